//! Flags a reserved inode (below `s_first_ino`, `special_inodes.rst`) may
//! not carry, checked as e2fsck checks every inode before its type-specific
//! checks: CASEFOLD_FL belongs to directories (`PR_1_CASEFOLD_NONDIR`),
//! EA_INODE_FL to regular files (`PR_1_EA_INODE_NONREG`); none of the
//! reserved inodes checked here is a directory.

use ext4kit_format::inode::{flags, mode};

use crate::inode_edit::InodeEdit;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// The flags of reserved inode `ino` (mode `imode`, flags `fl`) to clear;
/// each one asked about.
pub fn flags_to_drop(ctx: &mut Ctx, ino: u32, imode: u16, fl: u32) -> u32 {
    let fmt = imode & mode::S_IFMT;
    let mut drop = 0;
    for (flag, wrong, code, msg) in [
        (
            flags::CASEFOLD,
            fmt != mode::S_IFDIR,
            p::P1_CASEFOLD_NONDIR,
            "CASEFOLD_FL set on a non-directory",
        ),
        (
            flags::EA_INODE,
            fmt != mode::S_IFREG,
            p::P1_EA_INODE_NONREG,
            "EA_INODE_FL set on a non-regular file",
        ),
    ] {
        if fl & flag != 0 && wrong && ctx.fix(Finding::new(code, msg, "clear the flag").ino(ino)) {
            drop |= flag;
        }
    }
    drop
}

/// Clears from `ed` (a reserved inode other than root) the flags it may not carry.
pub fn check(ctx: &mut Ctx, ed: &mut InodeEdit) {
    let drop = flags_to_drop(ctx, ed.ino, ed.raw.i_mode.get(), ed.raw.flags());
    if drop != 0 {
        ed.raw.i_flags.set(ed.raw.flags() & !drop);
        ed.dirty = true;
    }
}
