//! Pass 0, group descriptors: load the table (old-style or meta_bg), then
//! check each descriptor's locations, flags, unused-inode count and
//! checksum (`blockgroup.rst`, `struct ext4_group_desc`).

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, RawGroupDesc};

use crate::Fatal;
use crate::fs::RawFs;
use crate::problem::{self as p, Finding};
pub use crate::relocate::{Table, relocate};
use crate::state::Ctx;

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

/// Checks every descriptor, repairing what e2fsck repairs in pass 0; a
/// bitmap or inode table outside its group is forgotten here (location 0)
/// and given a new home by [`relocate`] once pass 1 knows the free blocks.
pub fn check(ctx: &mut Ctx) {
    let flex = ctx.fs.geo.features.incompat.contains(IncompatFeatures::FLEX_BG);
    for g in 0..ctx.fs.geo.group_count {
        check_locations(ctx, g, flex);
        check_checksum(ctx, g);
        check_flags(ctx, g);
    }
}

/// A descriptor whose checksum does not match cannot be trusted about what
/// is uninitialized: e2fsck clears the uninit flags and the unused-inode
/// count, so pass 1 reads the whole group, and writes a new checksum.
fn check_checksum(ctx: &mut Ctx, g: u32) {
    let f = ctx.fs.geo.features;
    let ds = usize::from(ctx.fs.geo.desc_size);
    let gd = ctx.fs.groups[g as usize];
    if gd.verify_checksum(&f, ctx.fs.seed, &ctx.fs.sb.s_uuid, g, ds).is_ok() {
        return;
    }
    let msg = format!("group descriptor {g} checksum is invalid");
    // e2fsck -n says IGNORED and leaves the exit status clean.
    if ctx.fix(Finding::new(p::P0_GDT_CSUM, msg, "recompute it").grp(g).warning()) {
        set_flags(ctx, g, 0, true);
    }
}

/// Clears `clear` from group `g`'s flags, and with `unused` its unused
/// inode count; the end of the run writes the table with new checksums.
fn set_flags(ctx: &mut Ctx, g: u32, clear: u16, unused: bool) {
    let gd = &mut ctx.fs.groups[g as usize];
    let mut clear = clear;
    if unused {
        clear |= BG_INODE_UNINIT | BG_BLOCK_UNINIT;
        gd.bg_itable_unused_lo.set(0);
        gd.bg_itable_unused_hi.set(0);
    }
    gd.bg_flags.set(gd.flags() & !clear);
    ctx.fs.dirty_groups = true;
}

fn check_flags(ctx: &mut Ctx, g: u32) {
    let f = ctx.fs.geo.features;
    let gd = ctx.fs.groups[g as usize];
    let flags = gd.flags();
    if !f.has_group_csum() && flags & (BG_INODE_UNINIT | BG_BLOCK_UNINIT) != 0 {
        let msg = format!("group {g} is marked uninitialized without uninit_bg or metadata_csum");
        if ctx.fix(Finding::new(p::P0_GDT_UNINIT, msg, "clear the flags").grp(g)) {
            set_flags(ctx, g, 0, true);
        }
    }
    let gd = ctx.fs.groups[g as usize];
    if f.has_group_csum() && g + 1 == ctx.fs.geo.group_count && g > 0 && gd.flags() & BG_BLOCK_UNINIT != 0 {
        let msg = "the last group's block bitmap is marked uninitialized";
        if ctx.fix(Finding::new(p::P0_BB_UNINIT_LAST, msg, "clear BLOCK_UNINIT").grp(g)) {
            set_flags(ctx, g, BG_BLOCK_UNINIT, false);
        }
    }
    let gd = ctx.fs.groups[g as usize];
    let unused = gd.itable_unused();
    if f.has_group_csum() && (unused > ctx.fs.geo.inodes_per_group || unused > gd.free_inodes()) {
        let msg = format!("group {g} has an invalid unused inodes count {unused}");
        if ctx.fix(Finding::new(p::P0_GDT_ITABLE_UNUSED, msg, "set it to zero").grp(g)) {
            let gd = &mut ctx.fs.groups[g as usize];
            gd.bg_itable_unused_lo.set(0);
            gd.bg_itable_unused_hi.set(0);
            ctx.fs.dirty_groups = true;
        }
    }
}

/// Bitmaps and inode table must lie inside the group (anywhere in the file
/// system with flex_bg); block 0 is never one of them (it holds the boot
/// block or the superblock). A repair forgets a bad location (sets it to
/// 0, as e2fsck does) so that pass 1 neither reads nor claims it.
fn check_locations(ctx: &mut Ctx, g: u32, flex: bool) {
    let geo = &ctx.fs.geo;
    let (lo, hi) = if flex {
        (u64::from(geo.first_data_block), geo.blocks_count)
    } else {
        let s = geo.group_first_block(g);
        (s, s + u64::from(geo.blocks_in_group(g)))
    };
    let itb = u64::from(geo.inode_table_blocks);
    let inside = |b: u64, n: u64| b != 0 && b >= lo && b.checked_add(n).is_some_and(|e| e <= hi);
    let gd = ctx.fs.groups[g as usize];
    for (what, at, n, code) in [
        (Table::BlockBitmap, gd.block_bitmap(), 1, p::P0_BB_NOT_GROUP),
        (Table::InodeBitmap, gd.inode_bitmap(), 1, p::P0_IB_NOT_GROUP),
        (Table::InodeTable, gd.inode_table(), itb, p::P0_ITABLE_NOT_GROUP),
    ] {
        if inside(at, n) {
            continue;
        }
        let msg = format!("{} for group {g} is not in the group (block {at})", what.name());
        if ctx.fix(Finding::new(code, msg, "relocate").grp(g).blk(at)) {
            what.set(&mut ctx.fs.groups[g as usize], 0);
            ctx.fs.dirty_groups = true;
        }
    }
}

/// True when the descriptor's locations are usable (checked again by the
/// passes before they read through them).
pub fn table_ok(fs: &RawFs, gd: &RawGroupDesc) -> bool {
    let it = gd.inode_table();
    it != 0
        && it >= u64::from(fs.geo.first_data_block)
        && it.saturating_add(u64::from(fs.geo.inode_table_blocks)) <= fs.geo.blocks_count
}
