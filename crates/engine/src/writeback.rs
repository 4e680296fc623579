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
//! transaction leave the running set at once, and the logged set when the
//! freeing transaction commits, so a stale copy of a freed metadata block
//! is never written over data that reuses the block, nor missing from a
//! checkpoint while the committed state still owns the block.
//!
//! With a journal, a write-back is one jbd2 commit
//! (`journal::transaction`): the running blocks become the committing
//! transaction, which is written to the log without holding this cache's
//! lock, so other threads publish into the next running transaction and
//! read meanwhile. The logged blocks stay here, read through, until a
//! checkpoint writes them home, and freed blocks the log holds are revoked
//! at the next commit.
//! Without one, the blocks are written in place: a crash may leave a partly
//! written set, so the superblock says "not clean" while any change is
//! pending (it goes out before the blocks, and a clean state only after
//! them), and e2fsck checks such an image.
//!
//! [`OpenOptions::writeback_bytes`]: crate::OpenOptions::writeback_bytes

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ext4kit_format::superblock::RawSuperblock;

use crate::error::Result;
use crate::fs::Filesystem;
use crate::journal::writer::Log;

/// `EXT2_VALID_FS` in `s_state`.
pub(crate) const VALID_FS: u16 = 1;

/// Metadata changed by committed transactions and not yet in place.
#[derive(Debug)]
pub(crate) struct Dirty {
    /// The running transaction: published, not yet logged or written.
    pub(crate) blocks: BTreeMap<u64, Arc<[u8]>>,
    pub(crate) bytes: usize,
    /// The superblock as of the last published transaction, when changed
    /// since the last write-back: taken with the blocks under one lock, so
    /// a write-back never pairs counts with blocks of another moment.
    pub(crate) superblock: Option<RawSuperblock>,
    /// ID of the running transaction (`j_running_transaction->t_tid`).
    pub(crate) tid: u64,
    /// The highest transaction ID that is durable (`j_commit_sequence`).
    pub(crate) committed_tid: u64,
    /// The transaction being written to the log, read through until it is
    /// logged (`j_committing_transaction`).
    pub(crate) committing: Option<Arc<BTreeMap<u64, Arc<[u8]>>>>,
    /// What the running and the committing transaction changed besides
    /// their blocks.
    pub(crate) running_changes: Changes,
    pub(crate) committing_changes: Changes,
    /// Logged in the journal, not yet checkpointed (written home).
    pub(crate) logged: BTreeMap<u64, Arc<[u8]>>,
    pub(crate) logged_bytes: usize,
    /// Blocks the live log or the committing transaction holds a copy of:
    /// replay would write them, so freeing one needs a revoke record.
    pub(crate) log_holds: BTreeSet<u64>,
    /// Freed blocks the log holds: the next commit revokes them.
    pub(crate) revoke: BTreeSet<u64>,
    /// Most running bytes before a write-back: the option's, and a quarter
    /// of the journal (`j_max_transaction_buffers`) so a transaction fits.
    pub(crate) running_limit: usize,
    pub(crate) write_backs: u64,
    /// The blocks are a journal replayed in memory over a read-only
    /// device: read through, never written.
    replayed_in_memory: bool,
}

/// What a journal transaction changed besides its blocks.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Inodes whose records it wrote: an fsync of one waits for it (the
    /// kernel's `i_sync_tid`).
    pub(crate) inodes: HashSet<u32>,
    /// Block ranges it freed: their logged copies go when it commits.
    pub(crate) freed: Vec<(u64, u64)>,
    /// What its fast commits must carry (`journal::fast_commit::track`).
    pub(crate) fc: crate::journal::fast_commit::FcPending,
}

impl Changes {
    /// Takes on `later`'s changes too (a failed commit's go back under
    /// the running transaction's).
    pub(crate) fn absorb(&mut self, later: Changes) {
        self.inodes.extend(later.inodes);
        self.freed.extend(later.freed);
        self.fc.absorb(later.fc);
    }
}

impl Dirty {
    pub(crate) fn new(running_limit: usize) -> Self {
        Self {
            blocks: BTreeMap::new(),
            bytes: 0,
            superblock: None,
            tid: 1,
            committed_tid: 0,
            committing: None,
            running_changes: Changes::default(),
            committing_changes: Changes::default(),
            logged: BTreeMap::new(),
            logged_bytes: 0,
            log_holds: BTreeSet::new(),
            revoke: BTreeSet::new(),
            running_limit,
            write_backs: 0,
            replayed_in_memory: false,
        }
    }

