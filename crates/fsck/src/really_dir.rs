//! Pass 1: an inode whose mode says device, fifo or socket but whose
//! first block holds a directory's `.` and `..` records is a directory
//! with a damaged mode (e2fsck's `check_is_really_dir`, PR_1_TREAT_AS_DIRECTORY).
//! The evidence asked for, as e2fsck asks: the block map's pointers all
//! lie in the file system and in no block claimed so far (a device keeps
//! numbers there, not pointers); a character or block device with one
//! link and nothing past the fourth pointer stays a device; for an
//! extent-mapped inode, a depth-0 root whose first extent maps logical
//! block 0; then block 0 must start with `.` naming the inode and `..`.

use ext4kit_format::inode::{flags, mode};

use crate::inode_edit::InodeEdit;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// Checks `ed`; when it is a directory and the run repairs, its mode
/// becomes a directory's (permissions kept).
pub fn check(ctx: &mut Ctx, ed: &mut InodeEdit) {
    let m = ed.raw.i_mode.get() & mode::S_IFMT;
    let odd = matches!(m, mode::S_IFCHR | mode::S_IFBLK | mode::S_IFIFO | mode::S_IFSOCK);
    if !odd || ed.raw.i_block[..4] == [0; 4] || ed.raw.has_flag(flags::INLINE_DATA) {
        return;
    }
    let Some(blk) = first_block(ctx, ed, m) else { return };
    if !looks_like_dir(ctx, ed.ino, blk) {
        return;
    }
    let msg = "mode says a special file but block 0 holds a directory";
    if ctx.fix(Finding::new(p::P1_TREAT_AS_DIRECTORY, msg, "make it a directory").ino(ed.ino)) {
        let perm = ed.raw.i_mode.get() & 0o7777;
        ed.raw.i_mode.set(mode::S_IFDIR | perm);
        ed.dirty = true;
    }
}

/// Block 0's physical block, when the mapping could be a directory's.
fn first_block(ctx: &Ctx, ed: &InodeEdit, m: u16) -> Option<u64> {
    let w = |i: usize| {
        let b = &ed.raw.i_block[4 * i..4 * i + 4];
        u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let extents = ctx
        .fs
        .geo
        .features
        .incompat
        .contains(ext4kit_format::features::IncompatFeatures::EXTENTS);
    if extents && ed.raw.has_flag(flags::EXTENTS) {
        let r = &ed.raw.i_block;
        let le16 = |o: usize| u16::from_le_bytes([r[o], r[o + 1]]);
        // Magic, at least one entry, depth 0, first extent at logical 0.
        if le16(0) != 0xF30A || le16(2) == 0 || le16(6) != 0 || w(3) != 0 {
            return None;
        }
        return Some((u64::from(le16(18)) << 32) | w(5));
    }
    let mut not_device = false;
    for i in 0..15 {
        let b = w(i);
        if b == 0 {
            continue;
        }
        not_device |= i >= 4;
        if !ctx.fs.valid_block(b) || ctx.used.get(b) {
            return None;
        }
    }
    let device = matches!(m, mode::S_IFCHR | mode::S_IFBLK);
    if device && ed.raw.links() == 1 && !not_device {
        return None;
    }
    Some(w(0))
}

/// Block `blk` starts with `.` naming `ino`, then `..`.
fn looks_like_dir(ctx: &Ctx, ino: u32, blk: u64) -> bool {
    let Ok(b) = ctx.fs.read_block(blk) else { return false };
    let bs = b.len();
    let rec = |at: usize| -> Option<(u32, usize, &[u8])> {
        let h = b.get(at..at + 8)?;
        let inode = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let len = ext4kit_format::dir_entry::rec_len_from_disk(u16::from_le_bytes([h[4], h[5]]), bs);
        let name = b.get(at + 8..at + 8 + usize::from(h[6]))?;
        Some((inode, len, name))
    };
    let Some((i0, l0, n0)) = rec(0) else { return false };
    if n0 != b"." || i0 != ino || l0 < 12 || !l0.is_multiple_of(4) || l0 >= bs - 12 {
        return false;
    }
    rec(l0).is_some_and(|(_, l1, n1)| n1 == b".." && l1 >= 12 && l1.is_multiple_of(4))
}
