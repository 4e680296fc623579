//! The bad-blocks inode (inode 1, `special_inodes.rst`): the blocks it
//! lists are unusable. An inode-table block on the list holds inodes that
//! cannot be trusted, so an entry naming one of them is cleared in pass 2
//! (e2fsck's "points to inode located in a bad block", `PR_2_BB_INODE`),
//! and the inodes themselves stay allocated and unexamined, as e2fsck's
//! `inode_bb_map` keeps them: never reused, never reconnected.

use std::collections::BTreeSet;

use crate::pass1::decode;
use crate::state::{Ctx, KIND_RESERVED};
use crate::walk::{Event, Walker};

/// The bad-blocks inode.
const BAD_INO: u32 = 1;

/// Inode-table blocks the bad-blocks inode lists (bounded by the inode
/// tables' size: only blocks inside one are kept).
pub fn itable_blocks(ctx: &Ctx) -> BTreeSet<u64> {
    let Ok(rec) = ctx.fs.inode_record(BAD_INO) else {
        return BTreeSet::new();
    };
    let raw = decode(&rec);
    let itb = u64::from(ctx.fs.geo.inode_table_blocks);
    let tables: Vec<u64> = ctx
        .fs
        .groups
        .iter()
        .map(|g| g.inode_table())
        .filter(|&t| t != 0)
        .collect();
    let mut out = BTreeSet::new();
    let mut visit = |e: Event| {
        if let Event::Data { pblk, len, .. } = e {
            for b in pblk..pblk + u64::from(len) {
                if tables.iter().any(|&t| b >= t && b < t + itb) {
                    out.insert(b);
                }
            }
        }
    };
    Walker::new(&ctx.fs, BAD_INO, &raw, &mut visit).walk(&raw, false);
    out
}

/// True when inode `ino`'s record lies in one of `bad` (inode-table blocks
/// on the bad-block list).
pub fn inode_in(ctx: &Ctx, bad: &BTreeSet<u64>, ino: u32) -> bool {
    if bad.is_empty() {
        return false;
    }
    let Some((g, idx)) = ctx.fs.geo.inode_location(ino) else {
        return false;
    };
    let Some(gd) = ctx.fs.groups.get(g as usize) else {
        return false;
    };
    let byte = u64::from(idx) * u64::from(ctx.fs.geo.inode_size);
    bad.contains(&(gd.inode_table() + byte / u64::from(ctx.fs.geo.block_size)))
}

/// Marks every inode whose record lies in one of `bad` as reserved: in
/// use for the bitmaps, skipped by the reference counts.
pub fn reserve_inodes(ctx: &mut Ctx, bad: &BTreeSet<u64>) {
    let per_block = ctx.fs.geo.block_size / u32::from(ctx.fs.geo.inode_size);
    let ipg = ctx.fs.geo.inodes_per_group;
    for (g, gd) in ctx.fs.groups.iter().enumerate() {
        let t = gd.inode_table();
        for &b in bad.range(t..t + u64::from(ctx.fs.geo.inode_table_blocks)) {
            let first = g as u32 * ipg + (b - t) as u32 * per_block + 1;
            for ino in first..(first + per_block).min((g as u32 + 1) * ipg + 1) {
                if let Some(k) = ctx.kind.get_mut(ino as usize) {
                    *k = KIND_RESERVED;
                }
            }
        }
    }
}
