//! Pass 5, one group at a time: the on-disk block and inode bitmaps
//! against what passes 1–4 found, their padding and checksums, and the
//! descriptor's free and directory counts. When repairing, a group whose
//! bitmap differs in any way gets it rewritten whole ([`super::rewrite`]),
//! as e2fsck replaces its bitmaps with the ones it computed.

use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, bitmap_checksum};

use super::diffs::Diffs;
use super::rewrite;
use crate::bitmap::disk_bit;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// Compares group `g`'s block bitmap, one bit per cluster (one per block
/// without bigalloc); returns the free clusters counted. A difference is
/// reported at the first block of its cluster, as e2fsck does.
pub(super) fn block_group(ctx: &mut Ctx, g: u32, diffs: &mut Diffs) -> u64 {
    let gd = ctx.fs.groups[g as usize];
    let start = ctx.fs.geo.group_first_block(g);
    let bits = ctx.fs.geo.cluster_bits;
    let n = u64::from(ctx.fs.geo.clusters_in_group(g));
    let uninit = ctx.fs.geo.features.has_group_csum() && gd.flags() & BG_BLOCK_UNINIT != 0;
    let disk = if uninit {
        None
    } else {
        ctx.fs.read_block(gd.block_bitmap()).ok()
    };
    let used = ctx.used.count_range(start, start + (n << bits));
    if !uninit && disk.is_none() {
        ctx.report.note(format!("cannot read the block bitmap of group {g}"));
        return n - used;
    }
    let mut differs = false;
    for i in 0..n {
        let b = start + (i << bits);
        let on_disk = match &disk {
            Some(d) => disk_bit(d, i as usize),
            None => ctx.meta.count_range(b, b + (1 << bits)) > 0,
        };
        let found = ctx.used.get(b);
        if found != on_disk {
            differs = true;
            let code = if found { p::P5_BLOCK_USED } else { p::P5_BLOCK_UNUSED };
            diffs.push_step(code, b, 1 << bits);
        }
    }
    if let Some(d) = &disk {
        differs |= block_padding(ctx, g, d, n);
        differs |= block_csum(ctx, g, d);
    }
    if differs && ctx.repairing() {
        rewrite::block_bitmap(ctx, g);
    }
    let free = n - used;
    if u64::from(gd.free_blocks()) != free {
        let f = Finding::new(
            p::P5_FREE_BLOCK_COUNT_GROUP,
            format!(
                "free blocks count wrong for group #{g} ({}, counted={free})",
                gd.free_blocks()
            ),
            "set it",
        );
        if ctx.fix(f.grp(g)) {
            ctx.fs.groups[g as usize].set_free_blocks(free as u32);
            ctx.fs.dirty_groups = true;
        }
    }
    free
}

/// The last group's bits past its last cluster must be set.
fn block_padding(ctx: &mut Ctx, g: u32, d: &[u8], n: u64) -> bool {
    let cpg = ctx.fs.geo.clusters_per_group as usize;
    if g + 1 != ctx.fs.geo.group_count || (n as usize..cpg).all(|i| disk_bit(d, i)) {
        return false;
    }
    let f = Finding::new(
        p::P5_BLOCK_BMAP_PADDING,
        "padding at the end of the block bitmap is not set",
        "set it",
    );
    ctx.fix(f.grp(g));
    true
}

fn block_csum(ctx: &mut Ctx, g: u32, d: &[u8]) -> bool {
    if !ctx.fs.geo.features.metadata_csum() {
        return false;
    }
    let cpg = ctx.fs.geo.clusters_per_group as usize;
    let c = bitmap_checksum(ctx.fs.seed, d, cpg / 8, ctx.fs.geo.desc_size);
    if c == ctx.fs.groups[g as usize].block_bitmap_csum() {
        return false;
    }
    let f = Finding::new(
        p::P5_BLOCK_BITMAP_CSUM_INVALID,
        format!("group {g} block bitmap checksum does not match"),
        "recompute it",
    );
    ctx.fix(f.grp(g));
    true
}

