//! Rewriting a group's bitmap from what the passes found, laid out as
//! libext2fs writes bitmaps (`write_bitmaps` in `lib/ext2fs/rw_bitmaps.c`):
//! the block starts all ones, so bits past the group's blocks or inodes
//! (the padding) are set; the checksum in the descriptor follows
//! (`bitmaps.rst`). A group still flagged uninitialized that turns out to
//! need a real bitmap loses the flag.

use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, bitmap_checksum};

use crate::state::Ctx;

/// Writes group `g`'s block bitmap from `ctx.used`, one bit per cluster.
pub(super) fn block_bitmap(ctx: &mut Ctx, g: u32) {
    let start = ctx.fs.geo.group_first_block(g);
    let shift = ctx.fs.geo.cluster_bits;
    let n = u64::from(ctx.fs.geo.clusters_in_group(g));
    let bits: Vec<bool> = (0..n).map(|i| ctx.used.get(start + (i << shift))).collect();
    let buf = bitmap_block(ctx.fs.bs(), &bits);
    let at = ctx.fs.groups[g as usize].block_bitmap();
    if !ctx.fs.valid_block(at) {
        ctx.not_fixed(format!("group {g}'s block bitmap location {at} is not usable"));
        return;
    }
    if let Err(e) = ctx.fs.write_block(at, &buf) {
        ctx.not_fixed(format!("writing group {g}'s block bitmap: {e}"));
        return;
    }
    let cpg = ctx.fs.geo.clusters_per_group as usize;
    let csum = bitmap_checksum(ctx.fs.seed, &buf, cpg / 8, ctx.fs.geo.desc_size);
    let gd = &mut ctx.fs.groups[g as usize];
    gd.bg_flags.set(gd.flags() & !BG_BLOCK_UNINIT);
    if ctx.fs.geo.features.metadata_csum() {
        gd.set_block_bitmap_csum(csum);
    }
    ctx.fs.dirty_groups = true;
}

/// Writes group `g`'s inode bitmap from the inodes pass 1 found in use.
pub(super) fn inode_bitmap(ctx: &mut Ctx, g: u32) {
    let ipg = ctx.fs.geo.inodes_per_group;
    let bits: Vec<bool> = (0..ipg).map(|i| ctx.in_use(g * ipg + i + 1)).collect();
    let buf = bitmap_block(ctx.fs.bs(), &bits);
    let at = ctx.fs.groups[g as usize].inode_bitmap();
    if !ctx.fs.valid_block(at) {
        ctx.not_fixed(format!("group {g}'s inode bitmap location {at} is not usable"));
        return;
    }
    if let Err(e) = ctx.fs.write_block(at, &buf) {
        ctx.not_fixed(format!("writing group {g}'s inode bitmap: {e}"));
        return;
    }
    let csum = bitmap_checksum(ctx.fs.seed, &buf, ipg as usize / 8, ctx.fs.geo.desc_size);
    let gd = &mut ctx.fs.groups[g as usize];
    gd.bg_flags.set(gd.flags() & !BG_INODE_UNINIT);
    if ctx.fs.geo.features.metadata_csum() {
        gd.set_inode_bitmap_csum(csum);
    }
    ctx.fs.dirty_groups = true;
}

/// A bitmap block: `bits` first, every later bit set.
fn bitmap_block(bs: usize, bits: &[bool]) -> Vec<u8> {
    let mut buf = vec![0xFFu8; bs];
    for (i, &b) in bits.iter().enumerate() {
        if !b {
            buf[i / 8] &= !(1 << (i % 8));
        }
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::bitmap_block;

    #[test]
    fn padding_is_set_and_bits_follow_the_map() {
        let b = bitmap_block(4, &[true, false, true, false, false, false, false, false, false, true]);
        assert_eq!(b, [0b0000_0101, 0b1111_1110, 0xFF, 0xFF]);
    }
}