    /// True when something was published since the last write-back began
    /// and there is a device to write it to.
    pub(crate) fn has_running(&self) -> bool {
        !self.replayed_in_memory && (self.superblock.is_some() || !self.blocks.is_empty())
    }

    /// The ID of the last transaction with anything published: the
    /// running one, or the one before it when the running one is empty.
    fn last_published(&self) -> u64 {
        if self.has_running() { self.tid } else { self.tid - 1 }
    }
}

impl Filesystem {
    /// The dirty copy of `block`, if it has one.
    pub(crate) fn dirty_block(&self, block: u64) -> Option<Arc<[u8]>> {
        let d = self.dirty.lock();
        d.blocks
            .get(&block)
            .or_else(|| d.committing.as_ref().and_then(|c| c.get(&block)))
            .or_else(|| d.logged.get(&block))
            .cloned()
    }

    /// Copies the dirty blocks that overlap bytes `offset..offset + len`
    /// of the device into `buf`.
    pub(crate) fn overlay_dirty(&self, offset: u64, buf: &mut [u8]) {
        if buf.is_empty() {
            return;
        }
        let d = self.dirty.lock();
        let log2 = self.geo.block_size_log2;
        // Oldest first: logged, committing, running.
        overlay(&d.logged, log2, offset, buf);
        if let Some(c) = &d.committing {
            overlay(c, log2, offset, buf);
        }
        overlay(&d.blocks, log2, offset, buf);
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
        blocks: BTreeMap<u64, Arc<[u8]>>,
        freed: &[(u64, u64)],
        inodes: &[u32],
        sb: RawSuperblock,
        fc: crate::journal::fast_commit::FcNotes,
    ) -> Result<()> {
        let mut d = self.dirty.lock();
        if self.journaling {
            d.running_changes.inodes.extend(inodes);
            d.running_changes.fc.note(fc, inodes);
        }
        for &(start, len) in freed {
            d.forget(start, len);
            if self.journaling {
                self.busy.add(start, len);
            }
        }
        self.publish_seq.fetch_add(1, Ordering::AcqRel);
        for (block, bytes) in blocks {
            self.cache.insert(block, bytes.clone());
            d.bytes += bytes.len();
            if let Some(old) = d.blocks.insert(block, bytes) {
                d.bytes -= old.len();
            }
        }
        self.publish_seq.fetch_add(1, Ordering::AcqRel);
        d.superblock = Some(sb);
        Ok(())
    }

    /// Writes back when more is waiting than the running limit allows.
    /// Called after a publish, not inside it: the write-back must first
    /// wait for file data in flight, which the publishing thread may own.
    pub(crate) fn write_back_if_full(&self) -> Result<()> {
        let full = || {
            let d = self.dirty.lock();
            d.bytes > d.running_limit
        };
        if !full() {
            return Ok(());
        }
        let mut log = self.log.lock();
        // Another thread may have written it back while this one waited.
        if !full() {
            return Ok(());
        }
        self.dirty.lock().write_backs += 1;
        self.write_back_locked(&mut log)
    }

    /// Writes every dirty block and the superblock to the device (as one
    /// journal commit when journaling), once the file data they may point
    /// at is down (see [`crate::ordered`]).
    pub(crate) fn write_back(&self) -> Result<()> {
        let mut log = self.log.lock();
        self.dirty.lock().write_backs += 1;
        self.write_back_locked(&mut log)
    }

    /// Makes durable everything published before the call: with a
    /// journal, commits unless a commit that began after the last publish
    /// has already ended (`jbd2_log_wait_commit`), so threads that fsync
    /// together share commits.
    pub(crate) fn write_back_published(&self) -> Result<()> {
        let want = {
            let mut d = self.dirty.lock();
            d.write_backs += 1;
            d.last_published()
        };
        self.commit_through(want)
    }

    /// Makes durable what changed inode `ino` (fsync): with a journal,
    /// waits for the transaction holding its last change, committing it
    /// if need be, and only flushes the device when that is already
    /// durable (its file data may still be in the device's cache). Without
    /// a journal, as [`Filesystem::sync`].
    ///
    /// # Errors
    /// [`crate::Error::Io`] when the device cannot write or flush.
    pub fn sync_inode(&self, ino: u32) -> Result<()> {
        self.flush_file(ino)?;
        if !self.journaling {
            return self.sync_committed();
        }
        let want = {
            let mut d = self.dirty.lock();
            d.write_backs += 1;
            if d.running_changes.inodes.contains(&ino) {
                Some(d.tid)
            } else if d.committing_changes.inodes.contains(&ino) {
                Some(d.tid - 1)
            } else {
                None
            }
        };
        match want {
            Some(tid) if self.fast_commit_through(tid)? => Ok(()),
            Some(tid) => self.commit_through(tid),
            None => crate::journal::commit::flush(self),
        }
    }

