//! Pass 1: the inode table scan (`inodes.rst`, `struct ext4_inode`).
//!
//! Marks file-system metadata as owned, then reads every group's inode
//! table — skipping INODE_UNINIT groups and the `bg_itable_unused` tail when
//! a group checksum feature makes those fields trustworthy, which is what
//! makes a check of a mostly empty file system fast (seed 004 §J) — and
//! checks each inode: fields (`inode_fields`), xattrs, and the block
//! mapping, whose blocks are claimed in the ownership bitmap (a second
//! claim is a duplicate for pass 1B).

use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::group_desc::BG_INODE_UNINIT;
use ext4kit_format::inode::{RawInode, flags, mode};
use zerocopy::FromBytes;

use crate::inode_edit::{self, Claims, InodeEdit};
use crate::itable_scan::Record;
use crate::map_fix::Fixer;
use crate::problem::{self as p, Finding};
use crate::state::{Ctx, DirBlock, DirInfo, KIND_BAD, KIND_RESERVED, Mode};
use crate::walk::{Event, Walker};
use crate::xattr::{self, EaBlocks};
use crate::{Progress, inode_fields};

/// Resize inode: its double-indirect block is its only block not already
/// counted as reserved GDT space.
const RESIZE_INO: u32 = 7;
const BAD_INO: u32 = 1;
const ROOT_INO: u32 = 2;

/// Runs pass 1.
pub fn run(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    mark_metadata(ctx);
    crate::bad_blocks::start_pass1(ctx);
    let mut ea = EaBlocks::default();
    let done = if ctx.mode == Mode::Check && ctx.threads > 1 {
        crate::pass1_parallel::scan(ctx, &mut ea, progress)
    } else {
        scan_serial(ctx, &mut ea, progress)
    };
    if !done {
        return;
    }
    xattr::check_refcounts(ctx, &ea);
    ctx.dblocks.sort_unstable();
}

/// Every group's table on this thread; false when cancelled.
fn scan_serial(ctx: &mut Ctx, ea: &mut EaBlocks, progress: &mut dyn FnMut(Progress)) -> bool {
    let groups = ctx.fs.geo.group_count;
    for g in 0..groups {
        if ctx.cancelled() {
            return false;
        }
        progress(Progress {
            pass: 1,
            done: u64::from(g),
            total: u64::from(groups),
        });
        scan_group(ctx, ea, g);
    }
    true
}

/// Superblock copies, descriptor tables, bitmaps and inode tables belong to
/// the file system; a table overlapping another is a conflict.
fn mark_metadata(ctx: &mut Ctx) {
    for g in 0..ctx.fs.geo.group_count {
        for b in ctx.fs.super_and_gdt_blocks(g) {
            ctx.meta.set(b);
            ctx.used.set(b);
        }
    }
    let itb = u64::from(ctx.fs.geo.inode_table_blocks);
    for g in 0..ctx.fs.geo.group_count {
        let gd = ctx.fs.groups[g as usize];
        for (start, n, code) in [
            (gd.block_bitmap(), 1, p::P1_BB_CONFLICT),
            (gd.inode_bitmap(), 1, p::P1_IB_CONFLICT),
            (gd.inode_table(), itb, p::P1_ITABLE_CONFLICT),
        ] {
            if start == 0 || !ctx.fs.valid_block(start) || start + n > ctx.fs.geo.blocks_count {
                continue;
            }
            let clash = (start..start + n).any(|b| ctx.meta.get(b));
            if clash {
                let msg = format!("group {g} metadata at block {start} conflicts with other metadata");
                if ctx.fix(Finding::new(code, msg, "relocate it").grp(g).blk(start)) {
                    crate::relocate::later(ctx, g, code);
                    continue;
                }
            }
            (start..start + n).for_each(|b| claim_meta(ctx, b));
        }
    }
    if ctx.fs.geo.features.incompat.contains(IncompatFeatures::MMP) {
        let b = ctx.fs.sb.s_mmp_block.get();
        if ctx.fs.valid_block(b) {
            claim_meta(ctx, b);
        }
    }
}

