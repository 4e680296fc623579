//! `resize2fs -P`: the smallest size the file system could be shrunk to,
//! estimated as resize2fs's `calculate_minimum_resize_size` estimates it
//! (groups enough for the inodes in use, blocks enough for the data, a
//! flex group's worth of table slack, 50 blocks in the last group, and a
//! margin for extent trees that grow while blocks move), so the figures
//! agree with resize2fs's on the same image.

use ext4kit_format::features::{IncompatFeatures, RoCompatFeatures};

use super::plan::has_super;
use crate::fs::Filesystem;

/// Bytes of one extent record (`struct ext3_extent`).
const EXTENT_SIZE: u64 = 12;

/// The minimum size, in blocks.
pub fn minimum_size(fs: &Filesystem) -> u64 {
    let sb = fs.superblock();
    let geo = &fs.geo;
    let bpg = u64::from(geo.blocks_per_group);
    let blocks = geo.blocks_count;
    let descs = fs.group_descs();
    let meta_bg = geo.features.incompat.contains(IncompatFeatures::META_BG);
    let desc_blocks = geo.group_count.div_ceil(geo.descs_per_block());
    let old_desc = if meta_bg {
        u64::from(sb.s_first_meta_bg.get())
    } else {
        u64::from(desc_blocks) + u64::from(sb.s_reserved_gdt_blocks.get())
    };
    let overhead_of = |g: u32| -> u64 {
        let mut o = u64::from(geo.inode_table_blocks) + 2;
        let sup = has_super(geo, &sb, g);
        if g == 0 || sup {
            o += 1;
        }
        let dpb = geo.descs_per_block();
        if !meta_bg || g / dpb < sb.s_first_meta_bg.get() {
            if sup && old_desc > 0 {
                o += old_desc;
            }
        } else if matches!(g % dpb, 0 | 1) || g % dpb == dpb - 1 {
            o += 1;
        }
        o
    };
    let inode_count = u64::from(sb.s_inodes_count.get() - sb.s_free_inodes_count.get().min(sb.s_inodes_count.get()));
    let mut groups = inode_count.div_ceil(u64::from(geo.inodes_per_group)).max(1);
    let mut data_needed = blocks;
    for (g, d) in descs.iter().enumerate() {
        let n = u64::from(d.free_blocks()).min(bpg) + overhead_of(g as u32);
        if data_needed < n {
            return blocks;
        }
        data_needed -= n;
    }
    let flex = geo.groups_per_flex.max(1) as u64;
    let flex_on = geo.features.incompat.contains(IncompatFeatures::FLEX_BG);
    let total = u64::from(geo.group_count);
    let cap_flex = |groups: u64| (groups + flex - (groups & (flex - 1))).min(total);
    let mut flex_groups = if flex_on { cap_flex(groups) } else { groups };
    let mut data_blocks = groups * bpg;
    let mut last_start = 0u64;
    for g in 0..flex_groups {
        let o = overhead_of(g as u32);
        if g + 1 < groups {
            last_start += bpg - o;
        }
        data_blocks = data_blocks.saturating_sub(o);
    }
    let blks_needed = data_needed;
    while blks_needed > data_blocks {
        let extra = (blks_needed - data_blocks).div_ceil(bpg);
        data_blocks += extra * bpg;
        last_start += bpg - overhead_of((groups - 1) as u32);
        let mut g = flex_groups;
        groups += extra;
        if !flex_on {
            flex_groups = groups;
        } else if groups > flex_groups {
            flex_groups = cap_flex(groups);
        }
        while g < flex_groups {
            let o = overhead_of(g as u32);
            if g + 1 < groups {
                last_start += bpg - o;
            }
            data_blocks = data_blocks.wrapping_sub(o);
            g += 1;
        }
    }
    let mut g = groups - 1;
    if flex_on && g & !(flex - 1) == 0 {
        g &= !(flex - 1);
    }
    let mut overhead: u64 = (g..flex_groups).map(|g| overhead_of(g as u32)).sum();
    overhead += if last_start < blks_needed {
        (blks_needed - last_start).max(50)
    } else {
        50
    };
    overhead += u64::from(geo.first_data_block);
    if geo.features.ro_compat.contains(RoCompatFeatures::BIGALLOC) {
        overhead += u64::from(geo.cluster_ratio()) * 2;
    }
    let mut needed = (groups - 1) * bpg + overhead;
    if let Some(d) = descs.get((groups - 1) as usize) {
        needed = needed.max(d.inode_table() + u64::from(geo.inode_table_blocks));
    }
    if needed >= blocks {
        return blocks;
    }
    if geo.features.incompat.contains(IncompatFeatures::EXTENTS) {
        let per_block = u64::from(geo.block_size) / EXTENT_SIZE - 1;
        let worst = data_needed.div_ceil(per_block).max(inode_count);
        needed += ((blocks - needed) / 500).min(worst);
    }
    needed
}
