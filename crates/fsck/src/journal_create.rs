//! Recreating a journal the run deleted (e2fsck's "Recreate journal",
//! PR_6_RECREATE_JOURNAL): when pass 0 found the journal inode unusable
//! and cleared it ([`crate::journal`]), a new internal journal of the
//! default length for the file system's size is made in inode 8, as
//! `ext2fs_add_journal_inode3` makes it — the goal group near the middle
//! of the file system, the blocks mapped with extents or a block map, the
//! log zeroed, an empty jbd2 version-2 superblock in its first block, and
//! the superblock's has_journal, `s_journal_inum` and `s_jnl_blocks`
//! backup set. The layout, size and superblock are the engine's mkfs
//! functions ([`ext4kit_engine::mkfs::journal`], [`ext4kit_engine::mkfs::filemap`]).
//!
//! It runs before pass 5, taking free blocks from what pass 1 left
//! unclaimed, so pass 5 writes bitmaps and counts that include the new
//! journal; every write goes to the repair's overlay.
//!
//! See `Documentation/filesystems/ext4/journal.rst` and `special_inodes.rst`.

use ext4kit_engine::mkfs::filemap::{FileMap, FileShape, map_file};
use ext4kit_engine::mkfs::journal::{
    GroupLayout, JOURNAL_TO_FC_BLOCKS_RATIO, default_journal_blocks, empty_superblock_block, midpoint_group,
};
use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::inode::{flags, mode};

use crate::alloc::Pool;
use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::{Ctx, KIND_RESERVED};

/// The journal's inode (`EXT4_JOURNAL_INO`).
const JOURNAL_INO: u32 = 8;

/// Recreates the journal when this run deleted it.
pub fn run(ctx: &mut Ctx) {
    let deleted = ctx
        .report
        .findings
        .iter()
        .any(|f| f.code == p::P0_JOURNAL_BAD_INODE && f.fixed);
    let f = ctx.fs.geo.features;
    if !deleted || !ctx.repairing() || !ctx.blocks_known || f.compat.contains(CompatFeatures::HAS_JOURNAL) {
        return;
    }
    let blocks = default_journal_blocks(ctx.fs.geo.blocks_count);
    let fc = if f.compat.contains(CompatFeatures::FAST_COMMIT) {
        blocks / JOURNAL_TO_FC_BLOCKS_RATIO
    } else {
        0
    };
    let msg = format!("the journal was deleted: recreate it ({} blocks)", blocks + fc);
    if !ctx.fix(Finding::new(p::P6_RECREATE_JOURNAL, msg, "create a new journal").ino(JOURNAL_INO)) {
        return;
    }
    if blocks == 0 {
        ctx.not_fixed("the file system is too small for a journal");
        return;
    }
    match create(ctx, blocks, fc) {
        Ok(()) => ctx.report.note("journal has been regenerated"),
        Err(e) => ctx.not_fixed(e),
    }
}

/// Allocates, writes and records the journal; on failure gives back the
/// blocks it took.
fn create(ctx: &mut Ctx, blocks: u32, fc: u32) -> Result<(), String> {
    let old = decode(&ctx.fs.inode_record(JOURNAL_INO).map_err(|e| e.to_string())?);
    if old.i_blocks_lo.get() != 0 || old.i_blocks_high.get() != 0 {
        return Err(format!("inode {JOURNAL_INO} still holds blocks"));
    }
    let goal = goal(ctx);
    let shape = FileShape {
        block_size: ctx.fs.geo.block_size,
        extents: ctx.fs.geo.features.incompat.contains(IncompatFeatures::EXTENTS),
        csum_seed: ctx.fs.geo.features.metadata_csum().then(|| old_seed(ctx)),
    };
    let mut pool = Pool::new(ctx);
    let map = map_file(&mut pool, &shape, goal, u64::from(blocks + fc));
    let Pool { ctx, taken } = pool;
    let res = map
        .map_err(|e| format!("allocating the journal: {e}"))
        .and_then(|m| write(ctx, &m, blocks, fc));
    if res.is_err() {
        for (s, n) in taken {
            (s..s + n).for_each(|b| ctx.free_block(b));
        }
    }
    res
}

/// The checksum seed of a fresh inode 8 (generation 0).
fn old_seed(ctx: &Ctx) -> u32 {
    decode(&[0u8; 128]).csum_seed(ctx.fs.seed, JOURNAL_INO)
}