/// Claims metadata block `b`. With bigalloc several tables may share a
/// cluster (mke2fs packs a flex group's bitmaps): only a block claimed
/// twice makes its cluster a duplicate, as e2fsck marks tables in a
/// per-block map before turning it into a cluster map.
fn claim_meta(ctx: &mut Ctx, b: u64) {
    if ctx.meta.set(b) || !ctx.used.get(b) {
        ctx.claim(b);
    }
}

/// How many inodes of group `g` the scan reads.
pub(crate) fn scan_limit(ctx: &Ctx, g: u32) -> u32 {
    let gd = &ctx.fs.groups[g as usize];
    let ipg = ctx.fs.geo.inodes_per_group;
    if !ctx.fs.geo.features.has_group_csum() {
        return ipg;
    }
    if gd.flags() & BG_INODE_UNINIT != 0 {
        return 0;
    }
    ipg.saturating_sub(gd.itable_unused())
}

fn scan_group(ctx: &mut Ctx, ea: &mut EaBlocks, g: u32) {
    let limit = scan_limit(ctx, g);
    ctx.scanned[g as usize] = limit;
    let gd = ctx.fs.groups[g as usize];
    if limit == 0 || !crate::groups::table_ok(&ctx.fs, &gd) {
        return;
    }
    let isz = usize::from(ctx.fs.geo.inode_size);
    let per_block = ctx.fs.bs() / isz;
    let ipg = ctx.fs.geo.inodes_per_group;
    let nblocks = (limit as usize).div_ceil(per_block);
    let csum = ctx.fs.geo.features.metadata_csum().then_some(ctx.fs.seed);
    for bi in 0..nblocks {
        let blk = gd.inode_table() + bi as u64;
        if ctx.bad_itable.contains(&blk) {
            continue; // inodes in a bad block are not examined (e2fsck's inode_bb_map)
        }
        let buf = match ctx.fs.read_block(blk) {
            Ok(b) => b,
            Err(e) => {
                ctx.report
                    .note(format!("cannot read inode table block {blk} of group {g}: {e}"));
                continue;
            }
        };
        for k in 0..per_block {
            let idx = (bi * per_block + k) as u32;
            if idx >= limit {
                break;
            }
            let ino = g * ipg + idx + 1;
            let rec = &buf[k * isz..(k + 1) * isz];
            check_inode(ctx, ea, ino, rec, Record::examine(rec, ino, csum));
        }
    }
}

/// Decodes a record without trusting `i_extra_isize` (that is checked apart).
pub fn decode(rec: &[u8]) -> RawInode {
    let mut full = [0u8; 160];
    let n = rec.len().min(160);
    full[..n].copy_from_slice(&rec[..n]);
    let mut raw = RawInode::read_from_bytes(&full).unwrap_or_else(|_| unreachable!("160 bytes"));
    if rec.len() <= 128 {
        raw.i_extra_isize.set(0);
    }
    raw
}

/// Checks inode `ino`, whose record `rec` is as `pre` says
/// ([`Record::examine`], on this thread or a reader's).
pub(crate) fn check_inode(ctx: &mut Ctx, ea: &mut EaBlocks, ino: u32, rec: &[u8], pre: Record) {
    // A record of zeros past the reserved inodes was never used: nothing
    // to check, no checksum to verify (most of a table, with the group
    // flags cleared), and no copy to make.
    if ino >= ctx.fs.geo.first_ino && pre.zero {
        return;
    }
    let mut ed = InodeEdit::new(ino, rec);
    let csum_bad = pre.csum_bad;
    if ino == BAD_INO {
        return crate::bad_blocks::check_inode(ctx, rec, csum_bad);
    }
    if ino < ctx.fs.geo.first_ino && ino != ROOT_INO {
        crate::reserved::check(ctx, &mut ed);
        let raw = ed.raw;
        reserved_inode(ctx, ino, &raw);
        finish(ctx, &mut ed, csum_bad);
        return;
    }
    low_dtime(ctx, &mut ed);
    if ed.raw.links() == 0 {
        if ed.raw.i_mode.get() != 0 && ed.raw.i_dtime.get() == 0 && !pre.zero {
            let f = Finding::new(p::P1_ZERO_DTIME, "deleted inode has zero dtime", "set dtime");
            if ctx.fix(f.ino(ino)) {
                ed.raw.i_dtime.set(inode_edit::dtime_now(ctx));
                ed.dirty = true;
            }
        }
        finish(ctx, &mut ed, csum_bad);
        return;
    }
    check_live(ctx, ea, &mut ed);
    if !ed.cleared {
        finish(ctx, &mut ed, csum_bad);
    }
}

