//! Hashed directory index (htree) lookups: hash the name, descend from the
//! `dx_root` through at most two (three with `large_dir`) levels of
//! `dx_node`s, then search the one leaf block the index names — following
//! the hash-collision continuation bit into the next leaf when needed.
//! See `directory.rst`, "Hash Tree Directories".

use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::hash::HashVersion;
use ext4kit_format::htree::{DxEntry, DxNode, DxParams, DxRoot, find, verify_dx_checksum};
use ext4kit_format::inode::flags;

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// One level of the descent: the entries of an index block and the one taken.
pub(super) struct Level {
    pub(super) entries: Vec<DxEntry>,
    pub(super) at: usize,
}

impl Filesystem {
    pub(super) fn dx_params(&self) -> DxParams {
        let f = self.geo.features;
        DxParams {
            block_size: self.geo.block_size,
            metadata_csum: f.metadata_csum(),
            large_dir: f.incompat.contains(IncompatFeatures::LARGEDIR),
        }
    }

    pub(super) fn indexed(&self, dir: &Inode) -> bool {
        dir.raw.has_flag(flags::INDEX)
            && !dir.has_inline_data()
            && self.geo.features.compat.contains(CompatFeatures::DIR_INDEX)
    }

    /// Index levels of `dir`'s htree as `ext4_dir_htree_level` counts them
    /// (1 for a root over leaves; at most 2, or 3 with `large_dir`):
    /// `dx_root_info.indirect_levels` + 1; `None` without a usable index.
    ///
    /// # Errors
    /// Corruption of the root block.
    pub fn dir_index_depth(&self, dir: &Inode) -> Result<Option<u8>> {
        if !self.indexed(dir) {
            return Ok(None);
        }
        let (pblk, buf) = self.dir_block(dir, 0)?;
        let at = Location::Block {
            block: pblk,
            inode: dir.ino,
        };
        let root = DxRoot::parse(&buf, &self.dx_params()).map_err(|e| Error::format(at, e))?;
        Ok(Some(root.indirect_levels() + 1))
    }

    /// True when `buf` (logical block `logical` of `dir`) is an htree index block.
    pub(crate) fn is_dx_block(&self, dir: &Inode, buf: &[u8], logical: u64) -> bool {
        if !self.indexed(dir) || buf.len() < 8 {
            return false;
        }
        if logical == 0 {
            return true;
        }
        let inode = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let rec = ext4kit_format::dir_entry::rec_len_from_disk(u16::from_le_bytes([buf[4], buf[5]]), buf.len());
        inode == 0 && rec == buf.len()
    }

    pub(crate) fn verify_dx_block(&self, dir: &Inode, buf: &[u8], at: Location) -> Result<()> {
        let r = verify_dx_checksum(buf, self.geo.block_size, self.inode_csum_seed(dir));
        self.check(at, r)
    }

    /// Reads logical block `logical` of `dir` (a directory block).
    pub(super) fn dir_block(&self, dir: &Inode, logical: u64) -> Result<(u64, std::sync::Arc<[u8]>)> {
        let run = self.map_range(dir, logical, 1)?;
        let Some(r) = run.first() else {
            return Err(Error::inconsistent(
                Location::Inode(dir.ino),
                format!("directory block {logical} is unmapped: a hole, or past its end"),
            ));
        };
        Ok((r.physical, self.meta_block(r.physical, dir.ino)?))
    }

    /// `Some(found)` when `dir` is indexed and the index answered; `None`
    /// when the caller must scan (no index, or an index the kernel would
    /// also refuse and fall back from, like an unknown hash version).
    pub(crate) fn htree_lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<Option<u32>>> {
        // "." and ".." live in the root block, outside any leaf: scan for them
        // there, as the kernel's ext4_find_entry does.
        if name == b"." || name == b".." {
            return Ok(None);
        }
        let Some((hash, path)) = self.htree_path(dir, name)? else {
            return Ok(None);
        };
        self.search_leaves(dir, name, hash, path, &self.dx_params()).map(Some)
    }

    /// Descends the index for `name`: its hash and the path of index
    /// entries taken; `None` when `dir` has no usable index.
    fn htree_path(&self, dir: &Inode, name: &[u8]) -> Result<Option<(u32, Vec<Level>)>> {
        let Some((root, version)) = self.dx_root(dir)? else {
            return Ok(None);
        };
        // Without the key a casefolded, encrypted directory cannot hash a
        // name; its callers scan instead.
        let hash = match self.name_dx_hash(dir, name, version) {
            Err(Error::NoKey(_)) => return Ok(None),
            h => h?.major,
        };
        Ok(Some((hash, self.dx_descend(dir, root, hash)?)))
    }

