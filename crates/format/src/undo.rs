//! The undo file of e2fsprogs (`E2UNDO02`): the old contents of every block
//! a program overwrote, so that `e2undo` (or `ext4kit undo`) can put them
//! back.
//!
//! The file is cut into blocks of `block_size` bytes (1 KiB to 1 MiB):
//! block 0 holds the 512-byte [`UndoHeader`]; block `super_offset` (1) a
//! copy of the file system's superblock as it was when the file was last
//! updated, with `s_magic` inverted so the copy is never mistaken for a
//! superblock; from `key_offset` (2) on, a key block followed by the data
//! blocks its keys describe, then the next key block, and so on. A key
//! ([`UndoKey`]) names a run of file-system blocks (in `fs_block_size`
//! units), its length in bytes and the crc32c of its old bytes; its data
//! takes `ceil(size / block_size)` undo blocks. Every checksum is the
//! kernel's raw crc32c seeded with `~0` (e2fsprogs' `ext2fs_crc32c_le`).
//!
//! See e2fsprogs' `lib/ext2fs/undo_io.c` (writer) and `misc/e2undo.c`
//! (replay), which define the format.

use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};

/// `undo_header.magic`.
pub const E2UNDO_MAGIC: &[u8; 8] = b"E2UNDO02";
/// `undo_key_block.magic`.
pub const KEYBLOCK_MAGIC: u32 = 0xCADE_CADE;
/// `undo_header.state`: the writer closed the file; without it the file
/// stops where the writer was interrupted.
pub const E2UNDO_STATE_FINISHED: u32 = 0x1;
/// `f_compat`: `fs_offset` holds where the file system starts on the device.
pub const E2UNDO_FEATURE_COMPAT_FS_OFFSET: u32 = 0x1;
/// Smallest undo block size.
pub const E2UNDO_MIN_BLOCK_SIZE: u32 = 1024;
/// Largest undo block size.
pub const E2UNDO_MAX_BLOCK_SIZE: u32 = 1 << 20;
/// The most undo blocks one key may cover.
pub const E2UNDO_MAX_EXTENT_BLOCKS: u32 = 512;
/// Bytes of `struct undo_header`.
pub const HEADER_SIZE: usize = 512;
/// Bytes of `struct undo_key`.
pub const KEY_SIZE: usize = 16;
/// Bytes of the key block header (`magic`, `crc`, `reserved`).
const KEYBLOCK_HEADER: usize = 16;
/// Bytes of the superblock copy.
pub const SUPERBLOCK_SIZE: usize = 1024;
/// Offset of `s_magic` in the superblock.
const S_MAGIC: usize = 0x38;
/// Offset of `header_crc`: the last field, over everything before it.
const HEADER_CRC: usize = HEADER_SIZE - 4;

