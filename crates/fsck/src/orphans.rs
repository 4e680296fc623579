//! Pass 0, the orphan list (`Documentation/filesystems/ext4/
//! special_inodes.rst`, "Orphan list", and `orphan.rst`): inodes unlinked
//! or truncated while open, chained from `s_last_orphan` through
//! `i_dtime`, or listed in the orphan file's blocks. A repair run releases
//! them before pass 1, as e2fsck's `release_orphan_inodes` does: an inode
//! with no links is deleted (dtime set; pass 1 then sees it free and pass
//! 5 frees its blocks), one with links is truncated to its `i_size`.

use std::collections::HashSet;

use ext4kit_format::features::{CompatFeatures, RoCompatFeatures};
use ext4kit_format::inode::RawInode;
use ext4kit_format::orphan;
use ext4kit_format::superblock::STATE_ERROR;

use crate::inode_edit::dtime_now;
use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;
use crate::walk::{Event, Walker};

/// The classic orphan list: `s_last_orphan`, then each inode's `i_dtime`.
/// A check-only run checks its shape; a repair run releases it.
pub fn check(ctx: &mut Ctx) {
    if ctx.repairing() {
        release(ctx);
        return;
    }
    let mut ino = ctx.fs.sb.s_last_orphan.get();
    let mut seen = HashSet::new();
    let mut first = true;
    while ino != 0 {
        if illegal(ctx, ino) || !seen.insert(ino) {
            let code = if first {
                p::P0_ORPHAN_ILLEGAL_HEAD_INODE
            } else {
                p::P0_ORPHAN_ILLEGAL_INODE
            };
            ctx.add(
                Finding::new(
                    code,
                    format!("illegal inode {ino} in the orphan list"),
                    "clear the orphan list",
                )
                .ino(ino),
            );
            return;
        }
        first = false;
        if seen.len() <= 1000 {
            let f = Finding::new(
                p::P0_ORPHAN_CLEAR_INODE,
                format!("orphaned inode {ino} (a repair would release it)"),
                "release it",
            );
            ctx.add(f.ino(ino).warning());
        }
        let Ok(rec) = ctx.fs.inode_record(ino) else { return };
        ino = decode(&rec).i_dtime.get();
    }
    if !seen.is_empty() {
        ctx.report.note(format!(
            "{} inode(s) on the orphan list (not released by a read-only check)",
            seen.len()
        ));
    }
}

fn illegal(ctx: &Ctx, ino: u32) -> bool {
    ino > ctx.fs.geo.inodes_count || ino < ctx.fs.geo.first_ino
}

/// Releases the orphan list and the orphan file. `s_last_orphan` is
/// cleared whatever happens; a file system marked with errors keeps its
/// orphans for the passes to judge, as e2fsck does.
fn release(ctx: &mut Ctx) {
    let head = ctx.fs.sb.s_last_orphan.get();
    let present = ctx.fs.geo.features.ro_compat.contains(RoCompatFeatures::ORPHAN_PRESENT);
    if head == 0 && !present {
        return;
    }
    if head != 0 {
        ctx.fs.sb.s_last_orphan.set(0);
        ctx.fs.dirty_sb = true;
    }
    if ctx.fs.sb.s_state.get() & STATE_ERROR != 0 {
        ctx.report
            .note("file system has errors: the orphan list is not released");
        return;
    }
    if head != 0 && illegal(ctx, head) {
        let f = Finding::new(
            p::P0_ORPHAN_ILLEGAL_HEAD_INODE,
            format!("illegal inode {head} at the head of the orphan list"),
            "clear the orphan list",
        );
        ctx.fix(f.ino(head));
        return;
    }
    let mut seen = HashSet::new();
    let mut ino = head;
    while ino != 0 && seen.insert(ino) {
        match release_one(ctx, ino) {
            Some(next) => ino = next,
            None => return,
        }
    }
    if present && ctx.fs.geo.features.compat.contains(CompatFeatures::ORPHAN_FILE) {
        release_file(ctx);
    }
}

