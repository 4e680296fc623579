//! Recognising the journal at open time: where it is, what its superblock
//! says, and whether it holds transactions that were never checkpointed.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::journal::superblock::RawJournalSuperblock;

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
    /// The decoded journal superblock, when it could be read.
    pub superblock: Option<JournalSummary>,
    /// Why the journal superblock could not be read, if it could not.
    pub problem: Option<String>,
    /// What the replay at open did, when the journal was replayed
    /// ([`crate::DirtyJournal::Replay`]).
    pub recovered: Option<Recovered>,
    /// The fast-commit records the recovery found, until the open applies
    /// them (`journal::fast_commit`).
    pub(crate) pending_fast_commits: Vec<ext4kit_format::journal::fast_commit::Tag>,
}

/// What replaying the journal at open did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// `s_sequence` before the replay: the first transaction in the log.
    pub from_sequence: u32,
    /// Committed transactions replayed.
    pub transactions: u32,
    /// Logged block copies replayed (a block logged twice counts twice).
    pub blocks_replayed: u64,
    /// Distinct blocks written home (the newest copy of each).
    pub blocks_written: u64,
    /// Logged copies skipped because a later transaction revoked them.
    pub blocks_revoked: u64,
    /// Revoke records read.
    pub revoke_records: u64,
    /// The transaction whose commit block failed its checksum, ending the
    /// replay before it (recorded as an error in `s_state`, as e2fsck does).
    pub failed_commit: Option<u32>,
    /// The device is read-only: the replayed blocks are held in memory and
    /// the image is unchanged.
    pub in_memory: bool,
    /// Fast commits found valid after the last full commit
    /// (`INCOMPAT_FAST_COMMIT` journals).
    pub fast_commits: u32,
    /// Their records applied at open; 0 when the open could not write
    /// (a read-only device or session), which leaves them unapplied.
    pub fast_commit_records: u32,
}

/// The fields of the jbd2 superblock worth showing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalSummary {
    /// Journal block size.
    pub block_size: u32,
    /// Journal length in blocks.
    pub max_len: u32,
    /// First block of the log.
    pub first: u32,
    /// Sequence number expected next.
    pub sequence: u32,
    /// Block where the log starts; 0 means the journal is empty.
    pub start: u32,
    /// `s_feature_incompat` (revoke 1, 64bit 2, async_commit 4, csum_v2 8, csum_v3 0x10).
    pub incompat: u32,
    /// `s_feature_compat`.
    pub compat: u32,
}

impl Filesystem {
    pub(crate) fn inspect_journal(&self) -> Result<JournalInfo> {
        let f = self.geo.features;
        if !f.compat.contains(CompatFeatures::HAS_JOURNAL) {
            return Ok(JournalInfo::default());
        }
        let inode = self.sb.read().s_journal_inum.get();
        let mut info = JournalInfo {
            present: true,
            inode,
            external: inode == 0,
            needs_recovery: f.incompat.contains(IncompatFeatures::RECOVER),
            ..JournalInfo::default()
        };
        if inode != 0 {
            match self.journal_superblock(inode) {
                Ok(s) => {
                    info.needs_recovery |= s.start != 0;
                    info.superblock = Some(s);
                }
                Err(e) => info.problem = Some(e.to_string()),
            }
        } else if let Some(dev) = &self.opts.journal_device {
            // A journal device that is not this file system's is an error
            // at open, as the kernel's mount fails on it.
            let ext = super::external::External::open(dev, &self.sb.read(), self.geo.block_size)?;
            info.needs_recovery |= ext.jsb.s_start.get() != 0;
            info.superblock = Some(summary(&ext.jsb));
        } else {
            info.problem = Some(super::external::NOT_GIVEN.into());
        }
        Ok(info)
    }

    fn journal_superblock(&self, ino: u32) -> Result<JournalSummary> {
        let inode = self.inode(ino)?;
        let mut buf = vec![0u8; 1024];
        self.read_at(&inode, 0, &mut buf)?;
        let at = crate::error::Location::Journal { block: 0 };
        let jsb = RawJournalSuperblock::parse(&buf).map_err(|e| crate::Error::format(at, e))?;
        self.check_journal(at, jsb.verify_checksum())?;
        Ok(summary(&jsb))
    }
}

pub(crate) fn summary(jsb: &RawJournalSuperblock) -> JournalSummary {
    JournalSummary {
        block_size: jsb.s_blocksize.get(),
        max_len: jsb.s_maxlen.get(),
        first: jsb.s_first.get(),
        sequence: jsb.s_sequence.get(),
        start: jsb.s_start.get(),
        incompat: jsb.s_feature_incompat.get(),
        compat: jsb.s_feature_compat.get(),
    }
}
