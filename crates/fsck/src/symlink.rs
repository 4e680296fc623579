//! Symbolic links (`inodes.rst`, "Symbolic Links"): a fast symlink keeps
//! its target in `i_block` (size under 60 bytes), a slow one in exactly one
//! data block, an inline one in the inode body. The target's length must
//! be the size, with no NUL inside. Same rule as e2fsck's
//! `e2fsck_pass1_check_symlink`, reported in pass 2 as an invalid symlink.

use ext4kit_format::inode::{RawInode, flags};

use crate::fs::RawFs;

fn word(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i * 4], b[i * 4 + 1], b[i * 4 + 2], b[i * 4 + 3]])
}

/// Where a slow symlink's single block is, if the mapping is the one
/// allowed shape (one extent of one block at logical 0, or `i_block[0]`
/// alone).
fn slow_block(fs: &RawFs, raw: &RawInode) -> Option<u64> {
    let ib = &raw.i_block;
    let blk = if raw.has_flag(flags::EXTENTS) {
        let (magic, entries, depth) = (
            u16::from_le_bytes([ib[0], ib[1]]),
            u16::from_le_bytes([ib[2], ib[3]]),
            u16::from_le_bytes([ib[6], ib[7]]),
        );
        if magic != 0xF30A || entries != 1 || depth != 0 {
            return None;
        }
        let (lblk, len) = (word(ib, 3), u16::from_le_bytes([ib[16], ib[17]]));
        if lblk != 0 || len != 1 {
            return None;
        }
        (u64::from(u16::from_le_bytes([ib[18], ib[19]])) << 32) | u64::from(word(ib, 5))
    } else {
        if (1..15).any(|i| word(ib, i) != 0) {
            return None;
        }
        u64::from(word(ib, 0))
    };
    fs.valid_block(blk).then_some(blk)
}

/// An inline inode's data size as e2fsck counts it
/// (`ext2fs_inline_data_size`): all of `i_block` plus the `system.data`
/// value; `None` without that xattr.
fn inline_size(raw: &RawInode, rec: &[u8]) -> Option<u64> {
    let region = ext4kit_format::xattr::ibody_region(rec, raw.i_extra_isize.get()).ok()?;
    let entries = ext4kit_format::xattr::parse_ibody(region).ok()?;
    let data = ext4kit_format::inline::system_data(&entries)?;
    Some(60 + data.len() as u64)
}

/// True when the symlink inode `raw` (record `rec`) is well formed.
pub fn valid(fs: &RawFs, _ino: u32, raw: &RawInode, rec: &[u8]) -> bool {
    let size = raw.size();
    if raw.i_size_high.get() != 0 || size == 0 || raw.has_flag(flags::INDEX) {
        return false;
    }
    if raw.has_flag(flags::INLINE_DATA) {
        return !raw.has_flag(flags::EXTENTS) && inline_size(raw, rec) == Some(size);
    }
    let fast = size < 60;
    let target: Vec<u8> = if fast {
        if raw.has_flag(flags::EXTENTS) {
            return false;
        }
        raw.i_block.to_vec()
    } else {
        if size >= u64::from(fs.geo.block_size) {
            return false;
        }
        let Some(b) = slow_block(fs, raw) else { return false };
        let Ok(buf) = fs.read_block(b) else { return false };
        buf
    };
    let len = if raw.has_flag(flags::ENCRYPT) {
        usize::from(u16::from_le_bytes([target[0], target[1]])) + 2
    } else {
        target.iter().position(|&c| c == 0).unwrap_or(target.len())
    };
    len < target.len() && len as u64 == size
}
