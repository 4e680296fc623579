//! Replaying ext4 fast commits after the jbd2 log (the kernel's
//! `ext4_fc_replay`, e2fsck's `ext4_fc_replay`). The recovery reads the
//! fast-commit area (`ext4kit_format::journal::fast_commit`) while the log
//! is still the one the crash left, keeps the records of the fast commits
//! that follow the last full commit, and the open applies them once the
//! journal can be written again: inode records copied in, ranges mapped
//! and unmapped with the block bitmaps following, names linked and
//! unlinked, inode bitmaps set by the replayed link counts.
//!
//! The whole replay is one journaled transaction. A crash before it
//! commits leaves the state of the last full commit, which is consistent:
//! the journal superblock was already reset, so the fast commits are
//! lost, as they would be had the crash come before they were written.

mod apply;
mod area;
mod track;
mod write;

pub(crate) use track::{FcNotes, FcPending, NameChange, dentry};
pub(crate) use write::FcArea;

use ext4kit_format::journal::fast_commit::{self, Area};

use super::log::Log;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;

/// Reads the fast-commit area of `log` and keeps the fast commits that
/// follow transaction `end` (the first one the log does not hold).
pub(crate) fn scan(log: &Log<'_>, end: u32) -> Result<Area> {
    let mut blocks = Vec::with_capacity(log.fc.len());
    for b in log.fc.clone() {
        blocks.push(log.read(b)?);
    }
    let first = log.fc.start;
    fast_commit::scan(blocks.iter().map(Vec::as_slice), end)
        .map_err(|e| Error::format(Location::Journal { block: first.into() }, e))
}

impl Filesystem {
    /// Applies the fast commits the recovery at open found, in one
    /// transaction. On a device that cannot be written they are dropped,
    /// and the open says so in [`crate::journal::Recovered`].
    pub(crate) fn replay_fast_commits(&mut self) -> Result<()> {
        let tags = std::mem::take(&mut self.journal.pending_fast_commits);
        if tags.is_empty() {
            return Ok(());
        }
        if self.read_only_reason().is_some() {
            if let Some(r) = self.journal.recovered.as_mut() {
                r.fast_commit_records = 0;
            }
            return Ok(());
        }
        self.in_txn(|txn| apply::replay(txn, &tags))
    }
}