/// `struct undo_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UndoHeader {
    /// Keys in the file.
    pub num_keys: u64,
    /// Undo block of the superblock copy.
    pub super_offset: u64,
    /// Undo block of the first key block.
    pub key_offset: u64,
    /// Size of an undo block.
    pub block_size: u32,
    /// The unit of [`UndoKey::fs_block`].
    pub fs_block_size: u32,
    /// crc32c of the superblock copy (with its magic restored).
    pub sb_crc: u32,
    /// [`E2UNDO_STATE_FINISHED`] or 0.
    pub state: u32,
    /// Compatible features ([`E2UNDO_FEATURE_COMPAT_FS_OFFSET`]).
    pub f_compat: u32,
    /// Incompatible features: none are defined, so any is refused.
    pub f_incompat: u32,
    /// Read-only compatible features: none are defined either.
    pub f_rocompat: u32,
    /// Byte offset of the file system on the device.
    pub fs_offset: u64,
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl UndoHeader {
    /// The header's 512 bytes, `header_crc` filled in.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[..8].copy_from_slice(E2UNDO_MAGIC);
        b[8..16].copy_from_slice(&self.num_keys.to_le_bytes());
        b[16..24].copy_from_slice(&self.super_offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.key_offset.to_le_bytes());
        let words = [
            self.block_size,
            self.fs_block_size,
            self.sb_crc,
            self.state,
            self.f_compat,
            self.f_incompat,
            self.f_rocompat,
        ];
        for (i, w) in words.iter().enumerate() {
            b[32 + 4 * i..36 + 4 * i].copy_from_slice(&w.to_le_bytes());
        }
        b[64..72].copy_from_slice(&self.fs_offset.to_le_bytes());
        let crc = crc32c_raw(!0, &b[..HEADER_CRC]);
        b[HEADER_CRC..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads a header, checking its magic; the checksum result comes apart
    /// so that a forced replay can go on past a bad one.
    ///
    /// # Errors
    /// Too short, or not an undo file (bad magic).
    pub fn decode(b: &[u8]) -> Result<(Self, Result<()>)> {
        if b.len() < HEADER_SIZE {
            return Err(FormatError::truncated("undo_header", HEADER_SIZE, b.len()));
        }
        if &b[..8] != E2UNDO_MAGIC {
            return Err(FormatError::bad_magic("undo_header", "magic", 0, le64(b, 0)));
        }
        let h = Self {
            num_keys: le64(b, 8),
            super_offset: le64(b, 16),
            key_offset: le64(b, 24),
            block_size: le32(b, 32),
            fs_block_size: le32(b, 36),
            sb_crc: le32(b, 40),
            state: le32(b, 44),
            f_compat: le32(b, 48),
            f_incompat: le32(b, 52),
            f_rocompat: le32(b, 56),
            fs_offset: le64(b, 64),
        };
        let stored = le32(b, HEADER_CRC);
        let computed = crc32c_raw(!0, &b[..HEADER_CRC]);
        let crc = if stored == computed {
            Ok(())
        } else {
            Err(FormatError::checksum(
                "undo_header",
                "header_crc",
                HEADER_CRC,
                stored,
                computed,
            ))
        };
        Ok((h, crc))
    }

    /// The limits e2undo enforces before it replays anything: block sizes
    /// in range and no unknown incompatible feature.
    ///
    /// # Errors
    /// The offending field.
    pub fn validate(&self) -> Result<()> {
        if !(E2UNDO_MIN_BLOCK_SIZE..=E2UNDO_MAX_BLOCK_SIZE).contains(&self.block_size) {
            return Err(FormatError::invalid(
                "undo_header",
                "block_size",
                32,
                self.block_size.into(),
            ));
        }
        if self.fs_block_size == 0 {
            return Err(FormatError::invalid("undo_header", "fs_block_size", 36, 0));
        }
        if self.f_incompat != 0 {
            return Err(FormatError::invalid(
                "undo_header",
                "f_incompat",
                52,
                self.f_incompat.into(),
            ));
        }
        if self.f_rocompat != 0 {
            return Err(FormatError::invalid(
                "undo_header",
                "f_rocompat",
                56,
                self.f_rocompat.into(),
            ));
        }
        Ok(())
    }

    /// Keys one key block holds (`KEYS_PER_BLOCK`).
    pub fn keys_per_block(&self) -> usize {
        keys_per_block(self.block_size)
    }

    /// True when the writer closed the file.
    pub fn finished(&self) -> bool {
        self.state & E2UNDO_STATE_FINISHED != 0
    }
}

/// Keys in a key block of `block_size` bytes: the block less its header.
pub fn keys_per_block(block_size: u32) -> usize {
    (block_size as usize / KEY_SIZE).saturating_sub(1)
}

/// `struct undo_key`: `size` old bytes of the file system from block
/// `fs_block` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UndoKey {
    /// First block, in `fs_block_size` units.
    pub fs_block: u64,
    /// crc32c of the old bytes.
    pub crc: u32,
    /// Length of the old bytes.
    pub size: u32,
}

