//! Linear directory blocks: `struct ext4_dir_entry_2` records chained by
//! `rec_len`, and the 12-byte `struct ext4_dir_entry_tail` that carries the
//! block checksum with `metadata_csum`.
//!
//! See `Documentation/filesystems/ext4/directory.rst` ("Linear Directories").

use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};
use crate::util::{le16, le32};

const STRUCT: &str = "ext4_dir_entry_2";
const TAIL: &str = "ext4_dir_entry_tail";
/// Size of `struct ext4_dir_entry_tail`.
pub const TAIL_SIZE: usize = 12;
/// `det_reserved_ft` marking the checksum tail.
pub const TAIL_FT: u8 = 0xDE;
/// Longest name.
pub const NAME_MAX: usize = 255;

/// Minimal record length holding a name of `name_len` bytes (`EXT4_DIR_REC_LEN`).
pub fn rec_len_for(name_len: usize) -> usize {
    (name_len + 8 + 3) & !3
}

/// Size of `struct ext4_dir_entry_hash`: the major and minor hash a
/// directory both casefolded and encrypted stores after each name.
pub const HASH_LEN: usize = 8;

/// Minimal record length for a name of `name_len` bytes in a directory
/// that stores hashes in its entries (`ext4_dir_rec_len` with
/// `ext4_hash_in_dirent`): the hash sits at the first 4-byte boundary
/// past the name.
pub fn rec_len_hashed(name_len: usize, hashed: bool) -> usize {
    if hashed {
        rec_len_for(name_len) + HASH_LEN
    } else {
        rec_len_for(name_len)
    }
}

/// The `(hash, minor_hash)` stored after the name of `e` in `buf` (the
/// block `e` was read from), `None` when its record is too short to hold
/// them (`EXT4_DIRENT_HASHES`).
pub fn stored_hash(buf: &[u8], e: &DirEntry<'_>) -> Option<(u32, u32)> {
    let at = e.offset + rec_len_for(e.name.len());
    if rec_len_for(e.name.len()) + HASH_LEN > e.rec_len {
        return None;
    }
    Some((le32(buf, at, STRUCT).ok()?, le32(buf, at + 4, STRUCT).ok()?))
}

/// Writes `hash` after the name of the record at `offset` whose name is
/// `name_len` bytes (the caller sized the record with [`rec_len_hashed`]).
pub fn encode_hash(buf: &mut [u8], offset: usize, name_len: usize, hash: (u32, u32)) {
    let at = offset + rec_len_for(name_len);
    buf[at..at + 4].copy_from_slice(&hash.0.to_le_bytes());
    buf[at + 4..at + 8].copy_from_slice(&hash.1.to_le_bytes());
}

/// Decodes an on-disk `rec_len` for a block of `block_size` bytes; 64 KiB
/// blocks store 65536 as 0 or 65535 and keep bits 16–17 in the low bits.
pub fn rec_len_from_disk(raw: u16, block_size: usize) -> usize {
    let len = usize::from(raw);
    if block_size < 65536 {
        return len;
    }
    if raw == u16::MAX || raw == 0 {
        return block_size;
    }
    (len & 65532) | ((len & 3) << 16)
}

/// Encodes `rec_len` for the disk (inverse of [`rec_len_from_disk`]).
pub fn rec_len_to_disk(len: usize, block_size: usize) -> u16 {
    if block_size < 65536 {
        return len as u16;
    }
    if len == 65536 {
        return if block_size == 65536 { u16::MAX } else { 0 };
    }
    ((len & 65532) | ((len >> 16) & 3)) as u16
}

/// One directory record as found on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// Inode number; 0 for an unused record.
    pub inode: u32,
    /// Decoded record length.
    pub rec_len: usize,
    /// File type code (`EXT4_FT_*`), 0 without the `filetype` feature.
    pub file_type: u8,
    /// The name bytes.
    pub name: &'a [u8],
    /// Byte offset of the record in its block.
    pub offset: usize,
}

