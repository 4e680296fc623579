//! Index blocks of hashed (htree) directories: the root block (`struct
//! dx_root`: fake "." and ".." entries, `dx_root_info`, then the entry array),
//! interior nodes (`struct dx_node`: one empty fake entry spanning the block,
//! then the entry array), the `dx_countlimit` header that overlays the first
//! entry's hash, and the `dx_tail` checksum record of `metadata_csum` file
//! systems.
//!
//! This module owns parsing, validation, encoding, the hash lookup within one
//! index block and the index-block checksum. It does not own the leaf blocks
//! (ordinary directory entries, see [`crate::dir_entry`]), the name hashes
//! ([`crate::hash`]), or walking the tree across blocks (the engine's job).
//!
//! See `Documentation/filesystems/ext4/directory.rst`, "Hash Tree Directories",
//! and `Documentation/filesystems/ext4/checksums.rst`.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::error::{FormatError, Result};
use crate::hash::HashVersion;
use crate::util::{le16, le32, slice};

/// Size of one `struct dx_entry` (and of `dx_countlimit`, which overlays one).
pub const DX_ENTRY_SIZE: usize = 8;
/// Size of `struct dx_tail`.
pub const DX_TAIL_SIZE: usize = 8;
/// Offset of `dx_countlimit` in a root block: two 12-byte fake dirents plus
/// the 8-byte `dx_root_info`.
pub const DX_ROOT_COUNT_OFFSET: usize = 32;
/// Offset of `dx_countlimit` in an interior node: one 8-byte fake dirent.
pub const DX_NODE_COUNT_OFFSET: usize = 8;
/// The only `dx_root_info.info_length` the kernel accepts.
pub const DX_ROOT_INFO_LENGTH: u8 = 8;

mod checksum;

pub use checksum::{dx_checksum, inode_csum_seed, set_dx_checksum, verify_dx_checksum};

const ROOT: &str = "dx_root";
const INFO: &str = "dx_root_info";
const NODE: &str = "dx_node";
const COUNTLIMIT: &str = "dx_countlimit";
const TAIL: &str = "dx_tail";
const ENTRY: &str = "dx_entry";
/// `EXT4_FT_DIR`, the file type of "." and ".." in a new root.
const FT_DIR: u8 = 2;

/// The 8-byte dirent header of the fake entries (`struct fake_dirent`).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are the kernel's; see directory.rst
pub struct RawFakeDirent {
    pub inode: U32,
    pub rec_len: U16,
    pub name_len: u8,
    pub file_type: u8,
}
const _: () = assert!(core::mem::size_of::<RawFakeDirent>() == 8);

/// `struct dx_root_info`, at byte 24 of the root block.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are the kernel's; see directory.rst
pub struct RawDxRootInfo {
    pub reserved_zero: U32,
    pub hash_version: u8,
    pub info_length: u8,
    pub indirect_levels: u8,
    pub unused_flags: u8,
}
const _: () = assert!(core::mem::size_of::<RawDxRootInfo>() == 8);

/// The first 32 bytes of a root block (`struct dx_root` up to `entries`):
/// "." with its padded name, ".." with its padded name, then the info.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are the kernel's; see directory.rst
pub struct RawDxRootHeader {
    pub dot: RawFakeDirent,
    pub dot_name: [u8; 4],
    pub dotdot: RawFakeDirent,
    pub dotdot_name: [u8; 4],
    pub info: RawDxRootInfo,
}
const _: () = assert!(core::mem::size_of::<RawDxRootHeader>() == DX_ROOT_COUNT_OFFSET);
const _: () = assert!(core::mem::offset_of!(RawDxRootHeader, info) == 24);

/// `struct dx_countlimit`: overlays the hash of entry 0.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are the kernel's; see directory.rst
pub struct RawDxCountLimit {
    pub limit: U16,
    pub count: U16,
}
const _: () = assert!(core::mem::size_of::<RawDxCountLimit>() == 4);

