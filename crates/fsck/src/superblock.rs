//! Pass 0, superblock: find a usable superblock (the primary, else a backup
//! as e2fsck's "trying backup blocks"), refuse features this code does not
//! understand, and check the superblock's own fields (`super.rst`).

use ext4kit_engine::BlockDevice;
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use ext4kit_format::superblock::{
    EXT4_SUPER_MAGIC, Geometry, RawSuperblock, STATE_ERROR, STATE_VALID, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE,
};

use crate::Fatal;
use crate::fs::RawFs;
use crate::problem::{self as p, Finding};
use crate::report::Report;
use crate::state::Ctx;

/// Reads and validates the superblock at byte `off`: magic, geometry, and
/// with `metadata_csum` the checksum.
fn try_at(dev: &dyn BlockDevice, off: u64) -> Result<(RawSuperblock, Geometry), String> {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    if off.saturating_add(SUPERBLOCK_SIZE as u64) > dev.len() {
        return Err("past the end of the image".into());
    }
    dev.read_at(off, &mut buf).map_err(|e| e.to_string())?;
    let sb = RawSuperblock::parse(&buf).map_err(|e| e.to_string())?;
    let geo = Geometry::from_superblock(&sb).map_err(|e| e.to_string())?;
    if geo.features.metadata_csum() {
        sb.verify_checksum().map_err(|e| format!("checksum: {e}"))?;
    }
    Ok((sb, geo))
}

/// Backup superblock locations to try, as e2fsck does when the primary is
/// unusable: group 1's copy for each block size.
fn backup_offsets() -> impl Iterator<Item = (u64, u64)> {
    (10..=16u32).map(|log| {
        let bs = 1u64 << log;
        let blk = bs * 8 + u64::from(log == 10);
        (blk, blk * bs)
    })
}

/// The superblock e2fsck's `-b BLOCK [-B SIZE]` names: at `block` in blocks
/// of `size`, or without a size the first block size from 1 KiB to 64 KiB
/// whose superblock there records that size. A backup starts its group's
/// first block, so only a block whose size the copy records is that copy.
fn explicit(dev: &dyn BlockDevice, block: u64, size: Option<u32>) -> Result<(RawSuperblock, Geometry), Fatal> {
    let sizes: Vec<u32> = size.map_or_else(|| (10..=16).map(|l| 1u32 << l).collect(), |s| vec![s]);
    let mut why = String::from("no block size to try");
    for bs in sizes {
        let Some(off) = block.checked_mul(u64::from(bs)).filter(|&o| o != 0) else {
            why = format!("block {block} is not a backup superblock location");
            continue;
        };
        match try_at(dev, off) {
            Ok((sb, geo)) if geo.block_size == bs => return Ok((sb, geo)),
            Ok((_, geo)) => why = format!("it records {}-byte blocks, not {bs}", geo.block_size),
            Err(e) => why = e,
        }
    }
    let with = size.map_or_else(String::new, |s| format!(" ({s}-byte blocks)"));
    Err(Fatal::BadSuperblock(format!(
        "no usable superblock at block {block}{with}: {why}"
    )))
}

