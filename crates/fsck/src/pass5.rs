//! Pass 5: group summaries (`blockgroup.rst`, `bitmaps.rst`). The on-disk
//! block and inode bitmaps against what passes 1–4 found, bitmap padding,
//! bitmap checksums, per-group and total free counts and directory counts,
//! and backup superblocks against the primary.

use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, bitmap_checksum};

use crate::Progress;
use crate::bitmap::disk_bit;
use crate::problem::{self as p, Code, Finding};
use crate::state::Ctx;

/// Runs pass 5.
pub fn run(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    let bigalloc = ctx.fs.geo.features.ro_compat.contains(RoCompatFeatures::BIGALLOC);
    if bigalloc {
        ctx.report
            .note("bigalloc: block bitmaps are per cluster; the block bitmap check is skipped");
    }
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
        if !bigalloc {
            free_b += block_group(ctx, g, &mut diffs);
        }
        free_i += inode_group(ctx, g, &mut diffs);
    }
    diffs.flush(ctx);
    if !bigalloc && free_b != gd_free_b {
        ctx.add(Finding::new(
            p::P5_FREE_BLOCK_COUNT,
            format!("free blocks count wrong ({gd_free_b}, counted={free_b})"),
            "set it",
        ));
    }
    if free_i != gd_free_i {
        ctx.add(Finding::new(
            p::P5_FREE_INODE_COUNT,
            format!("free inodes count wrong ({gd_free_i}, counted={free_i})"),
            "set it",
        ));
    }
    backups(ctx);
}

/// Runs of differing bits, reported as ranges like e2fsck's
/// "Block bitmap differences: -(100--120) +200".
#[derive(Default)]
struct Diffs {
    open: Option<(Code, u64, u64)>,
    out: Vec<(Code, u64, u64)>,
}

impl Diffs {
    fn push(&mut self, code: Code, n: u64) {
        if let Some((c, _, end)) = &mut self.open
            && *c == code
            && *end + 1 == n
        {
            *end = n;
            return;
        }
        if let Some(o) = self.open.take() {
            self.out.push(o);
        }
        self.open = Some((code, n, n));
    }
    fn flush(&mut self, ctx: &mut Ctx) {
        if let Some(o) = self.open.take() {
            self.out.push(o);
        }
        for (code, a, b) in self.out.drain(..) {
            let inode = code == p::P5_INODE_USED || code == p::P5_INODE_UNUSED;
            let (code, what) = match (code == p::P5_BLOCK_USED || code == p::P5_INODE_USED, a == b, inode) {
                (true, true, _) => (code, "in use but not marked in the bitmap"),
                (false, true, _) => (code, "marked in the bitmap but not in use"),
                (true, false, false) => (p::P5_BLOCK_RANGE_USED, "in use but not marked in the bitmap"),
                (false, false, false) => (p::P5_BLOCK_RANGE_UNUSED, "marked in the bitmap but not in use"),
                (true, false, true) => (p::P5_INODE_RANGE_USED, "in use but not marked in the bitmap"),
                (false, false, true) => (p::P5_INODE_RANGE_UNUSED, "marked in the bitmap but not in use"),
            };
            let noun = if inode { "inode" } else { "block" };
            let range = if a == b { format!("{a}") } else { format!("{a}-{b}") };
            let f = Finding::new(code, format!("{noun} {range} {what}"), "fix the bitmap");
            ctx.add(if inode { f.ino(a as u32) } else { f.blk(a) });
        }
    }
}

