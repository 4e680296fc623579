//! Pass 1, one inode's fields (`inodes.rst`): checksum, `i_extra_isize`,
//! `i_dtime` on a live inode, flags that need a feature or a file type,
//! device/fifo/socket oddities, fast symlinks, and `i_size`/`i_blocks`
//! against what the block mapping holds.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::inode::{RawInode, flags, mode};

use crate::inode_edit::{self, InodeEdit};
use crate::pass1::Tally;
use crate::problem::{self as p, Code, Finding};
use crate::state::Ctx;

const CASEFOLD: u32 = flags::CASEFOLD;

/// Field checks, with e2fsck's repairs when the run makes them; returns
/// whether `i_extra_isize` is usable. May clear the inode
/// ([`InodeEdit::cleared`]).
pub fn check(ctx: &mut Ctx, ed: &mut InodeEdit) -> bool {
    let stored_extra = ed.raw.i_extra_isize.get();
    let extra_ok = extra_isize(ctx, ed);
    crate::inline_flags::check(ctx, ed, stored_extra);
    if ed.cleared {
        return extra_ok;
    }
    let m = ed.raw.i_mode.get() & mode::S_IFMT;
    if !dtimes(ctx, ed, m == mode::S_IFDIR) {
        return extra_ok;
    }
    feature_flags(ctx, ed, m);
    if ed.cleared {
        return extra_ok;
    }
    obsolete_fields(ctx, ed);
    by_type(ctx, ed, m);
    extra_ok
}

/// Records `f` for `ed`; true when it is to be repaired.
fn ask(ctx: &mut Ctx, ed: &InodeEdit, code: Code, msg: impl Into<String>, would: &'static str) -> bool {
    ctx.fix(Finding::new(code, msg, would).ino(ed.ino))
}

/// Clears `flag` in `ed` when `f` is to be repaired.
fn drop_flags(ctx: &mut Ctx, ed: &mut InodeEdit, code: Code, msg: &str, flag: u32) {
    if ask(ctx, ed, code, msg, "clear the flag") {
        let fl = ed.raw.flags() & !flag;
        ed.raw.i_flags.set(fl);
        ed.dirty = true;
    }
}

/// `i_extra_isize` must cover its own field and `i_checksum_hi`, fit in
/// the record and be a multiple of 4 (e2fsck's `check_inode_extra_space`):
/// out of range it becomes `s_want_extra_isize`, else it is rounded up.
fn extra_isize(ctx: &mut Ctx, ed: &mut InodeEdit) -> bool {
    let extra = ed.raw.i_extra_isize.get();
    let max = ctx.fs.geo.inode_size.saturating_sub(128);
    let ok = ed.rec.len() <= 128 || extra == 0 || (extra >= 4 && extra <= max && extra.is_multiple_of(4));
    if ok
        || !ask(
            ctx,
            ed,
            p::P1_EXTRA_ISIZE,
            format!("i_extra_isize {extra} is invalid"),
            "set it to the default",
        )
    {
        return ok;
    }
    let fixed = if extra < 4 || extra > max {
        ctx.fs.sb.s_want_extra_isize.get().min(max)
    } else {
        (extra + 3) & !3
    };
    ed.raw.i_extra_isize.set(fixed);
    ed.dirty = true;
    fixed == 0 || (fixed >= 4 && fixed <= max && fixed.is_multiple_of(4))
}

/// `i_dtime` on a live inode, and the root inode's type. False when the
/// inode was cleared.
fn dtimes(ctx: &mut Ctx, ed: &mut InodeEdit, is_dir: bool) -> bool {
    let dtime = ed.raw.i_dtime.get();
    if ed.ino == 2 {
        if !is_dir && ask(ctx, ed, p::P1_ROOT_NO_DIR, "root inode is not a directory", "clear it") {
            inode_edit::clear(ctx, ed);
            return false;
        }
        if dtime != 0 && ask(ctx, ed, p::P1_ROOT_DTIME, "root inode has dtime set", "clear dtime") {
            ed.raw.i_dtime.set(0);
            ed.dirty = true;
        }
    } else if dtime != 0
        && ask(
            ctx,
            ed,
            p::P1_SET_DTIME,
            "inode is in use but has dtime set",
            "clear dtime",
        )
    {
        ed.raw.i_dtime.set(0);
        ed.dirty = true;
    }
    true
}