    /// A fast commit in place of the full commit of transaction `tid`,
    /// when it is the running one and fast commits can carry it
    /// (`journal::fast_commit`); the data of every inode it names is
    /// written first, as the kernel's `ext4_fc_submit_inode_data_all` does.
    fn fast_commit_through(&self, tid: u64) -> Result<bool> {
        if self.log.lock().as_ref().is_none_or(|l| l.fc.is_none()) {
            return Ok(false);
        }
        let inodes: Vec<u32> = {
            let d = self.dirty.lock();
            if d.tid != tid || d.committing.is_some() {
                return Ok(false);
            }
            d.running_changes.inodes.iter().copied().collect()
        };
        for ino in inodes {
            self.flush_file(ino)?;
        }
        // No operation publishes while the fast commit reads what the
        // running transaction noted and marks it carried.
        let _writer = self.writer.lock();
        let mut log = self.log.lock();
        match log.as_mut() {
            Some(log) if self.dirty.lock().tid == tid => self.try_fast_commit(log),
            _ => Ok(false),
        }
    }

    /// Commits unless transaction `tid` is already durable; a commit that
    /// is running when this is called is waited for first, and may carry
    /// `tid` (`jbd2_log_wait_commit`).
    fn commit_through(&self, tid: u64) -> Result<()> {
        let mut log = self.log.lock();
        if log.is_some() && self.dirty.lock().committed_tid >= tid {
            return Ok(());
        }
        self.write_back_locked(&mut log)
    }

    fn write_back_locked(&self, log: &mut Option<Log>) -> Result<()> {
        match log {
            Some(log) => self.commit_running(log),
            None => self.write_in_place(),
        }
    }

    /// What the journal writer has done this session; `None` when changes
    /// do not go through a journal.
    pub fn journal_stats(&self) -> Option<crate::journal::JournalStats> {
        let mut s = self.log.lock().as_ref()?.stats;
        s.write_backs = self.dirty.lock().write_backs;
        Some(s)
    }

    /// Runs `write`, which puts dirty blocks home and then drops them from
    /// the overlay, as a window readers can see: a read that overlapped it
    /// may hold the device's older bytes and no overlay, and reads again.
    pub(crate) fn writing_home<T>(&self, write: impl FnOnce() -> T) -> T {
        self.writeback_seq.fetch_add(1, Ordering::AcqRel);
        let r = write();
        self.writeback_seq.fetch_add(1, Ordering::AcqRel);
        r
    }

    /// Without a journal: the running blocks are written in place, the
    /// superblock saying "not clean" before them when it does at all.
    fn write_in_place(&self) -> Result<()> {
        let _data = self.data_in_flight.write();
        let mut d = self.dirty.lock();
        if !d.has_running() {
            return Ok(());
        }
        self.writing_home(|| {
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
            d.running_changes = Changes::default();
            d.committed_tid = d.tid;
            d.tid += 1;
            Ok(())
        })
    }

    pub(crate) fn write_superblock(&self, sb: &RawSuperblock) -> Result<()> {
        self.dev
            .write_at(1024, &sb.encode())
            .map_err(|source| self.write_failed(1024, source))
    }
}

impl Dirty {
    /// Blocks `start..start + len` were just freed: their running copies
    /// go at once, and those the log holds are revoked at the next commit.
    /// Their logged copies stay until the freeing transaction commits
    /// ([`Dirty::drop_logged`]): until then the committed state still owns
    /// the blocks, and a checkpoint must write them home. No stale copy
    /// reaches a block reused meanwhile, because freed blocks are not
    /// reused before that commit either ([`crate::alloc::busy`]).
    fn forget(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let gone: Vec<u64> = self.blocks.range(start..end).map(|(b, _)| *b).collect();
        for b in gone {
            if let Some(v) = self.blocks.remove(&b) {
                self.bytes -= v.len();
            }
        }
        let held: Vec<u64> = self.log_holds.range(start..end).copied().collect();
        self.revoke.extend(held);
        self.running_changes.freed.push((start, len));
    }

    /// The frees of a transaction that just committed: the logged copies
    /// of those blocks are stale from now on.
    pub(crate) fn drop_logged(&mut self, freed: &[(u64, u64)]) {
        for &(start, len) in freed {
            let gone: Vec<u64> = self
                .logged
                .range(start..start.saturating_add(len))
                .map(|(b, _)| *b)
                .collect();
            for b in gone {
                if let Some(v) = self.logged.remove(&b) {
                    self.logged_bytes -= v.len();
                }
            }
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
