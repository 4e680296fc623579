//! Keeping the fast-commit area's head honest for every recovery. jbd2
//! reads the area only when the log needs recovery, and takes a `HEAD`
//! record at its first block for fast commits that follow the log. The
//! kernel stops at a `HEAD` whose tid is not the first one the log lacks;
//! e2fsck (`ext4_fc_replay_scan`, 1.47) fails the whole recovery instead
//! ("Invalid argument while recovering journal") and skips the log, so
//! every committed transaction not yet home is lost. A `HEAD` left from
//! fast commits that a full commit has since carried, or from an earlier
//! session (the kernel leaves its area as it was), is such a head: the
//! engine zeroes it.

use ext4kit_format::journal::fast_commit::TAG_HEAD;

use crate::error::Result;
use crate::fs::Filesystem;
use crate::journal::writer::Log;

impl Log {
    /// Zeroes journal block `lblk` (the area's first) if it starts with a
    /// `HEAD` record, and makes that durable: at load, before the first
    /// commit can make a stale head look like a broken one.
    pub(crate) fn clear_fc_head(&self, fs: &Filesystem, lblk: u32) -> Result<()> {
        let at = self.device_block(lblk)? << fs.geo.block_size_log2;
        let mut b = vec![0u8; fs.block_size()];
        self.device(fs)
            .read_at(at, &mut b)
            .map_err(|source| crate::Error::Io { offset: at, source })?;
        if u16::from_le_bytes([b[0], b[1]]) != TAG_HEAD {
            return Ok(());
        }
        self.zero_block(fs, lblk)
    }

    /// After a full commit has made durable what the area's fast commits
    /// carried (`jbd2_fc_release_bufs`): the area starts over, its head
    /// zeroed. Between the commit block and this write a crash leaves a
    /// stale head (the kernel's area keeps one until its next fast
    /// commit); the engine's and the kernel's recovery stop at it.
    pub(crate) fn retire_fast_commits(&mut self, fs: &Filesystem) -> Result<()> {
        let Some(fc) = self.fc.as_mut() else {
            return Ok(());
        };
        if fc.used() == 0 {
            return Ok(());
        }
        fc.reset();
        let first = fc.first();
        self.zero_block(fs, first)?;
        self.stats.fast_commit_resets += 1;
        Ok(())
    }

    fn zero_block(&self, fs: &Filesystem, lblk: u32) -> Result<()> {
        let at = self.device_block(lblk)? << fs.geo.block_size_log2;
        self.device(fs)
            .write_at(at, &vec![0u8; fs.block_size()])
            .map_err(|source| fs.write_failed(at, source))?;
        match self.ext {
            Some(_) => self.flush_external(fs),
            None => crate::journal::commit::flush(fs),
        }
    }
}
