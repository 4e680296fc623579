//! `setb`/`freeb` and `seti`/`freei`: bitmap bits alone. The free counts
//! of the group and the superblock stay as they were (debugfs's commands
//! leave them to e2fsck too); the bitmap checksums follow at commit. A
//! group still `BLOCK_UNINIT` or `INODE_UNINIT` gets its bitmap built
//! first and the flag cleared, or the bit would not be stored at all.

use crate::alloc::bitmap::{set_bit, test_bit};
use crate::error::{Error, Result};
use crate::fs::Filesystem;

impl Filesystem {
    /// Marks blocks `start..start + count` in use (`used`) or free in the
    /// block bitmap; returns those that already were (debugfs warns of them).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a range outside the file system;
    /// what the commit meets.
    pub fn mark_blocks(&self, start: u64, count: u64, used: bool) -> Result<Vec<u64>> {
        let geo = &self.geo;
        let end = start.checked_add(count).filter(|&e| e <= geo.blocks_count);
        if start < u64::from(geo.first_data_block) || end.is_none() {
            return Err(Error::InvalidArgument(format!(
                "blocks {start}+{count} are outside {}..{}",
                geo.first_data_block, geo.blocks_count
            )));
        }
        self.in_txn(|txn| {
            let mut already = Vec::new();
            for b in start..start + count {
                let g = txn.group_of(b);
                let bit = ((b - geo.group_first_block(g)) >> geo.cluster_bits) as u32;
                let map = txn.block_bitmap_mut(g)?;
                if test_bit(map, bit) == used {
                    already.push(b);
                }
                set_bit(map, bit, used);
                let d = txn.group(g)?;
                txn.set_group(g, d);
                txn.note_buddy_touched(g);
            }
            Ok(already)
        })
    }

    /// Marks inodes `first..first + count` in use or free in the inode
    /// bitmap; returns those that already were.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for inode numbers outside 1..=inodes_count;
    /// what the commit meets.
    pub fn mark_inodes(&self, first: u32, count: u32, used: bool) -> Result<Vec<u32>> {
        let geo = &self.geo;
        let total = geo.inodes_per_group * geo.group_count;
        if first == 0 || first.checked_add(count).is_none_or(|e| e - 1 > total) {
            return Err(Error::InvalidArgument(format!(
                "inodes {first}+{count} are outside 1..={total}"
            )));
        }
        self.in_txn(|txn| {
            let mut already = Vec::new();
            for ino in first..first + count {
                let (g, bit) = ((ino - 1) / geo.inodes_per_group, (ino - 1) % geo.inodes_per_group);
                let map = txn.inode_bitmap_mut(g)?;
                if test_bit(map, bit) == used {
                    already.push(ino);
                }
                set_bit(map, bit, used);
                let d = txn.group(g)?;
                txn.set_group(g, d);
            }
            Ok(already)
        })
    }
}
