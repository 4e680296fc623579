//! The `metadata_csum` checksum of htree index blocks (`ext4_dx_csum` in the
//! kernel, `ext2fs_dx_csum` in e2fsprogs), which lives in the block's
//! `dx_tail`.
//!
//! See `Documentation/filesystems/ext4/checksums.rst` and the "Hash Tree
//! Directories" section of `directory.rst`.

use zerocopy::little_endian::U32;

use super::{
    COUNTLIMIT, DX_ENTRY_SIZE, DX_NODE_COUNT_OFFSET, DX_ROOT_COUNT_OFFSET, DX_ROOT_INFO_LENGTH, DX_TAIL_SIZE, INFO,
    ROOT, TAIL, block_of, block_of_mut, rec_len_from_disk, write_at,
};
use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};
use crate::util::{le16, le32, slice};

/// The per-inode checksum seed (`ei->i_csum_seed`): crc32c of the inode
/// number, then of the generation, both little-endian, from the file
/// system's seed.
pub fn inode_csum_seed(fs_seed: u32, ino: u32, generation: u32) -> u32 {
    let seed = crc32c_raw(fs_seed, &ino.to_le_bytes());
    crc32c_raw(seed, &generation.to_le_bytes())
}

/// The checksum of the index block at the start of `buf` (`ext4_dx_csum`):
/// crc32c from `inode_seed` ([`inode_csum_seed`]) over the bytes from 0 to the
/// end of the used entries (count offset + `count` × 8), then over the tail's
/// `dt_reserved`, then over four zero bytes standing for `dt_checksum`.
///
/// Root or node is told apart by the first `rec_len`, as the kernel's
/// `get_dx_countlimit` does.
///
/// # Errors
/// - `Invalid` `<structure>.block_size` / `Truncated` as for parsing.
/// - `Invalid` `dx_root.rec_len` (4 or 16), `dx_root_info.reserved_zero` (24)
///   or `info_length` (29) when the block is neither a root nor a node.
/// - `Invalid` `dx_countlimit.limit` if no tail fits after `limit` slots,
///   `dx_countlimit.count` if `count` exceeds `limit`.
pub fn dx_checksum(buf: &[u8], block_size: u32, inode_seed: u32) -> Result<u32> {
    let block = block_of(buf, block_size, ROOT)?;
    let (used, tail_at) = csum_layout(block, block_size)?;
    let covered = slice(block, 0, used, ROOT)?;
    let reserved = slice(block, tail_at, 4, TAIL)?;
    let crc = crc32c_raw(inode_seed, covered);
    let crc = crc32c_raw(crc, reserved);
    Ok(crc32c_raw(crc, &[0u8; 4]))
}

/// Checks the `dt_checksum` of the index block at the start of `buf`.
///
/// # Errors
/// - `Checksum` `dx_tail.dt_checksum` at its byte offset on mismatch.
/// - Anything [`dx_checksum`] returns.
pub fn verify_dx_checksum(buf: &[u8], block_size: u32, inode_seed: u32) -> Result<()> {
    let computed = dx_checksum(buf, block_size, inode_seed)?;
    let block = block_of(buf, block_size, ROOT)?;
    let (_, tail_at) = csum_layout(block, block_size)?;
    let at = tail_at.saturating_add(4);
    let stored = le32(block, at, TAIL)?;
    if stored != computed {
        return Err(FormatError::checksum(TAIL, "dt_checksum", at, stored, computed));
    }
    Ok(())
}

/// Recomputes and stores the `dt_checksum` of the index block at the start
/// of `buf`.
///
/// # Errors
/// Anything [`dx_checksum`] returns.
pub fn set_dx_checksum(buf: &mut [u8], block_size: u32, inode_seed: u32) -> Result<()> {
    let computed = dx_checksum(buf, block_size, inode_seed)?;
    let block = block_of_mut(buf, block_size, ROOT)?;
    let (_, tail_at) = csum_layout(block, block_size)?;
    write_at(block, tail_at.saturating_add(4), &U32::new(computed), TAIL)
}

/// End of the used entries and start of the tail, from the block's own
/// count/limit (`ext4_dx_csum_verify`).
fn csum_layout(block: &[u8], block_size: u32) -> Result<(usize, usize)> {
    let off = count_offset(block, block_size)?;
    let limit = le16(block, off, COUNTLIMIT)?;
    let count = le16(block, off.saturating_add(2), COUNTLIMIT)?;
    let tail_at = off.saturating_add(usize::from(limit).saturating_mul(DX_ENTRY_SIZE));
    if tail_at.saturating_add(DX_TAIL_SIZE) > block.len() {
        return Err(FormatError::invalid(COUNTLIMIT, "limit", off, limit.into()));
    }
    if count > limit {
        let at = off.saturating_add(2);
        return Err(FormatError::invalid(COUNTLIMIT, "count", at, count.into()));
    }
    let used = off.saturating_add(usize::from(count).saturating_mul(DX_ENTRY_SIZE));
    Ok((used, tail_at))
}

/// Offset of `dx_countlimit` (`get_dx_countlimit`): 8 when the first fake
/// dirent spans the block (a node), 32 when it is a 12-byte "." followed by
/// a ".." spanning the rest and a plausible `dx_root_info` (a root).
fn count_offset(block: &[u8], block_size: u32) -> Result<usize> {
    let first = rec_len_from_disk(le16(block, 4, ROOT)?, block_size);
    if first == block_size {
        return Ok(DX_NODE_COUNT_OFFSET);
    }
    if first != 12 {
        return Err(FormatError::invalid(ROOT, "rec_len", 4, first.into()));
    }
    let second = rec_len_from_disk(le16(block, 16, ROOT)?, block_size);
    if second != block_size.saturating_sub(12) {
        return Err(FormatError::invalid(ROOT, "rec_len", 16, second.into()));
    }
    let reserved = le32(block, 24, INFO)?;
    if reserved != 0 {
        return Err(FormatError::invalid(INFO, "reserved_zero", 24, reserved.into()));
    }
    let info_length = slice(block, 29, 1, INFO)?.first().copied().unwrap_or(0);
    if info_length != DX_ROOT_INFO_LENGTH {
        return Err(FormatError::invalid(INFO, "info_length", 29, info_length.into()));
    }
    Ok(DX_ROOT_COUNT_OFFSET)
}
