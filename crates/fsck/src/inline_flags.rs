//! Pass 1, the `INLINE_DATA_FL` flag of one inode (`inline_data.rst`,
//! `inodes.rst` `i_flags`), checked in e2fsck's order. The in-inode
//! xattrs are read with `i_extra_isize` as stored, before its repair: a
//! bad one hides `system.data`, which is what e2fsck reports (it looks
//! before it repairs the field); the inode is only written once the field
//! is sound again.
//! - the flag with `EXTENTS_FL` too: one of them is wrong. An extent
//!   header in `i_block` keeps extents; a size that fits in the inode
//!   keeps inline data; block numbers that all lie in the file system make
//!   it a block-mapped file; otherwise the inode is cleared;
//! - the flag without the `inline_data` feature: the feature is set when
//!   the inode holds a `system.data` xattr, else the inode is cleared;
//! - the flag without a `system.data` xattr: the inline data is gone, and
//!   the inode is truncated to nothing (flag off, `i_block` zeroed);
//! - an inline directory's `i_size` other than what it holds.

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::{flags, mode};

use crate::inode_edit::{self, InodeEdit};
use crate::problem::{self as p, Code, Finding};
use crate::state::Ctx;

/// Checks `ed`'s inline-data flag, its xattrs read with `i_extra_isize`
/// `extra` (the stored value); the inode may be cleared ([`InodeEdit::cleared`]).
pub fn check(ctx: &mut Ctx, ed: &mut InodeEdit, extra: u16) {
    if !ed.raw.has_flag(flags::INLINE_DATA) || (ed.ino < ctx.fs.geo.first_ino && ed.ino != 2) {
        return;
    }
    let m = ed.raw.i_mode.get() & mode::S_IFMT;
    let special = matches!(m, mode::S_IFCHR | mode::S_IFBLK | mode::S_IFIFO | mode::S_IFSOCK);
    if ed.raw.has_flag(flags::EXTENTS) && !special {
        conflict(ctx, ed, extra);
        if ed.cleared || !ed.raw.has_flag(flags::INLINE_DATA) {
            return;
        }
    }
    if !ctx.fs.geo.features.incompat.contains(IncompatFeatures::INLINE_DATA) {
        return feature(ctx, ed, extra);
    }
    if !has_system_data(ed, extra) {
        let msg = "INLINE_DATA_FL set but the system.data xattr is missing";
        if ctx.fix(Finding::new(p::P1_INLINE_DATA_NO_ATTR, msg, "truncate the inode").ino(ed.ino)) {
            ed.raw.set_size(0);
            ed.raw.i_flags.set(ed.raw.flags() & !flags::INLINE_DATA);
            ed.raw.i_block = [0; 60];
            ed.dirty = true;
        }
    }
}

/// An inline directory's `i_size` is all it can hold: the 60 bytes of
/// `i_block` and the `system.data` value, `inline_len` bytes (e2fsck's
/// `check_blocks`, `bad_size` 7, from `ext2fs_inline_data_size`). With no
/// value to be read it holds nothing: the size becomes 0 and the flag goes.
pub fn check_dir_size(ctx: &mut Ctx, ed: &mut InodeEdit, inline_len: Option<usize>) {
    let raw = &ed.raw;
    let dir = raw.i_mode.get() & mode::S_IFMT == mode::S_IFDIR;
    if !dir || !raw.has_flag(flags::INLINE_DATA) || (ed.ino < ctx.fs.geo.first_ino && ed.ino != 2) {
        return;
    }
    let want = inline_len.map_or(0, |n| 60 + n as u64);
    let size = raw.size();
    if size == want {
        return;
    }
    let f = Finding::new(
        p::P1_BAD_I_SIZE,
        format!("i_size is {size}, should be {want}"),
        "set i_size",
    );
    if ctx.fix(f.ino(ed.ino)) {
        ed.raw.set_size(want);
        if want == 0 {
            ed.raw.i_flags.set(ed.raw.flags() & !flags::INLINE_DATA);
            ed.raw.i_block = [0; 60];
        }
        ed.dirty = true;
    }
}

