//! Extent-mapped inodes against the extents feature, as e2fsck's pass 1
//! weighs them: an inode whose `i_block` holds a sound extent root
//! (`ext2fs_extent_header_verify`) on a file system without extents turns
//! the feature on (`PR_1_EXTENT_FEATURE`) rather than losing the inode; on
//! an extents file system a regular file or directory whose `i_block` is a
//! sound extent root but lacks EXTENTS_FL gets the flag
//! (`PR_1_UNSET_EXTENT_FL`).

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::{flags, mode};

use crate::inode_edit::InodeEdit;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// `struct ext4_extent_header` magic.
const MAGIC: u16 = 0xF30A;
/// Bytes of the header and of one entry (extent or index).
const HEADER: usize = 12;

/// True when the 60-byte `i_block` starts with a sound extent root: the
/// magic, no more entries than `eh_max`, and `eh_max` what the space holds
/// (less up to two entries, which e2fsck allows).
pub fn root_ok(i_block: &[u8]) -> bool {
    if i_block.len() < HEADER {
        return false;
    }
    let le16 = |o: usize| u16::from_le_bytes([i_block[o], i_block[o + 1]]);
    let (magic, entries, max) = (le16(0), le16(2), le16(4));
    let fit = ((i_block.len() - HEADER) / HEADER) as u16;
    magic == MAGIC && entries <= max && max <= fit && max >= fit.saturating_sub(2)
}

/// Inode `ino` is extent-mapped with a sound root on a file system
/// without extents: asks to turn the feature on; true when it is on now.
pub fn enable(ctx: &mut Ctx, ino: u32) -> bool {
    let msg = "inode is in extent format, but the superblock lacks the extents feature";
    if !ctx.fix(Finding::new(p::P1_EXTENT_FEATURE, msg, "set extents").ino(ino)) {
        return false;
    }
    let v = ctx.fs.sb.s_feature_incompat.get() | IncompatFeatures::EXTENTS.0;
    ctx.fs.sb.s_feature_incompat.set(v);
    ctx.fs.geo.features = ctx.fs.sb.features();
    ctx.fs.dirty_sb = true;
    ctx.fs.dirty_backups = true;
    true
}

/// A live regular file or directory on an extents file system whose
/// `i_block` is a sound extent root without EXTENTS_FL gets the flag.
pub fn missing_flag(ctx: &mut Ctx, ed: &mut InodeEdit) {
    let m = ed.raw.i_mode.get() & mode::S_IFMT;
    let f = ctx.fs.geo.features;
    if !f.incompat.contains(IncompatFeatures::EXTENTS)
        || ed.raw.flags() & (flags::EXTENTS | flags::INLINE_DATA) != 0
        || (m != mode::S_IFREG && m != mode::S_IFDIR)
        || ed.raw.links() == 0
        || !root_ok(&ed.raw.i_block)
    {
        return;
    }
    let msg = "EXTENTS_FL is missing, but the inode is in extent format";
    if ctx.fix(Finding::new(p::P1_UNSET_EXTENT_FL, msg, "set the flag").ino(ed.ino)) {
        ed.raw.i_flags.set(ed.raw.flags() | flags::EXTENTS);
        ed.dirty = true;
    }
}
