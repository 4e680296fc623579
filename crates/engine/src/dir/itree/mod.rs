//! The itree of seed 003: a B+tree beside the htree of a hashed directory,
//! keyed by (inode number, name hash), whose leaves hold every name of the
//! directory in inode order. `readdir` walks it so that `readdir` + `stat`,
//! a copy or an `rm -r` of a huge directory visits inodes (and their data)
//! in disk order instead of hash order. The on-disk format is in
//! [`ext4kit_format::itree`].
//!
//! A directory gets the tree when it becomes indexed on a file system with
//! the `itree` feature (`make_indexed`), or from `ext4kit tune -O itree`;
//! from then on every name added to or removed from the htree is added to or
//! removed from the itree in the same transaction. Leaves split in half, or
//! take a new right neighbour when a name lands past the last key (names
//! mostly arrive in inode order, so halves would stay half full forever).
//! Removals merge a node with a sibling only when its 2-bit fullness class
//! drops to a half or less, so a mass delete does not coalesce on every
//! removal as the seed's first version did.
//!
//! The tree's nodes are owned by no extent tree: they are charged to no
//! inode's `i_blocks`, and freeing the directory frees them explicitly.

mod build;
mod convert;
mod fast;
mod insert;
mod io;
mod remove;
mod walk;

pub use convert::ItreeConversion;
pub use walk::ItreeStats;

use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::itree::ITREE_FL;

use crate::fs::Filesystem;
use crate::inode::Inode;

/// True when `dir` carries an itree.
pub(crate) fn has_itree(dir: &Inode) -> bool {
    dir.raw.has_flag(ITREE_FL)
}

impl Filesystem {
    /// True when the file system has the `itree` feature: directories that
    /// become indexed get an itree.
    pub fn itree_enabled(&self) -> bool {
        self.geo.features.ro_compat.contains(RoCompatFeatures::ITREE)
    }
}
