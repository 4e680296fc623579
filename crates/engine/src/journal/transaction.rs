//! The journaled write-back (`jbd2_journal_commit_transaction` as driven
//! by `kjournald2`): the running transaction becomes the committing one
//! under the cache lock, is written to the log without it, and then joins
//! the logged set. While the log is being written, other threads publish
//! into the next running transaction and read through all three sets, and
//! a thread whose fsync finds its transaction already committed returns at
//! once: that is what lets one commit carry several threads' fsyncs.
//!
//! Blocks freed while a transaction commits stay busy until the commit
//! after it ([`crate::alloc::busy`]); those the committing transaction
//! holds are revoked by the next commit and never become logged copies.

use std::collections::BTreeMap;
use std::sync::Arc;

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::superblock::RawSuperblock;

use super::commit::flush;
use super::writer::Log;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::writeback::{Dirty, VALID_FS};

/// A transaction taken from the running set for its commit.
struct Committing {
    tid: u64,
    blocks: Arc<BTreeMap<u64, Arc<[u8]>>>,
    sb: RawSuperblock,
    revokes: Vec<u64>,
}

/// How a committing transaction reached the device.
enum Landed {
    /// In the log: its blocks are logged copies until a checkpoint.
    Logged,
    /// Larger than the whole journal: written in place.
    InPlace,
}

impl Filesystem {
    /// Commits the running transaction, if anything was published. Called
    /// with the journal writer held (one commit at a time).
    pub(crate) fn commit_running(&self, log: &mut Log) -> Result<()> {
        let Some(txn) = self.take_running(log) else {
            return Ok(());
        };
        let sb = txn.sb;
        let ending = !sb.features().incompat.contains(IncompatFeatures::RECOVER);
        let landed = self.log_transaction(log, &txn);
        let mut d = self.dirty.lock();
        self.end_commit(&mut d, txn, landed)?;
        if ending || d.logged_bytes > self.opts.writeback_bytes {
            self.checkpoint(&mut d, log)?;
        }
        drop(d);
        if ending {
            // The superblock home without `needs_recovery`: the session
            // ends with an empty log.
            self.write_superblock(&sb)?;
            flush(self)?;
            log.recover_on_disk = false;
        }
        Ok(())
    }

    /// Turns the running transaction into the committing one, once the
    /// file data its metadata may point at is written ([`crate::ordered`]).
    fn take_running(&self, log: &Log) -> Option<Committing> {
        let _data = self.data_in_flight.write();
        let mut d = self.dirty.lock();
        if !d.has_running() {
            return None;
        }
        let mut blocks = std::mem::take(&mut d.blocks);
        d.bytes = 0;
        let sb = d.superblock.take().unwrap_or_else(|| *self.sb.read());
        let (home, bytes) = log.superblock_block(&with_recover(sb));
        blocks.insert(home, bytes);
        let revokes = std::mem::take(&mut d.revoke)
            .into_iter()
            .filter(|b| !blocks.contains_key(b))
            .collect();
        let blocks = Arc::new(blocks);
        d.log_holds.extend(blocks.keys().copied());
        d.committing = Some(blocks.clone());
        d.committing_changes = std::mem::take(&mut d.running_changes);
        let tid = d.tid;
        d.tid += 1;
        self.busy.start_commit();
        Some(Committing {
            tid,
            blocks,
            sb,
            revokes,
        })
    }

    /// Writes `txn` to the log, checkpointing first when it does not fit;
    /// a transaction larger than the whole journal goes in place.
    fn log_transaction(&self, log: &mut Log, txn: &Committing) -> Result<Landed> {
        if !log.recover_on_disk {
            self.mark_recover_on_disk()?;
            log.recover_on_disk = true;
        }
        let mut revokes = &txn.revokes[..];
        if log.blocks_needed(txn.blocks.len(), revokes.len()) > log.free() {
            self.checkpoint(&mut self.dirty.lock(), log)?;
            revokes = &[];
        }
        if log.blocks_needed(txn.blocks.len(), 0) > log.capacity() {
            self.write_unlogged(&txn.blocks, &txn.sb)?;
            return Ok(Landed::InPlace);
        }
        log.commit(self, &txn.blocks, revokes)?;
        Ok(Landed::Logged)
    }

