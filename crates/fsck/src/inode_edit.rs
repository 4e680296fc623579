//! Changing one inode record during a repair: read it, let the repair
//! change the decoded fields, write it back with its checksum
//! (`inodes.rst`, "Inode Table"). Fields past `i_extra_isize` and the
//! in-inode xattrs are left as they were.

use std::io;

use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::inode::{RawInode, flags};

use crate::fs::RawFs;
use crate::pass1::decode;

/// Reads inode `ino`, applies `f` to it, and writes it back.
pub fn update(fs: &RawFs, ino: u32, f: impl FnOnce(&mut RawInode)) -> io::Result<()> {
    let mut rec = fs.inode_record(ino)?;
    let mut raw = decode(&rec);
    f(&mut raw);
    raw.encode_into(&mut rec);
    fs.write_inode_record(ino, &mut rec)
}

/// The inode's `i_blocks` as a count of the unit it is stored in (512-byte
/// sectors, or file-system blocks with `HUGE_FILE_FL`), 48 bits with
/// huge_file.
fn iblocks_raw(fs: &RawFs, raw: &RawInode) -> u64 {
    let lo = u64::from(raw.i_blocks_lo.get());
    if fs.geo.features.ro_compat.contains(RoCompatFeatures::HUGE_FILE) {
        lo | (u64::from(raw.i_blocks_high.get()) << 32)
    } else {
        lo
    }
}

/// Adds (or with a negative `blocks`, takes away) whole file-system blocks
/// to `i_blocks`, in the unit the inode stores it in.
pub fn add_blocks(fs: &RawFs, raw: &mut RawInode, blocks: i64) {
    let unit = if raw.has_flag(flags::HUGE_FILE) {
        1
    } else {
        i64::from(fs.geo.block_size / 512)
    };
    let now = iblocks_raw(fs, raw) as i64;
    let n = now.saturating_add(blocks.saturating_mul(unit)).max(0) as u64;
    raw.i_blocks_lo.set(n as u32);
    if fs.geo.features.ro_compat.contains(RoCompatFeatures::HUGE_FILE) {
        raw.i_blocks_high.set((n >> 32) as u16);
    }
}

/// Seconds since the epoch, for the times of inodes a repair makes or
/// deletes (e2fsck's `ctx->now`).
pub fn now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}
