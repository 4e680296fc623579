//! The bad-blocks inode (inode 1, `special_inodes.rst`): the blocks it
//! lists are unusable. An inode-table block on the list holds inodes that
//! cannot be trusted, so an entry naming one of them is cleared in pass 2
//! (e2fsck's "points to inode located in a bad block", `PR_2_BB_INODE`),
//! and the inodes themselves stay allocated and unexamined, as e2fsck's
//! `inode_bb_map` keeps them: never reused, never reconnected.

use std::collections::BTreeSet;

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::flags;

use crate::pass1::decode;
use crate::problem::{self as p, Code, Finding};
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

/// Pass 1, before the scan: the inode-table blocks on the bad-block list,
/// remembered in [`Ctx::bad_itable`]. When the list names the block that
/// holds inode 1 itself, the list cannot be trusted: e2fsck clears inode 1
/// (`PR_1_BADBLOCKS_IN_BADBLOCKS`) and starts over with an empty list.
pub fn start_pass1(ctx: &mut Ctx) {
    ctx.bad_itable = itable_blocks(ctx);
    if !inode_in(ctx, &ctx.bad_itable.clone(), BAD_INO) {
        return;
    }
    let msg = "the bad-block list names the block holding the bad-blocks inode";
    if ctx.fix(Finding::new(p::P1_BADBLOCKS_IN_BADBLOCKS, msg, "clear the bad-blocks inode").ino(BAD_INO)) {
        if write_cleared(ctx).is_err() {
            ctx.not_fixed("the inode could not be written");
            return;
        }
        ctx.bad_itable.clear();
    }
}

/// Zeroes inode 1's `struct ext2_inode` part (its first 128 bytes), as
/// e2fsck clears an invalid bad-blocks inode.
fn write_cleared(ctx: &mut Ctx) -> std::io::Result<()> {
    let mut rec = ctx.fs.inode_record(BAD_INO)?;
    let n = rec.len().min(128);
    rec[..n].fill(0);
    ctx.fs.write_inode_record(BAD_INO, &mut rec)
}

/// Pass 1's check of the bad-blocks inode (e2fsck's `EXT2_BAD_INO` case):
/// flags it may not carry, fields that make it invalid (it is then
/// cleared), and every block it lists through [`ListWalk`].
pub fn check_inode(ctx: &mut Ctx, rec: &[u8], csum_bad: bool) {
    ctx.kind[BAD_INO as usize] = KIND_RESERVED;
    let raw = decode(rec);
    let fl = raw.flags();
    let f = ctx.fs.geo.features;
    let drop = crate::reserved::flags_to_drop(ctx, BAD_INO, raw.i_mode.get(), fl);
    let no_extents = !f.incompat.contains(IncompatFeatures::EXTENTS);
    let why = if fl & flags::EXTENTS != 0 && no_extents {
        Some((p::P1_EXTENTS_SET, "EXTENTS_FL set without the extent feature"))
    } else if csum_bad
        || raw.i_mode.get() != 0
        || raw.i_uid.get() != 0
        || raw.i_gid.get() != 0
        || raw.links() != 0
        || fl & flags::INLINE_DATA != 0
        || raw.file_acl() != 0
    {
        Some((p::P1_INVALID_BAD_INODE, "the bad-blocks inode looks invalid"))
    } else {
        None
    };
    if let Some((code, msg)) = why
        && ctx.fix(Finding::new(code, msg, "clear it").ino(BAD_INO))
    {
        if write_cleared(ctx).is_err() {
            ctx.not_fixed("the inode could not be written");
        }
        return;
    }
    if drop != 0 {
        let _ = crate::inode_edit::update(&ctx.fs, BAD_INO, |r| r.i_flags.set(r.flags() & !drop));
    }
    if fl & flags::EXTENTS != 0 {
        return; // an extent-mapped list is not walked (e2fsck's lists are block-mapped)
    }
    ListWalk::new(ctx, &raw).run(ctx);
}

/// Where a block already claimed before the bad-blocks inode lists it lies.
enum Claimed {
    /// Group 0's superblock or descriptor table: the list is wrong about it
    /// or the file system cannot be repaired (e2fsck clears the entry).
    Primary(Code, &'static str),
    /// A backup superblock or descriptor copy: only a warning.
    Backup(Code, u32),
    /// A bitmap or inode-table block (see [`crate::relocate`] and
    /// [`itable_blocks`]), or a second mention of a listed block.
    Other,
}

/// e2fsck's search in `process_bad_block` for the metadata a listed block
/// belongs to (`s_first_data_block` plus one superblock and the descriptor
/// blocks per group with a superblock).
fn claimed_by(ctx: &Ctx, b: u64) -> Claimed {
    let gdt = ctx.fs.gdt_blocks();
    for g in 0..ctx.fs.geo.group_count {
        if !ctx.fs.has_super(g) {
            continue;
        }
        let start = ctx.fs.geo.group_first_block(g);
        let what = if b == start {
            (
                p::P1_BAD_PRIMARY_SUPERBLOCK,
                p::P1_BAD_SUPERBLOCK,
                "the primary superblock",
            )
        } else if b > start && b <= start + gdt {
            let m = "a primary group descriptor block";
            (p::P1_BAD_PRIMARY_GROUP_DESCRIPTOR, p::P1_BAD_GROUP_DESCRIPTORS, m)
        } else {
            continue;
        };
        return if g == 0 {
            Claimed::Primary(what.0, what.2)
        } else {
            Claimed::Backup(what.1, g)
        };
    }
    Claimed::Other
}

/// Walks the bad-block list's block map (`i_block`: twelve direct
/// pointers, then single, double and triple indirect), judging each
/// listed block as e2fsck's `process_bad_block` does and clearing the
/// pointers it may not keep: blocks outside the file system, the primary
/// superblock and descriptors, map blocks that are metadata or listed
/// twice. Every other listed block is claimed (it is in use, by the list).
struct ListWalk {
    iblock: [u32; 15],
    inode_dirty: bool,
    /// Map blocks still to read (bounds the work a hostile map causes).
    reads: u64,
}

impl ListWalk {
    fn new(ctx: &Ctx, raw: &ext4kit_format::inode::RawInode) -> Self {
        let mut iblock = [0u32; 15];
        for (i, v) in iblock.iter_mut().enumerate() {
            *v = u32::from_le_bytes(raw.i_block[i * 4..i * 4 + 4].try_into().unwrap_or([0; 4]));
        }
        Self {
            iblock,
            inode_dirty: false,
            reads: ctx.fs.geo.blocks_count.min(1 << 20),
        }
    }