/// `struct dx_entry`: the smallest hash served by `block` (a logical block
/// of the directory).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are the kernel's; see directory.rst
pub struct RawDxEntry {
    pub hash: U32,
    pub block: U32,
}
const _: () = assert!(core::mem::size_of::<RawDxEntry>() == DX_ENTRY_SIZE);

/// `struct dx_tail`: right after the last possible entry (`limit`), present
/// only with `metadata_csum`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are the kernel's; see directory.rst
pub struct RawDxTail {
    pub dt_reserved: U32,
    pub dt_checksum: U32,
}
const _: () = assert!(core::mem::size_of::<RawDxTail>() == DX_TAIL_SIZE);

/// One index entry: names hashing to `hash` or above (up to the next entry's
/// hash) live under logical directory block `block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DxEntry {
    /// Lower bound of the range; bit 0 set means the range continues a hash
    /// collision from the previous block. Entry 0's hash is implicitly 0.
    pub hash: u32,
    /// Logical block number within the directory.
    pub block: u32,
}

/// What parsing needs to know about the file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DxParams {
    /// Block size in bytes (1024..=65536, power of two).
    pub block_size: u32,
    /// `metadata_csum` is on: every index block ends with a `dx_tail`.
    pub metadata_csum: bool,
    /// `large_dir` is on: the tree may have three index levels instead of two.
    pub large_dir: bool,
}

/// Entries a root block can hold (`dx_root_limit`): the block less the 32-byte
/// header, less one entry for the tail when `metadata_csum` is on.
pub fn root_limit(block_size: u32, metadata_csum: bool) -> u16 {
    entries_limit(block_size, DX_ROOT_COUNT_OFFSET, metadata_csum)
}

/// Entries an interior node can hold (`dx_node_limit`): the block less the
/// 8-byte fake dirent, less one entry for the tail when `metadata_csum` is on.
pub fn node_limit(block_size: u32, metadata_csum: bool) -> u16 {
    entries_limit(block_size, DX_NODE_COUNT_OFFSET, metadata_csum)
}

fn entries_limit(block_size: u32, count_offset: usize, csum: bool) -> u16 {
    let bs = usize::try_from(block_size).unwrap_or(usize::MAX);
    let slots = bs.saturating_sub(count_offset) / DX_ENTRY_SIZE;
    let slots = slots.saturating_sub(usize::from(csum));
    u16::try_from(slots).unwrap_or(u16::MAX)
}

/// The highest `dx_root_info.indirect_levels` the kernel (`dx_probe`) and
/// e2fsck accept: 1 without `large_dir`, 2 with it (that is, at most two or
/// three levels of index blocks, the root included).
pub fn max_indirect_levels(large_dir: bool) -> u8 {
    if large_dir { 2 } else { 1 }
}

/// Index of the entry whose range contains `hash` (`dx_probe`'s binary
/// search): the last entry whose hash is `<= hash`, where entry 0 covers
/// every hash below entry 1's. Returns 0 for an empty slice.
pub fn find(entries: &[DxEntry], hash: u32) -> usize {
    entries
        .get(1..)
        .map_or(0, |rest| rest.partition_point(|e| e.hash <= hash))
}

/// A parsed root block (logical block 0 of an indexed directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DxRoot {
    /// Fake "." and ".." entries and `dx_root_info`, every byte kept.
    pub header: RawDxRootHeader,
    /// `dx_countlimit.limit`.
    pub limit: u16,
    /// The `count` entries in use; `entries[0].hash` is 0.
    pub entries: Vec<DxEntry>,
    /// The checksum record, with `metadata_csum`.
    pub tail: Option<RawDxTail>,
}

/// A parsed interior index node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DxNode {
    /// The empty fake dirent spanning the block, every byte kept.
    pub fake: RawFakeDirent,
    /// `dx_countlimit.limit`.
    pub limit: u16,
    /// The `count` entries in use; `entries[0].hash` is 0.
    pub entries: Vec<DxEntry>,
    /// The checksum record, with `metadata_csum`.
    pub tail: Option<RawDxTail>,
}

