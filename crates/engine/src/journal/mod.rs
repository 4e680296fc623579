//! The jbd2 journal (inode 8, or a journal device: [`external`]): what it
//! looked like at open ([`info`]), replaying what a crash left in it
//! (`recovery`), and writing the committed metadata through it
//! (`transaction`, `commit`, `checkpoint`). The on-disk blocks are
//! `ext4kit_format::journal`'s; this module walks the log, maps journal
//! blocks to device blocks through the journal inode (or, for an external
//! journal, to blocks of its own device, where commits go while
//! checkpoints go to the image), and orders the writes. See
//! `Documentation/filesystems/ext4/journal.rst`.

mod checkpoint;
pub(crate) mod commit;
pub mod external;
pub(crate) mod fast_commit;
pub mod info;
pub(crate) mod log;
mod recovery;
mod replay;
mod transaction;
pub(crate) mod writer;

pub use external::JournalDevice;
pub use info::{JournalInfo, JournalSummary, Recovered};
pub use writer::{DataMode, JournalOptions, JournalStats};
