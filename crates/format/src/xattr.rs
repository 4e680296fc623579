//! Extended attributes: the external xattr block (`struct ext4_xattr_header`
//! followed by `struct ext4_xattr_entry` records) and the in-inode region (a
//! magic number right after `i_extra_isize`, then the same entry records),
//! with the entry and block hashes and the `metadata_csum` block checksum.
//!
//! This module owns the bytes of one block or one inode tail. It does not
//! read blocks, follow `i_file_acl`, or load `ea_inode` values: an entry whose
//! value lives in its own inode comes back as [`XattrValue::EaInode`] with the
//! inode number so the engine can resolve it. Building a region from a list
//! of attributes lives in [`encode`], POSIX ACL value conversion in [`acl`].
//!
//! See `Documentation/filesystems/ext4/attributes.rst`.

pub mod acl;
pub mod encode;

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};
use crate::util::{le32, slice};

/// `h_magic` of an xattr block and the magic opening the in-inode region.
pub const XATTR_MAGIC: u32 = 0xEA02_0000;
/// Size of `struct ext4_xattr_header`; the first entry of a block follows it.
pub const XATTR_HEADER_SIZE: usize = 32;
/// Size of the fixed part of `struct ext4_xattr_entry` (the name follows).
pub const XATTR_ENTRY_SIZE: usize = 16;
/// Size of the in-inode header (`struct ext4_xattr_ibody_header`: the magic).
pub const XATTR_IBODY_HEADER_SIZE: usize = 4;
/// Size of the classic inode core; the `i_extra_isize` tail starts here.
pub const GOOD_OLD_INODE_SIZE: usize = 128;
/// Byte offset of `h_checksum` within the block header.
pub const H_CHECKSUM_OFFSET: usize = 16;

const HDR: &str = "ext4_xattr_header";
const ENTRY: &str = "ext4_xattr_entry";
const IBODY: &str = "ext4_xattr_ibody_header";

/// Header of an external xattr block (`struct ext4_xattr_header`, 32 bytes).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are the kernel's; see attributes.rst
pub struct RawXattrHeader {
    pub h_magic: U32,
    pub h_refcount: U32,
    pub h_blocks: U32,
    pub h_hash: U32,
    pub h_checksum: U32,
    pub h_reserved: [U32; 3],
}
const _: () = assert!(core::mem::size_of::<RawXattrHeader>() == XATTR_HEADER_SIZE);
const _: () = assert!(core::mem::offset_of!(RawXattrHeader, h_checksum) == H_CHECKSUM_OFFSET);

/// Fixed part of one entry (`struct ext4_xattr_entry`, 16 bytes); the
/// `e_name_len` name bytes follow and the record is padded to 4 bytes.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are the kernel's; see attributes.rst
pub struct RawXattrEntry {
    pub e_name_len: u8,
    pub e_name_index: u8,
    pub e_value_offs: U16,
    pub e_value_inum: U32,
    pub e_value_size: U32,
    pub e_hash: U32,
}
const _: () = assert!(core::mem::size_of::<RawXattrEntry>() == XATTR_ENTRY_SIZE);
const _: () = assert!(core::mem::offset_of!(RawXattrEntry, e_value_size) == 8);

/// `e_name_index` values and the name prefix each stands for. Indexes 2, 3
/// and 8 stand for a whole name; their stored suffix is empty.
pub const NAME_PREFIXES: [(u8, &str); 7] = [
    (1, "user."),
    (2, "system.posix_acl_access"),
    (3, "system.posix_acl_default"),
    (4, "trusted."),
    (6, "security."),
    (7, "system."),
    (8, "system.richacl"),
];

/// The prefix `e_name_index` stands for, or `None` for an unknown index
/// (whose entries the kernel ignores).
pub fn prefix(index: u8) -> Option<&'static str> {
    NAME_PREFIXES.iter().find(|(i, _)| *i == index).map(|(_, p)| *p)
}

/// Splits a full attribute name into `(e_name_index, suffix)`, trying the
/// whole-name prefixes first so `system.posix_acl_access` maps to index 2.
/// `None` when no prefix matches (such a name cannot be stored).
pub fn split_name(full: &[u8]) -> Option<(u8, &[u8])> {
    let mut order = NAME_PREFIXES;
    order.sort_by_key(|(_, p)| core::cmp::Reverse(p.len()));
    order
        .iter()
        .find_map(|(i, p)| full.strip_prefix(p.as_bytes()).map(|rest| (*i, rest)))
}

/// Where an entry's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrValue<'a> {
    /// The value bytes, inside the parsed buffer (`e_value_size` long).
    Inline(&'a [u8]),
    /// `ea_inode`: the value is the content of inode `inum`, `size` bytes.
    EaInode {
        /// `e_value_inum`.
        inum: u32,
        /// `e_value_size`.
        size: u32,
    },
}

