//! Block and inode allocation over the group bitmaps (`bitmaps.rst`,
//! `allocators.rst`): a goal-based block allocator with per-inode
//! preallocation windows and a parent-group inode allocator, working
//! inside a transaction. The
//! allocator issue replaces them with mballoc and Orlov/flex_bg, chosen by
//! option.

mod bitmap;
mod blocks;
pub(crate) mod busy;
mod data;
mod ext3;
mod inodes;
pub(crate) mod mballoc;
mod options;
pub(crate) mod prealloc;

pub(crate) use data::DataRequest;
pub use data::set_caller_pid;
pub use mballoc::criteria::MbStats;
pub use options::{AllocOptions, BlockAllocator, InodeAllocator};
