//! An htree as stored (`debugfs htree_dump`): the root's `dx_root_info`,
//! every index node's entries, and every leaf's names with their hashes.

use std::collections::HashSet;

use ext4kit_format::dir_entry::{self, DirEntryIter};
use ext4kit_format::hash::{HashVersion, dx_hash};
use ext4kit_format::htree::{DxEntry, DxNode, DxParams, DxRoot};

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// A whole hashed directory index.
#[derive(Debug, Clone)]
pub struct HtreeDump {
    /// `dx_root_info.hash_version` as stored.
    pub hash_version: u8,
    /// `dx_root_info.info_length`.
    pub info_length: u8,
    /// `dx_root_info.indirect_levels`.
    pub indirect_levels: u8,
    /// `dx_root_info.unused_flags`.
    pub flags: u8,
    /// `dx_countlimit.limit` of the root.
    pub limit: u16,
    /// The root's entries.
    pub root: Vec<DxEntry>,
    /// Interior index nodes, in the order the tree is walked.
    pub nodes: Vec<HtreeNode>,
    /// Leaf blocks, in hash order.
    pub leaves: Vec<HtreeLeaf>,
}

/// One interior index block.
#[derive(Debug, Clone)]
pub struct HtreeNode {
    /// Logical block in the directory.
    pub logical: u32,
    /// `dx_countlimit.limit`.
    pub limit: u16,
    /// Its entries.
    pub entries: Vec<DxEntry>,
}

/// One leaf block and its names.
#[derive(Debug, Clone)]
pub struct HtreeLeaf {
    /// Logical block in the directory.
    pub logical: u32,
    /// Where it lies on the device.
    pub physical: u64,
    /// Its live records.
    pub names: Vec<HtreeName>,
}

/// One record of a leaf, hashed as the root says.
#[derive(Debug, Clone)]
pub struct HtreeName {
    /// Inode number.
    pub ino: u32,
    /// Major hash: in a casefolded, encrypted directory (hash version 6)
    /// the one stored after the name, else computed from the name; 0 when
    /// neither is possible.
    pub hash: u32,
    /// Minor hash.
    pub minor: u32,
    /// Decoded `rec_len`.
    pub rec_len: usize,
    /// The name bytes.
    pub name: Vec<u8>,
}

impl Filesystem {
    /// Reads `dir`'s whole index; each block at most once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `dir` has no htree; corruption of an
    /// index block, located at its block.
    pub fn htree_dump(&self, dir: &Inode) -> Result<HtreeDump> {
        let not = || Error::InvalidArgument(format!("inode {} is not a hashed (htree) directory", dir.ino));
        if !dir.is_dir() || !dir.raw.has_flag(ext4kit_format::inode::flags::INDEX) || dir.has_inline_data() {
            return Err(not());
        }
        let params = DxParams {
            block_size: self.geo.block_size,
            metadata_csum: self.geo.features.metadata_csum(),
            large_dir: self
                .geo
                .features
                .incompat
                .contains(ext4kit_format::features::IncompatFeatures::LARGEDIR),
        };
        let (pblk, buf) = self.dir_block_at(dir, 0)?;
        let root = DxRoot::parse(&buf, &params).map_err(|e| Error::format(self.at(dir, pblk), e))?;
        let info = root.header.info;
        let version = root
            .hash_version()
            .map(|v| v.with_unsigned(self.sb.read().s_flags.get() & 2 != 0));
        let mut out = HtreeDump {
            hash_version: info.hash_version,
            info_length: info.info_length,
            indirect_levels: info.indirect_levels,
            flags: info.unused_flags,
            limit: root.limit,
            root: root.entries.clone(),
            nodes: Vec::new(),
            leaves: Vec::new(),
        };
        let mut seen = HashSet::new();
        self.htree_walk(
            dir,
            &params,
            version,
            &root.entries,
            info.indirect_levels,
            &mut seen,
            &mut out,
        )?;
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn htree_walk(
        &self,
        dir: &Inode,
        params: &DxParams,
        version: Option<HashVersion>,
        entries: &[DxEntry],
        levels: u8,
        seen: &mut HashSet<u32>,
        out: &mut HtreeDump,
    ) -> Result<()> {
        for e in entries {
            if !seen.insert(e.block) {
                continue;
            }
            let (pblk, buf) = self.dir_block_at(dir, e.block.into())?;
            if levels > 0 {
                let node = DxNode::parse(&buf, params).map_err(|err| Error::format(self.at(dir, pblk), err))?;
                out.nodes.push(HtreeNode {
                    logical: e.block,
                    limit: node.limit,
                    entries: node.entries.clone(),
                });
                self.htree_walk(dir, params, version, &node.entries, levels - 1, seen, out)?;
            } else {
                out.leaves.push(self.htree_leaf(dir, e.block, pblk, &buf, version));
            }
        }
        Ok(())
    }

    fn htree_leaf(
        &self,
        dir: &Inode,
        logical: u32,
        physical: u64,
        buf: &[u8],
        version: Option<HashVersion>,
    ) -> HtreeLeaf {
        let bs = buf.len();
        let used = if dir_entry::has_tail(buf) { bs - 12 } else { bs };
        let seed = self.sb.read().s_hash_seed.map(|w| w.get());
        let stored = self.hash_in_dirent(dir);
        let filetype = self
            .geo
            .features
            .incompat
            .contains(ext4kit_format::features::IncompatFeatures::FILETYPE);
        let names = DirEntryIter::new(&buf[..used], bs, filetype)
            .map_while(|r| r.ok())
            .filter(|e| e.inode != 0)
            .map(|e| {
                let h = match version {
                    // SipHash needs the key; the entry stores the hash it was filed by.
                    Some(HashVersion::SipHash) if stored => dir_entry::stored_hash(buf, &e),
                    Some(v) => dx_hash(&self.hash_input(dir, e.name), v, &seed)
                        .ok()
                        .map(|h| (h.major, h.minor)),
                    None => None,
                };
                HtreeName {
                    ino: e.inode,
                    hash: h.map_or(0, |h| h.0),
                    minor: h.map_or(0, |h| h.1),
                    rec_len: e.rec_len,
                    name: e.name.to_vec(),
                }
            })
            .collect();
        HtreeLeaf {
            logical,
            physical,
            names,
        }
    }

    fn dir_block_at(&self, dir: &Inode, logical: u64) -> Result<(u64, std::sync::Arc<[u8]>)> {
        let run = self.map_range(dir, logical, 1)?;
        let r = run.first().ok_or_else(|| {
            Error::inconsistent(
                Location::Inode(dir.ino),
                format!("directory block {logical} is unmapped"),
            )
        })?;
        Ok((r.physical, self.meta_block(r.physical, dir.ino)?))
    }

    fn at(&self, dir: &Inode, block: u64) -> Location {
        Location::Block { block, inode: dir.ino }
    }
}