impl DxRoot {
    /// Parses and validates the root block at the start of `buf`.
    ///
    /// Checks what the kernel's `get_dx_countlimit` and `dx_probe` check;
    /// does not check that hashes ascend (fsck's job) nor the checksum (see
    /// [`verify_dx_checksum`]). Allocates at most `limit` entries.
    ///
    /// # Errors
    /// Offsets are bytes within the block.
    /// - `Invalid` `dx_root.block_size` (offset 0) for an impossible block size;
    ///   `Truncated` if `buf` is shorter than the block.
    /// - `Invalid` `dx_root.rec_len` at 4 (must be 12) or 16 (block size - 12).
    /// - `Invalid` `dx_root_info.reserved_zero` (24), `hash_version` (28: only
    ///   0, 1, 2 and 6 are stored on disk), `info_length` (29, must be 8),
    ///   `indirect_levels` (30, see [`max_indirect_levels`]), `unused_flags`
    ///   (31, bit 0 must be clear).
    /// - `Invalid` `dx_countlimit.limit` (32) if not [`root_limit`],
    ///   `dx_countlimit.count` (34) if 0 or above `limit`.
    pub fn parse(buf: &[u8], params: &DxParams) -> Result<Self> {
        let block = block_of(buf, params.block_size, ROOT)?;
        let header = RawDxRootHeader::read_from_prefix(block)
            .map(|(h, _)| h)
            .map_err(|_| FormatError::truncated(ROOT, DX_ROOT_COUNT_OFFSET, block.len()))?;
        check_root_header(&header, params)?;
        let limit = root_limit(params.block_size, params.metadata_csum);
        let (entries, tail) = parse_entries(block, DX_ROOT_COUNT_OFFSET, limit, params)?;
        Ok(Self {
            header,
            limit,
            entries,
            tail,
        })
    }

    /// A fresh root for a directory whose "." is `dot_inode` and ".." is
    /// `dotdot_inode`, hashed with `hash_version` (a code 0..=2 or 6), one
    /// level deep, pointing every hash at `first_leaf`.
    pub fn new(
        dot_inode: u32,
        dotdot_inode: u32,
        hash_version: HashVersion,
        first_leaf: u32,
        params: &DxParams,
    ) -> Self {
        let dotdot_len = params.block_size.saturating_sub(12);
        let header = RawDxRootHeader {
            dot: fake_dirent(dot_inode, 12, 1, FT_DIR),
            dot_name: *b".\0\0\0",
            dotdot: fake_dirent(dotdot_inode, dotdot_len, 2, FT_DIR),
            dotdot_name: *b"..\0\0",
            info: RawDxRootInfo {
                reserved_zero: U32::new(0),
                hash_version: hash_version.code(),
                info_length: DX_ROOT_INFO_LENGTH,
                indirect_levels: 0,
                unused_flags: 0,
            },
        };
        Self {
            header,
            limit: root_limit(params.block_size, params.metadata_csum),
            entries: vec![DxEntry {
                hash: 0,
                block: first_leaf,
            }],
            tail: params.metadata_csum.then(RawDxTail::new_zeroed),
        }
    }

    /// The stored hash version (before the superblock's unsigned flag is
    /// applied; see [`HashVersion::effective`]).
    pub fn hash_version(&self) -> Option<HashVersion> {
        HashVersion::from_code(self.header.info.hash_version)
    }

    /// Index levels below the root (0: the root points at leaves).
    pub fn indirect_levels(&self) -> u8 {
        self.header.info.indirect_levels
    }