/// Writes the inode when a repair changed it; otherwise, when its only
/// fault is its checksum, rewrites it with the right one (e2fsck's
/// `finish_processing_inode`: a rewrite sets the checksum anyway).
fn finish(ctx: &mut Ctx, ed: &mut InodeEdit, csum_bad: bool) {
    if !ed.dirty {
        let f = Finding::new(
            p::P1_INODE_ONLY_CSUM_INVALID,
            "inode checksum does not match",
            "recompute it",
        );
        if !csum_bad || !ctx.fix(f.ino(ed.ino)) {
            return;
        }
    }
    if !ed.write(ctx) {
        ctx.not_fixed("the inode could not be written");
    }
}

/// An inode in use: fields, xattrs, mapping, sizes.
fn check_live(ctx: &mut Ctx, ea: &mut EaBlocks, ed: &mut InodeEdit) {
    let ino = ed.ino;
    crate::really_dir::check(ctx, ed);
    let kind = ed.raw.file_type().map_or(KIND_BAD, |t| t.dirent_code());
    ctx.kind[ino as usize] = kind;
    ctx.links[ino as usize] = ed.raw.links();
    xattr::note_ea_inode_flag(ctx, ed);
    let extra_ok = inode_fields::check(ctx, ed);
    if !ed.cleared {
        crate::encryption::check_inode(ctx, ed);
    }
    if ed.cleared {
        return;
    }
    let (inline_len, ibody) = if extra_ok && ed.rec.len() > 128 {
        xattr::check_ibody(ctx, ed)
    } else {
        (None, xattr::Charge::default())
    };
    let acl = ed.raw.file_acl();
    let block = (acl != 0)
        .then(|| xattr::check_block(ctx, ea, ed, acl, !xattr::inline_symlink(&ed.raw, inline_len)))
        .flatten()
        .unwrap_or_default();
    let sectors = ibody.sectors + block.sectors;
    ctx.ea.set_owned(ino, ibody.ea_inodes + block.ea_inodes);
    if kind == KIND_BAD {
        return;
    }
    let raw = ed.raw;
    let mut tally = map_blocks(ctx, ino, &raw, inline_len, kind == 2);
    if let Some(root) = tally.root.take() {
        ed.raw.i_block = root;
        ed.dirty = true;
    }
    if tally.clear {
        tally.claims.undo(ctx);
        inode_edit::clear(ctx, ed);
        return;
    }
    let sectors = sectors + tally.blocks * u64::from(ctx.fs.geo.block_size / 512);
    inode_fields::check_sizes(ctx, ed, &tally, sectors);
    crate::inline_flags::check_dir_size(ctx, ed, inline_len);
    let raw = ed.raw;
    if !xattr::inline_symlink(&raw, inline_len) {
        let owned = ctx.ea.owned(ino);
        crate::quota::charge(ctx, ino, &raw, ed.rec.len(), sectors, owned);
    }
    if tally.blocks == 0 && raw.size() == 0 && inline_len.unwrap_or(0) == 0 {
        ctx.empty.set(u64::from(ino));
    }
    if kind == 2 {
        directory(ctx, ed, &tally);
    }
}

/// Records a directory for pass 2; one without blocks is cleared.
fn directory(ctx: &mut Ctx, ed: &mut InodeEdit, tally: &Tally) {
    let (ino, raw) = (ed.ino, ed.raw);
    let htree = raw.has_flag(flags::INDEX) && ctx.fs.geo.features.compat.contains(CompatFeatures::DIR_INDEX);
    let inline = raw.has_flag(flags::INLINE_DATA);
    let csum_seed = raw.csum_seed(ctx.fs.seed, ino);
    let itree = raw.has_flag(ext4kit_format::itree::ITREE_FL)
        && ctx
            .fs
            .geo
            .features
            .ro_compat
            .contains(ext4kit_format::features::RoCompatFeatures::ITREE);
    let info = DirInfo {
        size: raw.size(),
        htree,
        inline,
        itree,
        csum_seed,
        ..DirInfo::default()
    };
    ctx.dirs.insert(ino, info);
    if tally.blocks == 0 && !inline {
        let f = Finding::new(p::P1_ZERO_LENGTH_DIR, "directory has no blocks", "clear the inode");
        if ctx.fix(f.ino(ino)) {
            tally.claims.undo(ctx);
            inode_edit::clear(ctx, ed);
        }
    }
}

