//! jbd2, the ext4 journal: block header, journal superblock, descriptor
//! blocks with their tags, commit blocks and revoke blocks, and the
//! `csum_v2`/`csum_v3` checksums of each. Every field is big-endian.
//!
//! This module parses and (where trivial) encodes single journal blocks. It
//! does not walk the log, map journal blocks to disk blocks, or replay:
//! that is the engine's recovery. Fast-commit records: [`fast_commit`].
//!
//! See `Documentation/filesystems/ext4/journal.rst` and `include/linux/jbd2.h`.

pub mod commit;
pub mod descriptor;
pub mod fast_commit;
pub mod revoke;
pub mod superblock;

use zerocopy::big_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};
use crate::util::be32;

/// `h_magic` of every jbd2 metadata block.
pub const JBD2_MAGIC: u32 = 0xC03B_3998;
/// Size of `journal_header_t`.
pub const HEADER_SIZE: usize = 12;
/// Size of `struct jbd2_journal_block_tail` (descriptor and revoke blocks).
pub const TAIL_SIZE: usize = 4;

/// `s_feature_compat`: data-block crc32 in commit blocks (v1 checksums).
pub const COMPAT_CHECKSUM: u32 = 0x1;
/// `s_feature_incompat`: revoke blocks in use.
pub const INCOMPAT_REVOKE: u32 = 0x1;
/// `s_feature_incompat`: 64-bit block numbers in tags and revoke records.
pub const INCOMPAT_64BIT: u32 = 0x2;
/// `s_feature_incompat`: commit blocks written without waiting.
pub const INCOMPAT_ASYNC_COMMIT: u32 = 0x4;
/// `s_feature_incompat`: crc32c checksums, 16-bit tag checksums.
pub const INCOMPAT_CSUM_V2: u32 = 0x8;
/// `s_feature_incompat`: crc32c checksums, 32-bit tag checksums (`tag3`).
pub const INCOMPAT_CSUM_V3: u32 = 0x10;
/// `s_feature_incompat`: fast-commit area present.
pub const INCOMPAT_FAST_COMMIT: u32 = 0x20;

/// `h_blocktype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockType {
    /// 1: descriptor block (tags for the data blocks that follow).
    Descriptor,
    /// 2: commit block.
    Commit,
    /// 3: journal superblock, version 1.
    SuperblockV1,
    /// 4: journal superblock, version 2.
    SuperblockV2,
    /// 5: revoke block.
    Revoke,
}

impl BlockType {
    /// Decodes `h_blocktype`; `None` for an unknown value.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::Descriptor,
            2 => Self::Commit,
            3 => Self::SuperblockV1,
            4 => Self::SuperblockV2,
            5 => Self::Revoke,
            _ => return None,
        })
    }

    /// The `h_blocktype` value.
    pub fn raw(self) -> u32 {
        match self {
            Self::Descriptor => 1,
            Self::Commit => 2,
            Self::SuperblockV1 => 3,
            Self::SuperblockV2 => 4,
            Self::Revoke => 5,
        }
    }
}

/// `journal_header_t`, the 12 bytes opening every jbd2 metadata block.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are jbd2.h's; see journal.rst
pub struct RawJournalHeader {
    pub h_magic: U32,
    pub h_blocktype: U32,
    pub h_sequence: U32,
}
const _: () = assert!(core::mem::size_of::<RawJournalHeader>() == HEADER_SIZE);

impl RawJournalHeader {
    /// A header for a block of type `kind` in transaction `sequence`.
    pub fn new(kind: BlockType, sequence: u32) -> Self {
        Self {
            h_magic: U32::new(JBD2_MAGIC),
            h_blocktype: U32::new(kind.raw()),
            h_sequence: U32::new(sequence),
        }
    }

    /// Decodes the header at the start of `buf`, checking `h_magic` only.
    ///
    /// # Errors
    /// Truncated, or bad magic on `journal_header_t.h_magic` (offset 0).
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let h = Self::read_from_prefix(buf)
            .map(|(h, _)| h)
            .map_err(|_| FormatError::truncated("journal_header_t", HEADER_SIZE, buf.len()))?;
        let magic = h.h_magic.get();
        if magic != JBD2_MAGIC {
            return Err(FormatError::bad_magic("journal_header_t", "h_magic", 0, magic.into()));
        }
        Ok(h)
    }

    /// `h_blocktype` decoded.
    pub fn block_type(&self) -> Option<BlockType> {
        BlockType::from_raw(self.h_blocktype.get())
    }

    /// Decodes the header and checks that it is of type `want`.
    ///
    /// # Errors
    /// As [`Self::parse`], plus invalid `h_blocktype` (offset 4).
    pub fn parse_kind(buf: &[u8], want: BlockType, structure: &'static str) -> Result<Self> {
        let h = Self::parse(buf).map_err(|e| FormatError { structure, ..e })?;
        if h.block_type() != Some(want) {
            let v = h.h_blocktype.get().into();
            return Err(FormatError::invalid(structure, "h_blocktype", 4, v));
        }
        Ok(h)
    }
}