/// First block of [`midpoint_group`], free blocks counted from pass 1's map.
fn goal(ctx: &Ctx) -> u64 {
    let geo = &ctx.fs.geo;
    let layout = GroupLayout {
        blocks_count: geo.blocks_count,
        first_data_block: geo.first_data_block,
        blocks_per_group: geo.blocks_per_group,
        group_count: geo.group_count,
        log_groups_per_flex: ctx.fs.sb.s_log_groups_per_flex,
    };
    let free = |g: u32| {
        let lo = geo.group_first_block(g);
        let hi = (lo + u64::from(geo.blocks_in_group(g))).min(geo.blocks_count);
        (hi - lo).saturating_sub(ctx.used.count_range(lo, hi) << geo.cluster_bits)
    };
    geo.group_first_block(midpoint_group(&layout, &free))
}

/// Writes the log (zeroed where it is not), its superblock, the mapping
/// blocks and inode 8, then points the superblock at it.
fn write(ctx: &mut Ctx, m: &FileMap, blocks: u32, fc: u32) -> Result<(), String> {
    let bs = ctx.fs.bs();
    let zero = vec![0u8; bs];
    let io = |e: std::io::Error| format!("writing the journal: {e}");
    for &(s, n) in &m.runs {
        for b in s..s + n {
            if ctx.fs.read_block(b).map_err(io)? != zero {
                ctx.fs.write_block(b, &zero).map_err(io)?;
            }
        }
    }
    let first = m.runs.first().ok_or("the journal got no blocks")?.0;
    let uuid = ctx.fs.sb.s_uuid;
    let jsb = empty_superblock_block(ctx.fs.geo.block_size, blocks, fc, &uuid);
    ctx.fs.write_block(first, &jsb[..bs]).map_err(io)?;
    for (b, data) in &m.meta {
        ctx.fs.write_block(*b, data).map_err(io)?;
    }
    let size = m.data_blocks() * bs as u64;
    write_inode(ctx, m, size)?;
    set_superblock(ctx, m, size);
    Ok(())
}

/// Inode 8 as `write_journal_inode` leaves it: a regular file, mode 0600,
/// one link, the times now.
fn write_inode(ctx: &mut Ctx, m: &FileMap, size: u64) -> Result<(), String> {
    let mut rec = vec![0u8; usize::from(ctx.fs.geo.inode_size)];
    let mut raw = decode(&rec);
    let t = ctx.now;
    raw.i_mode.set(mode::S_IFREG | 0o600);
    raw.i_links_count.set(1);
    raw.set_size(size);
    let sectors = m.blocks() * u64::from(ctx.fs.geo.block_size) / 512;
    raw.i_blocks_lo.set(sectors as u32);
    raw.i_blocks_high.set((sectors >> 32) as u16);
    raw.i_atime.set(t);
    raw.i_ctime.set(t);
    raw.i_mtime.set(t);
    raw.i_block = m.i_block;
    if ctx.fs.geo.features.incompat.contains(IncompatFeatures::EXTENTS) {
        raw.i_flags.set(flags::EXTENTS);
    }
    if rec.len() > 128 {
        raw.i_extra_isize.set(32);
        raw.i_crtime.set(t);
    }
    raw.encode_into(&mut rec);
    ctx.fs
        .write_inode_record(JOURNAL_INO, &mut rec)
        .map_err(|e| format!("writing inode {JOURNAL_INO}: {e}"))?;
    ctx.kind[JOURNAL_INO as usize] = KIND_RESERVED;
    ctx.links[JOURNAL_INO as usize] = 1;
    ctx.empty.clear(u64::from(JOURNAL_INO));
    Ok(())
}

/// has_journal, `s_journal_inum` 8 and the `s_jnl_blocks` backup of the
/// inode's `i_block` and size, in every superblock copy; large_file when
/// the journal reaches 2 GiB.
fn set_superblock(ctx: &mut Ctx, m: &FileMap, size: u64) {
    let sb = &mut ctx.fs.sb;
    sb.s_feature_compat
        .set(sb.s_feature_compat.get() | CompatFeatures::HAS_JOURNAL.0);
    if size >= 1 << 31 {
        sb.s_feature_ro_compat
            .set(sb.s_feature_ro_compat.get() | RoCompatFeatures::LARGE_FILE.0);
    }
    sb.s_journal_inum.set(JOURNAL_INO);
    sb.set_journal_backup(&m.i_block, size);
    ctx.fs.geo.features = ctx.fs.sb.features();
    ctx.fs.dirty_sb = true;
    ctx.fs.dirty_backups = true;
}