/// An inode whose `i_dtime` is a small number looks like a leftover of the
/// orphan list (which chains through `i_dtime`); e2fsck asks about it
/// before anything else, unless the clock or a pending journal make
/// times unreliable.
fn low_dtime(ctx: &mut Ctx, ed: &mut InodeEdit) {
    let sb = &ctx.fs.sb;
    let n = ctx.fs.geo.inodes_count;
    let busted = ctx.fs.geo.features.incompat.contains(IncompatFeatures::RECOVER)
        || sb.s_mtime.get() < n
        || (sb.s_mkfs_time.get() != 0 && sb.s_mkfs_time.get() < n);
    let dtime = ed.raw.i_dtime.get();
    if !busted && dtime != 0 && dtime < n {
        let f = Finding::new(
            p::P1_LOW_DTIME,
            "inode was part of the orphaned inode list",
            "clear dtime",
        );
        if ctx.fix(f.ino(ed.ino)) {
            // A live inode keeps no dtime; a deleted one gets a real one.
            let t = if ed.raw.links() != 0 {
                0
            } else {
                inode_edit::dtime_now(ctx)
            };
            ed.raw.i_dtime.set(t);
            ed.dirty = true;
        }
    }
}

/// Reserved inodes below `s_first_ino` (e2fsck's special cases): the bad
/// blocks list, the resize inode, the journal, quota and others.
fn reserved_inode(ctx: &mut Ctx, ino: u32, raw: &RawInode) {
    ctx.kind[ino as usize] = KIND_RESERVED;
    let f = ctx.fs.geo.features;
    let regular = raw.i_mode.get() & mode::S_IFMT == mode::S_IFREG;
    let journal = f.compat.contains(CompatFeatures::HAS_JOURNAL) && ctx.fs.sb.s_journal_inum.get() == ino;
    match ino {
        BAD_INO => {
            map_blocks(ctx, ino, raw, None, false);
        }
        RESIZE_INO => {
            // e2fsck marks the double-indirect block used with the feature
            // or without it (pass 0 then left a stale inode alone).
            let dind = u64::from(u32::from_le_bytes(raw.i_block[52..56].try_into().unwrap_or([0; 4])));
            if ctx.fs.valid_block(dind) {
                ctx.claim(dind);
            }
            if f.compat.contains(CompatFeatures::RESIZE_INODE) {
                if let Err(why) = crate::resize::check(&ctx.fs, raw) {
                    ctx.add(
                        Finding::new(
                            p::P0_RESIZE_INODE_INVALID,
                            format!("resize inode is not valid: {why}"),
                            "recreate it",
                        )
                        .ino(ino),
                    );
                }
                resize_blocks(ctx, ino, raw);
            }
            // Without the feature, pass 0 ([`crate::resize_inode`]) has
            // reported (or cleared) a resize inode that is not empty.
            if raw.i_mode.get() != 0 && !regular {
                let msg = format!("reserved inode {ino} has a bad mode {:#o}", raw.i_mode.get());
                ctx.add(Finding::new(p::P1_RESERVED_BAD_MODE, msg, "fix the mode").ino(ino));
            }
        }
        _ if journal => {
            if !regular {
                ctx.add(
                    Finding::new(
                        p::P1_JOURNAL_BAD_MODE,
                        "journal inode is not a regular file",
                        "fix the mode",
                    )
                    .ino(ino),
                );
            }
            map_blocks(ctx, ino, raw, None, false);
        }
        8 => {
            let holds_data = raw.links() != 0 || raw.i_blocks_lo.get() != 0 || raw.i_block[..4] != [0; 4];
            if holds_data && regular {
                // A journal without has_journal: e2fsck asks to clear the
                // flag's absence ("no" leaves the status clean) and still
                // counts the journal's blocks as used.
                let f = Finding::new(
                    p::P0_JOURNAL_HAS_JOURNAL,
                    "has_journal is clear, but a journal is present",
                    "clear it",
                );
                ctx.add(f.ino(ino).warning());
                map_blocks(ctx, ino, raw, None, false);
            } else if holds_data {
                let f = Finding::new(
                    p::P1_JOURNAL_INODE_NOT_CLEAR,
                    "journal inode is not in use but holds data",
                    "clear it",
                );
                ctx.add(f.ino(ino));
            }
        }
        _ => {
            if raw.i_mode.get() != 0 && !regular {
                ctx.add(
                    Finding::new(
                        p::P1_RESERVED_BAD_MODE,
                        format!("reserved inode {ino} has a bad mode {:#o}", raw.i_mode.get()),
                        "fix the mode",
                    )
                    .ino(ino),
                );
            }
            if raw.i_mode.get() != 0 {
                map_blocks(ctx, ino, raw, None, false);
            }
        }
    }
}