/// The journal-wide facts every block parser needs, taken from a validated
/// journal superblock (see [`superblock::RawJournalSuperblock::params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalParams {
    /// `s_blocksize`: bytes per journal block.
    pub block_size: usize,
    /// `s_feature_incompat` (`INCOMPAT_*`).
    pub incompat: u32,
    /// `crc32c(~0, s_uuid)`, the seed of every v2/v3 checksum.
    pub csum_seed: u32,
}

impl JournalParams {
    /// `csum_v2` or `csum_v3`: blocks carry crc32c checksums.
    pub fn has_csum_v2or3(&self) -> bool {
        self.incompat & (INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3) != 0
    }

    /// `csum_v3`: descriptor tags are `journal_block_tag3_t`.
    pub fn has_csum_v3(&self) -> bool {
        self.incompat & INCOMPAT_CSUM_V3 != 0
    }

    /// `64bit`: tags and revoke records carry 64-bit block numbers.
    pub fn is_64bit(&self) -> bool {
        self.incompat & INCOMPAT_64BIT != 0
    }

    /// Bytes per descriptor tag (`journal_tag_bytes`): 16 with `csum_v3`;
    /// otherwise 12, +2 with `csum_v2`, −4 without `64bit`.
    pub fn tag_bytes(&self) -> usize {
        if self.has_csum_v3() {
            return 16;
        }
        let sz = if self.has_csum_v2or3() { 14 } else { 12 };
        if self.is_64bit() { sz } else { sz - 4 }
    }

    /// Bytes reserved at the end of descriptor and revoke blocks for the
    /// block tail (4 with v2/v3 checksums, else 0).
    pub fn tail_bytes(&self) -> usize {
        if self.has_csum_v2or3() { TAIL_SIZE } else { 0 }
    }
}

/// The seed of journal checksums: `crc32c(~0, s_uuid)`.
pub fn csum_seed(uuid: &[u8; 16]) -> u32 {
    crc32c_raw(!0, uuid)
}

/// The block-tail checksum of a descriptor or revoke block: crc32c from the
/// journal seed over the whole block with the last 4 bytes taken as zero.
pub fn tail_checksum(csum_seed: u32, block: &[u8]) -> u32 {
    let body = block.len().saturating_sub(TAIL_SIZE);
    let crc = crc32c_raw(csum_seed, block.get(..body).unwrap_or(&[]));
    crc32c_raw(crc, &[0u8; TAIL_SIZE])
}

/// Checks the block tail (`jbd2_journal_block_tail.t_checksum`) of a
/// descriptor or revoke block; a no-op without v2/v3 checksums.
///
/// # Errors
/// Checksum error on `structure.t_checksum` at the last 4 bytes.
pub fn verify_tail(p: &JournalParams, block: &[u8], structure: &'static str) -> Result<()> {
    if !p.has_csum_v2or3() {
        return Ok(());
    }
    let at = block.len().checked_sub(TAIL_SIZE).filter(|&a| a >= HEADER_SIZE);
    let at = at.ok_or_else(|| FormatError::truncated(structure, HEADER_SIZE + TAIL_SIZE, block.len()))?;
    let stored = be32(block, at, structure)?;
    let computed = tail_checksum(p.csum_seed, block);
    if stored != computed {
        return Err(FormatError::checksum(structure, "t_checksum", at, stored, computed));
    }
    Ok(())
}

/// Stores the block-tail checksum (v2/v3 only; otherwise leaves the block).
pub fn set_tail(p: &JournalParams, block: &mut [u8]) {
    if !p.has_csum_v2or3() {
        return;
    }
    let csum = tail_checksum(p.csum_seed, block);
    let at = block.len().saturating_sub(TAIL_SIZE);
    if let Some(t) = block.get_mut(at..).filter(|t| t.len() == TAIL_SIZE) {
        t.copy_from_slice(&csum.to_be_bytes());
    }
}

#[cfg(test)]
mod tests;
