//! Verified reads: each data block a read touches is hashed and checked
//! against its entry in the level-0 tree block, that block against the
//! level above, up to the root hash in the descriptor. Tree blocks proven
//! once are trusted from memory afterwards, in the same read and in later
//! ones ([`super::cache`]), as the kernel's "verified" page bits.

use std::collections::HashMap;
use std::sync::Arc;

use ext4kit_format::inode::flags as fl;
use ext4kit_format::verity::{self as v, Descriptor, HashAlgorithm};

use super::hash::{Salted, plain};
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::map::MAX_LOGICAL;

/// Whether `inode` carries `EXT4_VERITY_FL`.
pub(crate) fn is_verity(inode: &Inode) -> bool {
    inode.raw.has_flag(fl::VERITY)
}

/// What checking a verity file's blocks needs.
pub(super) struct Tree {
    pub(super) desc: Descriptor,
    hasher: Salted,
    /// Byte offset of tree block 0 in the file.
    pos: u64,
    /// `(first tree block, count)` per level, level 0 first.
    levels: Vec<(u64, u64)>,
}

/// `what` does not hash to its entry in `holder`: one of the two changed.
fn mismatch(ino: u32, what: &str, holder: &str) -> Error {
    Error::VerityMismatch(format!("inode {ino}: {what} does not match its hash in {holder}"))
}

impl Filesystem {
    /// Reads `buf.len()` bytes of `inode`'s blocks at byte `offset` with no
    /// regard to `i_size` (the verity area lies past it); holes and
    /// unwritten runs read as zeros.
    pub(super) fn read_past_eof(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.fill(0);
        let bs = u64::from(self.geo.block_size);
        let end = offset + buf.len() as u64;
        let first = offset / bs;
        for r in self.map_range(inode, first, end.div_ceil(bs) - first)? {
            let lo = (r.logical * bs).max(offset);
            let hi = (r.end() * bs).min(end);
            if r.unwritten || lo >= hi {
                continue;
            }
            let dst = &mut buf[(lo - offset) as usize..(hi - offset) as usize];
            self.read_bytes(r.physical * bs + (lo - r.logical * bs), dst)?;
        }
        Ok(())
    }

    /// The descriptor of verity file `inode`, found through the size word
    /// in the last four bytes of its last mapped block.
    pub(super) fn verity_descriptor(&self, inode: &Inode) -> Result<Descriptor> {
        let ino = inode.ino;
        let bs = u64::from(self.geo.block_size);
        let meta = v::metadata_pos(inode.size()) / bs;
        let runs = self.map_range(inode, meta, MAX_LOGICAL.saturating_sub(meta))?;
        let end = runs
            .last()
            .map(|r| r.end())
            .ok_or_else(|| Error::inconsistent(Location::Inode(ino), "verity file without metadata past its data"))?;
        let size_pos = end * bs - 4;
        let mut word = [0u8; 4];
        self.read_past_eof(inode, size_pos, &mut word)?;
        let pos = v::descriptor_pos_from_size(size_pos, u32::from_le_bytes(word), bs)
            .map_err(|e| Error::format(Location::Inode(ino), e))?;
        let mut raw = [0u8; v::DESCRIPTOR_SIZE];
        self.read_past_eof(inode, pos, &mut raw)?;
        let desc = Descriptor::parse(&raw).map_err(|e| Error::format(Location::Inode(ino), e))?;
        if desc.data_size != inode.size() {
            return Err(Error::inconsistent(
                Location::Inode(ino),
                format!(
                    "verity descriptor covers {} bytes, i_size is {}",
                    desc.data_size,
                    inode.size()
                ),
            ));
        }
        Ok(desc)
    }

    pub(super) fn verity_tree(&self, inode: &Inode) -> Result<Tree> {
        let desc = self.verity_descriptor(inode)?;
        let alg = desc.hash_algorithm;
        Ok(Tree {
            hasher: Salted::new(alg, desc.salt()),
            pos: v::metadata_pos(inode.size()),
            levels: v::tree_levels(desc.data_size, desc.block_size(), alg.digest_size()),
            desc,
        })
    }

    /// The fs-verity file digest of verity file `ino` (what `fsverity
    /// digest` prints): the plain hash of its descriptor with `sig_size`
    /// zero.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a file without fs-verity; a corrupt
    /// descriptor.
    pub fn verity_digest(&self, ino: u32) -> Result<(HashAlgorithm, Vec<u8>)> {
        let _file = self.inode_locks.read(ino);
        let inode = self.inode(ino)?;
        if !is_verity(&inode) {
            return Err(Error::InvalidArgument(format!(
                "inode {ino} does not have fs-verity enabled"
            )));
        }
        let desc = self.verity_descriptor(&inode)?;
        Ok((desc.hash_algorithm, plain(desc.hash_algorithm, &desc.digest_input())))
    }

