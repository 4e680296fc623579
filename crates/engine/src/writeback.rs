//! The metadata write-back cache, which is also the journal's running
//! transaction: a committed transaction's metadata blocks and superblock
//! are published in memory and written out later — when
//! [`Filesystem::sync`] runs, when the file system is closed, when more
//! than [`OpenOptions::writeback_bytes`] (or a quarter of the journal) are
//! waiting, or after every commit with `sync_writes`. Bitmaps, descriptor
//! blocks and hot directory and inode-table blocks are then written once
//! per write-back instead of once per operation.
//!
//! File data is not held here: it goes to the device at commit, before any
//! metadata that points at it (`data=ordered`), or just after a
//! [`crate::ordered`] commit, before any write-back. Blocks freed by a
//! transaction leave the dirty set at once, so a stale copy of a freed
//! metadata block is never written over data that reuses the block.
//!
//! With a journal, a write-back is one jbd2 commit (`journal::commit`); the
//! logged blocks stay here, read through, until a checkpoint writes them
//! home, and freed blocks the log holds are revoked at the next commit.
//! Without one, the blocks are written in place: a crash may leave a partly
//! written set, so the superblock says "not clean" while any change is
//! pending (it goes out before the blocks, and a clean state only after
//! them), and e2fsck checks such an image.
//!
//! [`OpenOptions::writeback_bytes`]: crate::OpenOptions::writeback_bytes

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::superblock::RawSuperblock;

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::journal::commit::flush;
use crate::journal::writer::Log;

/// `EXT2_VALID_FS` in `s_state`.
const VALID_FS: u16 = 1;

/// Metadata changed by committed transactions and not yet in place.
#[derive(Debug, Default)]
pub(crate) struct Dirty {
    /// Committed by transactions, not yet logged or written.
    blocks: BTreeMap<u64, Arc<[u8]>>,
    bytes: usize,
    /// The superblock as of the last published transaction, when changed
    /// since the last write-back: taken with the blocks under one lock, so
    /// a write-back never pairs counts with blocks of another moment.
    superblock: Option<RawSuperblock>,
    /// Logged in the journal, not yet checkpointed (written home).
    logged: BTreeMap<u64, Arc<[u8]>>,
    logged_bytes: usize,
    /// Freed blocks the log holds: the next commit revokes them.
    revoke: BTreeSet<u64>,
    /// The journal writer, when the file system has a journal and is
    /// opened for writing.
    pub(crate) log: Option<Log>,
    write_backs: u64,
    /// The blocks are a journal replayed in memory over a read-only
    /// device: read through, never written.
    replayed_in_memory: bool,
}

impl Filesystem {
    /// The dirty copy of `block`, if it has one.
    pub(crate) fn dirty_block(&self, block: u64) -> Option<Arc<[u8]>> {
        let d = self.dirty.lock();
        d.blocks.get(&block).or_else(|| d.logged.get(&block)).cloned()
    }

    /// Copies the dirty blocks that overlap bytes `offset..offset + len`
    /// of the device into `buf`.
    pub(crate) fn overlay_dirty(&self, offset: u64, buf: &mut [u8]) {
        if buf.is_empty() {
            return;
        }
        let d = self.dirty.lock();
        // The logged copies are older than the running ones.
        for set in [&d.logged, &d.blocks] {
            overlay(set, self.geo.block_size_log2, offset, buf);
        }
    }

    /// Holds a block replayed from the journal of a read-only image
    /// (`journal::replay`): reads see it, write-back never writes it.
    pub(crate) fn hold_replayed(&self, block: u64, bytes: Vec<u8>) {
        let mut d = self.dirty.lock();
        d.replayed_in_memory = true;
        d.bytes += bytes.len();
        if let Some(old) = d.blocks.insert(block, bytes.into()) {
            d.bytes -= old.len();
        }
    }