/// The resize inode's `i_blocks` must count every block of its map (the
/// reserved GDT blocks and their backups, and the map's own blocks), none
/// of which it owns in the bitmap sense); with bigalloc each counts a
/// whole cluster, as e2fsck multiplies by the cluster ratio.
fn resize_blocks(ctx: &mut Ctx, ino: u32, raw: &RawInode) {
    let mut n = 0u64;
    let mut visit = |e: Event| match e {
        Event::Data { len, .. } => n += u64::from(len),
        Event::Meta { .. } => n += 1,
    };
    let mut w = Walker::new(&ctx.fs, ino, raw, &mut visit);
    w.walk(raw, false);
    drop(w);
    let geo = &ctx.fs.geo;
    let huge = geo
        .features
        .ro_compat
        .contains(ext4kit_format::features::RoCompatFeatures::HUGE_FILE);
    let (stored, want) = (
        raw.blocks_512(huge, geo.block_size),
        (n * u64::from(geo.block_size / 512)) << geo.cluster_bits,
    );
    if stored != want {
        let f = Finding::new(
            p::P1_BAD_I_BLOCKS,
            format!("i_blocks is {stored}, should be {want}"),
            "set i_blocks",
        );
        ctx.add(f.ino(ino));
    }
}

/// What mapping an inode's blocks found.
#[derive(Debug, Default)]
pub struct Tally {
    /// Blocks claimed (data and mapping blocks).
    pub blocks: u64,
    /// Last mapped logical block.
    pub last: Option<u64>,
    /// Last initialized (not unwritten) logical block.
    pub last_init: Option<u64>,
    /// The mapping was walked (not inline, not a fast symlink or device).
    pub walked: bool,
    /// The blocks this walk claimed, to give back if the inode is cleared.
    pub claims: Claims,
    /// `i_block` as the walk's repairs left it, when they changed it.
    pub root: Option<[u8; 60]>,
    /// The walk's repairs ask for the inode to be cleared.
    pub clear: bool,
}

/// Whether `i_block` maps blocks (e2fsck's `ext2fs_inode_has_valid_blocks2`):
/// not for devices, fifos, sockets or inline data; for a symlink, only when
/// `i_blocks` says it has blocks beyond its xattr block.
fn has_block_mapping(raw: &RawInode, inline: bool) -> bool {
    let m = raw.i_mode.get() & mode::S_IFMT;
    if inline || !matches!(m, mode::S_IFREG | mode::S_IFDIR | mode::S_IFLNK) {
        return false;
    }
    if m == mode::S_IFLNK {
        if raw.file_acl() == 0 {
            // i_blocks may count an ea_inode value; a fast symlink
            // (`ext2fs_is_fast_symlink`: size 1..59) still has no blocks.
            let fast = raw.size() != 0 && raw.size() < 60;
            return raw.i_blocks_lo.get() != 0 && !fast;
        }
        let b1 = u32::from_le_bytes([raw.i_block[4], raw.i_block[5], raw.i_block[6], raw.i_block[7]]);
        return raw.size() >= 60 || (raw.size() > 4 && b1 == 0);
    }
    true
}