/// Loads the superblock in use: the one `-b` names (`at`), else the
/// primary, else a backup. Damage to the primary is a finding, an image
/// with no usable superblock at all is fatal.
pub fn load<'a>(
    dev: &'a dyn BlockDevice,
    report: &mut Report,
    at: Option<(u64, Option<u32>)>,
) -> Result<RawFs<'a>, Fatal> {
    let primary = match at {
        Some((block, size)) => {
            let (sb, geo) = explicit(dev, block, size)?;
            report.note(format!("using backup superblock at block {block} (-b)"));
            Ok((sb, geo, block))
        }
        None => try_at(dev, SUPERBLOCK_OFFSET).map(|(sb, geo)| (sb, geo, 0)),
    };
    let (sb, geo, group_block) = match primary {
        Ok(found) => found,
        Err(why) => {
            let mut found = None;
            for (blk, off) in backup_offsets() {
                if let Ok((sb, geo)) = try_at(dev, off)
                    && u64::from(geo.block_size) * 8 + u64::from(geo.block_size == 1024) == blk
                {
                    found = Some((sb, geo, blk, why.clone()));
                    break;
                }
            }
            let Some((sb, geo, blk, why)) = found else {
                return Err(Fatal::BadSuperblock(format!(
                    "bad superblock ({why}) and no usable backup"
                )));
            };
            report.add(
                Finding::new(
                    p::P0_SB_CORRUPT,
                    format!("the primary superblock is unusable ({why}); using the backup at block {blk}"),
                    "rewrite the primary superblock from the backup",
                )
                // e2fsck -n falls back to the backup and, if nothing else is
                // wrong, exits 0.
                .warning(),
            );
            report.note(format!("using backup superblock at block {blk}"));
            let gb = blk;
            (sb, geo, gb)
        }
    };
    refuse_unknown(&sb)?;
    check_bounds(dev, &geo)?;
    let seed = sb.csum_seed();
    Ok(RawFs {
        dev,
        sb,
        sb_group_block: group_block,
        geo,
        seed,
        groups: Vec::new(),
        dirty_sb: false,
        dirty_groups: false,
        dirty_backups: false,
    })
}

/// The checker's memory follows the geometry (bitmaps over blocks, arrays
/// over inodes), so a geometry far beyond what the image holds, or inode
/// tables that cannot fit in the file system, is refused rather than
/// believed.
fn check_bounds(dev: &dyn BlockDevice, geo: &Geometry) -> Result<(), Fatal> {
    let dev_blocks = dev.len() / u64::from(geo.block_size);
    if geo.blocks_count > dev_blocks.saturating_mul(4).max(1 << 20) {
        return Err(Fatal::BadSuperblock(format!(
            "the superblock claims {} blocks but the image holds {dev_blocks}",
            geo.blocks_count
        )));
    }
    let itable_bytes = u64::from(geo.inodes_count) * u64::from(geo.inode_size);
    if itable_bytes > geo.blocks_count * u64::from(geo.block_size) {
        return Err(Fatal::BadSuperblock(format!(
            "{} inodes of {} bytes cannot fit in {} blocks",
            geo.inodes_count, geo.inode_size, geo.blocks_count
        )));
    }
    Ok(())
}

/// Unknown incompatible (or read-only-compatible) features mean this code
/// cannot know what the metadata means: refuse, naming them, as e2fsck does.
fn refuse_unknown(sb: &RawSuperblock) -> Result<(), Fatal> {
    let f = sb.features();
    let mut unknown = f.incompat.unknown().names();
    unknown.extend(f.ro_compat.unknown().names());
    if f.incompat.contains(IncompatFeatures::JOURNAL_DEV) {
        return Err(Fatal::Unsupported(
            "this is an external journal device, not a file system".into(),
        ));
    }
    if !unknown.is_empty() {
        return Err(Fatal::Unsupported(format!(
            "unsupported feature(s): {}",
            unknown.join(" ")
        )));
    }
    Ok(())
}

/// The superblock's own consistency, after loading (e2fsck's
/// `check_super_block`): the fields [`crate::sb_fields`] checks and
/// repairs, then the counts and the image size.
pub fn check(ctx: &mut Ctx) {
    from_backup(ctx);
    crate::resize_inode::check(ctx);
    crate::sb_fields::check(ctx);
    check_counts(&ctx.fs, &mut ctx.report);
    check_size(&ctx.fs, &mut ctx.report);
}

