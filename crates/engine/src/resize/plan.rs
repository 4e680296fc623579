//! The new superblock of a resize: block and inode counts, reserved GDT
//! blocks, `s_backup_bgs` (sparse_super2) and the reserved-block share, as
//! resize2fs's `adjust_fs_info` sets them; and the refusals of what this
//! resize does not do, each naming the feature or layout.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::superblock::{Geometry, RawSuperblock};

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;

/// The file system before and after.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) old_sb: RawSuperblock,
    pub(crate) new_sb: RawSuperblock,
    pub(crate) old: Geometry,
    pub(crate) new: Geometry,
    pub(crate) new_desc_blocks: u32,
}

impl Plan {
    /// Whether `group` of the new layout holds a superblock backup.
    pub(crate) fn new_has_super(&self, group: u32) -> bool {
        has_super(&self.new, &self.new_sb, group)
    }

    /// Whether `group` of the old layout holds a superblock backup.
    pub(crate) fn old_has_super(&self, group: u32) -> bool {
        has_super(&self.old, &self.old_sb, group)
    }

    /// Blocks opening `group` of the new layout held by its superblock and
    /// descriptor copies (see [`base_len`]).
    pub(crate) fn new_base(&self, group: u32) -> u64 {
        base_len(&self.new, &self.new_sb, group)
    }

    /// As [`Self::new_base`], in the old layout.
    pub(crate) fn old_base(&self, group: u32) -> u64 {
        base_len(&self.old, &self.old_sb, group)
    }

    /// Whether the layout has meta_bg descriptor blocks.
    pub(crate) fn meta_bg(&self) -> bool {
        self.new.features.incompat.contains(IncompatFeatures::META_BG)
    }

    /// Where the primary copy of descriptor block `i` lives in the new
    /// layout: after the primary superblock below `s_first_meta_bg`, else
    /// in the first group of meta group `i`, after its superblock copy.
    pub(crate) fn primary_desc_block(&self, i: u32) -> u64 {
        let sb_block = 1024 / u64::from(self.new.block_size);
        if !self.meta_bg() || i < self.new_sb.s_first_meta_bg.get() {
            return sb_block + 1 + u64::from(i);
        }
        let g = i * self.new.descs_per_block();
        self.new.group_first_block(g) + u64::from(self.new_has_super(g))
    }
}

/// `ext2fs_super_and_bgd_loc2`'s count of the blocks opening `group`: its
/// superblock copy, then either the old-style table (`s_first_meta_bg`
/// blocks under meta_bg, else every descriptor block plus the reserved GDT
/// blocks) when the group has a superblock, or, for a group of a meta
/// group at or past `s_first_meta_bg`, its meta group's descriptor block
/// when it is the meta group's first, second or last group.
pub(crate) fn base_len(geo: &Geometry, sb: &RawSuperblock, group: u32) -> u64 {
    let sup = has_super(geo, sb, group);
    let dpb = geo.descs_per_block();
    let meta_bg = geo.features.incompat.contains(IncompatFeatures::META_BG);
    if !meta_bg || group / dpb < sb.s_first_meta_bg.get() {
        if !sup {
            return 0;
        }
        let table = if meta_bg {
            sb.s_first_meta_bg.get()
        } else {
            geo.group_count.div_ceil(dpb)
        };
        return 1 + u64::from(table) + u64::from(sb.s_reserved_gdt_blocks.get());
    }
    let holds_desc = matches!(group % dpb, 0 | 1) || group % dpb == dpb - 1;
    u64::from(sup) + u64::from(holds_desc)
}

/// `ext2fs_bg_has_super`, with `s_backup_bgs` for sparse_super2.
pub(crate) fn has_super(geo: &Geometry, sb: &RawSuperblock, group: u32) -> bool {
    if geo.features.compat.contains(CompatFeatures::SPARSE_SUPER2) {
        return group == 0 || [sb.s_backup_bgs[0].get(), sb.s_backup_bgs[1].get()].contains(&group);
    }
    geo.group_has_super_sparse(group)
}

/// Features whose layouts this resize does not change, named.
pub(crate) fn refuse_features(geo: &Geometry) -> Result<()> {
    let f = &geo.features;
    let refused = [
        (f.ro_compat.contains(RoCompatFeatures::BIGALLOC), "bigalloc"),
        (f.ro_compat.contains(RoCompatFeatures::HAS_SNAPSHOT), "snapshot"),
        (f.incompat.contains(IncompatFeatures::JOURNAL_DEV), "journal_dev"),
    ];
    if let Some((_, name)) = refused.iter().find(|(on, _)| *on) {
        return Err(Error::Unsupported(format!(
            "resize of a file system with {name} is not implemented"
        )));
    }
    Ok(())
}