/// One decoded entry, borrowing from the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XattrEntry<'a> {
    /// Byte offset of the entry within the parsed buffer.
    pub offset: usize,
    /// The raw fixed part, as stored.
    pub raw: RawXattrEntry,
    /// The stored name suffix (`e_name`, `e_name_len` bytes).
    pub name: &'a [u8],
    /// The value, or where to find it.
    pub value: XattrValue<'a>,
    /// The value with its on-disk padding up to a 4-byte multiple (as far as
    /// the buffer reaches), which is what the kernel hashes.
    pub padded_value: &'a [u8],
}

impl XattrEntry<'_> {
    /// `e_name_index`.
    pub fn index(&self) -> u8 {
        self.raw.e_name_index
    }

    /// The full attribute name: prefix of the index, then the suffix.
    pub fn full_name(&self) -> Vec<u8> {
        let mut out = prefix(self.index()).unwrap_or("").as_bytes().to_vec();
        out.extend_from_slice(self.name);
        out
    }

    /// Checks `e_hash`: 0 (not hashed, as in-inode entries are) or the hash
    /// of the name and padded value, by either the unsigned or the signed
    /// variant of the kernel's name hashing. `ea_inode` entries hash the
    /// value inode's hash, which needs that inode, so they are not checked.
    ///
    /// # Errors
    /// A checksum error on `ext4_xattr_entry.e_hash` at the entry's offset + 12.
    pub fn verify_hash(&self) -> Result<()> {
        let stored = self.raw.e_hash.get();
        if stored == 0 || matches!(self.value, XattrValue::EaInode { .. }) {
            return Ok(());
        }
        let unsigned = entry_hash(self.name, self.padded_value, false);
        if stored == unsigned || stored == entry_hash(self.name, self.padded_value, true) {
            return Ok(());
        }
        let off = self.offset.saturating_add(12);
        Err(FormatError::checksum(ENTRY, "e_hash", off, stored, unsigned))
    }
}

/// A parsed xattr block: the header and its entries in on-disk order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XattrBlock<'a> {
    /// The header as stored.
    pub header: RawXattrHeader,
    /// The entries, in on-disk order.
    pub entries: Vec<XattrEntry<'a>>,
}

/// Parses an external xattr block (the whole block, `block.len()` = block
/// size). Value offsets are relative to the start of the block.
///
/// # Errors
/// - `ext4_xattr_header.h_magic` (bad magic) or `h_blocks` (≠ 1).
/// - `ext4_xattr_entry` errors at the entry's byte offset (see [`parse_ibody`]).
pub fn parse_block(block: &[u8]) -> Result<XattrBlock<'_>> {
    let header = RawXattrHeader::read_from_prefix(block)
        .map(|(h, _)| h)
        .map_err(|_| FormatError::truncated(HDR, XATTR_HEADER_SIZE, block.len()))?;
    let magic = header.h_magic.get();
    if magic != XATTR_MAGIC {
        return Err(FormatError::bad_magic(HDR, "h_magic", 0, magic.into()));
    }
    let blocks = header.h_blocks.get();
    if blocks != 1 {
        return Err(FormatError::invalid(HDR, "h_blocks", 8, blocks.into()));
    }
    let entries = parse_entries(block, XATTR_HEADER_SIZE, 0)?;
    Ok(XattrBlock { header, entries })
}

/// The in-inode xattr region of a raw inode record: the bytes from
/// `128 + i_extra_isize` to the end of `inode` (whose length is the inode size).
///
/// # Errors
/// `ext4_inode.i_extra_isize` (offset 128) if it is not a multiple of 4 or
/// leaves no room for the region's magic.
pub fn ibody_region(inode: &[u8], extra_isize: u16) -> Result<&[u8]> {
    let start = GOOD_OLD_INODE_SIZE.saturating_add(usize::from(extra_isize));
    let room = inode.len().saturating_sub(XATTR_IBODY_HEADER_SIZE);
    if !extra_isize.is_multiple_of(4) || start > room {
        let v = extra_isize.into();
        return Err(FormatError::invalid("ext4_inode", "i_extra_isize", 128, v));
    }
    slice(inode, start, inode.len().saturating_sub(start), "ext4_inode")
}