    /// Writes this root into the first `block_size` bytes of `buf`: header,
    /// count/limit, the used entries and the tail (if any). Other bytes (the
    /// unused entry slots) are left as they are. Does not compute the checksum
    /// (see [`set_dx_checksum`]).
    ///
    /// # Errors
    /// As for [`DxNode::encode`], on structure `dx_root`.
    pub fn encode(&self, buf: &mut [u8], block_size: u32) -> Result<()> {
        let block = block_of_mut(buf, block_size, ROOT)?;
        write_at(block, 0, &self.header, ROOT)?;
        let raw = Raw {
            count_offset: DX_ROOT_COUNT_OFFSET,
            limit: self.limit,
            entries: &self.entries,
            tail: self.tail,
        };
        write_entries(block, &raw)
    }

    /// [`DxRoot::encode`] into a zero-filled block.
    ///
    /// # Errors
    /// As for [`DxRoot::encode`].
    pub fn to_block(&self, block_size: u32) -> Result<Vec<u8>> {
        let mut block = new_block(block_size, ROOT)?;
        self.encode(&mut block, block_size)?;
        Ok(block)
    }
}

impl DxNode {
    /// Parses and validates the interior node at the start of `buf`.
    ///
    /// # Errors
    /// Offsets are bytes within the block.
    /// - `Invalid` `dx_node.block_size` (0) or `Truncated`, as for [`DxRoot::parse`].
    /// - `Invalid` `dx_node.rec_len` (4) unless the fake dirent spans the block.
    /// - `Invalid` `dx_countlimit.limit` (8) if not [`node_limit`],
    ///   `dx_countlimit.count` (10) if 0 or above `limit`.
    pub fn parse(buf: &[u8], params: &DxParams) -> Result<Self> {
        let block = block_of(buf, params.block_size, NODE)?;
        let fake = RawFakeDirent::read_from_prefix(block)
            .map(|(f, _)| f)
            .map_err(|_| FormatError::truncated(NODE, DX_NODE_COUNT_OFFSET, block.len()))?;
        let rec_len = rec_len_from_disk(fake.rec_len.get(), params.block_size);
        if rec_len != params.block_size {
            return Err(FormatError::invalid(NODE, "rec_len", 4, rec_len.into()));
        }
        let limit = node_limit(params.block_size, params.metadata_csum);
        let (entries, tail) = parse_entries(block, DX_NODE_COUNT_OFFSET, limit, params)?;
        Ok(Self {
            fake,
            limit,
            entries,
            tail,
        })
    }

    /// A fresh, empty-named node spanning `params.block_size` with the given
    /// entries (at least one; entry 0's hash is ignored and stored as the
    /// count/limit header).
    pub fn new(entries: Vec<DxEntry>, params: &DxParams) -> Self {
        Self {
            fake: fake_dirent(0, params.block_size, 0, 0),
            limit: node_limit(params.block_size, params.metadata_csum),
            entries,
            tail: params.metadata_csum.then(RawDxTail::new_zeroed),
        }
    }

    /// Writes this node into the first `block_size` bytes of `buf`, leaving
    /// unused entry slots untouched. Does not compute the checksum.
    ///
    /// # Errors
    /// - `Invalid` `<structure>.block_size` / `Truncated` as for parsing.
    /// - `Invalid` `dx_countlimit.count` if there are no entries or more than
    ///   `limit`; `dx_countlimit.limit` if `limit` slots (plus the tail) do not
    ///   fit in the block.
    pub fn encode(&self, buf: &mut [u8], block_size: u32) -> Result<()> {
        let block = block_of_mut(buf, block_size, NODE)?;
        write_at(block, 0, &self.fake, NODE)?;
        let raw = Raw {
            count_offset: DX_NODE_COUNT_OFFSET,
            limit: self.limit,
            entries: &self.entries,
            tail: self.tail,
        };
        write_entries(block, &raw)
    }