/// The plan for a file system of `blocks` blocks (already [`super::size::fit`]).
/// A grow may need more descriptor blocks than are reserved: the blocks
/// in the way are then moved ([`super::displace`]), offline and online.
pub(crate) fn plan(fs: &Filesystem, blocks: u64) -> Result<Plan> {
    let old_sb = fs.superblock();
    let old = fs.geo.clone();
    refuse_features(&old)?;
    let bit64 = old.features.incompat.contains(IncompatFeatures::BIT64);
    if !bit64 && blocks > u64::from(u32::MAX) {
        return Err(Error::InvalidArgument(format!(
            "{blocks} blocks need the 64bit feature, which this file system does not have"
        )));
    }
    let mut sb = old_sb;
    sb.s_blocks_count_lo.set(blocks as u32);
    if bit64 {
        sb.s_blocks_count_hi.set((blocks >> 32) as u32);
    }
    let first = u64::from(old.first_data_block);
    let groups = (blocks - first).div_ceil(u64::from(old.blocks_per_group)) as u32;
    sb.s_inodes_count.set(groups * old.inodes_per_group);
    let dpb = old.descs_per_block();
    let (old_desc_blocks, new_desc_blocks) = (old.group_count.div_ceil(dpb), groups.div_ceil(dpb));
    let reserved = u32::from(old_sb.s_reserved_gdt_blocks.get());
    if old.features.incompat.contains(IncompatFeatures::META_BG) {
        refuse_meta_bg(&old, &old_sb, blocks)?;
    } else if u64::from(new_desc_blocks) + first > u64::from(old.blocks_per_group) {
        // resize2fs's "too many block group descriptors"; the kernel would
        // switch to meta_bg, which this resize does not do.
        return Err(Error::Unsupported(format!(
            "growing to {groups} groups needs {new_desc_blocks} descriptor blocks, more than a group of {} \
             blocks holds; without meta_bg the table must fit in one group (converting to meta_bg is not \
             implemented)",
            old.blocks_per_group
        )));
    }
    if old.features.compat.contains(CompatFeatures::RESIZE_INODE) && new_desc_blocks != old_desc_blocks {
        let r = i64::from(reserved) + i64::from(old_desc_blocks) - i64::from(new_desc_blocks);
        sb.s_reserved_gdt_blocks
            .set(r.clamp(0, i64::from(old.block_size / 4)) as u16);
    }
    backup_bgs(&mut sb, old.group_count, groups);
    scale_reserved(&mut sb, &old_sb, old.blocks_count, blocks, bit64);
    sb.s_overhead_clusters.set(0);
    let new = Geometry::from_superblock(&sb).map_err(|e| Error::format(Location::Superblock, e))?;
    Ok(Plan {
        old_sb,
        new_sb: sb,
        old,
        new,
        new_desc_blocks,
    })
}

/// The meta_bg layouts this resize does not change: a shrink below
/// `s_first_meta_bg` meta groups, the resize inode beside meta_bg (mke2fs does not make it), sparse_super2 (a
/// dropped backup would move a group's descriptor block), and an
/// old-style table longer than the descriptor blocks (resize2fs would
/// turn meta_bg off).
fn refuse_meta_bg(old: &Geometry, sb: &RawSuperblock, blocks: u64) -> Result<()> {
    let groups = (blocks - u64::from(old.first_data_block)).div_ceil(u64::from(old.blocks_per_group)) as u32;
    let why = if blocks < old.blocks_count && groups.div_ceil(old.descs_per_block()) < sb.s_first_meta_bg.get() {
        // resize2fs would turn meta_bg off (the old-style table covers it all).
        "shrinking below s_first_meta_bg with"
    } else if old.features.compat.contains(CompatFeatures::RESIZE_INODE) {
        "the resize inode beside"
    } else if old.features.compat.contains(CompatFeatures::SPARSE_SUPER2) {
        "sparse_super2 with"
    } else if sb.s_first_meta_bg.get() > old.group_count.div_ceil(old.descs_per_block()) {
        "s_first_meta_bg past the descriptor table with"
    } else {
        return Ok(());
    };
    Err(Error::Unsupported(format!("resize: {why} meta_bg is not implemented")))
}

/// sparse_super2: the second backup follows the last group, as resize2fs
/// moves it.
fn backup_bgs(sb: &mut RawSuperblock, old_groups: u32, groups: u32) {
    if !sb.features().compat.contains(CompatFeatures::SPARSE_SUPER2) {
        return;
    }
    let (last, old_last) = (groups - 1, old_groups - 1);
    let old1 = sb.s_backup_bgs[1].get();
    if last > old_last {
        if old_groups == 1 {
            sb.s_backup_bgs[0].set(1);
        }
        if (old_groups < 3 && groups > 2) || old1 != 0 {
            sb.s_backup_bgs[1].set(last);
        }
    } else if last < old_last {
        if sb.s_backup_bgs[0].get() > last {
            sb.s_backup_bgs[0].set(0);
        }
        if old1 > last {
            sb.s_backup_bgs[1].set(0);
        }
        if last > 1 && old1 == old_last {
            sb.s_backup_bgs[1].set(last);
        }
    }
}

/// `s_r_blocks_count` keeps its share of the blocks (resize2fs computes
/// the share in floating point; so does this).
fn scale_reserved(sb: &mut RawSuperblock, old: &RawSuperblock, old_blocks: u64, blocks: u64, bit64: bool) {
    let r_old = u64::from(old.s_r_blocks_count_lo.get()) | (u64::from(old.s_r_blocks_count_hi.get()) << 32);
    let r_old = if bit64 { r_old } else { r_old & 0xFFFF_FFFF };
    let percent = r_old as f64 * 100.0 / old_blocks as f64;
    let r = (percent * blocks as f64 / 100.0) as u64;
    sb.s_r_blocks_count_lo.set(r as u32);
    if bit64 {
        sb.s_r_blocks_count_hi.set((r >> 32) as u32);
    }
}
