//! ext4kit's first inode allocator, kept for comparison: every inode
//! starts at its parent's group, and the claim moves on to the following
//! groups only when that one has no free inode. Nothing is spread.

use super::Placement;

/// The parent's group.
pub(super) fn find_group_parent(p: &Placement) -> Option<u32> {
    Some(p.parent_group)
}
