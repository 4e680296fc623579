//! Checkpointing (`jbd2_log_do_checkpoint`, `jbd2_mark_journal_empty`): the
//! logged blocks are written to their homes and flushed, then the journal
//! superblock says the log is empty (`s_start = 0`, `s_sequence` = the next
//! transaction ID; `s_start = s_first` while fast commits of that
//! transaction wait in their area) and is flushed, so a crash either replays the log onto
//! homes that may be half written or finds nothing to replay.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::commit::flush;
use super::writer::Log;
use crate::error::Result;
use crate::fs::Filesystem;
use crate::txn::write_runs;

impl Log {
    /// Writes `logged` home and empties the log.
    pub(crate) fn checkpoint(&mut self, fs: &Filesystem, logged: &BTreeMap<u64, Arc<[u8]>>) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let log2 = fs.geo.block_size_log2;
        write_runs(fs, logged.iter().map(|(b, bytes)| (b << log2, &bytes[..])))?;
        flush(fs)?;
        self.jsb.s_start.set(self.emptied_start());
        self.jsb.s_sequence.set(self.sequence);
        self.write_superblock(fs)?;
        match self.ext {
            Some(_) => self.flush_external(fs)?,
            None => flush(fs)?,
        }
        self.restart();
        self.stats.checkpoints += 1;
        Ok(())
    }
}