/// Releases one orphan; the next inode of the list, or `None` when the
/// list cannot be followed further.
fn release_one(ctx: &mut Ctx, ino: u32) -> Option<u32> {
    let mut rec = ctx.fs.inode_record(ino).ok()?;
    let mut raw = decode(&rec);
    let verb = if raw.links() > 0 { "truncating" } else { "clearing" };
    let msg = format!(
        "{verb} orphaned inode {ino} (mode {:o}, size {})",
        raw.i_mode.get(),
        raw.size()
    );
    ctx.fix(Finding::new(p::P0_ORPHAN_CLEAR_INODE, msg, "release it").ino(ino));
    let next = raw.i_dtime.get();
    if next != 0 && illegal(ctx, next) {
        let f = Finding::new(
            p::P0_ORPHAN_ILLEGAL_INODE,
            format!("illegal inode {next} in the orphan list"),
            "stop releasing the list",
        );
        ctx.fix(f.ino(next));
        return None;
    }
    let done = if raw.links() > 0 {
        truncate(ctx, ino, &mut raw).map(|()| raw.i_dtime.set(0))
    } else {
        release_xattr_block(ctx, &mut raw);
        raw.i_dtime.set(dtime_now(ctx));
        Ok(())
    };
    if let Err(e) = done {
        ctx.not_fixed(e);
        return None;
    }
    raw.encode_into(&mut rec);
    if let Err(e) = ctx.fs.write_inode_record(ino, &mut rec) {
        ctx.not_fixed(e);
        return None;
    }
    Some(next)
}

fn truncate(ctx: &Ctx, ino: u32, raw: &mut RawInode) -> Result<(), String> {
    let keep = raw.size().div_ceil(u64::from(ctx.fs.geo.block_size));
    let extra = u64::from(raw.file_acl() != 0);
    crate::truncate::truncate(&ctx.fs, ino, raw, keep, extra)
}

/// A deleted inode gives up its xattr block: one reference fewer in the
/// block's `h_refcount` (the block itself is left for pass 5 when no
/// other inode names it).
fn release_xattr_block(ctx: &Ctx, raw: &mut RawInode) {
    let blk = raw.file_acl();
    if blk == 0 {
        return;
    }
    raw.i_file_acl_lo.set(0);
    raw.i_file_acl_high.set(0);
    if !ctx.fs.valid_block(blk) {
        return;
    }
    let Ok(mut buf) = ctx.fs.read_block(blk) else { return };
    if buf[..4] != ext4kit_format::xattr::XATTR_MAGIC.to_le_bytes() {
        return;
    }
    let refs = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    if refs <= 1 {
        return;
    }
    buf[4..8].copy_from_slice(&(refs - 1).to_le_bytes());
    if ctx.fs.geo.features.metadata_csum()
        && ext4kit_format::xattr::set_block_checksum(ctx.fs.seed, blk, &mut buf).is_err()
    {
        return;
    }
    let _ = ctx.fs.write_block(blk, &buf);
}

/// The orphan file (`orphan.rst`): each listed inode is released and its
/// slot emptied; `orphan_present` is cleared when all went well.
fn release_file(ctx: &mut Ctx) {
    let oino = ctx.fs.sb.s_orphan_file_inum.get();
    let Ok(rec) = ctx.fs.inode_record(oino) else { return };
    let raw = decode(&rec);
    let mut blocks = Vec::new();
    let mut visit = |e: Event| {
        if let Event::Data { pblk, len, .. } = e {
            blocks.extend((0..u64::from(len)).map(|i| pblk + i).take(1 << 16));
        }
    };
    Walker::new(&ctx.fs, oino, &raw, &mut visit).walk(&raw, raw.has_flag(ext4kit_format::inode::flags::EXTENTS));
    let seed = raw.csum_seed(ctx.fs.seed, oino);
    for pblk in blocks {
        let Ok(mut buf) = ctx.fs.read_block(pblk) else { return };
        if orphan::check_block(&buf).is_err() {
            return;
        }
        let listed: Vec<(usize, u32)> = orphan::entries(&buf).collect();
        for (slot, ino) in listed {
            if illegal(ctx, ino) || release_one(ctx, ino).is_none() {
                return;
            }
            orphan::set_entry(&mut buf, slot, 0);
        }
        if ctx.fs.geo.features.metadata_csum() {
            orphan::set_checksum(seed, pblk, &mut buf);
        }
        if ctx.fs.write_block(pblk, &buf).is_err() {
            return;
        }
    }
    let ro = ctx.fs.sb.s_feature_ro_compat.get() & !RoCompatFeatures::ORPHAN_PRESENT.0;
    ctx.fs.sb.s_feature_ro_compat.set(ro);
    ctx.fs.geo.features.ro_compat = RoCompatFeatures(ro);
    ctx.fs.dirty_sb = true;
}
