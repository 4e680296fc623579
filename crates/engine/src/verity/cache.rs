//! What reads of a verity file keep between calls: its parsed descriptor
//! and the Merkle tree blocks already proven against the root hash, as
//! the kernel keeps `fsverity_info` and "verified" page bits. A data block
//! is still hashed on every read; only its path up the tree stops at the
//! first tree block proven earlier (a block in memory, so later changes to
//! the disk cannot reach it).
//!
//! Entries are keyed by inode number and `i_generation`, dropped when the
//! inode is freed ([`VerityCache::forget`], from `free_inode`), and held
//! to [`MAX_BYTES`] of tree blocks over all files: past it, the files
//! read longest ago lose their blocks first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::read::Tree;

/// Tree bytes kept over all verity files: with 4 KiB blocks and SHA-256,
/// 8 MiB of level-0 blocks cover 1 GiB of data.
pub(crate) const MAX_BYTES: usize = 8 << 20;

/// Files whose descriptors are kept (each a few hundred bytes).
const MAX_FILES: usize = 256;

struct Entry {
    generation: u32,
    tree: Arc<Tree>,
    /// Proven tree blocks by tree block number.
    blocks: HashMap<u64, Arc<[u8]>>,
    bytes: usize,
    last_use: u64,
}

#[derive(Default)]
struct Inner {
    files: HashMap<u32, Entry>,
    bytes: usize,
    clock: u64,
}

/// The per-`Filesystem` cache of verity trees (see the module doc).
#[derive(Default)]
pub(crate) struct VerityCache {
    inner: Mutex<Inner>,
}

impl VerityCache {
    /// The cached tree of inode `ino` at `generation`, if any.
    pub(super) fn tree(&self, ino: u32, generation: u32) -> Option<Arc<Tree>> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.clock += 1;
        let now = g.clock;
        let e = g.files.get_mut(&ino).filter(|e| e.generation == generation)?;
        e.last_use = now;
        Some(e.tree.clone())
    }

    /// Keeps `tree` for `ino` (replacing an entry of another generation).
    pub(super) fn put_tree(&self, ino: u32, generation: u32, tree: Arc<Tree>) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.clock += 1;
        let now = g.clock;
        if let Some(old) = g.files.remove(&ino) {
            g.bytes -= old.bytes;
        }
        if g.files.len() >= MAX_FILES {
            g.evict_oldest();
        }
        let e = Entry {
            generation,
            tree,
            blocks: HashMap::new(),
            bytes: 0,
            last_use: now,
        };
        g.files.insert(ino, e);
    }

    /// A proven tree block of `ino`, if kept.
    pub(super) fn block(&self, ino: u32, generation: u32, tbn: u64) -> Option<Arc<[u8]>> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let e = g.files.get(&ino).filter(|e| e.generation == generation)?;
        e.blocks.get(&tbn).cloned()
    }

    /// Keeps tree blocks a read proved, within [`MAX_BYTES`].
    pub(super) fn put_blocks(&self, ino: u32, generation: u32, proven: HashMap<u64, Arc<[u8]>>) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let added: usize = proven.values().map(|b| b.len()).sum();
        while g.bytes + added > MAX_BYTES && g.evict_blocks_of_oldest(ino) {}
        if g.bytes + added > MAX_BYTES {
            return;
        }
        let Some(e) = g.files.get_mut(&ino).filter(|e| e.generation == generation) else {
            return;
        };
        let mut grown = 0;
        for (tbn, b) in proven {
            let len = b.len();
            if e.blocks.insert(tbn, b).is_none() {
                grown += len;
            }
        }
        e.bytes += grown;
        g.bytes += grown;
    }

    /// Drops what is kept for `ino` (the inode is being freed).
    pub(crate) fn forget(&self, ino: u32) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = g.files.remove(&ino) {
            g.bytes -= old.bytes;
        }
    }

    /// Tree bytes kept now.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }
}

impl Inner {
    fn evict_oldest(&mut self) {
        let oldest = self.files.iter().min_by_key(|(_, e)| e.last_use).map(|(&i, _)| i);
        if let Some(old) = oldest.and_then(|i| self.files.remove(&i)) {
            self.bytes -= old.bytes;
        }
    }

    /// Empties the blocks of the least recently read file other than
    /// `keep` that has any; false when there is none.
    fn evict_blocks_of_oldest(&mut self, keep: u32) -> bool {
        let victim = self
            .files
            .iter_mut()
            .filter(|(i, e)| **i != keep && e.bytes > 0)
            .min_by_key(|(_, e)| e.last_use);
        let Some((_, e)) = victim else { return false };
        let freed = std::mem::take(&mut e.bytes);
        e.blocks = HashMap::new();
        self.bytes -= freed;
        true
    }
}
