//! Carrying out a recovery plan at open: the logged blocks go to their
//! homes, then the journal superblock is reset (`s_start = 0`, the sequence
//! moved past the log, as `jbd2_journal_recover` and e2fsck leave it) and
//! `needs_recovery` is cleared in the file-system superblock.
//!
//! On a writable device the writes go to the device and are flushed, the
//! logged blocks first and the two superblocks last, so a crash part-way
//! leaves a journal that replays again. On a read-only device they are
//! held in memory, in the write-back set that every read overlays, and are
//! never written: the image stays as it was and reads see the replayed state.

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::journal::JBD2_MAGIC;
use ext4kit_format::journal::fast_commit::{Area, Tag};
use ext4kit_format::superblock::{RawSuperblock, STATE_ERROR, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

use super::Recovered;
use super::log::Log;
use super::recovery::{self, Plan, Scan};
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;

impl Filesystem {
    /// Replays the journal found dirty at open (`DirtyJournal::Replay`),
    /// then reloads the superblock and group descriptors it changed, with
    /// the file system's checksums verified again (the open may have read
    /// the journal inode without).
    pub(crate) fn replay_at_open(&mut self) -> Result<()> {
        if self.journal.external && self.opts.journal_device.is_none() {
            return Err(Error::Unsupported(format!(
                "the journal needs recovery: {}",
                super::external::NOT_GIVEN
            )));
        }
        let (recovered, fast) = self.recover_journal()?;
        self.csum_deferred = false;
        self.reload()?;
        self.journal.recovered = Some(recovered);
        self.journal.pending_fast_commits = fast;
        Ok(())
    }

    /// Replays the log; returns what it did and the fast-commit records
    /// to apply once the journal can be written.
    fn recover_journal(&self) -> Result<(Recovered, Vec<Tag>)> {
        let log = Log::open(self, self.journal.inode)?;
        let scan = recovery::scan(&log)?;
        // Without needs_recovery the kernel skips the log rather than
        // replaying it (`jbd2_journal_wipe`): only the sequence moves on.
        let replay = self.geo.features.incompat.contains(IncompatFeatures::RECOVER);
        let plan = if replay {
            recovery::plan(&log, &scan)?
        } else {
            Plan::default()
        };
        let fast = if replay && !log.fc.is_empty() {
            super::fast_commit::scan(&log, scan.end)?
        } else {
            Area::default()
        };
        let in_memory = self.dev.read_only();
        for (&home, &(at, escaped)) in &plan.writes {
            let mut data = log.read(at)?;
            if escaped {
                data[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
            }
            self.put_block(home, data, in_memory)?;
        }
        self.flush_replay(in_memory)?;
        let failed = scan.failed_commit.is_some() || log.sb.s_errno.get() != 0;
        self.reset_journal_superblock(&log, &scan, in_memory)?;
        self.clear_recover_flag(failed, in_memory)?;
        self.flush_replay(in_memory)?;
        let recovered = Recovered {
            from_sequence: log.sb.s_sequence.get(),
            transactions: plan.transactions,
            blocks_replayed: plan.replayed,
            blocks_written: plan.writes.len() as u64,
            blocks_revoked: plan.revoked,
            revoke_records: plan.revoke_records,
            failed_commit: scan.failed_commit,
            in_memory,
            fast_commits: fast.commits,
            fast_commit_records: fast.tags.len() as u32,
        };
        Ok((recovered, fast.tags))
    }

    /// `s_start = 0` (the journal is empty) and `s_sequence` one past the
    /// first transaction not replayed (`++info.end_transaction`).
    fn reset_journal_superblock(&self, log: &Log<'_>, scan: &Scan, in_memory: bool) -> Result<()> {
        let mut jsb = log.sb;
        jsb.s_start.set(0);
        jsb.s_sequence.set(scan.end.wrapping_add(1));
        // An error the journal recorded, or a failed commit, goes to the
        // file system's state (e2fsck's `e2fsck_check_ext3_journal`).
        jsb.s_errno.set(0);
        jsb.set_checksum();
        let home = log.physical(0)?;
        let mut block = log.read(0)?;
        block[..jsb.encode().len()].copy_from_slice(&jsb.encode());
        match &log.ext {
            // The overlay holds file-system blocks only: a read-only
            // session leaves the journal device as it is.
            Some(_) if in_memory => Ok(()),
            Some(dev) => {
                let offset = home << self.geo.block_size_log2;
                let io = |source| Error::Io { offset, source };
                dev.write_at(offset, &block).map_err(io)?;
                dev.flush().map_err(io)
            }
            None => self.put_block(home, block, in_memory),
        }
    }

    /// Clears `needs_recovery` in the replayed superblock (and records an
    /// error in `s_state` when the log recorded one).
    fn clear_recover_flag(&self, error: bool, in_memory: bool) -> Result<()> {
        let log2 = self.geo.block_size_log2;
        let home = SUPERBLOCK_OFFSET >> log2;
        let mut block = vec![0u8; self.block_size()];
        self.read_bytes(home << log2, &mut block)?;
        let off = (SUPERBLOCK_OFFSET - (home << log2)) as usize;
        let mut sb = RawSuperblock::parse(&block[off..off + SUPERBLOCK_SIZE])
            .map_err(|e| Error::format(Location::Superblock, e))?;
        let incompat = sb.s_feature_incompat.get() & !IncompatFeatures::RECOVER.0;
        sb.s_feature_incompat.set(incompat);
        if error {
            sb.s_state.set(sb.s_state.get() | STATE_ERROR);
        }
        sb.set_checksum();
        block[off..off + SUPERBLOCK_SIZE].copy_from_slice(&sb.encode());
        self.put_block(home, block, in_memory)
    }

    fn put_block(&self, block: u64, data: Vec<u8>, in_memory: bool) -> Result<()> {
        if in_memory {
            self.hold_replayed(block, data);
            return Ok(());
        }
        let offset = block << self.geo.block_size_log2;
        self.dev
            .write_at(offset, &data)
            .map_err(|source| Error::Io { offset, source })
    }

    fn flush_replay(&self, in_memory: bool) -> Result<()> {
        if in_memory {
            return Ok(());
        }
        self.dev.flush().map_err(|source| Error::Io { offset: 0, source })
    }
}