/// Compares group `g`'s block bitmap; returns the free blocks counted.
fn block_group(ctx: &mut Ctx, g: u32, diffs: &mut Diffs) -> u64 {
    let gd = ctx.fs.groups[g as usize];
    let start = ctx.fs.geo.group_first_block(g);
    let n = u64::from(ctx.fs.geo.blocks_in_group(g));
    let uninit = ctx.fs.geo.features.has_group_csum() && gd.flags() & BG_BLOCK_UNINIT != 0;
    let disk = if uninit {
        None
    } else {
        ctx.fs.read_block(gd.block_bitmap()).ok()
    };
    let used = ctx.used.count_range(start, start + n);
    if !uninit && disk.is_none() {
        ctx.report.note(format!("cannot read the block bitmap of group {g}"));
        return n - used;
    }
    for i in 0..n {
        let b = start + i;
        let on_disk = match &disk {
            Some(d) => disk_bit(d, i as usize),
            None => ctx.meta.get(b),
        };
        let found = ctx.used.get(b);
        if found != on_disk {
            diffs.push(if found { p::P5_BLOCK_USED } else { p::P5_BLOCK_UNUSED }, b);
        }
    }
    if let Some(d) = &disk {
        let bpg = ctx.fs.geo.blocks_per_group as usize;
        if (n as usize..bpg).any(|i| !disk_bit(d, i)) && g + 1 == ctx.fs.geo.group_count {
            ctx.add(
                Finding::new(
                    p::P5_BLOCK_BMAP_PADDING,
                    "padding at the end of the block bitmap is not set",
                    "set it",
                )
                .grp(g),
            );
        }
        if ctx.fs.geo.features.metadata_csum() {
            let c = bitmap_checksum(ctx.fs.seed, d, bpg / 8, ctx.fs.geo.desc_size);
            if c != gd.block_bitmap_csum() {
                ctx.add(
                    Finding::new(
                        p::P5_BLOCK_BITMAP_CSUM_INVALID,
                        format!("group {g} block bitmap checksum does not match"),
                        "recompute it",
                    )
                    .grp(g),
                );
            }
        }
    }
    let free = n - used;
    if u64::from(gd.free_blocks()) != free {
        ctx.add(
            Finding::new(
                p::P5_FREE_BLOCK_COUNT_GROUP,
                format!(
                    "free blocks count wrong for group #{g} ({}, counted={free})",
                    gd.free_blocks()
                ),
                "set it",
            )
            .grp(g),
        );
    }
    free
}

/// Compares group `g`'s inode bitmap; returns the free inodes counted.
fn inode_group(ctx: &mut Ctx, g: u32, diffs: &mut Diffs) -> u64 {
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
    let (mut used, mut dirs) = (0u64, 0u64);
    for i in 0..ipg {
        let ino = g * ipg + i + 1;
        let found = ctx.in_use(ino);
        used += u64::from(found);
        dirs += u64::from(ctx.is_dir(ino));
        let on_disk = disk.as_ref().is_some_and(|d| disk_bit(d, i as usize));
        if (uninit || disk.is_some()) && found != on_disk {
            let code = if found { p::P5_INODE_USED } else { p::P5_INODE_UNUSED };
            diffs.push(code, u64::from(ino));
        }
    }
    if let Some(d) = &disk
        && (ipg as usize..d.len() * 8).any(|i| !disk_bit(d, i))
    {
        let f = Finding::new(
            p::P5_INODE_BMAP_PADDING,
            "padding at the end of the inode bitmap is not set",
            "set it",
        );
        ctx.add(f.grp(g));
    }
    if let Some(d) = &disk
        && ctx.fs.geo.features.metadata_csum()
    {
        let c = bitmap_checksum(ctx.fs.seed, d, ipg as usize / 8, ctx.fs.geo.desc_size);
        if c != gd.inode_bitmap_csum() {
            ctx.add(
                Finding::new(
                    p::P5_INODE_BITMAP_CSUM_INVALID,
                    format!("group {g} inode bitmap checksum does not match"),
                    "recompute it",
                )
                .grp(g),
            );
        }
    }
    let free = u64::from(ipg) - used;
    if u64::from(gd.free_inodes()) != free {
        ctx.add(
            Finding::new(
                p::P5_FREE_INODE_COUNT_GROUP,
                format!(
                    "free inodes count wrong for group #{g} ({}, counted={free})",
                    gd.free_inodes()
                ),
                "set it",
            )
            .grp(g),
        );
    }
    if u64::from(gd.used_dirs()) != dirs {
        ctx.add(
            Finding::new(
                p::P5_FREE_DIR_COUNT_GROUP,
                format!(
                    "directories count wrong for group #{g} ({}, counted={dirs})",
                    gd.used_dirs()
                ),
                "set it",
            )
            .grp(g),
        );
    }
    free
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
        ctx.add(
            Finding::new(
                p::own::P0_BACKUP_SB_DIFFERS,
                format!("backup superblock in group {g} differs from the primary"),
                "rewrite the backups",
            )
            .grp(g)
            .warning(),
        );
    }
}