/// Flags that need a feature or a file type.
fn feature_flags(ctx: &mut Ctx, ed: &mut InodeEdit, m: u16) {
    let f = ctx.fs.geo.features;
    let is_dir = m == mode::S_IFDIR;
    let fl = ed.raw.flags();
    if fl & flags::EXTENTS != 0 && !f.incompat.contains(IncompatFeatures::EXTENTS) {
        // e2fsck offers to turn the feature on when the root header is
        // sound (not done here), and otherwise clears the inode.
        let sound = crate::extent_feature::root_ok(&ed.raw.i_block);
        let msg = "EXTENTS_FL set without the extent feature";
        if sound && crate::extent_feature::enable(ctx, ed.ino) {
            // the feature is on now
        } else if sound && !ctx.repairing() {
            ctx.add(Finding::new(p::P1_EXTENTS_SET, msg, "clear the inode").ino(ed.ino));
        } else if ask(ctx, ed, p::P1_EXTENTS_SET, msg, "clear the inode") {
            return inode_edit::clear(ctx, ed);
        }
    }
    crate::extent_feature::missing_flag(ctx, ed);
    if fl & flags::INDEX != 0 {
        if !f.compat.contains(CompatFeatures::DIR_INDEX) {
            drop_flags(ctx, ed, p::P1_HTREE_SET, "INDEX_FL set without dir_index", flags::INDEX);
        } else if !is_dir {
            drop_flags(
                ctx,
                ed,
                p::P1_HTREE_NODIR,
                "INDEX_FL set on a non-directory",
                flags::INDEX,
            );
        }
    }
    if fl & CASEFOLD != 0 {
        if !is_dir {
            drop_flags(
                ctx,
                ed,
                p::P1_CASEFOLD_NONDIR,
                "CASEFOLD_FL set on a non-directory",
                CASEFOLD,
            );
        } else if !f.incompat.contains(IncompatFeatures::CASEFOLD) {
            drop_flags(
                ctx,
                ed,
                p::P1_CASEFOLD_FEATURE,
                "CASEFOLD_FL set without casefold",
                CASEFOLD,
            );
        }
    }
    if fl & ITREE_FL != 0 && !f.ro_compat.contains(RoCompatFeatures::ITREE) {
        let msg = "itree flag set without the itree feature";
        drop_flags(ctx, ed, p::own::P2_ITREE_FLAG_WITHOUT_FEATURE, msg, ITREE_FL);
    }
    if fl & IMAGIC_FL != 0 && !f.compat.contains(CompatFeatures::IMAGIC_INODES) {
        drop_flags(
            ctx,
            ed,
            p::P1_SET_IMAGIC,
            "imagic flag set without imagic_inodes",
            IMAGIC_FL,
        );
    }
}

/// Devices, fifos, sockets and symlinks (e2fsck's pass 1 type switch and
/// pass 2's `process_bad_inode`): a malformed one is cleared (pass 2 then
/// drops the entries naming it); a sound one loses flags and size it may
/// not have.
fn by_type(ctx: &mut Ctx, ed: &mut InodeEdit, m: u16) {
    let special = matches!(m, mode::S_IFCHR | mode::S_IFBLK | mode::S_IFIFO | mode::S_IFSOCK);
    if m == mode::S_IFLNK {
        if !crate::symlink::valid(&ctx.fs, ed.ino, &ed.raw, &ed.rec) {
            if ask(ctx, ed, p::P2_INVALID_SYMLINK, "symlink is invalid", "clear the inode") {
                inode_edit::clear(ctx, ed);
            }
            return;
        }
        immutable(ctx, ed, "symlink has immutable or append-only set");
        return;
    }
    if !special {
        return;
    }
    if !device_ok(&ed.raw) {
        let code = match m {
            mode::S_IFCHR => p::P2_BAD_CHAR_DEV,
            mode::S_IFBLK => p::P2_BAD_BLOCK_DEV,
            mode::S_IFIFO => p::P2_BAD_FIFO,
            _ => p::P2_BAD_SOCKET,
        };
        let msg = "special file has index/extent flags or stray block pointers";
        if ask(ctx, ed, code, msg, "clear the inode") {
            inode_edit::clear(ctx, ed);
        }
        return;
    }
    if ed.raw.flags() & (flags::EXTENTS | flags::INLINE_DATA) != 0 {
        let msg = "special file has extent or inline-data flags";
        drop_flags(
            ctx,
            ed,
            p::P1_SPECIAL_EXTENTS_IDATA,
            msg,
            flags::EXTENTS | flags::INLINE_DATA,
        );
    }
    immutable(ctx, ed, "special file has immutable or append-only set");
    if ed.raw.size() != 0
        && ask(
            ctx,
            ed,
            p::P1_SET_NONZSIZE,
            "special file has a nonzero size",
            "set size to 0",
        )
    {
        ed.raw.set_size(0);
        ed.dirty = true;
    }
}

fn immutable(ctx: &mut Ctx, ed: &mut InodeEdit, msg: &str) {
    if ed.raw.flags() & (flags::IMMUTABLE | flags::APPEND) != 0 {
        drop_flags(ctx, ed, p::P1_SET_IMMUTABLE, msg, flags::IMMUTABLE | flags::APPEND);
    }
}

