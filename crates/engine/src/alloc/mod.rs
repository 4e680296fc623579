//! Block and inode allocation over the group bitmaps (`bitmaps.rst`,
//! `allocators.rst`): a goal-based block allocator with per-inode
//! preallocation windows and a parent-group inode allocator, working
//! inside a transaction. The
//! allocator issue replaces them with mballoc and Orlov/flex_bg, chosen by
//! option.

mod bitmap;
mod blocks;
pub(crate) mod busy;
mod inodes;
mod options;
pub(crate) mod prealloc;

pub use options::{AllocOptions, BlockAllocator, InodeAllocator};
