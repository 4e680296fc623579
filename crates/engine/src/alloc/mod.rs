//! Block and inode allocation over the group bitmaps (`bitmaps.rst`,
//! `allocators.rst`, seed 001), inside a transaction, each a policy
//! chosen by [`AllocOptions`]: blocks by [`mballoc`] (buddies, criteria
//! passes, normalization, locality-group and per-inode preallocation in
//! [`prealloc`]) or the [`ext3`] allocator with reservation windows,
//! data placement in [`data`]; inodes by Orlov, the flex_bg allocator or
//! the parent's group ([`ialloc`]). The bitmaps are the only state on
//! disk; every other structure here is in memory and rebuilt on demand.

pub(crate) mod bitmap;
mod blocks;
pub(crate) mod busy;
mod cluster;
mod cluster_pa;
mod cpu;
mod data;
mod ext3;
pub(crate) mod ialloc;
mod longest;
pub(crate) mod mballoc;
mod options;
pub(crate) mod prealloc;

pub(crate) use cluster::ClusterRequest;
pub(crate) use data::DataRequest;
pub use data::set_caller_pid;
pub use mballoc::criteria::MbStats;
pub use options::{AllocOptions, BlockAllocator, InodeAllocator};