    /// Publishes a transaction's metadata (under the writer lock): `freed`
    /// ranges leave the dirty set, `blocks` enter it and the cache.
    pub(crate) fn publish(
        &self,
        blocks: BTreeMap<u64, Vec<u8>>,
        freed: &[(u64, u64)],
        sb: RawSuperblock,
    ) -> Result<()> {
        let mut d = self.dirty.lock();
        for &(start, len) in freed {
            d.forget(start, len);
            if self.journaling {
                self.busy.add(start, len);
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
        d.superblock = Some(sb);
        Ok(())
    }

    /// Writes back when more is waiting than [`Self::max_running_bytes`]
    /// allows. Called after a publish, not inside it: the write-back must
    /// first wait for file data in flight, which the publishing thread may
    /// own.
    pub(crate) fn write_back_if_full(&self) -> Result<()> {
        let full = {
            let d = self.dirty.lock();
            d.bytes > self.max_running_bytes(&d)
        };
        if full {
            self.write_back()?;
        }
        Ok(())
    }

    /// Writes every dirty block and the superblock to the device, once the
    /// file data they may point at is down (see [`crate::ordered`]).
    pub(crate) fn write_back(&self) -> Result<()> {
        let _data = self.data_in_flight.write();
        let mut d = self.dirty.lock();
        d.write_backs += 1;
        self.write_dirty(&mut d)
    }

    /// What the journal writer has done this session; `None` when changes
    /// do not go through a journal.
    pub fn journal_stats(&self) -> Option<crate::journal::JournalStats> {
        let d = self.dirty.lock();
        let mut s = d.log.as_ref()?.stats;
        s.write_backs = d.write_backs;
        Some(s)
    }

    fn write_dirty(&self, d: &mut Dirty) -> Result<()> {
        if d.replayed_in_memory || (d.superblock.is_none() && d.blocks.is_empty()) {
            return Ok(());
        }
        use std::sync::atomic::Ordering;
        self.writeback_seq.fetch_add(1, Ordering::AcqRel);
        let r = self.write_blocks(d);
        self.writeback_seq.fetch_add(1, Ordering::AcqRel);
        r
    }

    /// Most running bytes before a write-back: the option's, and a quarter
    /// of the journal (`j_max_transaction_buffers`) so a transaction fits.
    fn max_running_bytes(&self, d: &Dirty) -> usize {
        let journal = d
            .log
            .as_ref()
            .map_or(usize::MAX, |l| l.capacity() as usize / 4 * self.block_size());
        self.opts.writeback_bytes.min(journal)
    }

    fn write_blocks(&self, d: &mut Dirty) -> Result<()> {
        if d.log.is_some() {
            return self.write_journaled(d);
        }
        let sb = d.superblock.unwrap_or_else(|| *self.sb.read());
        let clean = sb.s_state.get() & VALID_FS != 0;
        if !clean {
            self.write_superblock(&sb)?;
        }
        let log2 = self.geo.block_size_log2;
        crate::txn::write_runs(self, d.blocks.iter().map(|(b, bytes)| (b << log2, &bytes[..])))?;
        if clean {
            self.write_superblock(&sb)?;
        }
        d.blocks.clear();
        d.bytes = 0;
        d.superblock = None;
        Ok(())
    }

    /// Write-back through the journal: the running blocks and the
    /// superblock become one jbd2 transaction. The log is checkpointed when
    /// the transaction would not fit, when the logged copies pass the
    /// write-back limit, and at the end of the session (the superblock no
    /// longer says `needs_recovery`), which then writes the superblock home.
    fn write_journaled(&self, d: &mut Dirty) -> Result<()> {
        let Some(mut log) = d.log.take() else {
            return Ok(());
        };
        let r = self.log_running(d, &mut log);
        d.log = Some(log);
        r
    }

    fn log_running(&self, d: &mut Dirty, log: &mut Log) -> Result<()> {
        let sb = d.superblock.take().unwrap_or_else(|| *self.sb.read());
        let ending = !sb.features().incompat.contains(IncompatFeatures::RECOVER);
        if !log.recover_on_disk {
            self.mark_recover_on_disk()?;
            log.recover_on_disk = true;
        }
        let mut blocks = std::mem::take(&mut d.blocks);
        d.bytes = 0;
        let (home, bytes) = log.superblock_block(&with_recover(sb));
        blocks.insert(home, bytes);
        let mut revokes: Vec<u64> = d.revoke.iter().filter(|b| !blocks.contains_key(b)).copied().collect();
        d.revoke.clear();
        if log.blocks_needed(blocks.len(), revokes.len()) > log.free() {
            self.checkpoint(d, log)?;
            revokes.clear();
        }
        if log.blocks_needed(blocks.len(), 0) > log.capacity() {
            self.write_unlogged(blocks, home, &sb)?;
            self.busy.clear();
        } else {
            log.commit(self, &blocks, &revokes)?;
            self.busy.clear();
            for (b, bytes) in blocks {
                d.logged_bytes += bytes.len();
                if let Some(old) = d.logged.insert(b, bytes) {
                    d.logged_bytes -= old.len();
                }
            }
        }
        if ending || d.logged_bytes > self.opts.writeback_bytes {
            self.checkpoint(d, log)?;
        }
        if ending {
            self.write_superblock(&sb)?;
            flush(self)?;
            log.recover_on_disk = false;
        }
        Ok(())
    }

    /// Writes the logged blocks home and empties the log.
    fn checkpoint(&self, d: &mut Dirty, log: &mut Log) -> Result<()> {
        log.checkpoint(self, &d.logged)?;
        d.logged.clear();
        d.logged_bytes = 0;
        d.revoke.clear();
        Ok(())
    }

    /// A transaction larger than the whole journal (a huge batch) cannot be
    /// logged: it is written in place, with the superblock saying "not
    /// clean" on the device until every block is down, as without a journal.
    fn write_unlogged(&self, mut blocks: BTreeMap<u64, Arc<[u8]>>, sb_home: u64, sb: &RawSuperblock) -> Result<()> {
        let sb_block = blocks.remove(&sb_home);
        let mut unchecked = *sb;
        unchecked.s_state.set(unchecked.s_state.get() & !VALID_FS);
        unchecked.set_checksum();
        self.write_superblock(&unchecked)?;
        flush(self)?;
        let log2 = self.geo.block_size_log2;
        crate::txn::write_runs(self, blocks.iter().map(|(b, bytes)| (b << log2, &bytes[..])))?;
        flush(self)?;
        if let Some(b) = sb_block {
            crate::txn::write_runs(self, std::iter::once((sb_home << log2, &b[..])))?;
        }
        flush(self)
    }

    /// Sets `needs_recovery` in the superblock on the device, as the
    /// kernel's mount does before the first commit: from then on a crash
    /// sends the next mount (or e2fsck) to the journal.
    fn mark_recover_on_disk(&self) -> Result<()> {
        let mut buf = vec![0u8; 1024];
        self.dev
            .read_at(1024, &mut buf)
            .map_err(|source| Error::Io { offset: 1024, source })?;
        let sb = RawSuperblock::parse(&buf).map_err(|e| Error::format(crate::Location::Superblock, e))?;
        self.write_superblock(&with_recover(sb))?;
        flush(self)
    }

    pub(crate) fn write_superblock(&self, sb: &RawSuperblock) -> Result<()> {
        self.dev
            .write_at(1024, &sb.encode())
            .map_err(|source| self.write_failed(1024, source))
    }
}

impl Dirty {
    /// Drops blocks `start..start + len`, just freed, from every set: a
    /// stale copy must never be written over what reuses the block. Those
    /// the log holds are revoked at the next commit.
    fn forget(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let gone: Vec<u64> = self.blocks.range(start..end).map(|(b, _)| *b).collect();
        for b in gone {
            if let Some(v) = self.blocks.remove(&b) {
                self.bytes -= v.len();
            }
        }
        let gone: Vec<u64> = self.logged.range(start..end).map(|(b, _)| *b).collect();
        for b in gone {
            if let Some(v) = self.logged.remove(&b) {
                self.logged_bytes -= v.len();
            }
        }
        if let Some(log) = &self.log {
            self.revoke.extend(log.logged.range(start..end));
        }
    }
}

/// Copies the blocks of `set` that overlap `offset..offset + buf.len()`.
fn overlay(set: &BTreeMap<u64, Arc<[u8]>>, log2: u32, offset: u64, buf: &mut [u8]) {
    if set.is_empty() {
        return;
    }
    let end = offset + buf.len() as u64;
    for (block, bytes) in set.range(offset >> log2..=(end - 1) >> log2) {
        let start = block << log2;
        let (lo, hi) = (start.max(offset), (start + bytes.len() as u64).min(end));
        if lo < hi {
            buf[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&bytes[(lo - start) as usize..(hi - start) as usize]);
        }
    }
}

/// `sb` saying `needs_recovery`, with a fresh checksum.
fn with_recover(mut sb: RawSuperblock) -> RawSuperblock {
    let f = sb.s_feature_incompat.get() | IncompatFeatures::RECOVER.0;
    sb.s_feature_incompat.set(f);
    sb.set_checksum();
    sb
}
