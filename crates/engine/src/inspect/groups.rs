//! Where each block group keeps its copies and what it has free, as
//! dumpe2fs lists them per group (`list_desc`): the superblock copy and
//! the descriptor blocks that follow it (`ext2fs_super_and_bgd_loc2`:
//! the whole table and the reserved GDT blocks, or with `meta_bg` one
//! descriptor block in the first, second and last group of a meta group),
//! and the free blocks and inodes as runs read from the bitmaps.

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::BG_INODE_UNINIT;

use crate::error::Result;
use crate::fs::Filesystem;

/// One group's copies of the superblock and descriptors, and its free runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupLayout {
    /// Block of the group's superblock copy (the primary's in group 0).
    pub superblock: Option<u64>,
    /// The descriptor table's blocks `(first, last)` kept after it.
    pub descriptors: Option<(u64, u64)>,
    /// Reserved GDT blocks `(first, last)` after the table.
    pub reserved_gdt: Option<(u64, u64)>,
    /// With `meta_bg`: the one descriptor block this group holds.
    pub meta_bg_descriptor: Option<u64>,
    /// Free blocks as `(first, last)` runs (whole clusters with bigalloc,
    /// as dumpe2fs prints them).
    pub free_blocks: Vec<(u64, u64)>,
    /// Free inodes as `(first, last)` runs of inode numbers.
    pub free_inodes: Vec<(u32, u32)>,
}

impl Filesystem {
    /// Group `g`'s layout (see [`GroupLayout`]).
    ///
    /// # Errors
    /// A group out of range; I/O errors reading a bitmap.
    pub fn group_layout(&self, g: u32) -> Result<GroupLayout> {
        let geo = &self.geo;
        let mut out = GroupLayout::default();
        let has_super = self.group_has_super(g);
        let sb_block = geo.superblock_block(g);
        if has_super {
            out.superblock = Some(sb_block);
        }
        let per = geo.descs_per_block();
        let meta_bg = geo.features.incompat.contains(IncompatFeatures::META_BG);
        let first_meta = self.superblock().s_first_meta_bg.get();
        let table = if meta_bg {
            first_meta
        } else {
            geo.group_count.div_ceil(per)
        };
        let meta_group = g / per;
        let old_style = !meta_bg || meta_group < first_meta;
        if has_super && old_style && table > 0 {
            out.descriptors = Some((sb_block + 1, sb_block + u64::from(table)));
            let reserved = u64::from(self.superblock().s_reserved_gdt_blocks.get());
            if reserved > 0 {
                let at = sb_block + 1 + u64::from(table);
                out.reserved_gdt = Some((at, at + reserved - 1));
            }
        }
        if !old_style {
            let i = g % per;
            if i == 0 || i == 1 || i == per - 1 {
                out.meta_bg_descriptor = Some(sb_block + u64::from(has_super));
            }
        }
        out.free_blocks = self.free_block_runs(g)?;
        out.free_inodes = self.free_inode_runs(g)?;
        Ok(out)
    }

    /// Free blocks of group `g` as runs (a free cluster frees its blocks).
    fn free_block_runs(&self, g: u32) -> Result<Vec<(u64, u64)>> {
        let map = self.block_bitmap_view(g)?;
        let first = self.geo.group_first_block(g);
        let ratio = 1u64 << self.geo.cluster_bits;
        let clusters = u64::from(self.geo.clusters_in_group(g));
        let runs = clear_runs(&map, clusters);
        Ok(runs
            .into_iter()
            .map(|(a, b)| (first + a * ratio, first + (b + 1) * ratio - 1))
            .collect())
    }

    /// Free inodes of group `g` as runs of inode numbers.
    fn free_inode_runs(&self, g: u32) -> Result<Vec<(u32, u32)>> {
        let d = self.group_desc(g)?;
        let ipg = self.geo.inodes_per_group;
        let base = g * ipg + 1;
        if d.flags() & BG_INODE_UNINIT != 0 && self.geo.features.has_group_csum() {
            return Ok(vec![(base, base + ipg - 1)]);
        }
        let map = self.meta_block(d.inode_bitmap(), 0)?;
        Ok(clear_runs(&map, u64::from(ipg))
            .into_iter()
            .map(|(a, b)| (base + a as u32, base + b as u32))
            .collect())
    }
}

/// Runs of clear bits among the first `bits` of `map` (bits past its end
/// count as set).
fn clear_runs(map: &[u8], bits: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for i in 0..bits.min(map.len() as u64 * 8) {
        if map[(i / 8) as usize] & (1 << (i % 8)) != 0 {
            continue;
        }
        match out.last_mut() {
            Some(r) if r.1 + 1 == i => r.1 = i,
            _ => out.push((i, i)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::clear_runs;

    #[test]
    fn runs_of_clear_bits() {
        assert_eq!(clear_runs(&[0b1111_0010, 0x00], 12), vec![(0, 0), (2, 3), (8, 11)]);
        assert_eq!(clear_runs(&[0xff], 40), vec![]);
    }
}
