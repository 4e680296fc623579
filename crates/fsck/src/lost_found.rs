//! `/lost+found` and the root directory as pass 3 and pass 4 need them:
//! made when missing (e2fsck's `e2fsck_get_lost_and_found` and
//! `check_root`), and inodes linked into `/lost+found` as `#<ino>`
//! (`e2fsck_reconnect_file`). Link counts move with the links made, as
//! e2fsck's `e2fsck_adjust_inode_count` moves both the references counted
//! and `i_links_count`; pass 4 then compares the two.

use ext4kit_format::extent::{EXT4_EXT_MAGIC, Extent, ExtentNode, NodeEntries, RawExtentHeader, encode_node};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::{flags, mode};

use crate::dir_link::{self, FT_DIR};
use crate::inode_edit;
use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::{Ctx, DirBlock, DirInfo, KIND_FREE};

/// The root directory's inode.
pub const ROOT: u32 = 2;
const NAME: &[u8] = b"lost+found";

/// Moves the references counted for `ino` by `delta` (+1 or -1), and its
/// `i_links_count` with them (left alone at 0 going down and at 65535
/// going up).
pub fn adjust_count(ctx: &mut Ctx, ino: u32, delta: i32) {
    let Some(r) = ctx.refs.get_mut(ino as usize) else {
        return;
    };
    *r = if delta > 0 {
        r.saturating_add(1)
    } else {
        r.saturating_sub(1)
    };
    if !ctx.in_use(ino) {
        return;
    }
    let mut links = 0;
    let res = inode_edit::update(&ctx.fs, ino, |raw| {
        let l = raw.links();
        links = if delta > 0 {
            l.saturating_add(1)
        } else {
            l.saturating_sub(1)
        };
        raw.i_links_count.set(links);
    });
    if res.is_ok() {
        ctx.links[ino as usize] = links;
    }
}

/// `/lost+found`, made when it is missing and the run may repair; `None`
/// when there is none to be had (then `ctx.lost_found_bad` is set so the
/// next caller does not try again).
pub fn get(ctx: &mut Ctx) -> Option<u32> {
    if ctx.lost_found_bad {
        return None;
    }
    if let Some(l) = ctx.lost_found.filter(|&l| usable(ctx, l)) {
        return Some(l);
    }
    let made = replace(ctx);
    if made.is_none() {
        ctx.lost_found_bad = true;
    }
    made
}

/// A directory, not inline, not encrypted: fit to hold reconnected files.
fn usable(ctx: &Ctx, l: u32) -> bool {
    if !ctx.is_dir(l) || ctx.dirs.get(&l).is_none_or(|d| d.inline) {
        return false;
    }
    ctx.fs
        .inode_record(l)
        .is_ok_and(|rec| !decode(&rec).has_flag(flags::ENCRYPT))
}

/// Unlinks an unfit `/lost+found` and makes a new one.
fn replace(ctx: &mut Ctx) -> Option<u32> {
    if let Some(old) = ctx.lost_found.take() {
        let what = if ctx.is_dir(old) {
            "/lost+found is not usable (inline or encrypted)"
        } else {
            "/lost+found is not a directory"
        };
        if !ctx.fix(Finding::new(p::P3_LPF_NOTDIR, what, "unlink it and make a new one").ino(old)) {
            return None;
        }
        if let Err(e) = dir_link::remove_entry(ctx, ROOT, NAME) {
            ctx.not_fixed(e);
            return None;
        }
        adjust_count(ctx, old, -1);
        if let Some(d) = ctx.dirs.get_mut(&old) {
            d.parent = 0;
        }
    }
    if !ctx.fix(Finding::new(p::P3_NO_LF_DIR, "/lost+found not found", "create it").warning()) {
        return None;
    }
    match create(ctx) {
        Ok(l) => Some(l),
        Err(e) if e == NO_INODE || e == NO_BLOCK => {
            ctx.not_fixed(e);
            Some(use_root(ctx))
        }
        Err(e) => {
            ctx.not_fixed(e);
            None
        }
    }
}

/// Why [`create`] failed for lack of space.
const NO_INODE: &str = "no free inode";
const NO_BLOCK: &str = "no free block";

/// No inode or block is left for `/lost+found`: as e2fsck does, lost
/// files go into the root directory for this run. Both findings are
/// warnings that stay unrepaired (the file system is short of space, not
/// inconsistent), so a repair run that reconnects nothing more stops.
fn use_root(ctx: &mut Ctx) -> u32 {
    let f = |code, msg: &str, would| Finding::new(code, msg, would).warning();
    ctx.add(f(
        p::P3_LPF_NO_SPACE,
        "cannot allocate space for /lost+found",
        "place lost files in the root directory",
    ));
    ctx.add(f(
        p::P3_NO_SPACE_TO_RECOVER,
        "insufficient space to recover lost files: move data off the file system and check again",
        "nothing",
    ));
    ctx.lost_found = Some(ROOT);
    ROOT
}