    /// The root block of `dir`'s index (checksum verified) and the hash
    /// version its names are hashed with (`dx_root_info.hash_version`, made
    /// unsigned by the superblock flag as `dx_probe` does); `None` when
    /// `dir` has no index this code can walk.
    pub(super) fn dx_root(&self, dir: &Inode) -> Result<Option<(DxRoot, HashVersion)>> {
        if !self.indexed(dir) {
            return Ok(None);
        }
        let params = self.dx_params();
        let (pblk, buf) = self.dir_block(dir, 0)?;
        let Ok(root) = DxRoot::parse(&buf, &params) else {
            return Ok(None);
        };
        if params.metadata_csum {
            self.verify_dx_block(
                dir,
                &buf,
                Location::Block {
                    block: pblk,
                    inode: dir.ino,
                },
            )?;
        }
        let unsigned = self.sb.read().s_flags.get() & 2 != 0;
        let Some(version) = root.hash_version().map(|v| v.with_unsigned(unsigned)) else {
            return Ok(None);
        };
        // SipHash indexes only directories whose entries carry their hash
        // ([`crate::crypt::dirhash`]); anywhere else it is nothing to walk.
        if version == HashVersion::SipHash && !self.hash_in_dirent(dir) {
            return Ok(None);
        }
        Ok(Some((root, version)))
    }

    /// The index path from `root` down to the leaf whose range holds
    /// `hash` (`dx_probe`): one block read per level below the root.
    pub(super) fn dx_descend(&self, dir: &Inode, root: DxRoot, hash: u32) -> Result<Vec<Level>> {
        let params = self.dx_params();
        let levels = root.indirect_levels();
        let mut path = vec![Level {
            at: find(&root.entries, hash),
            entries: root.entries,
        }];
        for _ in 0..levels {
            let child = self.dx_child(dir, path.last().map_or(0, |l| l.entries[l.at].block), &params)?;
            path.push(Level {
                at: find(&child, hash),
                entries: child,
            });
        }
        Ok(path)
    }

    fn dx_child(&self, dir: &Inode, logical: u32, params: &DxParams) -> Result<Vec<DxEntry>> {
        let (pblk, buf) = self.dir_block(dir, logical.into())?;
        let at = Location::Block {
            block: pblk,
            inode: dir.ino,
        };
        let node = DxNode::parse(&buf, params).map_err(|e| Error::format(at, e))?;
        if params.metadata_csum {
            self.verify_dx_block(dir, &buf, at)?;
        }
        Ok(node.entries)
    }

    /// Searches the leaf the path ends at, then successive leaves while the
    /// next one starts with the same hash and the collision bit set.
    fn search_leaves(
        &self,
        dir: &Inode,
        name: &[u8],
        hash: u32,
        mut path: Vec<Level>,
        params: &DxParams,
    ) -> Result<Option<u32>> {
        let max_leaves = dir.size() >> self.geo.block_size_log2;
        let key = self.name_key(dir, name);
        for _ in 0..=max_leaves {
            let leaf = path.last().map_or(0, |l| l.entries[l.at].block);
            let (pblk, buf) = self.dir_block(dir, leaf.into())?;
            let at = Location::Block {
                block: pblk,
                inode: dir.ino,
            };
            if let Some(ino) = self.scan_dir_block(dir, &buf, leaf.into(), at, |e| key.matches(e.name))? {
                return Ok(Some(ino));
            }
            match self.next_leaf(dir, &mut path, params)? {
                Some(next_hash) if next_hash & 1 == 1 && next_hash & !1 == hash => continue,
                _ => return Ok(None),
            }
        }
        Err(Error::inconsistent(
            Location::Inode(dir.ino),
            "htree collision chain longer than the directory",
        ))
    }

    /// Advances `path` to the next leaf (`ext4_htree_next_block`); returns the
    /// hash that leaf starts with, or `None` past the last one.
    pub(super) fn next_leaf(&self, dir: &Inode, path: &mut [Level], params: &DxParams) -> Result<Option<u32>> {
        let mut depth = path.len();
        while depth > 0 {
            let l = &mut path[depth - 1];
            if l.at + 1 < l.entries.len() {
                l.at += 1;
                break;
            }
            depth -= 1;
        }
        if depth == 0 {
            return Ok(None);
        }
        let hash = path[depth - 1].entries[path[depth - 1].at].hash;
        for d in depth..path.len() {
            let block = path[d - 1].entries[path[d - 1].at].block;
            path[d] = Level {
                entries: self.dx_child(dir, block, params)?,
                at: 0,
            };
        }
        Ok(Some(hash))
    }
}