/// A key block of `block_size` bytes holding `keys` (at most
/// [`keys_per_block`]), its checksum filled in.
pub fn encode_key_block(keys: &[UndoKey], block_size: u32) -> Vec<u8> {
    let mut b = vec![0u8; block_size as usize];
    b[..4].copy_from_slice(&KEYBLOCK_MAGIC.to_le_bytes());
    for (k, slot) in keys.iter().zip(b[KEYBLOCK_HEADER..].chunks_exact_mut(KEY_SIZE)) {
        slot[..8].copy_from_slice(&k.fs_block.to_le_bytes());
        slot[8..12].copy_from_slice(&k.crc.to_le_bytes());
        slot[12..].copy_from_slice(&k.size.to_le_bytes());
    }
    let crc = crc32c_raw(!0, &b);
    b[4..8].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The first `count` keys of a key block, after checking its magic and
/// checksum (computed with the `crc` field zeroed).
///
/// # Errors
/// Bad magic, checksum mismatch, or `count` more than the block holds.
pub fn decode_key_block(b: &[u8], count: usize) -> Result<Vec<UndoKey>> {
    let magic = if b.len() >= KEYBLOCK_HEADER { le32(b, 0) } else { 0 };
    if magic != KEYBLOCK_MAGIC {
        return Err(FormatError::bad_magic("undo_key_block", "magic", 0, magic.into()));
    }
    let mut zeroed = b.to_vec();
    zeroed[4..8].fill(0);
    let (stored, computed) = (le32(b, 4), crc32c_raw(!0, &zeroed));
    if stored != computed {
        return Err(FormatError::checksum("undo_key_block", "crc", 4, stored, computed));
    }
    let slots = b[KEYBLOCK_HEADER..].chunks_exact(KEY_SIZE);
    if count > slots.len() {
        return Err(FormatError::invalid("undo_header", "num_keys", 8, count as u64));
    }
    Ok(slots
        .take(count)
        .map(|s| UndoKey {
            fs_block: le64(s, 0),
            crc: le32(s, 8),
            size: le32(s, 12),
        })
        .collect())
}

/// The superblock as the undo file stores it (`s_magic` inverted), and
/// the `sb_crc` of the original.
pub fn superblock_copy(sb: &[u8; SUPERBLOCK_SIZE]) -> ([u8; SUPERBLOCK_SIZE], u32) {
    let mut copy = *sb;
    invert_magic(&mut copy);
    (copy, crc32c_raw(!0, sb))
}

/// The superblock a stored copy stands for (`s_magic` restored).
pub fn superblock_from_copy(copy: &[u8; SUPERBLOCK_SIZE]) -> [u8; SUPERBLOCK_SIZE] {
    let mut sb = *copy;
    invert_magic(&mut sb);
    sb
}

fn invert_magic(sb: &mut [u8; SUPERBLOCK_SIZE]) {
    sb[S_MAGIC] = !sb[S_MAGIC];
    sb[S_MAGIC + 1] = !sb[S_MAGIC + 1];
}

/// crc32c of a block's old bytes, as a key records it.
pub fn data_crc(data: &[u8]) -> u32 {
    crc32c_raw(!0, data)
}

/// A key's crc after `more` bytes are appended to its run (e2fsprogs
/// extends a key over the next contiguous block instead of adding one).
pub fn extend_crc(crc: u32, more: &[u8]) -> u32 {
    crc32c_raw(crc, more)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_detects_damage() {
        let h = UndoHeader {
            num_keys: 7,
            super_offset: 1,
            key_offset: 2,
            block_size: 4096,
            fs_block_size: 4096,
            sb_crc: 0x1234,
            state: E2UNDO_STATE_FINISHED,
            ..UndoHeader::default()
        };
        let mut b = h.encode();
        let (back, crc) = UndoHeader::decode(&b).unwrap();
        assert_eq!((back, crc), (h, Ok(())));
        b[9] ^= 1;
        assert!(UndoHeader::decode(&b).unwrap().1.unwrap_err().is_checksum());
        b[0] = b'X';
        assert!(UndoHeader::decode(&b).is_err());
        assert!(UndoHeader::decode(&b[..100]).is_err());
    }

    #[test]
    fn key_block_round_trips_and_checks() {
        let keys = [
            UndoKey {
                fs_block: 5,
                crc: 9,
                size: 4096,
            },
            UndoKey {
                fs_block: 90,
                crc: 1,
                size: 8192,
            },
        ];
        let mut b = encode_key_block(&keys, 1024);
        assert_eq!(keys_per_block(1024), 63);
        assert_eq!(decode_key_block(&b, 2).unwrap(), keys);
        assert!(decode_key_block(&b, 64).is_err());
        b[20] ^= 1;
        assert!(decode_key_block(&b, 2).unwrap_err().is_checksum());
        assert!(decode_key_block(&b[..8], 0).is_err());
    }

    #[test]
    fn extending_a_crc_equals_one_crc_over_both() {
        let (a, b) = (b"old bytes ".as_slice(), b"and more".as_slice());
        assert_eq!(extend_crc(data_crc(a), b), data_crc(&[a, b].concat()));
    }

    #[test]
    fn superblock_copy_inverts_the_magic_only() {
        let mut sb = [0u8; SUPERBLOCK_SIZE];
        sb[S_MAGIC..S_MAGIC + 2].copy_from_slice(&0xEF53u16.to_le_bytes());
        let (copy, crc) = superblock_copy(&sb);
        assert_eq!(&copy[S_MAGIC..S_MAGIC + 2], &(!0xEF53u16).to_le_bytes());
        assert_eq!(superblock_from_copy(&copy), sb);
        assert_eq!(crc, data_crc(&sb));
    }
}