    fn run(mut self, ctx: &mut Ctx) {
        for i in 0..15 {
            let b = self.iblock[i];
            if b == 0 {
                continue;
            }
            let keep = if i < 12 {
                self.data(ctx, b)
            } else {
                self.map_block(ctx, b)
            };
            if !keep {
                self.iblock[i] = 0;
                self.inode_dirty = true;
            } else if i >= 12 && ctx.fs.valid_block(u64::from(b)) {
                self.walk(ctx, u64::from(b), i - 11);
            }
        }
        if self.inode_dirty {
            let ib = self.iblock;
            let r = crate::inode_edit::update(&ctx.fs, BAD_INO, |raw| {
                for (i, v) in ib.iter().enumerate() {
                    raw.i_block[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
                }
            });
            if r.is_err() {
                ctx.not_fixed("the bad-blocks inode could not be written");
            }
        }
    }

    /// One map block at `level` (1: it lists data blocks).
    fn walk(&mut self, ctx: &mut Ctx, blk: u64, level: usize) {
        if self.reads == 0 {
            return;
        }
        self.reads -= 1;
        let Ok(mut buf) = ctx.fs.read_block(blk) else {
            return;
        };
        let mut changed = false;
        for k in 0..buf.len() / 4 {
            let b = u32::from_le_bytes(buf[k * 4..k * 4 + 4].try_into().unwrap_or([0; 4]));
            if b == 0 {
                continue;
            }
            let keep = if level == 1 {
                self.data(ctx, b)
            } else {
                self.map_block(ctx, b)
            };
            if !keep {
                buf[k * 4..k * 4 + 4].fill(0);
                changed = true;
            } else if level > 1 && ctx.fs.valid_block(u64::from(b)) {
                self.walk(ctx, u64::from(b), level - 1);
            }
        }
        if changed && ctx.fs.write_block(blk, &buf).is_err() {
            ctx.not_fixed("the bad-block list's map block could not be written");
        }
    }

    /// A listed block outside the file system (`PR_1_BB_ILLEGAL_BLOCK_NUM`):
    /// returns whether the pointer stays.
    fn illegal(ctx: &mut Ctx, b: u64, what: &str) -> bool {
        let msg = format!("illegal {what} {b} in the bad-blocks inode");
        !ctx.fix(
            Finding::new(p::P1_BB_ILLEGAL_BLOCK_NUM, msg, "clear it")
                .ino(BAD_INO)
                .blk(b),
        )
    }

    /// One of the list's own indirect blocks: returns whether it stays.
    fn map_block(&mut self, ctx: &mut Ctx, b: u32) -> bool {
        let b = u64::from(b);
        if !ctx.fs.valid_block(b) {
            return Self::illegal(ctx, b, "indirect block");
        }
        let (code, msg) = if ctx.meta.get(b) {
            (
                p::P1_BB_FS_BLOCK,
                format!("the bad-blocks inode's indirect block {b} is file-system metadata"),
            )
        } else if ctx.used.get(b) {
            (
                p::P1_BBINODE_BAD_METABLOCK,
                format!("bad block {b} is used as a bad-blocks inode indirect block"),
            )
        } else {
            ctx.used.set(b);
            return true;
        };
        !ctx.fix(Finding::new(code, msg, "clear it").ino(BAD_INO).blk(b))
    }

    /// One listed bad block: returns whether it stays on the list.
    fn data(&mut self, ctx: &mut Ctx, b: u32) -> bool {
        let ind = self.iblock[12..].contains(&b);
        let b = u64::from(b);
        if !ctx.fs.valid_block(b) {
            return Self::illegal(ctx, b, "block");
        }
        if !ctx.used.get(b) {
            ctx.used.set(b);
            return true;
        }
        match claimed_by(ctx, b) {
            Claimed::Primary(code, what) => {
                let msg = format!("{what} ({b}) is on the bad block list");
                !ctx.fix(Finding::new(code, msg, "remove it from the list").ino(BAD_INO).blk(b))
            }
            Claimed::Backup(code, g) => {
                let msg = format!("group {g}'s superblock or descriptor copy ({b}) is on the bad block list");
                ctx.add(Finding::new(code, msg, "nothing").grp(g).blk(b).warning());
                true
            }
            Claimed::Other if ind && !ctx.meta.get(b) => {
                let msg = format!("bad block {b} is used as a bad-blocks inode indirect block");
                !ctx.fix(
                    Finding::new(p::P1_BBINODE_BAD_METABLOCK, msg, "clear it")
                        .ino(BAD_INO)
                        .blk(b),
                )
            }
            Claimed::Other => true,
        }
    }
}