fn create(ctx: &mut Ctx) -> Result<u32, String> {
    if !ctx.is_dir(ROOT) {
        return Err("no root directory".into());
    }
    let ino = ctx.alloc_inode(FT_DIR).ok_or(NO_INODE)?;
    if let Err(e) = make_dir(ctx, ino, ROOT, 0o700) {
        ctx.kind[ino as usize] = KIND_FREE;
        return Err(e);
    }
    dir_link::add_entry(ctx, ROOT, NAME, ino, FT_DIR)?;
    // Its `..` is one more link to the root.
    adjust_count(ctx, ROOT, 1);
    ctx.refs[ino as usize] = ctx.refs[ino as usize].saturating_add(1);
    if let Some(d) = ctx.dirs.get_mut(&ino) {
        d.parent = ROOT;
    }
    ctx.lost_found = Some(ino);
    Ok(ino)
}

/// Writes inode `ino` as a new directory of one block whose `..` is
/// `parent`, mode `perm`, two links; records it in the checker's state
/// (its own `.` counted; the entry naming it and the link its `..` makes
/// to the parent are the caller's).
pub fn make_dir(ctx: &mut Ctx, ino: u32, parent: u32, perm: u16) -> Result<(), String> {
    let blk = ctx.alloc_block(0).ok_or(NO_BLOCK)?;
    let mut rec = vec![0u8; usize::from(ctx.fs.geo.inode_size)];
    let mut raw = decode(&rec);
    let t = ctx.now;
    raw.i_mode.set(mode::S_IFDIR | perm);
    raw.i_size_lo.set(ctx.fs.geo.block_size);
    raw.i_atime.set(t);
    raw.i_ctime.set(t);
    raw.i_mtime.set(t);
    raw.i_links_count.set(2);
    raw.i_blocks_lo.set(ctx.fs.geo.block_size / 512);
    if rec.len() > 128 {
        raw.i_extra_isize.set(32);
    }
    if ctx.fs.geo.features.incompat.contains(IncompatFeatures::EXTENTS) {
        raw.i_flags.set(flags::EXTENTS);
        encode_node(&one_extent(blk), &mut raw.i_block);
    } else {
        raw.i_block[..4].copy_from_slice(&(blk as u32).to_le_bytes());
    }
    raw.encode_into(&mut rec);
    let res = ctx.fs.write_inode_record(ino, &mut rec).map_err(|e| e.to_string());
    let seed = raw.csum_seed(ctx.fs.seed, ino);
    let buf = dir_link::first_block(ctx, ino, parent, seed);
    let res = res.and_then(|()| ctx.fs.write_block(blk, &buf).map_err(|e| e.to_string()));
    if let Err(e) = res {
        ctx.free_block(blk);
        return Err(e);
    }
    ctx.kind[ino as usize] = FT_DIR;
    ctx.links[ino as usize] = 2;
    ctx.refs[ino as usize] = 1;
    let info = DirInfo {
        parent: 0,
        dotdot: parent,
        size: u64::from(ctx.fs.geo.block_size),
        csum_seed: seed,
        ..DirInfo::default()
    };
    ctx.dirs.insert(ino, info);
    let at = ctx.dblocks.partition_point(|b| (b.ino, b.lblk) < (ino, 0));
    ctx.dblocks.insert(
        at,
        DirBlock {
            ino,
            lblk: 0,
            pblk: blk,
        },
    );
    Ok(())
}

/// An extent root mapping logical block 0 to `blk`.
fn one_extent(blk: u64) -> ExtentNode {
    let header = RawExtentHeader {
        eh_magic: EXT4_EXT_MAGIC.into(),
        eh_entries: 1.into(),
        eh_max: 4.into(),
        eh_depth: 0.into(),
        eh_generation: 0.into(),
    };
    let e = Extent {
        logical: 0,
        len: 1,
        physical: blk,
        unwritten: false,
    };
    ExtentNode {
        header,
        depth: 0,
        entries: NodeEntries::Leaf(vec![e]),
    }
}

/// Makes a new root directory in inode 2 (e2fsck's `check_root`): it is
/// its own parent.
///
/// # Errors
/// Why not.
pub fn make_root(ctx: &mut Ctx) -> Result<(), String> {
    if ctx.in_use(ROOT) {
        return Err("the root inode is in use but is not a directory".into());
    }
    make_dir(ctx, ROOT, ROOT, 0o755)?;
    ctx.refs[ROOT as usize] = 2;
    if let Some(d) = ctx.dirs.get_mut(&ROOT) {
        d.parent = ROOT;
    }
    Ok(())
}

/// Links `ino` into `/lost+found` as `#<ino>` and counts the link.
///
/// # Errors
/// Why not: no `/lost+found` to be had, or no room in it.
pub fn reconnect(ctx: &mut Ctx, ino: u32) -> Result<u32, String> {
    let lf = get(ctx).ok_or("no /lost+found")?;
    let kind = ctx.kind.get(ino as usize).copied().unwrap_or(0);
    let ft = if (1..=7).contains(&kind) { kind } else { 0 };
    let name = format!("#{ino}");
    dir_link::add_entry(ctx, lf, name.as_bytes(), ino, ft)?;
    adjust_count(ctx, ino, 1);
    Ok(lf)
}