    /// After the log write: the committed blocks become logged copies, the
    /// logged copies of blocks this transaction freed go, and those blocks
    /// may be reused. Blocks freed meanwhile keep their copies until the
    /// next commit, which revokes them. On failure the blocks go back
    /// under the running ones, so reads still see them.
    fn end_commit(&self, d: &mut Dirty, txn: Committing, landed: Result<Landed>) -> Result<()> {
        d.committing = None;
        let blocks = Arc::try_unwrap(txn.blocks).unwrap_or_else(|shared| (*shared).clone());
        match landed {
            Ok(Landed::Logged) => {
                for (b, bytes) in blocks {
                    d.logged_bytes += bytes.len();
                    if let Some(old) = d.logged.insert(b, bytes) {
                        d.logged_bytes -= old.len();
                    }
                }
            }
            Ok(Landed::InPlace) => {}
            Err(e) => {
                for (b, bytes) in blocks {
                    if !d.blocks.contains_key(&b) {
                        d.bytes += bytes.len();
                        d.blocks.insert(b, bytes);
                    }
                }
                d.superblock.get_or_insert(txn.sb);
                d.revoke.extend(txn.revokes);
                let failed = std::mem::take(&mut d.committing_changes);
                d.running_changes.absorb(failed);
                return Err(e);
            }
        }
        d.committed_tid = txn.tid;
        let done = std::mem::take(&mut d.committing_changes);
        d.drop_logged(&done.freed);
        self.busy.end_commit();
        Ok(())
    }

    /// Writes the logged blocks home and empties the log. Only a
    /// committing transaction, about to be logged, is left for revokes to
    /// cover.
    fn checkpoint(&self, d: &mut Dirty, log: &mut Log) -> Result<()> {
        self.writing_home(|| log.checkpoint(self, &d.logged))?;
        d.logged.clear();
        d.logged_bytes = 0;
        let committing = d.committing.clone().unwrap_or_default();
        d.revoke.retain(|b| committing.contains_key(b));
        d.log_holds = committing.keys().copied().collect();
        Ok(())
    }

    /// A transaction larger than the whole journal (a huge batch) cannot be
    /// logged: it is written in place, with the superblock saying "not
    /// clean" on the device until every block is down, as without a journal.
    fn write_unlogged(&self, blocks: &BTreeMap<u64, Arc<[u8]>>, sb: &RawSuperblock) -> Result<()> {
        let sb_home = u64::from(self.geo.block_size == 1024);
        let mut unchecked = *sb;
        unchecked.s_state.set(unchecked.s_state.get() & !VALID_FS);
        unchecked.set_checksum();
        self.write_superblock(&unchecked)?;
        flush(self)?;
        let log2 = self.geo.block_size_log2;
        let home = |(b, bytes): (&u64, &Arc<[u8]>)| (b << log2, bytes.clone());
        // The window readers retry across ends when the copies leave the
        // overlay, not when the writes do.
        self.writing_home(|| {
            let (rest, sb_block): (Vec<_>, Vec<_>) =
                blocks.iter().map(home).partition(|(at, _)| *at != sb_home << log2);
            crate::txn::write_runs(self, rest.iter().map(|(at, b)| (*at, &b[..])))?;
            flush(self)?;
            crate::txn::write_runs(self, sb_block.iter().map(|(at, b)| (*at, &b[..])))?;
            flush(self)?;
            self.dirty.lock().committing = None;
            Ok(())
        })
    }

    /// Sets `needs_recovery` in the superblock on the device, as the
    /// kernel's mount does before the first commit: from then on a crash
    /// sends the next mount (or e2fsck) to the journal.
    pub(crate) fn mark_recover_on_disk(&self) -> Result<()> {
        let mut buf = vec![0u8; 1024];
        self.dev
            .read_at(1024, &mut buf)
            .map_err(|source| Error::Io { offset: 1024, source })?;
        let sb = RawSuperblock::parse(&buf).map_err(|e| Error::format(crate::Location::Superblock, e))?;
        self.write_superblock(&with_recover(sb))?;
        flush(self)
    }
}

/// `sb` saying `needs_recovery`, with a fresh checksum.
fn with_recover(mut sb: RawSuperblock) -> RawSuperblock {
    let f = sb.s_feature_incompat.get() | IncompatFeatures::RECOVER.0;
    sb.s_feature_incompat.set(f);
    sb.set_checksum();
    sb
}
