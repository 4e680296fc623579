//! Pass 0, the resize inode (inode 7, `special_inodes.rst`) against the
//! features, as e2fsck's `check_resize_inode` begins: resize_inode and
//! meta_bg cannot both be set (meta_bg leaves no reserved descriptor
//! blocks to grow into), so resize_inode goes (`PR_0_DISABLE_RESIZE_INODE`);
//! without resize_inode, a resize inode that still maps blocks is zeroed
//! (`PR_0_CLEAR_RESIZE_INODE`), and pass 5 frees what it held.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures};

use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// The resize inode.
const RESIZE_INO: u32 = 7;

/// Checks the resize inode against the features.
pub fn check(ctx: &mut Ctx) {
    let f = ctx.fs.geo.features;
    if f.compat.contains(CompatFeatures::RESIZE_INODE) && f.incompat.contains(IncompatFeatures::META_BG) {
        let msg = "resize_inode and meta_bg are both set";
        if ctx.fix(Finding::new(p::P0_DISABLE_RESIZE_INODE, msg, "clear resize_inode")) {
            let v = ctx.fs.sb.s_feature_compat.get() & !CompatFeatures::RESIZE_INODE.0;
            ctx.fs.sb.s_feature_compat.set(v);
            ctx.fs.sb.s_reserved_gdt_blocks.set(0);
            ctx.fs.geo.features = ctx.fs.sb.features();
            ctx.fs.dirty_sb = true;
            ctx.fs.dirty_backups = true;
        }
    }
    if ctx.fs.geo.features.compat.contains(CompatFeatures::RESIZE_INODE) {
        return;
    }
    let Ok(mut rec) = ctx.fs.inode_record(RESIZE_INO) else {
        return;
    };
    // i_block: 60 bytes at offset 0x28 of `struct ext4_inode`.
    if rec.len() < 0x64 || rec[0x28..0x64].iter().all(|&b| b == 0) {
        return;
    }
    let msg = "resize_inode is off but the resize inode is not empty";
    if ctx.fix(Finding::new(p::P0_CLEAR_RESIZE_INODE, msg, "clear it").ino(RESIZE_INO)) {
        let n = rec.len().min(128);
        rec[..n].fill(0);
        if let Err(e) = ctx.fs.write_inode_record(RESIZE_INO, &mut rec) {
            ctx.not_fixed(e);
        }
    }
}
