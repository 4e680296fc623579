//! The blocks a resize writes, sorted by when they may be written so that
//! a crash leaves the old file system or the new one:
//! - `copy`: blocks a shrink moves, copied to blocks the old file system
//!   does not use;
//! - `before`: blocks the old file system does not use (the new groups'
//!   metadata, new tables placed in free blocks of old groups); written
//!   and flushed first, they change nothing the old file system reads;
//! - `txn`: blocks the old file system reads (the primary superblock and
//!   descriptors, old groups' bitmaps, the resize inode); one journal
//!   transaction;
//! - `after`: superblock and descriptor backups in old groups, read only
//!   when the primary is lost; brought up to date after the commit.

use std::collections::BTreeMap;

use ext4kit_format::superblock::RawSuperblock;

use super::plan::Plan;

/// Staged contents, block number → bytes.
pub(crate) struct Stage {
    pub(crate) before: BTreeMap<u64, Vec<u8>>,
    pub(crate) txn: BTreeMap<u64, Vec<u8>>,
    pub(crate) after: BTreeMap<u64, Vec<u8>>,
    /// Runs of blocks zeroed before (new inode tables).
    pub(crate) zero: Vec<(u64, u64)>,
    /// Runs copied before, (from, to, length): blocks a shrink moves.
    pub(crate) copy: Vec<(u64, u64, u64)>,
    /// The switch cannot go through the journal (the journal's own
    /// blocks move).
    pub(crate) skip_journal: bool,
    /// Going home from the journal, the superblock goes last even on a
    /// shrink: a kept group's tables moved, so the old descriptors under
    /// the new superblock would point past its end.
    pub(crate) sb_last: bool,
    /// Blocks moved and inodes renumbered by a shrink.
    pub(crate) moved: (u64, u32),
    /// The new primary superblock.
    pub(crate) sb: RawSuperblock,
}

impl Stage {
    pub(crate) fn new(p: &Plan) -> Self {
        Self {
            before: BTreeMap::new(),
            txn: BTreeMap::new(),
            after: BTreeMap::new(),
            zero: Vec::new(),
            copy: Vec::new(),
            skip_journal: false,
            sb_last: false,
            moved: (0, 0),
            sb: p.new_sb,
        }
    }

    /// Stages `b`: unused by the old file system (`before`) or read by it
    /// (`txn`).
    pub(crate) fn put(&mut self, b: u64, data: Vec<u8>, unreferenced: bool) {
        if unreferenced {
            self.before.insert(b, data);
        } else {
            self.txn.insert(b, data);
        }
    }
}