/// Fields that must be zero (e2fsck's `process_bad_inode`, reported in
/// pass 2): the obsolete fragment address, and the high halves of
/// `i_file_acl` and `i_blocks` without 64bit and huge_file. Repaired by
/// zeroing them.
fn obsolete_fields(ctx: &mut Ctx, ed: &mut InodeEdit) {
    let f = ctx.fs.geo.features;
    let faddr = ed.raw.i_obso_faddr.get();
    if faddr != 0
        && ask(
            ctx,
            ed,
            p::P2_FADDR_ZERO,
            format!("i_faddr is {faddr}, should be zero"),
            "clear it",
        )
    {
        ed.raw.i_obso_faddr.set(0);
        ed.dirty = true;
    }
    if ed.raw.i_file_acl_high.get() != 0
        && !f.incompat.contains(IncompatFeatures::BIT64)
        && ask(
            ctx,
            ed,
            p::P2_I_FILE_ACL_HI_ZERO,
            "i_file_acl_hi is not zero",
            "clear it",
        )
    {
        ed.raw.i_file_acl_high.set(0);
        ed.dirty = true;
    }
    if ed.raw.i_blocks_high.get() != 0
        && !f.ro_compat.contains(RoCompatFeatures::HUGE_FILE)
        && ask(ctx, ed, p::P2_BLOCKS_HI_ZERO, "i_blocks_hi is not zero", "clear it")
    {
        ed.raw.i_blocks_high.set(0);
        ed.dirty = true;
    }
}

/// `EXT2_IMAGIC_FL`: AFS "imagic" inode.
const IMAGIC_FL: u32 = 0x2000;

/// ext4kit's itree directory flag (see `docs/itree.md`).
pub const ITREE_FL: u32 = 0x0080_0000;

/// A device, fifo or socket is bogus with the index or extents flag, or
/// with immutable/append set and anything past `i_block[3]` (e2fsck's
/// `e2fsck_pass1_check_device_inode`; the kernel leaves stray words there
/// otherwise).
fn device_ok(raw: &RawInode) -> bool {
    if raw.flags() & (flags::INDEX | flags::EXTENTS) != 0 {
        return false;
    }
    raw.flags() & (flags::IMMUTABLE | flags::APPEND) == 0 || raw.i_block[16..].iter().all(|&b| b == 0)
}

/// `i_size` and `i_blocks` against the mapping (e2fsck's end of `check_blocks`).
/// Repairs as e2fsck: `i_size` becomes the end of the last mapped block,
/// `i_blocks` what was counted (in file-system blocks for a HUGE_FILE_FL
/// inode on a huge_file file system, else in 512-byte sectors).
pub fn check_sizes(ctx: &mut Ctx, ed: &mut InodeEdit, t: &Tally, sectors: u64) {
    let raw = ed.raw;
    let ino = ed.ino;
    let geo = ctx.fs.geo.clone();
    let bs = u64::from(geo.block_size);
    let size = raw.size();
    let m = raw.i_mode.get() & mode::S_IFMT;
    let bad_size = if !t.walked || raw.has_flag(flags::VERITY) {
        false
    } else if m == mode::S_IFDIR {
        let nblock = size / bs;
        let want = t.last.map_or(0, |l| l + 1);
        !size.is_multiple_of(bs)
            || nblock > want
            || (nblock < want && want - nblock > u64::from(ctx.fs.sb.s_prealloc_dir_blocks))
    } else if m == mode::S_IFREG {
        let max = if raw.has_flag(flags::EXTENTS) {
            (1u64 << (32 + geo.block_size_log2)) - 1
        } else {
            let per = bs / 4;
            (12 + per + per * per + per * per * per).saturating_mul(bs)
        };
        t.last_init.is_some_and(|l| size < l * bs) || size > max
    } else {
        false
    };
    if bad_size {
        let f = Finding::new(
            p::P1_BAD_I_SIZE,
            format!("i_size is {size}, the blocks say otherwise"),
            "set i_size",
        )
        .ino(ino);
        if ctx.fix(f) {
            ed.raw.set_size(t.last.map_or(0, |l| l + 1) * bs);
            ed.dirty = true;
            crate::sb_fields::size_set(ctx, m == mode::S_IFDIR, ed.raw.size());
        }
    }
    if m == mode::S_IFREG && crate::sb_fields::needs_large_file(ed.raw.size()) {
        ctx.large_files = ctx.large_files.saturating_add(1);
    }
    if !t.walked && sectors == 0 && raw.i_blocks_lo.get() == 0 {
        return;
    }
    let huge = geo.features.ro_compat.contains(RoCompatFeatures::HUGE_FILE);
    let stored = raw.blocks_512(huge, geo.block_size);
    let want = sectors;
    if stored != want {
        let f = Finding::new(
            p::P1_BAD_I_BLOCKS,
            format!("i_blocks is {stored}, should be {want}"),
            "set i_blocks",
        )
        .ino(ino);
        if ctx.fix(f) {
            let units = if huge && raw.has_flag(flags::HUGE_FILE) {
                want / u64::from(geo.block_size / 512)
            } else {
                want
            };
            ed.raw.i_blocks_lo.set(units as u32);
            ed.raw.i_blocks_high.set((units >> 32) as u16);
            ed.dirty = true;
        }
    }
}