    /// The tree of `inode`, from the cache or read and kept there.
    pub(super) fn verity_tree_cached(&self, inode: &Inode) -> Result<Arc<Tree>> {
        let generation = inode.raw.i_generation.get();
        if let Some(t) = self.verity_cache.tree(inode.ino, generation) {
            return Ok(t);
        }
        let t = Arc::new(self.verity_tree(inode)?);
        self.verity_cache.put_tree(inode.ino, generation, t.clone());
        Ok(t)
    }

    /// [`Filesystem::read_body`] for a verity file: whole blocks are read
    /// and checked, then the asked range copied out (a range of whole
    /// blocks is read in place). On a mismatch the buffer is zeroed.
    pub(crate) fn read_verified(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let size = inode.size();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = (size - offset).min(buf.len() as u64) as usize;
        let tree = self.verity_tree_cached(inode)?;
        let tb = tree.desc.block_size();
        let first = offset / tb;
        let last = (offset + n as u64).div_ceil(tb);
        let whole = offset.is_multiple_of(tb) && (n as u64).is_multiple_of(tb);
        let mut padded = Vec::new();
        let data = if whole {
            // Whole blocks: read and checked in the caller's buffer.
            &mut buf[..n]
        } else {
            padded.resize(((last - first) * tb) as usize, 0);
            &mut padded[..]
        };
        self.read_body(inode, first * tb, data)?;
        let mut proven = Proven::new(self, inode);
        for (k, block) in data.chunks(tb as usize).enumerate() {
            if let Err(e) = self.verify_block(inode, &tree, first + k as u64, block, &mut proven) {
                data.fill(0); // nothing unverified is left in the buffer
                return Err(e);
            }
        }
        self.verity_cache.put_blocks(inode.ino, proven.generation, proven.local);
        if !whole {
            let from = (offset - first * tb) as usize;
            buf[..n].copy_from_slice(&padded[from..from + n]);
        }
        Ok(n)
    }

    /// Checks data block `index` up the tree until a block already proven
    /// (in this read or the cache) or the root hash.
    pub(super) fn verify_block(
        &self,
        inode: &Inode,
        tree: &Tree,
        index: u64,
        block: &[u8],
        proven: &mut Proven<'_>,
    ) -> Result<()> {
        let ds = tree.desc.hash_algorithm.digest_size();
        let tb = tree.desc.block_size();
        let per = tb / ds as u64;
        let mut want = tree.hasher.block(block);
        let mut idx = index;
        let mut what = format!("data block {index} (byte {})", index * tb);
        let mut path = Vec::new();
        for (level, &(start, _)) in tree.levels.iter().enumerate() {
            let tbn = start + idx / per;
            let slot = (idx % per) as usize * ds;
            if let Some(known) = proven.get(inode.ino, tbn) {
                if known[slot..slot + ds] != want[..] {
                    return Err(mismatch(inode.ino, &what, &format!("Merkle tree block {tbn}")));
                }
                proven.local.extend(path);
                return Ok(());
            }
            let mut got = vec![0u8; tb as usize];
            self.read_past_eof(inode, tree.pos + tbn * tb, &mut got)?;
            if got[slot..slot + ds] != want[..] {
                return Err(mismatch(inode.ino, &what, &format!("Merkle tree block {tbn}")));
            }
            want = tree.hasher.block(&got);
            what = format!("Merkle tree block {tbn} (level {level})");
            path.push((tbn, Arc::<[u8]>::from(got)));
            idx /= per;
        }
        if want[..] != *tree.desc.root() {
            return Err(mismatch(inode.ino, &what, "the descriptor's root hash"));
        }
        proven.local.extend(path);
        Ok(())
    }
}

/// Tree blocks proven so far: this read's, then those kept from earlier
/// reads of the same inode generation.
pub(super) struct Proven<'a> {
    fs: &'a Filesystem,
    generation: u32,
    pub(super) local: HashMap<u64, Arc<[u8]>>,
}

impl<'a> Proven<'a> {
    pub(super) fn new(fs: &'a Filesystem, inode: &Inode) -> Self {
        Proven {
            fs,
            generation: inode.raw.i_generation.get(),
            local: HashMap::new(),
        }
    }

    fn get(&self, ino: u32, tbn: u64) -> Option<Arc<[u8]>> {
        let local = self.local.get(&tbn).cloned();
        local.or_else(|| self.fs.verity_cache.block(ino, self.generation, tbn))
    }
}
