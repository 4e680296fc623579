//! Pass 0, group descriptors: load the table (old-style or meta_bg), then
//! check each descriptor's locations, flags, unused-inode count and
//! checksum (`blockgroup.rst`, `struct ext4_group_desc`).

use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, RawGroupDesc};

use crate::Fatal;
use crate::fs::RawFs;
use crate::problem::{self as p, Finding};
use crate::report::Report;

/// Reads every group descriptor. A table that cannot be read is fatal:
/// nothing else can be located without it.
pub fn load(fs: &mut RawFs) -> Result<(), Fatal> {
    let ds = usize::from(fs.geo.desc_size);
    let dpb = fs.geo.descs_per_block() as usize;
    let mut groups = Vec::with_capacity(fs.geo.group_count as usize);
    for i in 0..fs.gdt_blocks() {
        let blk = fs.desc_block(i);
        let buf = fs
            .read_block(blk)
            .map_err(|e| Fatal::BadSuperblock(format!("cannot read group descriptor block {blk}: {e}")))?;
        for j in 0..dpb {
            if groups.len() == fs.geo.group_count as usize {
                break;
            }
            let gd = RawGroupDesc::parse(&buf[j * ds..(j + 1) * ds], ds)
                .map_err(|e| Fatal::BadSuperblock(format!("group descriptor {}: {e}", groups.len())))?;
            groups.push(gd);
        }
    }
    fs.groups = groups;
    Ok(())
}

/// Checks every descriptor.
pub fn check(fs: &RawFs, report: &mut Report) {
    let f = fs.geo.features;
    let flex = f.incompat.contains(ext4kit_format::features::IncompatFeatures::FLEX_BG);
    for (g, gd) in fs.groups.iter().enumerate() {
        let g = g as u32;
        check_locations(fs, g, gd, flex, report);
        if gd
            .verify_checksum(&f, fs.seed, &fs.sb.s_uuid, g, usize::from(fs.geo.desc_size))
            .is_err()
        {
            report.add(
                Finding::new(
                    p::P0_GDT_CSUM,
                    format!("group descriptor {g} checksum is invalid"),
                    "recompute it",
                )
                .grp(g)
                // e2fsck -n says IGNORED and leaves the exit status clean.
                .warning(),
            );
        }
        let flags = gd.flags();
        if !f.has_group_csum() && flags & (BG_INODE_UNINIT | BG_BLOCK_UNINIT) != 0 {
            report.add(
                Finding::new(
                    p::P0_GDT_UNINIT,
                    format!("group {g} is marked uninitialized without uninit_bg or metadata_csum"),
                    "clear the flags",
                )
                .grp(g),
            );
        }
        if f.has_group_csum() && (gd.itable_unused() > fs.geo.inodes_per_group || gd.itable_unused() > gd.free_inodes())
        {
            report.add(
                Finding::new(
                    p::P0_GDT_ITABLE_UNUSED,
                    format!("group {g} has an invalid unused inodes count {}", gd.itable_unused()),
                    "set it to zero",
                )
                .grp(g),
            );
        }
        if f.has_group_csum() && g + 1 == fs.geo.group_count && g > 0 && flags & BG_BLOCK_UNINIT != 0 {
            report.add(
                Finding::new(
                    p::P0_BB_UNINIT_LAST,
                    "the last group's block bitmap is marked uninitialized",
                    "clear BLOCK_UNINIT",
                )
                .grp(g),
            );
        }
    }
}

/// Bitmaps and inode table must lie inside the group (anywhere in the file
/// system with flex_bg).
fn check_locations(fs: &RawFs, g: u32, gd: &RawGroupDesc, flex: bool, report: &mut Report) {
    let (lo, hi) = if flex {
        (u64::from(fs.geo.first_data_block), fs.geo.blocks_count)
    } else {
        let s = fs.geo.group_first_block(g);
        (s, s + u64::from(fs.geo.blocks_in_group(g)))
    };
    let inside = |b: u64, n: u64| b >= lo && b.checked_add(n).is_some_and(|e| e <= hi);
    if !inside(gd.block_bitmap(), 1) {
        report.add(
            Finding::new(
                p::P0_BB_NOT_GROUP,
                format!(
                    "block bitmap for group {g} is not in the group (block {})",
                    gd.block_bitmap()
                ),
                "relocate",
            )
            .grp(g)
            .blk(gd.block_bitmap()),
        );
    }
    if !inside(gd.inode_bitmap(), 1) {
        report.add(
            Finding::new(
                p::P0_IB_NOT_GROUP,
                format!(
                    "inode bitmap for group {g} is not in the group (block {})",
                    gd.inode_bitmap()
                ),
                "relocate",
            )
            .grp(g)
            .blk(gd.inode_bitmap()),
        );
    }
    if !inside(gd.inode_table(), u64::from(fs.geo.inode_table_blocks)) {
        report.add(
            Finding::new(
                p::P0_ITABLE_NOT_GROUP,
                format!(
                    "inode table for group {g} is not in the group (block {})",
                    gd.inode_table()
                ),
                "relocate",
            )
            .grp(g)
            .blk(gd.inode_table()),
        );
    }
}

/// True when the descriptor's locations are usable (checked again by the
/// passes before they read through them).
pub fn table_ok(fs: &RawFs, gd: &RawGroupDesc) -> bool {
    let it = gd.inode_table();
    it >= u64::from(fs.geo.first_data_block)
        && it.saturating_add(u64::from(fs.geo.inode_table_blocks)) <= fs.geo.blocks_count
}
