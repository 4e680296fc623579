//! The metadata write-back cache: a committed transaction's metadata blocks
//! and superblock are published in memory and written to the device later —
//! when [`Filesystem::sync`] runs, when the file system is closed, when more
//! than [`OpenOptions::writeback_bytes`] are waiting, or after every commit
//! with `sync_writes`. Bitmaps, descriptor blocks and hot directory and
//! inode-table blocks are then written once per write-back instead of once
//! per operation, as the kernel's buffer cache does between journal commits.
//!
//! File data is not held here: it goes to the device at commit, before any
//! metadata that points at it (`data=ordered`), or just after a
//! [`crate::ordered`] commit, before any write-back. Blocks freed by a
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

    /// Copies the dirty blocks that overlap bytes `offset..offset + len`
    /// of the device into `buf`.
    pub(crate) fn overlay_dirty(&self, offset: u64, buf: &mut [u8]) {
        if buf.is_empty() {
            return;
        }
        let d = self.dirty.lock();
        if d.blocks.is_empty() {
            return;
        }
        let log2 = self.geo.block_size_log2;
        let end = offset + buf.len() as u64;
        for (block, bytes) in d.blocks.range(offset >> log2..=(end - 1) >> log2) {
            let start = block << log2;
            let (lo, hi) = (start.max(offset), (start + bytes.len() as u64).min(end));
            if lo < hi {
                buf[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&bytes[(lo - start) as usize..(hi - start) as usize]);
            }
        }
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
        Ok(())
    }

    /// Writes back when more than `writeback_bytes` are waiting. Called
    /// after a publish, not inside it: the write-back must first wait for
    /// file data in flight, which the publishing thread may own.
    pub(crate) fn write_back_if_full(&self) -> Result<()> {
        if self.dirty.lock().bytes > self.opts.writeback_bytes {
            self.write_back()?;
        }
        Ok(())
    }

    /// Writes every dirty block and the superblock to the device, once the
    /// file data they may point at is down (see [`crate::ordered`]).
    pub(crate) fn write_back(&self) -> Result<()> {
        let _data = self.data_in_flight.write();
        let mut d = self.dirty.lock();
        self.write_dirty(&mut d)
    }

    fn write_dirty(&self, d: &mut Dirty) -> Result<()> {
        if !d.superblock && d.blocks.is_empty() {
            return Ok(());
        }
        use std::sync::atomic::Ordering;
        self.writeback_seq.fetch_add(1, Ordering::AcqRel);
        let r = self.write_blocks(d);
        self.writeback_seq.fetch_add(1, Ordering::AcqRel);
        r
    }

    fn write_blocks(&self, d: &mut Dirty) -> Result<()> {
        let sb = *self.sb.read();
        let clean = sb.s_state.get() & VALID_FS != 0;
        if !clean {
            self.write_superblock(&sb)?;
        }
        let log2 = self.geo.block_size_log2;
        crate::txn::write_runs(self, d.blocks.iter().map(|(b, bytes)| (b << log2, &bytes[..])))?;
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
