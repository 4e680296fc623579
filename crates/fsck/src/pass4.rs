//! Pass 4: reference counts. Each inode's `i_links_count` against the
//! directory entries pass 2 counted (`.` and `..` included); inodes no
//! directory names are unattached.
//!
//! Repairs, as e2fsck's pass4.c: an unattached regular file or directory
//! that holds no blocks and no in-inode xattrs is cleared; any other
//! unattached inode is linked into `/lost+found`; `i_links_count` is set to
//! the references found (1 for a directory past 65000 links, with
//! dir_nlink turned on).

use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::xattr::XATTR_MAGIC;

use crate::Progress;
use crate::inode_edit;
use crate::lost_found;
use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::{Ctx, KIND_FREE, KIND_RESERVED};

/// Above this many links a directory stores 1 (`dir_nlink`).
const LINK_MAX: u16 = 65000;

/// Runs pass 4.
pub fn run(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    let n = ctx.fs.geo.inodes_count;
    for ino in 1..=n {
        if ino % 65536 == 0 {
            progress(Progress {
                pass: 4,
                done: u64::from(ino),
                total: u64::from(n),
            });
        }
        let k = ctx.kind[ino as usize];
        if k == KIND_FREE || k == KIND_RESERVED {
            continue;
        }
        if ino == ctx.fs.sb.s_orphan_file_inum.get() || crate::quota::is_quota_file(ctx, ino) {
            continue;
        }
        crate::ea_refs::pass4(ctx, ino);
        if ctx.refs[ino as usize] == 0 && !unattached(ctx, ino) {
            continue;
        }
        link_count(ctx, ino);
    }
}

/// An inode no directory names: cleared when it holds nothing, else linked
/// into `/lost+found`. False when the link count is not worth checking
/// (cleared, or left unattached).
fn unattached(ctx: &mut Ctx, ino: u32) -> bool {
    if zero_length(ctx, ino) {
        let f = Finding::new(p::P4_ZERO_LEN_INODE, "unattached zero-length inode", "clear it").ino(ino);
        if ctx.fix(f) {
            clear(ctx, ino);
        }
        return false;
    }
    let f = Finding::new(p::P4_UNATTACHED_INODE, "unattached inode", "connect it to /lost+found").ino(ino);
    if !ctx.fix(f) {
        return false;
    }
    if let Err(e) = lost_found::reconnect(ctx, ino) {
        ctx.not_fixed(e);
        return false;
    }
    true
}

/// e2fsck's test: a regular file or directory with `i_blocks` 0 and no
/// in-inode xattrs (an xattr block may hold something worth keeping).
fn zero_length(ctx: &Ctx, ino: u32) -> bool {
    if !matches!(ctx.kind[ino as usize], 1 | 2) {
        return false;
    }
    let Ok(rec) = ctx.fs.inode_record(ino) else {
        return ctx.empty.get(u64::from(ino));
    };
    let raw = decode(&rec);
    if raw.i_blocks_lo.get() != 0 || raw.i_blocks_high.get() != 0 {
        return false;
    }
    let at = 128 + usize::from(raw.i_extra_isize.get());
    let magic = rec
        .get(at..at + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    magic != XATTR_MAGIC
}

/// Deletes inode `ino` as e2fsck's `e2fsck_clear_inode`: no links, dtime
/// set; it is free from here on.
fn clear(ctx: &mut Ctx, ino: u32) {
    let dtime = inode_edit::dtime_now(ctx);
    let res = inode_edit::update(&ctx.fs, ino, |r| {
        r.i_links_count.set(0);
        r.i_dtime.set(dtime);
    });
    if let Err(e) = res {
        ctx.not_fixed(e);
        return;
    }
    ctx.kind[ino as usize] = KIND_FREE;
    ctx.links[ino as usize] = 0;
    ctx.dirs.remove(&ino);
}

/// P4_BAD_REF_COUNT: `i_links_count` against the references found.
fn link_count(ctx: &mut Ctx, ino: u32) {
    let (links, refs) = (ctx.links[ino as usize], ctx.refs[ino as usize]);
    let mut counted = refs;
    if ctx.is_dir(ino) && refs > LINK_MAX {
        if !ctx.fs.geo.features.ro_compat.contains(RoCompatFeatures::DIR_NLINK) {
            let f = Finding::new(
                p::P4_DIR_NLINK_FEATURE,
                "directory has more than 65000 links without dir_nlink",
                "set dir_nlink",
            );
            if ctx.fix(f.ino(ino)) {
                set_dir_nlink(ctx);
            }
        }
        counted = 1;
    }
    if links == counted {
        return;
    }
    let overflowed = ctx.is_dir(ino) && links == 1 && counted > 1 && ctx.dirs.get(&ino).is_some_and(|d| d.htree);
    let f = if overflowed {
        // A directory that once had more than 65000 links: not an error.
        if !ctx.repairing() {
            return;
        }
        Finding::new(
            p::P4_DIR_OVERFLOW_REF_COUNT,
            format!("directory inode {ino} ref count is 1, should be {counted}"),
            "set it",
        )
        .warning()
    } else {
        Finding::new(
            p::P4_BAD_REF_COUNT,
            format!("inode {ino} ref count is {links}, should be {counted}"),
            "set it",
        )
    };
    if !ctx.fix(f.ino(ino)) {
        return;
    }
    match inode_edit::update(&ctx.fs, ino, |r| r.i_links_count.set(counted)) {
        Ok(()) => ctx.links[ino as usize] = counted,
        Err(e) => ctx.not_fixed(e),
    }
}

/// Turns on `dir_nlink` in the superblock.
fn set_dir_nlink(ctx: &mut Ctx) {
    let sb = &mut ctx.fs.sb;
    let ro = sb.s_feature_ro_compat.get() | RoCompatFeatures::DIR_NLINK.0;
    sb.s_feature_ro_compat.set(ro);
    ctx.fs.geo.features.ro_compat = RoCompatFeatures(ro);
    ctx.fs.dirty_sb = true;
}