/// Iterates the records of one directory block (or of an inline-data region).
#[derive(Debug, Clone)]
pub struct DirEntryIter<'a> {
    buf: &'a [u8],
    pos: usize,
    block_size: usize,
    filetype: bool,
    failed: bool,
}

impl<'a> DirEntryIter<'a> {
    /// Iterates `buf`. `block_size` decides the `rec_len` encoding; pass the
    /// block's used length as `buf` (i.e. without the checksum tail) so the
    /// tail is not returned. `filetype` says whether the high byte of
    /// `name_len` is a file type (feature `filetype`).
    pub fn new(buf: &'a [u8], block_size: usize, filetype: bool) -> Self {
        Self {
            buf,
            pos: 0,
            block_size,
            filetype,
            failed: false,
        }
    }

    fn parse_at(&self, pos: usize) -> Result<DirEntry<'a>> {
        let inode = le32(self.buf, pos, STRUCT)?;
        let raw_rec = le16(self.buf, pos + 4, STRUCT)?;
        let rec_len = rec_len_from_disk(raw_rec, self.block_size);
        let name_len = usize::from(
            *self
                .buf
                .get(pos + 6)
                .ok_or_else(|| FormatError::truncated(STRUCT, pos + 8, self.buf.len()))?,
        );
        let ft = self.buf.get(pos + 7).copied().unwrap_or(0);
        let bad = |field, v: u64, o| Err(FormatError::invalid(STRUCT, field, pos + o, v));
        if rec_len < 12 || !rec_len.is_multiple_of(4) {
            return bad("rec_len", rec_len as u64, 4);
        }
        if pos + rec_len > self.buf.len() {
            return bad("rec_len", rec_len as u64, 4);
        }
        let (name_len, file_type) = if self.filetype {
            (name_len, ft)
        } else {
            (name_len | usize::from(ft) << 8, 0)
        };
        if rec_len_for(name_len) > rec_len {
            return bad("name_len", name_len as u64, 6);
        }
        let name = &self.buf[pos + 8..pos + 8 + name_len];
        Ok(DirEntry {
            inode,
            rec_len,
            file_type,
            name,
            offset: pos,
        })
    }
}