    /// [`DxNode::encode`] into a zero-filled block.
    ///
    /// # Errors
    /// As for [`DxNode::encode`].
    pub fn to_block(&self, block_size: u32) -> Result<Vec<u8>> {
        let mut block = new_block(block_size, NODE)?;
        self.encode(&mut block, block_size)?;
        Ok(block)
    }
}

/// The fake "." / ".." rules of `get_dx_countlimit` and the info checks of
/// `dx_probe`.
fn check_root_header(h: &RawDxRootHeader, params: &DxParams) -> Result<()> {
    if h.dot.rec_len.get() != 12 {
        return Err(FormatError::invalid(ROOT, "rec_len", 4, h.dot.rec_len.get().into()));
    }
    let dotdot = rec_len_from_disk(h.dotdot.rec_len.get(), params.block_size);
    if dotdot != params.block_size.saturating_sub(12) {
        return Err(FormatError::invalid(ROOT, "rec_len", 16, dotdot.into()));
    }
    let info = &h.info;
    if info.reserved_zero.get() != 0 {
        let v = info.reserved_zero.get().into();
        return Err(FormatError::invalid(INFO, "reserved_zero", 24, v));
    }
    if !matches!(info.hash_version, 0..=2 | 6) {
        let v = info.hash_version.into();
        return Err(FormatError::invalid(INFO, "hash_version", 28, v));
    }
    if info.info_length != DX_ROOT_INFO_LENGTH {
        let v = info.info_length.into();
        return Err(FormatError::invalid(INFO, "info_length", 29, v));
    }
    if info.indirect_levels > max_indirect_levels(params.large_dir) {
        let v = info.indirect_levels.into();
        return Err(FormatError::invalid(INFO, "indirect_levels", 30, v));
    }
    if info.unused_flags & 1 != 0 {
        let v = info.unused_flags.into();
        return Err(FormatError::invalid(INFO, "unused_flags", 31, v));
    }
    Ok(())
}

/// Reads count/limit at `off`, checks them, then the used entries and the
/// tail (which sits right after `limit` slots).
fn parse_entries(
    block: &[u8],
    off: usize,
    expect_limit: u16,
    params: &DxParams,
) -> Result<(Vec<DxEntry>, Option<RawDxTail>)> {
    let limit = le16(block, off, COUNTLIMIT)?;
    let count = le16(block, off.saturating_add(2), COUNTLIMIT)?;
    if limit != expect_limit {
        return Err(FormatError::invalid(COUNTLIMIT, "limit", off, limit.into()));
    }
    if count == 0 || count > limit {
        let at = off.saturating_add(2);
        return Err(FormatError::invalid(COUNTLIMIT, "count", at, count.into()));
    }
    let mut entries = Vec::with_capacity(usize::from(count));
    for i in 0..usize::from(count) {
        let at = off.saturating_add(i.saturating_mul(DX_ENTRY_SIZE));
        let hash = if i == 0 { 0 } else { le32(block, at, ENTRY)? };
        let block_no = le32(block, at.saturating_add(4), ENTRY)?;
        entries.push(DxEntry { hash, block: block_no });
    }
    let tail = if params.metadata_csum {
        let at = off.saturating_add(usize::from(limit).saturating_mul(DX_ENTRY_SIZE));
        Some(read_tail(block, at)?)
    } else {
        None
    };
    Ok((entries, tail))
}

fn read_tail(block: &[u8], at: usize) -> Result<RawDxTail> {
    let bytes = slice(block, at, DX_TAIL_SIZE, TAIL)?;
    RawDxTail::read_from_bytes(bytes).map_err(|_| FormatError::truncated(TAIL, DX_TAIL_SIZE, 0))
}

/// The pieces `write_entries` lays out after a header.
struct Raw<'a> {
    count_offset: usize,
    limit: u16,
    entries: &'a [DxEntry],
    tail: Option<RawDxTail>,
}

