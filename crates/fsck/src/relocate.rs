//! New homes for block bitmaps, inode bitmaps and inode tables whose
//! descriptor pointed outside their group (`blockgroup.rst`): pass 0
//! forgets the bad location, and once pass 1 has claimed every block in
//! use this finds free blocks — in the group, or with flex_bg in its flex
//! group and then anywhere — and zeroes them, as e2fsck's
//! `handle_fs_bad_blocks` does at the end of its pass 1. A bitmap is
//! rewritten by pass 5; a new inode table is empty, so the inodes the old
//! one held are lost (e2fsck warns of the same).

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::RawGroupDesc;

use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// One of a group's three tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `bg_block_bitmap`.
    BlockBitmap,
    /// `bg_inode_bitmap`.
    InodeBitmap,
    /// `bg_inode_table`.
    InodeTable,
}

impl Table {
    /// In words.
    pub fn name(self) -> &'static str {
        match self {
            Self::BlockBitmap => "block bitmap",
            Self::InodeBitmap => "inode bitmap",
            Self::InodeTable => "inode table",
        }
    }

    /// Where the descriptor says it is.
    pub fn get(self, gd: &RawGroupDesc) -> u64 {
        match self {
            Self::BlockBitmap => gd.block_bitmap(),
            Self::InodeBitmap => gd.inode_bitmap(),
            Self::InodeTable => gd.inode_table(),
        }
    }

    /// Points the descriptor at `blk` (both halves of the 64-bit field).
    pub fn set(self, gd: &mut RawGroupDesc, blk: u64) {
        let (lo, hi) = (blk as u32, (blk >> 32) as u32);
        match self {
            Self::BlockBitmap => {
                gd.bg_block_bitmap_lo.set(lo);
                gd.bg_block_bitmap_hi.set(hi);
            }
            Self::InodeBitmap => {
                gd.bg_inode_bitmap_lo.set(lo);
                gd.bg_inode_bitmap_hi.set(hi);
            }
            Self::InodeTable => {
                gd.bg_inode_table_lo.set(lo);
                gd.bg_inode_table_hi.set(hi);
            }
        }
    }
}

/// Gives every forgotten table (location 0) a new home, and moves a bitmap
/// the bad-blocks inode lists. Runs after pass 1.
pub fn relocate(ctx: &mut Ctx) {
    if !ctx.repairing() || !ctx.blocks_known {
        return;
    }
    bad_bitmaps(ctx);
    for (g, t) in std::mem::take(&mut ctx.conflicts) {
        let old = t.get(&ctx.fs.groups[g as usize]);
        if relocate_one(ctx, g, t) {
            copy_table(ctx, g, t, old);
        } else {
            ctx.not_fixed("no room to relocate it");
        }
    }
    for g in 0..ctx.fs.geo.group_count {
        for t in [Table::BlockBitmap, Table::InodeBitmap, Table::InodeTable] {
            if t.get(&ctx.fs.groups[g as usize]) == 0 {
                relocate_one(ctx, g, t);
            }
        }
    }
}

/// A bitmap on the bad-block list (inode 1's blocks) is moved, its
/// content copied, as e2fsck's pass 1 offers ("block bitmap is bad,
/// relocate?"); the bad block is then the bad-blocks inode's alone.
fn bad_bitmaps(ctx: &mut Ctx) {
    let bad = bad_blocks(ctx);
    if bad.is_empty() {
        return;
    }
    for g in 0..ctx.fs.geo.group_count {
        for (t, code) in [
            (Table::BlockBitmap, p::P1_BB_BAD_BLOCK),
            (Table::InodeBitmap, p::P1_IB_BAD_BLOCK),
        ] {
            let old = t.get(&ctx.fs.groups[g as usize]);
            if old == 0 || !bad.contains(&old) {
                continue;
            }
            let msg = format!("the {} of group {g} ({old}) is on the bad block list", t.name());
            if ctx.fix(Finding::new(code, msg, "relocate it").grp(g).blk(old)) && relocate_one(ctx, g, t) {
                if let Ok(data) = ctx.fs.read_block(old) {
                    let new = t.get(&ctx.fs.groups[g as usize]);
                    let _ = ctx.fs.write_block(new, &data);
                }
                ctx.meta.clear(old);
                ctx.dup.clear(old);
            }
        }
    }
}