/// The flag on a file system without `inline_data`.
fn feature(ctx: &mut Ctx, ed: &mut InodeEdit, extra: u16) {
    let msg = "INLINE_DATA_FL set without inline_data";
    if has_system_data(ed, extra) {
        if ctx.fix(Finding::new(p::P1_INLINE_DATA_FEATURE, msg, "set the feature").ino(ed.ino)) {
            let sb = &mut ctx.fs.sb;
            sb.s_feature_incompat
                .set(sb.s_feature_incompat.get() | IncompatFeatures::INLINE_DATA.0);
            ctx.fs.geo.features = ctx.fs.sb.features();
            ctx.fs.dirty_sb = true;
        }
    } else if ctx.fix(Finding::new(p::P1_INLINE_DATA_SET, msg, "clear the inode").ino(ed.ino)) {
        inode_edit::clear(ctx, ed);
    }
}

/// Both `INLINE_DATA_FL` and `EXTENTS_FL` (e2fsck's
/// `fix_inline_data_extents_file`).
fn conflict(ctx: &mut Ctx, ed: &mut InodeEdit, extra: u16) {
    let f = ctx.fs.geo.features.incompat;
    if !f.contains(IncompatFeatures::EXTENTS) && !f.contains(IncompatFeatures::INLINE_DATA) {
        return;
    }
    let ino = ed.ino;
    let ask = |ctx: &mut Ctx, code: Code, msg: &str, would| ctx.fix(Finding::new(code, msg, would).ino(ino));
    let drop = |ed: &mut InodeEdit, fl: u32| {
        ed.raw.i_flags.set(ed.raw.flags() & !fl);
        ed.dirty = true;
    };
    if extent_header_ok(&ed.raw.i_block) {
        let msg = "extent header in i_block but INLINE_DATA_FL set";
        if ask(ctx, p::P1_CLEAR_INLINE_DATA_FOR_EXTENT, msg, "clear INLINE_DATA_FL") {
            drop(ed, flags::INLINE_DATA);
        }
        return;
    }
    let room = ed.rec.len().saturating_sub(128 + usize::from(extra));
    if ed.raw.size() < (60 + room) as u64 {
        let msg = "looks like inline data but EXTENTS_FL set";
        if ask(ctx, p::P1_CLEAR_EXTENT_FOR_INLINE_DATA, msg, "clear EXTENTS_FL") {
            drop(ed, flags::EXTENTS);
        }
        return;
    }
    let blocks = ctx.fs.geo.blocks_count;
    let map_ok = ed
        .raw
        .i_block
        .chunks_exact(4)
        .all(|w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])) < blocks);
    if map_ok {
        let msg = "looks like a block map but INLINE_DATA_FL and EXTENTS_FL set";
        if ask(ctx, p::P1_CLEAR_EXTENT_INLINE_DATA_FLAGS, msg, "clear both flags") {
            drop(ed, flags::INLINE_DATA | flags::EXTENTS);
        }
        return;
    }
    let msg = "INLINE_DATA_FL and EXTENTS_FL set but i_block holds neither";
    if ask(ctx, p::P1_CLEAR_EXTENT_INLINE_DATA_INODE, msg, "clear the inode") {
        inode_edit::clear(ctx, ed);
    }
}

/// `ext4_extent_header` at the start of `i_block` looks sound (e2fsck's
/// `ext2fs_extent_header_verify`): magic 0xF30A, `eh_max` within two of
/// the four entries `i_block` holds, `eh_entries` no more than `eh_max`,
/// a plausible depth.
fn extent_header_ok(i_block: &[u8; 60]) -> bool {
    let le = |i: usize| u16::from_le_bytes([i_block[i], i_block[i + 1]]);
    let (magic, entries, max, depth) = (le(0), le(2), le(4), le(6));
    let fit = (60 - 12) / 12;
    magic == 0xF30A && max <= fit && max + 2 >= fit && entries <= max && depth <= 5
}

/// The inode holds a `system.data` xattr in its body, read with
/// `i_extra_isize` `extra`.
pub fn has_system_data(ed: &InodeEdit, extra: u16) -> bool {
    let Ok(region) = ext4kit_format::xattr::ibody_region(&ed.rec, extra) else {
        return false;
    };
    ext4kit_format::xattr::parse_ibody(region)
        .ok()
        .is_some_and(|e| ext4kit_format::inline::system_data(&e).is_some())
}
