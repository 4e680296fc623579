//! Read-only views of on-disk structures for `ext4kit debug`, the answers
//! debugfs gives an ext4 engineer: which inode owns a block (`icheck`),
//! which names lead to an inode (`ncheck`), where an inode record lies
//! (`imap`), the first free blocks and inodes (`ffb`, `ffi`), each group's
//! copies and free runs (dumpe2fs's per-group lines), an htree as
//! stored (`htree`) and the journal's transactions (`logdump`). Nothing
//! here writes; every walk is bounded by the image's own counts.

mod blocks;
mod groups;
mod htree;
mod logdump;

pub use groups::GroupLayout;
pub use htree::{HtreeDump, HtreeLeaf, HtreeName, HtreeNode};
pub use logdump::{LogBlock, LogDump, LogEnd};

/// Where an inode's record lives (`debugfs imap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeRecordAt {
    /// Block group holding the inode.
    pub group: u32,
    /// Inode-table block holding the record.
    pub block: u64,
    /// Byte offset of the record within that block.
    pub offset: usize,
}