/// Pass 1 found group `g`'s table (named by the conflict `code`) on
/// blocks other metadata holds: it is moved, with its content, after pass 1
/// (e2fsck's "conflicts with some other fs block. Relocate?").
pub fn later(ctx: &mut Ctx, g: u32, code: p::Code) {
    let t = if code == p::P1_BB_CONFLICT {
        Table::BlockBitmap
    } else if code == p::P1_IB_CONFLICT {
        Table::InodeBitmap
    } else {
        Table::InodeTable
    };
    ctx.conflicts.push((g, t));
}

/// Copies group `g`'s table `t` from its old home `old` to the new one,
/// as e2fsck's `new_table_block` does (bitmaps are rewritten by pass 5
/// anyway; an inode table keeps its inodes).
fn copy_table(ctx: &mut Ctx, g: u32, t: Table, old: u64) {
    let n = if t == Table::InodeTable {
        u64::from(ctx.fs.geo.inode_table_blocks)
    } else {
        1
    };
    let new = t.get(&ctx.fs.groups[g as usize]);
    for i in 0..n {
        if let Ok(data) = ctx.fs.read_block(old + i)
            && ctx.fs.write_block(new + i, &data).is_err()
        {
            ctx.report.note(format!("copying block {} to {}", old + i, new + i));
        }
    }
}

/// The blocks the bad-blocks inode lists (at most a million).
fn bad_blocks(ctx: &Ctx) -> std::collections::HashSet<u64> {
    let mut out = std::collections::HashSet::new();
    let Ok(rec) = ctx.fs.inode_record(1) else {
        return out;
    };
    let raw = crate::pass1::decode(&rec);
    let mut visit = |e: crate::walk::Event| {
        if let crate::walk::Event::Data { pblk, len, .. } = e
            && out.len() < 1 << 20
        {
            out.extend(pblk..pblk + u64::from(len));
        }
    };
    let mut w = crate::walk::Walker::new(&ctx.fs, 1, &raw, &mut visit);
    w.walk(&raw, false);
    drop(w);
    out
}

/// Gives group `g`'s table `t` a new, zeroed home; false when there is
/// no room.
fn relocate_one(ctx: &mut Ctx, g: u32, t: Table) -> bool {
    let n = if t == Table::InodeTable {
        u64::from(ctx.fs.geo.inode_table_blocks)
    } else {
        1
    };
    let Some(at) = find_home(ctx, g, n) else {
        let msg = format!("no room for a new {} of group {g} ({n} blocks)", t.name());
        ctx.add(Finding::new(p::P1_RELOC_BLOCK_ALLOCATE, msg, "free some space and check again").grp(g));
        return false;
    };
    let zero = vec![0u8; ctx.fs.bs()];
    for b in at..at + n {
        if let Err(e) = ctx.fs.write_block(b, &zero) {
            ctx.report.note(format!("zeroing block {b}: {e}"));
        }
        ctx.used.set(b);
        ctx.meta.set(b);
    }
    t.set(&mut ctx.fs.groups[g as usize], at);
    ctx.fs.dirty_groups = true;
    ctx.fs.dirty_backups = true;
    ctx.report
        .note(format!("relocated the {} of group {g} to block {at}", t.name()));
    true
}

/// Free blocks for `n` contiguous blocks of group `g`'s metadata: in the
/// group, or with flex_bg in its flex group, then anywhere.
fn find_home(ctx: &Ctx, g: u32, n: u64) -> Option<u64> {
    let geo = &ctx.fs.geo;
    let last = |g: u32| geo.group_first_block(g) + u64::from(geo.blocks_in_group(g));
    if geo.features.incompat.contains(IncompatFeatures::FLEX_BG) && geo.groups_per_flex > 1 {
        let first_g = g - g % geo.groups_per_flex;
        let last_g = (first_g + geo.groups_per_flex - 1).min(geo.group_count - 1);
        let lo = geo.group_first_block(first_g);
        ctx.free_run(lo, last(last_g), n)
            .or_else(|| ctx.free_run(u64::from(geo.first_data_block), geo.blocks_count, n))
    } else {
        ctx.free_run(geo.group_first_block(g), last(g), n)
    }
}

impl Ctx<'_> {
    /// The first run of `n` blocks in `[lo, hi)` that no owner claims
    /// (pass 1's map), without marking it.
    pub fn free_run(&self, lo: u64, hi: u64, n: u64) -> Option<u64> {
        let hi = hi.min(self.fs.geo.blocks_count);
        let mut from = lo.max(u64::from(self.fs.geo.first_data_block));
        while from + n <= hi {
            let start = self.used.next_clear(from, hi)?;
            if start + n > hi {
                return None;
            }
            match (start..start + n).find(|&b| self.used.get(b)) {
                Some(busy) => from = busy + 1,
                None => return Some(start),
            }
        }
        None
    }
}