/// Compares group `g`'s inode bitmap; returns the free inodes counted.
pub(super) fn inode_group(ctx: &mut Ctx, g: u32, diffs: &mut Diffs) -> u64 {
    let gd = ctx.fs.groups[g as usize];
    let ipg = ctx.fs.geo.inodes_per_group;
    let uninit = ctx.fs.geo.features.has_group_csum() && gd.flags() & BG_INODE_UNINIT != 0;
    let disk = if uninit {
        None
    } else {
        ctx.fs.read_block(gd.inode_bitmap()).ok()
    };
    if !uninit && disk.is_none() {
        ctx.report.note(format!("cannot read the inode bitmap of group {g}"));
    }
    let (mut used, mut dirs, mut differs) = (0u64, 0u64, false);
    for i in 0..ipg {
        let ino = g * ipg + i + 1;
        let found = ctx.in_use(ino);
        used += u64::from(found);
        dirs += u64::from(ctx.is_dir(ino));
        let on_disk = disk.as_ref().is_some_and(|d| disk_bit(d, i as usize));
        if (uninit || disk.is_some()) && found != on_disk {
            differs = true;
            let code = if found { p::P5_INODE_USED } else { p::P5_INODE_UNUSED };
            diffs.push(code, u64::from(ino));
        }
    }
    if let Some(d) = &disk {
        differs |= inode_padding(ctx, g, d);
        differs |= inode_csum(ctx, g, d);
    }
    if differs && ctx.repairing() {
        rewrite::inode_bitmap(ctx, g);
    }
    inode_counts(ctx, g, u64::from(ipg) - used, dirs);
    u64::from(ipg) - used
}

fn inode_padding(ctx: &mut Ctx, g: u32, d: &[u8]) -> bool {
    let ipg = ctx.fs.geo.inodes_per_group as usize;
    if (ipg..d.len() * 8).all(|i| disk_bit(d, i)) {
        return false;
    }
    let f = Finding::new(
        p::P5_INODE_BMAP_PADDING,
        "padding at the end of the inode bitmap is not set",
        "set it",
    );
    ctx.fix(f.grp(g));
    true
}

fn inode_csum(ctx: &mut Ctx, g: u32, d: &[u8]) -> bool {
    if !ctx.fs.geo.features.metadata_csum() {
        return false;
    }
    let ipg = ctx.fs.geo.inodes_per_group as usize;
    let c = bitmap_checksum(ctx.fs.seed, d, ipg / 8, ctx.fs.geo.desc_size);
    if c == ctx.fs.groups[g as usize].inode_bitmap_csum() {
        return false;
    }
    let f = Finding::new(
        p::P5_INODE_BITMAP_CSUM_INVALID,
        format!("group {g} inode bitmap checksum does not match"),
        "recompute it",
    );
    ctx.fix(f.grp(g));
    true
}

/// The descriptor's free inode and directory counts.
fn inode_counts(ctx: &mut Ctx, g: u32, free: u64, dirs: u64) {
    let gd = ctx.fs.groups[g as usize];
    if u64::from(gd.free_inodes()) != free {
        let f = Finding::new(
            p::P5_FREE_INODE_COUNT_GROUP,
            format!(
                "free inodes count wrong for group #{g} ({}, counted={free})",
                gd.free_inodes()
            ),
            "set it",
        );
        if ctx.fix(f.grp(g)) {
            ctx.fs.groups[g as usize].set_free_inodes(free as u32);
            ctx.fs.dirty_groups = true;
        }
    }
    if u64::from(gd.used_dirs()) != dirs {
        let f = Finding::new(
            p::P5_FREE_DIR_COUNT_GROUP,
            format!(
                "directories count wrong for group #{g} ({}, counted={dirs})",
                gd.used_dirs()
            ),
            "set it",
        );
        if ctx.fix(f.grp(g)) {
            ctx.fs.groups[g as usize].set_used_dirs(dirs as u32);
            ctx.fs.dirty_groups = true;
        }
    }
}