/// Parses the in-inode region (see [`ibody_region`]): a magic number, then
/// entries whose value offsets are relative to the first entry (byte 4 of
/// `region`). A region without the magic holds no attributes: `Ok(vec![])`.
///
/// # Errors
/// At the entry's byte offset within `region`:
/// - `ext4_xattr_entry.e_name_len` if the name or the list's 4-byte
///   terminator runs past the region;
/// - `e_value_offs` / `e_value_size` if the value runs outside the region
///   or overlaps the entry list;
/// - `e_value_inum` for an `ea_inode` entry with a nonzero `e_value_offs`.
pub fn parse_ibody(region: &[u8]) -> Result<Vec<XattrEntry<'_>>> {
    match le32(region, 0, IBODY) {
        Ok(XATTR_MAGIC) => parse_entries(region, XATTR_IBODY_HEADER_SIZE, XATTR_IBODY_HEADER_SIZE),
        _ => Ok(Vec::new()),
    }
}

/// Rounds a length up to the 4-byte entry/value padding.
pub(crate) fn pad4(len: usize) -> Option<usize> {
    len.checked_add(3).map(|l| l & !3)
}

/// Walks the entry list starting at `first`; values are at `value_base +
/// e_value_offs`. The loop is bounded by the buffer: each step advances at
/// least 16 bytes.
fn parse_entries(buf: &[u8], first: usize, value_base: usize) -> Result<Vec<XattrEntry<'_>>> {
    let mut raws = Vec::new();
    let mut off = first;
    while le32(buf, off, ENTRY)? != 0 {
        let raw = RawXattrEntry::read_from_prefix(buf.get(off..).unwrap_or(&[]))
            .map(|(e, _)| e)
            .map_err(|_| bad_name_len(buf, off))?;
        let len =
            pad4(XATTR_ENTRY_SIZE.saturating_add(usize::from(raw.e_name_len))).ok_or_else(|| bad_name_len(buf, off))?;
        let next = off.saturating_add(len);
        if next.saturating_add(4) > buf.len() {
            return Err(bad_name_len(buf, off));
        }
        raws.push((off, raw));
        off = next;
    }
    let list_end = off.saturating_add(4);
    raws.into_iter()
        .map(|(off, raw)| decode_entry(buf, off, raw, value_base, list_end))
        .collect()
}

fn bad_name_len(buf: &[u8], off: usize) -> FormatError {
    let v = buf.get(off).copied().unwrap_or(0);
    FormatError::invalid(ENTRY, "e_name_len", off, v.into())
}

fn decode_entry(
    buf: &[u8],
    off: usize,
    raw: RawXattrEntry,
    value_base: usize,
    list_end: usize,
) -> Result<XattrEntry<'_>> {
    let name_start = off.saturating_add(XATTR_ENTRY_SIZE);
    let name = slice(buf, name_start, raw.e_name_len.into(), ENTRY)?;
    let size = raw.e_value_size.get();
    let inum = raw.e_value_inum.get();
    let (value, padded_value) = if inum != 0 {
        if raw.e_value_offs.get() != 0 {
            let v = raw.e_value_offs.get().into();
            return Err(FormatError::invalid(ENTRY, "e_value_offs", off.saturating_add(2), v));
        }
        (XattrValue::EaInode { inum, size }, &[][..])
    } else {
        let (v, p) = inline_value(buf, off, &raw, value_base, list_end)?;
        (XattrValue::Inline(v), p)
    };
    Ok(XattrEntry {
        offset: off,
        raw,
        name,
        value,
        padded_value,
    })
}

fn inline_value<'a>(
    buf: &'a [u8],
    off: usize,
    raw: &RawXattrEntry,
    value_base: usize,
    list_end: usize,
) -> Result<(&'a [u8], &'a [u8])> {
    let size = usize::try_from(raw.e_value_size.get()).unwrap_or(usize::MAX);
    if size == 0 {
        return Ok((&[], &[]));
    }
    let start = value_base.saturating_add(raw.e_value_offs.get().into());
    let offs_err = || {
        let v = raw.e_value_offs.get().into();
        FormatError::invalid(ENTRY, "e_value_offs", off.saturating_add(2), v)
    };
    if start < list_end || start > buf.len() {
        return Err(offs_err());
    }
    let end = start.checked_add(size).filter(|&e| e <= buf.len()).ok_or_else(|| {
        FormatError::invalid(
            ENTRY,
            "e_value_size",
            off.saturating_add(8),
            raw.e_value_size.get().into(),
        )
    })?;
    let padded_end = pad4(end).unwrap_or(end).min(buf.len());
    let value = buf.get(start..end).ok_or_else(offs_err)?;
    let padded = buf.get(start..padded_end).ok_or_else(offs_err)?;
    Ok((value, padded))
}

const NAME_HASH_SHIFT: u32 = 5;
const VALUE_HASH_SHIFT: u32 = 16;
const BLOCK_HASH_SHIFT: u32 = 16;