/// A run on a backup superblock trusts no group's uninit flags (the
/// backup's descriptors may be older than the groups): as e2fsck's open
/// from a backup, every group is marked initialized with no unused inodes
/// and a fresh descriptor checksum, in memory even for a check. A repair
/// then writes the superblock and descriptors to every copy, the primary
/// included (the finding [`load`] made is the repair's record).
fn from_backup(ctx: &mut Ctx) {
    if ctx.fs.sb_group_block == 0 {
        return;
    }
    let f = ctx.fs.geo.features;
    if f.has_group_csum() {
        let ds = usize::from(ctx.fs.geo.desc_size);
        let (seed, uuid) = (ctx.fs.seed, ctx.fs.sb.s_uuid);
        for (g, gd) in ctx.fs.groups.iter_mut().enumerate() {
            gd.bg_flags.set(gd.flags() & !(BG_INODE_UNINIT | BG_BLOCK_UNINIT));
            gd.bg_itable_unused_lo.set(0);
            gd.bg_itable_unused_hi.set(0);
            let c = gd.compute_checksum(&f, seed, &uuid, g as u32, ds);
            gd.bg_checksum.set(c);
        }
    }
    if !ctx.repairing() {
        return;
    }
    let sb_corrupt = ctx.report.findings.iter_mut().find(|x| x.code == p::P0_SB_CORRUPT);
    if let Some(x) = sb_corrupt {
        x.fixed = true;
    } else {
        let mut f = Finding::new(
            p::own::P0_PRIMARY_FROM_BACKUP,
            format!(
                "checked from the backup superblock at block {} (-b)",
                ctx.fs.sb_group_block
            ),
            "rewrite the primary superblock and group descriptors from it",
        )
        .warning();
        f.fixed = true;
        ctx.report.add(f);
    }
    ctx.fs.dirty_sb = true;
    ctx.fs.dirty_groups = true;
    ctx.fs.dirty_backups = true;
}

/// Free counts beyond the totals are recounted in memory by e2fsck (pass 5
/// then judges the recount), so they are warnings here.
fn check_counts(fs: &RawFs, report: &mut Report) {
    let sb = &fs.sb;
    let bit64 = fs.geo.features.incompat.contains(IncompatFeatures::BIT64);
    let hi = if bit64 { sb.s_free_blocks_count_hi.get() } else { 0 };
    let free_blocks = u64::from(sb.s_free_blocks_count_lo.get()) | (u64::from(hi) << 32);
    if free_blocks > fs.geo.blocks_count {
        report.add(
            Finding::new(
                p::P0_FREE_BLOCK_COUNT,
                format!("free blocks count {free_blocks} exceeds the block count"),
                "recount",
            )
            .warning(),
        );
    }
    let free_inodes = sb.s_free_inodes_count.get();
    if free_inodes > fs.geo.inodes_count {
        report.add(
            Finding::new(
                p::P0_FREE_INODE_COUNT,
                format!("free inodes count {free_inodes} exceeds the inode count"),
                "recount",
            )
            .warning(),
        );
    }
}

/// An image file shorter than the file system it holds.
fn check_size(fs: &RawFs, report: &mut Report) {
    let need = fs.geo.blocks_count * u64::from(fs.geo.block_size);
    if fs.dev.len() < need {
        report.add(Finding::new(
            p::P0_FS_SIZE_WRONG,
            format!(
                "the superblock says {} blocks but the image holds {}",
                fs.geo.blocks_count,
                fs.dev.len() / u64::from(fs.geo.block_size)
            ),
            "abort (the image is truncated)",
        ));
    }
}

/// Why a check is due (e2fsck's reasons to check without `-f`), or `None`
/// when the superblock says the file system is clean.
pub fn check_reason(fs: &RawFs, now: u64) -> Option<String> {
    let sb = &fs.sb;
    let state = sb.s_state.get();
    if state & STATE_VALID == 0 {
        return Some("was not cleanly unmounted".into());
    }
    if state & STATE_ERROR != 0 {
        return Some("contains a file system with errors".into());
    }
    if fs.geo.features.incompat.contains(IncompatFeatures::RECOVER) {
        return Some("needs journal recovery".into());
    }
    let max = sb.s_max_mnt_count.get() as i16;
    if max > 0 && sb.s_mnt_count.get() >= max as u16 {
        return Some(format!(
            "has been mounted {} times without being checked",
            sb.s_mnt_count.get()
        ));
    }
    let interval = u64::from(sb.s_checkinterval.get());
    let last = u64::from(sb.s_lastcheck.get()) | (u64::from(sb.s_lastcheck_hi) << 32);
    if interval > 0 && now >= last + interval {
        return Some("has gone too long without being checked".into());
    }
    if sb.s_magic.get() != EXT4_SUPER_MAGIC {
        return Some("has a bad magic".into());
    }
    None
}