fn write_entries(block: &mut [u8], raw: &Raw<'_>) -> Result<()> {
    let off = raw.count_offset;
    let count = u16::try_from(raw.entries.len()).unwrap_or(u16::MAX);
    if count == 0 || count > raw.limit {
        let at = off.saturating_add(2);
        return Err(FormatError::invalid(COUNTLIMIT, "count", at, count.into()));
    }
    let slots_end = off.saturating_add(usize::from(raw.limit).saturating_mul(DX_ENTRY_SIZE));
    let tail_len = raw.tail.map_or(0, |_| DX_TAIL_SIZE);
    if slots_end.saturating_add(tail_len) > block.len() {
        let v = raw.limit.into();
        return Err(FormatError::invalid(COUNTLIMIT, "limit", off, v));
    }
    let cl = RawDxCountLimit {
        limit: U16::new(raw.limit),
        count: U16::new(count),
    };
    write_at(block, off, &cl, COUNTLIMIT)?;
    for (i, e) in raw.entries.iter().enumerate() {
        let at = off.saturating_add(i.saturating_mul(DX_ENTRY_SIZE));
        if i != 0 {
            write_at(block, at, &U32::new(e.hash), COUNTLIMIT)?;
        }
        write_at(block, at.saturating_add(4), &U32::new(e.block), COUNTLIMIT)?;
    }
    match raw.tail {
        Some(tail) => write_at(block, slots_end, &tail, TAIL),
        None => Ok(()),
    }
}

fn write_at<T: IntoBytes + Immutable>(block: &mut [u8], at: usize, value: &T, structure: &'static str) -> Result<()> {
    let bytes = value.as_bytes();
    let have = block.len();
    let end = at.saturating_add(bytes.len());
    let dst = block
        .get_mut(at..end)
        .ok_or_else(|| FormatError::truncated(structure, end, have))?;
    dst.copy_from_slice(bytes);
    Ok(())
}

/// Checks `block_size` and returns the block at the start of `buf`.
fn block_of<'a>(buf: &'a [u8], block_size: u32, structure: &'static str) -> Result<&'a [u8]> {
    let bs = checked_block_size(block_size, structure)?;
    buf.get(..bs)
        .ok_or_else(|| FormatError::truncated(structure, bs, buf.len()))
}

fn block_of_mut<'a>(buf: &'a mut [u8], block_size: u32, structure: &'static str) -> Result<&'a mut [u8]> {
    let bs = checked_block_size(block_size, structure)?;
    let have = buf.len();
    buf.get_mut(..bs)
        .ok_or_else(|| FormatError::truncated(structure, bs, have))
}

fn new_block(block_size: u32, structure: &'static str) -> Result<Vec<u8>> {
    Ok(vec![0u8; checked_block_size(block_size, structure)?])
}

fn checked_block_size(block_size: u32, structure: &'static str) -> Result<usize> {
    if !(1024..=65536).contains(&block_size) || !block_size.is_power_of_two() {
        return Err(FormatError::invalid(structure, "block_size", 0, block_size.into()));
    }
    usize::try_from(block_size).map_err(|_| FormatError::invalid(structure, "block_size", 0, 0))
}

/// Decodes `rec_len` as e2fsprogs' `ext2fs_get_rec_len` does: 0 and 65535
/// mean a whole 64 KiB block; the low two bits carry bits 16-17.
fn rec_len_from_disk(raw: u16, block_size: u32) -> u32 {
    if raw == u16::MAX || raw == 0 {
        return block_size;
    }
    let len = u32::from(raw);
    (len & 0xfffc) | ((len & 3) << 16)
}

fn fake_dirent(inode: u32, rec_len: u32, name_len: u8, file_type: u8) -> RawFakeDirent {
    // A rec_len of 65536 (a whole 64 KiB block) is stored as 65535.
    let stored = u16::try_from(rec_len).unwrap_or(u16::MAX);
    RawFakeDirent {
        inode: U32::new(inode),
        rec_len: U16::new(stored),
        name_len,
        file_type,
    }
}

#[cfg(test)]
mod tests;