/// `ext4_xattr_hash_entry`: folds the name bytes (rotate left 5, xor) then
/// the value as little-endian 32-bit words (rotate left 16, xor); missing
/// bytes of a last partial word count as zero, as the on-disk padding is.
/// `signed` selects `ext4_xattr_hash_entry_signed`, which sign-extends name
/// bytes ≥ 0x80 as older kernels and e2fsprogs on x86 (`char` signed) did.
pub fn entry_hash(name: &[u8], padded_value: &[u8], signed: bool) -> u32 {
    let hash = name_hash(name, signed);
    padded_value.chunks(4).fold(hash, |h, w| {
        let mut word = [0u8; 4];
        word.iter_mut().zip(w).for_each(|(d, s)| *d = *s);
        fold_value_word(h, u32::from_le_bytes(word))
    })
}

/// The `e_hash` of an `ea_inode` entry: the name, then one word holding
/// the value inode's own hash (kept in that inode's `i_atime`).
pub fn entry_hash_ea_inode(name: &[u8], ea_inode_hash: u32, signed: bool) -> u32 {
    fold_value_word(name_hash(name, signed), ea_inode_hash)
}

fn name_hash(name: &[u8], signed: bool) -> u32 {
    name.iter().fold(0u32, |h, &b| {
        let c = if signed {
            // Sign-extend as a C `signed char` widened to 32 bits.
            u32::from_le_bytes(i32::from(i8::from_le_bytes([b])).to_le_bytes())
        } else {
            u32::from(b)
        };
        h.rotate_left(NAME_HASH_SHIFT) ^ c
    })
}

fn fold_value_word(hash: u32, word: u32) -> u32 {
    hash.rotate_left(VALUE_HASH_SHIFT) ^ word
}

/// `ext4_xattr_rehash`: the block's `h_hash`, folding every entry's `e_hash`
/// (rotate left 16, xor); 0 if any entry has `e_hash` 0, which marks a block
/// that must not be shared.
pub fn block_hash(entries: &[XattrEntry<'_>]) -> u32 {
    block_hash_of(entries.iter().map(|e| e.raw.e_hash.get()))
}

pub(crate) fn block_hash_of(hashes: impl Iterator<Item = u32>) -> u32 {
    let mut hash = 0u32;
    for h in hashes {
        if h == 0 {
            return 0;
        }
        hash = hash.rotate_left(BLOCK_HASH_SHIFT) ^ h;
    }
    hash
}

/// `ext4_xattr_block_csum`: crc32c from the filesystem seed over the
/// little-endian 64-bit block number, then over the whole block with
/// `h_checksum` taken as zero.
pub fn block_checksum(csum_seed: u32, block_nr: u64, block: &[u8]) -> u32 {
    let crc = crc32c_raw(csum_seed, &block_nr.to_le_bytes());
    let head = block.get(..H_CHECKSUM_OFFSET).unwrap_or(block);
    let crc = crc32c_raw(crc, head);
    let crc = crc32c_raw(crc, &[0u8; 4]);
    crc32c_raw(crc, block.get(H_CHECKSUM_OFFSET + 4..).unwrap_or(&[]))
}

/// Checks `h_checksum` (call only with `metadata_csum`).
///
/// # Errors
/// Truncated if `block` is shorter than the header; a checksum error on
/// `ext4_xattr_header.h_checksum` (offset 16) on mismatch.
pub fn verify_block_checksum(csum_seed: u32, block_nr: u64, block: &[u8]) -> Result<()> {
    let stored = le32(block, H_CHECKSUM_OFFSET, HDR)?;
    if block.len() < XATTR_HEADER_SIZE {
        return Err(FormatError::truncated(HDR, XATTR_HEADER_SIZE, block.len()));
    }
    let computed = block_checksum(csum_seed, block_nr, block);
    if stored != computed {
        return Err(FormatError::checksum(
            HDR,
            "h_checksum",
            H_CHECKSUM_OFFSET,
            stored,
            computed,
        ));
    }
    Ok(())
}

/// Recomputes and stores `h_checksum`.
///
/// # Errors
/// Truncated if `block` is shorter than the header.
pub fn set_block_checksum(csum_seed: u32, block_nr: u64, block: &mut [u8]) -> Result<()> {
    if block.len() < XATTR_HEADER_SIZE {
        return Err(FormatError::truncated(HDR, XATTR_HEADER_SIZE, block.len()));
    }
    let csum = block_checksum(csum_seed, block_nr, block);
    if let Some(field) = block.get_mut(H_CHECKSUM_OFFSET..H_CHECKSUM_OFFSET + 4) {
        field.copy_from_slice(&csum.to_le_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
