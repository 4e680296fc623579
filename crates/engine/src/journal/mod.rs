//! The jbd2 journal (inode 8): what it looked like at open ([`info`]),
//! replaying what a crash left in it (`recovery`), and writing the
//! committed metadata through it (`transaction`, `commit`, `checkpoint`). The on-disk
//! blocks are `ext4kit_format::journal`'s; this module walks the log, maps
//! journal blocks to device blocks through the journal inode, and orders
//! the writes. See `Documentation/filesystems/ext4/journal.rst`.

mod checkpoint;
pub(crate) mod commit;
pub(crate) mod fast_commit;
pub mod info;
mod log;
mod recovery;
mod replay;
mod transaction;
pub(crate) mod writer;

pub use info::{JournalInfo, JournalSummary, Recovered};
pub use writer::{DataMode, JournalOptions, JournalStats};