impl<'a> Iterator for DirEntryIter<'a> {
    type Item = Result<DirEntry<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        match self.parse_at(self.pos) {
            Ok(e) => {
                self.pos += e.rec_len;
                Some(Ok(e))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// True when the last 12 bytes of `block` are a checksum tail.
pub fn has_tail(block: &[u8]) -> bool {
    let Some(off) = block.len().checked_sub(TAIL_SIZE) else {
        return false;
    };
    le32(block, off, TAIL) == Ok(0)
        && le16(block, off + 4, TAIL) == Ok(12)
        && block.get(off + 6) == Some(&0)
        && block.get(off + 7) == Some(&TAIL_FT)
}

/// The checksum of a linear directory block: crc32c(inode seed) over the
/// block up to the tail (`ext4_dirblock_csum`).
pub fn block_checksum(block: &[u8], inode_seed: u32) -> u32 {
    crc32c_raw(inode_seed, &block[..block.len().saturating_sub(TAIL_SIZE)])
}

/// Verifies the tail checksum of a linear directory block.
///
/// # Errors
/// A missing tail (`det_reserved_ft`) or a checksum mismatch.
pub fn verify_block_checksum(block: &[u8], inode_seed: u32) -> Result<()> {
    if !has_tail(block) {
        return Err(FormatError::invalid(
            TAIL,
            "det_reserved_ft",
            block.len().saturating_sub(5),
            0,
        ));
    }
    let off = block.len() - 4;
    let stored = le32(block, off, TAIL)?;
    let computed = block_checksum(block, inode_seed);
    if stored != computed {
        return Err(FormatError::checksum(TAIL, "det_checksum", off, stored, computed));
    }
    Ok(())
}

/// Writes a fresh tail with the block's checksum into the last 12 bytes.
pub fn set_block_checksum(block: &mut [u8], inode_seed: u32) {
    let Some(off) = block.len().checked_sub(TAIL_SIZE) else {
        return;
    };
    block[off..off + 4].fill(0);
    block[off + 4..off + 6].copy_from_slice(&12u16.to_le_bytes());
    block[off + 6] = 0;
    block[off + 7] = TAIL_FT;
    let c = block_checksum(block, inode_seed);
    block[off + 8..off + 12].copy_from_slice(&c.to_le_bytes());
}

/// Writes one record at `offset` of `buf` (the caller guarantees room).
pub fn encode_entry(
    buf: &mut [u8],
    offset: usize,
    inode: u32,
    rec_len: usize,
    file_type: u8,
    name: &[u8],
    block_size: usize,
) {
    buf[offset..offset + 4].copy_from_slice(&inode.to_le_bytes());
    buf[offset + 4..offset + 6].copy_from_slice(&rec_len_to_disk(rec_len, block_size).to_le_bytes());
    buf[offset + 6] = name.len() as u8;
    buf[offset + 7] = file_type;
    buf[offset + 8..offset + 8 + name.len()].copy_from_slice(name);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterate_block_with_tail() {
        let bs = 1024;
        let mut b = vec![0u8; bs];
        encode_entry(&mut b, 0, 2, 12, 2, b".", bs);
        encode_entry(&mut b, 12, 2, 12, 2, b"..", bs);
        encode_entry(&mut b, 24, 11, bs - 24 - TAIL_SIZE, 1, b"hello", bs);
        set_block_checksum(&mut b, 77);
        verify_block_checksum(&b, 77).unwrap();
        let names: Vec<_> = DirEntryIter::new(&b[..bs - TAIL_SIZE], bs, true)
            .map(|e| e.unwrap().name.to_vec())
            .collect();
        assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"hello".to_vec()]);
        b[30] ^= 1;
        assert!(verify_block_checksum(&b, 77).unwrap_err().is_checksum());
    }

    #[test]
    fn corrupt_rec_len_stops_iteration_with_error() {
        let bs = 1024;
        let mut b = vec![0u8; bs];
        encode_entry(&mut b, 0, 2, 12, 2, b".", bs);
        encode_entry(&mut b, 12, 2, 2000, 2, b"..", bs);
        let v: Vec<_> = DirEntryIter::new(&b, bs, true).collect();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].unwrap_err().field, "rec_len");
    }

    #[test]
    fn hash_sits_at_the_first_word_past_the_name() {
        let bs = 1024;
        let mut b = vec![0u8; bs];
        encode_entry(&mut b, 0, 11, rec_len_hashed(5, true), 1, b"hello", bs);
        encode_hash(&mut b, 0, 5, (0x1234_5678, 0x9abc_def0));
        encode_entry(&mut b, 24, 12, bs - 24, 1, b"x", bs);
        assert_eq!(rec_len_hashed(5, true), 24);
        assert_eq!(&b[16..20], &0x1234_5678u32.to_le_bytes());
        let es: Vec<_> = DirEntryIter::new(&b, bs, true).map(Result::unwrap).collect();
        assert_eq!(stored_hash(&b, &es[0]), Some((0x1234_5678, 0x9abc_def0)));
        let mut short = es[0];
        short.rec_len = 16;
        assert_eq!(stored_hash(&b, &short), None);
    }

    #[test]
    fn rec_len_64k_encoding() {
        assert_eq!(rec_len_from_disk(rec_len_to_disk(65536, 65536), 65536), 65536);
        assert_eq!(rec_len_from_disk(rec_len_to_disk(65532, 65536), 65536), 65532);
        assert_eq!(rec_len_from_disk(rec_len_to_disk(4096, 4096), 4096), 4096);
    }
}
