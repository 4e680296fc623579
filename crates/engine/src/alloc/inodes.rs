//! Inode allocation: the parent's group first, then the following groups
//! (the `ParentGroup` policy), keeping `bg_itable_unused` and the
//! directory counts right.

use super::bitmap::{find_zero, set_bit, test_bit};
use crate::error::{Error, Location, Result};
use crate::txn::Txn;

impl Txn<'_> {
    /// Allocates an inode near `parent`; returns its number.
    ///
    /// # Errors
    /// [`Error::NoSpace`] when no group has a free inode.
    pub(crate) fn alloc_inode(&mut self, parent: u32, is_dir: bool) -> Result<u32> {
        let geo = self.fs.geo.clone();
        let start = (parent.max(1) - 1) / geo.inodes_per_group;
        for step in 0..geo.group_count {
            let g = (start + step) % geo.group_count;
            if self.group(g)?.free_inodes() == 0 {
                continue;
            }
            let first_ok = if g == 0 { geo.first_ino } else { 1 };
            let map = self.inode_bitmap_mut(g)?;
            let Some(i) = find_zero(map, first_ok - 1, geo.inodes_per_group) else {
                continue;
            };
            set_bit(map, i, true);
            self.adjust_group_inodes(g, i, -1, is_dir)?;
            return Ok(g * geo.inodes_per_group + i + 1);
        }
        Err(Error::NoSpace)
    }

    /// Releases inode `ino` in its bitmap and counts.
    pub(crate) fn free_inode(&mut self, ino: u32, is_dir: bool) -> Result<()> {
        self.fs.prealloc.release(ino);
        let geo = self.fs.geo.clone();
        let (g, i) = geo
            .inode_location(ino)
            .ok_or_else(|| Error::InvalidArgument(format!("inode {ino}")))?;
        let map = self.inode_bitmap_mut(g)?;
        if !test_bit(map, i) {
            return Err(Error::inconsistent(
                Location::Inode(ino),
                "freeing an inode that is already free",
            ));
        }
        set_bit(map, i, false);
        self.adjust_group_inodes(g, i, 1, is_dir)
    }

    /// True when `ino`'s bit is set in its group's inode bitmap (an
    /// `INODE_UNINIT` group has none in use).
    pub(crate) fn inode_in_use(&self, ino: u32) -> Result<bool> {
        let Some((g, i)) = self.fs.geo.inode_location(ino) else {
            return Ok(false);
        };
        let d = self.group(g)?;
        let uninit = d.flags() & ext4kit_format::group_desc::BG_INODE_UNINIT != 0;
        if uninit && self.fs.geo.features.has_group_csum() {
            return Ok(false);
        }
        Ok(test_bit(&self.block(d.inode_bitmap(), 0)?, i))
    }

    fn adjust_group_inodes(&mut self, g: u32, index: u32, delta: i32, is_dir: bool) -> Result<()> {
        let ipg = self.fs.geo.inodes_per_group;
        let mut d = self.group(g)?;
        let free = (d.free_inodes() as i64 + i64::from(delta)).max(0) as u32;
        d.bg_free_inodes_count_lo.set(free as u16);
        d.bg_free_inodes_count_hi.set((free >> 16) as u16);
        if is_dir {
            let dirs = (d.used_dirs() as i64 - i64::from(delta)).max(0) as u32;
            d.bg_used_dirs_count_lo.set(dirs as u16);
            d.bg_used_dirs_count_hi.set((dirs >> 16) as u16);
        }
        if delta < 0 && self.fs.geo.features.has_group_csum() {
            // Inodes past the high-water mark count as never used.
            let unused = d.itable_unused().min(ipg - index - 1);
            d.bg_itable_unused_lo.set(unused as u16);
            d.bg_itable_unused_hi.set((unused >> 16) as u16);
        }
        self.set_group(g, d);
        self.count(0, i64::from(delta));
        Ok(())
    }
}
