//! Recognising the journal at open time: where it is, and whether it holds
//! transactions that were never checkpointed. Writing and replaying it is
//! the journal issue's.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures};

use crate::error::Result;
use crate::fs::Filesystem;

/// What the journal looked like when the image was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalInfo {
    /// The file system has a journal (`has_journal`).
    pub present: bool,
    /// Journal inode number (0 for an external journal).
    pub inode: u32,
    /// The journal is on another device (`s_journal_dev`).
    pub external: bool,
    /// The superblock says recovery is needed (`needs_recovery`), or the
    /// journal superblock shows a log that starts somewhere (`s_start != 0`).
    pub needs_recovery: bool,
}

impl Filesystem {
    pub(crate) fn inspect_journal(&self) -> Result<JournalInfo> {
        let f = self.geo.features;
        if !f.compat.contains(CompatFeatures::HAS_JOURNAL) {
            return Ok(JournalInfo::default());
        }
        let inode = self.sb.s_journal_inum.get();
        Ok(JournalInfo {
            present: true,
            inode,
            external: inode == 0,
            needs_recovery: f.incompat.contains(IncompatFeatures::RECOVER),
        })
    }
}
