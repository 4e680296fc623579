//! The metadata write-back cache: a committed transaction's metadata blocks
//! and superblock are published in memory and written to the device later —
//! when [`Filesystem::sync`] runs, when the file system is closed, when more
//! than [`OpenOptions::writeback_bytes`] are waiting, or after every commit
//! with `sync_writes`. Bitmaps, descriptor blocks and hot directory and
//! inode-table blocks are then written once per write-back instead of once
//! per operation, as the kernel's buffer cache does between journal commits.
//!
//! File data is not held here: it goes to the device at commit, before any
//! metadata that points at it (`data=ordered`). Blocks freed by a
//! transaction leave the dirty set at once, so a stale copy of a freed
//! metadata block is never written over data that reuses the block.
//!
//! Until the journal lands, a crash loses the changes not yet written back
//! and may leave a partly written set; the superblock says "not clean" while
//! any change is pending (it goes out before the blocks, and a clean state
//! only after them), so e2fsck checks such an image.
//!
//! [`OpenOptions::writeback_bytes`]: crate::OpenOptions::writeback_bytes

use std::collections::BTreeMap;
use std::sync::Arc;

use ext4kit_format::superblock::RawSuperblock;

use crate::error::{Error, Result};
use crate::fs::Filesystem;

/// `EXT2_VALID_FS` in `s_state`.
const VALID_FS: u16 = 1;

/// Metadata changed by committed transactions and not yet on the device.
#[derive(Debug, Default)]
pub(crate) struct Dirty {
    blocks: BTreeMap<u64, Arc<[u8]>>,
    bytes: usize,
    superblock: bool,
}

impl Filesystem {
    /// The dirty copy of `block`, if it has one.
    pub(crate) fn dirty_block(&self, block: u64) -> Option<Arc<[u8]>> {
        self.dirty.lock().blocks.get(&block).cloned()
    }

    /// Publishes a transaction's metadata (under the writer lock): `freed`
    /// ranges leave the dirty set, `blocks` enter it and the cache.
    pub(crate) fn publish(&self, blocks: BTreeMap<u64, Vec<u8>>, freed: &[(u64, u64)]) -> Result<()> {
        let mut d = self.dirty.lock();
        for &(start, len) in freed {
            let gone: Vec<u64> = d.blocks.range(start..start + len).map(|(b, _)| *b).collect();
            for b in gone {
                if let Some(v) = d.blocks.remove(&b) {
                    d.bytes -= v.len();
                }
            }
        }
        for (block, bytes) in blocks {
            let bytes: Arc<[u8]> = bytes.into();
            self.cache.insert(block, bytes.clone());
            d.bytes += bytes.len();
            if let Some(old) = d.blocks.insert(block, bytes) {
                d.bytes -= old.len();
            }
        }
        d.superblock = true;
        if self.opts.sync_writes || d.bytes > self.opts.writeback_bytes {
            self.write_dirty(&mut d)?;
        }
        Ok(())
    }

    /// Writes every dirty block and the superblock to the device.
    pub(crate) fn write_back(&self) -> Result<()> {
        let mut d = self.dirty.lock();
        self.write_dirty(&mut d)
    }

    fn write_dirty(&self, d: &mut Dirty) -> Result<()> {
        if !d.superblock && d.blocks.is_empty() {
            return Ok(());
        }
        let sb = *self.sb.read();
        let clean = sb.s_state.get() & VALID_FS != 0;
        if !clean {
            self.write_superblock(&sb)?;
        }
        for (block, bytes) in &d.blocks {
            let off = block << self.geo.block_size_log2;
            self.dev
                .write_at(off, bytes)
                .map_err(|source| Error::Io { offset: off, source })?;
        }
        if clean {
            self.write_superblock(&sb)?;
        }
        *d = Dirty::default();
        Ok(())
    }

    fn write_superblock(&self, sb: &RawSuperblock) -> Result<()> {
        self.dev
            .write_at(1024, &sb.encode())
            .map_err(|source| Error::Io { offset: 1024, source })
    }
}