/// Walks the mapping of `ino`, claiming its blocks and (for directories)
/// recording them for pass 2. Inodes in use outside the reserved range are
/// repaired as the walk goes when the run repairs ([`crate::map_fix`]).
fn map_blocks(ctx: &mut Ctx, ino: u32, raw: &RawInode, inline: Option<usize>, is_dir: bool) -> Tally {
    let inline_fl = raw.has_flag(flags::INLINE_DATA);
    let _ = inline;
    let ordinary = ino >= ctx.fs.geo.first_ino || ino == ROOT_INO;
    if ordinary && !has_block_mapping(raw, inline_fl) {
        return Tally::default();
    }
    let extents = raw.has_flag(flags::EXTENTS);
    if extents && !ctx.fs.geo.features.incompat.contains(IncompatFeatures::EXTENTS) {
        return Tally::default();
    }
    let fixer = (ordinary && ctx.mode != Mode::Check).then(|| Fixer::new(ctx.mode, ctx.halted, raw.i_block));
    let mut t = Tally {
        walked: true,
        ..Tally::default()
    };
    let (problems, fixer) = walk_claiming(ctx, ino, raw, extents, is_dir, fixer, &mut t);
    match fixer {
        None => problems.into_iter().for_each(|f| ctx.add(f)),
        Some(fx) => {
            for mut f in problems {
                let applied = std::mem::take(&mut f.fixed);
                if ctx.fix(f) && !applied {
                    ctx.not_fixed("no repair for this mapping problem");
                }
            }
            t.root = fx.root_dirty.then_some(fx.root);
            t.clear = fx.clear;
        }
    }
    t
}

/// The walk itself: claims blocks into `t`, returns the problems met and
/// the fixer as the walk left it.
fn walk_claiming(
    ctx: &mut Ctx,
    ino: u32,
    raw: &RawInode,
    extents: bool,
    is_dir: bool,
    fixer: Option<Fixer>,
    t: &mut Tally,
) -> (Vec<Finding>, Option<Fixer>) {
    let cap = ctx.fs.geo.blocks_count as usize;
    let bits = ctx.fs.geo.cluster_bits;
    let mut clusters = crate::cluster::FileClusters::new(bits);
    let Ctx {
        fs,
        used,
        dup,
        dblocks,
        claim_budget,
        ..
    } = ctx;
    let Tally {
        blocks,
        last,
        last_init,
        claims,
        ..
    } = t;
    let mut visit = |e: Event| match e {
        Event::Data {
            lblk,
            pblk,
            len,
            unwritten,
        } => {
            // The budget bounds the work hostile mappings can cause (many
            // inodes each mapping the whole file system); past it blocks
            // are counted but no longer marked.
            let mark = *claim_budget >= u64::from(len);
            *claim_budget = claim_budget.saturating_sub(u64::from(len));
            let (first, n) = if extents {
                clusters.extent(pblk, u64::from(len))
            } else {
                (pblk, u64::from(clusters.mapped(lblk, pblk)))
            };
            for k in 0..n {
                if mark {
                    claims.claim(used, dup, first + (k << bits));
                }
            }
            *blocks += n << bits;
            for i in 0..u64::from(len) {
                if is_dir && dblocks.len() < cap {
                    dblocks.push(DirBlock {
                        ino,
                        lblk: (lblk + i) as u32,
                        pblk: pblk + i,
                    });
                }
            }
            let end = lblk + u64::from(len) - 1;
            *last = (*last).max(Some(end));
            if !unwritten {
                *last_init = (*last_init).max(Some(end));
            }
        }
        Event::Meta { pblk, .. } => {
            claims.claim(used, dup, pblk);
            *blocks += 1 << bits;
        }
    };
    let limit = crate::walk::dir_block_limit(fs, raw, is_dir);
    let mut w = Walker::new(fs, ino, raw, &mut visit);
    w.fixer = fixer;
    w.dir_limit = limit;
    w.is_dir = is_dir;
    w.walk(raw, extents);
    (std::mem::take(&mut w.problems), w.fixer.take())
}
