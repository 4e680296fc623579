//! Block and inode allocation over the group bitmaps (`bitmaps.rst`,
//! `allocators.rst`): a goal-based block allocator with per-inode
//! preallocation windows, and the inode allocators (Orlov, flex_bg,
//! parent group) chosen by option in [`ialloc`], working inside a
//! transaction. The allocator issue replaces the block side with mballoc.

mod bitmap;
mod blocks;
pub(crate) mod busy;
pub(crate) mod ialloc;
mod options;
pub(crate) mod prealloc;

pub use options::{AllocOptions, BlockAllocator, InodeAllocator};
