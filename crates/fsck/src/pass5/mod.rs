//! Pass 5: group summaries (`blockgroup.rst`, `bitmaps.rst`). The on-disk
//! block and inode bitmaps against what passes 1–4 found, bitmap padding,
//! bitmap checksums, per-group and total free counts and directory counts,
//! and backup superblocks against the primary.

mod diffs;
mod groups;
mod rewrite;

use crate::Progress;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;
use diffs::Diffs;
use groups::{block_group, inode_group};

/// Runs pass 5.
pub fn run(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    let (mut free_b, mut free_i) = (0u64, 0u64);
    let (mut gd_free_b, mut gd_free_i) = (0u64, 0u64);
    let groups = ctx.fs.geo.group_count;
    let mut diffs = Diffs::default();
    for g in 0..groups {
        progress(Progress {
            pass: 5,
            done: u64::from(g),
            total: u64::from(groups),
        });
        let gd = ctx.fs.groups[g as usize];
        gd_free_b += u64::from(gd.free_blocks());
        gd_free_i += u64::from(gd.free_inodes());
        free_b += block_group(ctx, g, &mut diffs);
        free_i += inode_group(ctx, g, &mut diffs);
    }
    diffs.flush(ctx);
    // Descriptors count free clusters; the superblock and e2fsck's
    // message count blocks.
    let bits = ctx.fs.geo.cluster_bits;
    totals(ctx, Some(free_b << bits), gd_free_b << bits, free_i, gd_free_i);
    backups(ctx);
}

/// The file system's free counts. They are compared with the sum of the
/// descriptors, as the kernel keeps the superblock's copy only roughly
/// (`ext4_statfs` sums the groups; e2fsck -n does not count a stale
/// superblock count as an error). A repair that changes anything also
/// brings the superblock's counts up to date, as e2fsck -y does.
fn totals(ctx: &mut Ctx, free_b: Option<u64>, gd_free_b: u64, free_i: u64, gd_free_i: u64) {
    let settle = ctx.repairing() && ctx.report.fixed() > 0;
    if let Some(free_b) = free_b {
        let wrong = free_b != gd_free_b;
        let fix = wrong
            && ctx.fix(Finding::new(
                p::P5_FREE_BLOCK_COUNT,
                format!("free blocks count wrong ({gd_free_b}, counted={free_b})"),
                "set it",
            ));
        let sb = &mut ctx.fs.sb;
        let stored = u64::from(sb.s_free_blocks_count_lo.get()) | u64::from(sb.s_free_blocks_count_hi.get()) << 32;
        if (fix || settle) && stored != free_b {
            sb.s_free_blocks_count_lo.set(free_b as u32);
            sb.s_free_blocks_count_hi.set((free_b >> 32) as u32);
            ctx.fs.dirty_sb = true;
        }
    }
    let wrong = free_i != gd_free_i;
    let fix = wrong
        && ctx.fix(Finding::new(
            p::P5_FREE_INODE_COUNT,
            format!("free inodes count wrong ({gd_free_i}, counted={free_i})"),
            "set it",
        ));
    if (fix || settle) && u64::from(ctx.fs.sb.s_free_inodes_count.get()) != free_i {
        ctx.fs.sb.s_free_inodes_count.set(free_i as u32);
        ctx.fs.dirty_sb = true;
    }
}

/// Backup superblocks whose layout fields differ from the primary. e2fsck
/// rewrites them silently after a check, so this is a warning.
fn backups(ctx: &mut Ctx) {
    let geo = &ctx.fs.geo;
    let mut bad = Vec::new();
    for g in 1..geo.group_count {
        if !ctx.fs.has_super(g) {
            continue;
        }
        let blk = geo.group_first_block(g);
        let Ok(buf) = ctx.fs.read_block(blk) else { continue };
        // Backups sit at the start of their group's first block.
        let Ok(b) = ext4kit_format::superblock::RawSuperblock::parse(&buf) else {
            continue;
        };
        let a = &ctx.fs.sb;
        let same = b.s_magic == a.s_magic
            && b.s_blocks_count_lo == a.s_blocks_count_lo
            && b.s_inodes_count == a.s_inodes_count
            && b.s_log_block_size == a.s_log_block_size
            && b.s_blocks_per_group == a.s_blocks_per_group
            && b.s_inodes_per_group == a.s_inodes_per_group
            && b.s_feature_incompat == a.s_feature_incompat
            && b.s_feature_ro_compat == a.s_feature_ro_compat;
        if !same {
            bad.push(g);
        }
    }
    for g in bad {
        let f = Finding::new(
            p::own::P0_BACKUP_SB_DIFFERS,
            format!("backup superblock in group {g} differs from the primary"),
            "rewrite the backups",
        );
        if ctx.fix(f.grp(g).warning()) {
            ctx.fs.dirty_backups = true;
        }
    }
}
