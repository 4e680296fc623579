//! Orphan-file blocks (`COMPAT_ORPHAN_FILE`): each block of the inode named by
//! `s_orphan_file_inum` is an array of `__le32` inode numbers (0 = free slot)
//! followed by `struct ext4_orphan_block_tail` in its last 8 bytes:
//! `ob_magic` (0x0b10ca04) at `blocksize - 8` and `ob_checksum` at
//! `blocksize - 4`. Under `metadata_csum` the checksum is crc32c seeded with
//! the orphan file inode's seed, over the little-endian 64-bit *physical*
//! block number and then the slot array.
//!
//! The classic list needs no structure of its own: `s_last_orphan` in the
//! superblock names the first orphan and each orphan's `i_dtime` the next.
//!
//! See `Documentation/filesystems/ext4/orphan.rst`.

use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};

/// `ob_magic` of `struct ext4_orphan_block_tail`.
pub const ORPHAN_BLOCK_MAGIC: u32 = 0x0B10_CA04;
/// Bytes of `struct ext4_orphan_block_tail` at the end of each block.
pub const TAIL_SIZE: usize = 8;
const STRUCT: &str = "ext4_orphan_block";

/// Inode-number slots in one orphan-file block of `block_size` bytes
/// (`ext4_inodes_per_orphan_block`).
pub fn slots_per_block(block_size: usize) -> usize {
    block_size.saturating_sub(TAIL_SIZE) / 4
}

/// Checks that `buf` is a whole orphan-file block: long enough for a tail
/// and at least one slot, with `ob_magic` in place.
pub fn check_block(buf: &[u8]) -> Result<()> {
    if buf.len() < TAIL_SIZE + 4 || !buf.len().is_multiple_of(4) {
        return Err(FormatError::truncated(STRUCT, 1024, buf.len()));
    }
    let at = buf.len() - TAIL_SIZE;
    let magic = read_u32(buf, at);
    if magic != ORPHAN_BLOCK_MAGIC {
        return Err(FormatError::bad_magic(STRUCT, "ob_magic", at, u64::from(magic)));
    }
    Ok(())
}

/// The inode number in `slot` (0 when free, or when `slot` is out of range).
pub fn entry(buf: &[u8], slot: usize) -> u32 {
    if slot >= slots_per_block(buf.len()) {
        return 0;
    }
    read_u32(buf, slot * 4)
}

/// Stores `ino` in `slot` (0 frees it); ignored when `slot` is out of range.
pub fn set_entry(buf: &mut [u8], slot: usize, ino: u32) {
    if slot < slots_per_block(buf.len()) {
        buf[slot * 4..slot * 4 + 4].copy_from_slice(&ino.to_le_bytes());
    }
}

/// The used slots of a block as (slot, inode number), in slot order.
pub fn entries(buf: &[u8]) -> impl Iterator<Item = (usize, u32)> + '_ {
    (0..slots_per_block(buf.len()))
        .map(move |s| (s, read_u32(buf, s * 4)))
        .filter(|&(_, ino)| ino != 0)
}

/// The first free slot, if any.
pub fn free_slot(buf: &[u8]) -> Option<usize> {
    (0..slots_per_block(buf.len())).find(|&s| read_u32(buf, s * 4) == 0)
}

/// `ob_checksum` as computed for the block stored at `physical`; `seed` is
/// the orphan file inode's checksum seed (`ext4_orphan_file_block_trigger`).
pub fn compute_checksum(seed: u32, physical: u64, buf: &[u8]) -> u32 {
    let c = crc32c_raw(seed, &physical.to_le_bytes());
    crc32c_raw(c, &buf[..slots_per_block(buf.len()) * 4])
}

/// Checks `ob_checksum` (callers skip this without `metadata_csum`).
pub fn verify_checksum(seed: u32, physical: u64, buf: &[u8]) -> Result<()> {
    check_block(buf)?;
    let at = buf.len() - 4;
    let (stored, computed) = (read_u32(buf, at), compute_checksum(seed, physical, buf));
    if stored != computed {
        return Err(FormatError::checksum(STRUCT, "ob_checksum", at, stored, computed));
    }
    Ok(())
}

/// Recomputes `ob_checksum`.
pub fn set_checksum(seed: u32, physical: u64, buf: &mut [u8]) {
    if buf.len() < TAIL_SIZE + 4 {
        return;
    }
    let c = compute_checksum(seed, physical, buf);
    let at = buf.len() - 4;
    buf[at..].copy_from_slice(&c.to_le_bytes());
}

/// An empty block: every slot free, `ob_magic` set, `ob_checksum` zero
/// (set it with [`set_checksum`] once the block's location is known).
pub fn empty_block(block_size: usize) -> Vec<u8> {
    let mut buf = vec![0u8; block_size];
    if block_size >= TAIL_SIZE {
        buf[block_size - TAIL_SIZE..block_size - 4].copy_from_slice(&ORPHAN_BLOCK_MAGIC.to_le_bytes());
    }
    buf
}

fn read_u32(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_block_has_magic_and_no_entries() {
        let b = empty_block(4096);
        assert_eq!(check_block(&b), Ok(()));
        assert_eq!(slots_per_block(4096), 1022);
        assert_eq!(entries(&b).count(), 0);
        assert_eq!(free_slot(&b), Some(0));
        assert_eq!(&b[4088..4092], &[0x04, 0xca, 0x10, 0x0b]);
    }

    #[test]
    fn entries_round_trip() {
        let mut b = empty_block(1024);
        set_entry(&mut b, 0, 12);
        set_entry(&mut b, 253, 99);
        set_entry(&mut b, 254, 7); // past the last slot: ignored
        assert_eq!(entries(&b).collect::<Vec<_>>(), vec![(0, 12), (253, 99)]);
        assert_eq!(entry(&b, 253), 99);
        assert_eq!(entry(&b, 254), 0);
        assert_eq!(free_slot(&b), Some(1));
        assert_eq!(check_block(&b), Ok(()), "the tail is untouched");
        set_entry(&mut b, 0, 0);
        assert_eq!(free_slot(&b), Some(0));
    }

    #[test]
    fn checksum_covers_slots_and_location() {
        let mut b = empty_block(1024);
        set_entry(&mut b, 3, 42);
        set_checksum(0x1234_5678, 500, &mut b);
        assert_eq!(verify_checksum(0x1234_5678, 500, &b), Ok(()));
        // The same bytes at another block, or under another seed, mismatch.
        assert!(verify_checksum(0x1234_5678, 501, &b).unwrap_err().is_checksum());
        assert!(verify_checksum(1, 500, &b).unwrap_err().is_checksum());
        set_entry(&mut b, 3, 43);
        assert!(verify_checksum(0x1234_5678, 500, &b).unwrap_err().is_checksum());
        // The checksum is crc32c(seed, le64 block) continued over the slots.
        let want = crc32c_raw(crc32c_raw(0x1234_5678, &500u64.to_le_bytes()), &b[..1016]);
        assert_eq!(compute_checksum(0x1234_5678, 500, &b), want);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(check_block(&[]).is_err());
        assert!(check_block(&[0u8; 7]).is_err());
        assert!(verify_checksum(0, 0, &[0u8; 3]).is_err());
        let b = vec![0u8; 1024];
        let e = check_block(&b).unwrap_err();
        assert_eq!(e.field, "ob_magic");
        assert_eq!(e.offset, 1016);
        let mut tiny = [0u8; 5];
        set_checksum(0, 0, &mut tiny);
        set_entry(&mut tiny, 0, 1);
        assert_eq!(entries(&tiny).count(), 0);
    }
}
