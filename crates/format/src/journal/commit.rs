//! Commit blocks (`struct commit_header`): the record that makes a
//! transaction durable. With v2/v3 checksums `h_chksum[0]` holds the crc32c
//! of the whole block computed with that word zero (and `h_chksum_type` /
//! `h_chksum_size` written as zero); with the old `COMPAT_CHECKSUM` it holds
//! a crc32 of the data blocks, which this module only reports.
//!
//! See `Documentation/filesystems/ext4/journal.rst` ("Commit Block").

use zerocopy::big_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::descriptor::put;
use super::{BlockType, JournalParams, RawJournalHeader};
use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};

/// Size of `struct commit_header`.
pub const COMMIT_HEADER_SIZE: usize = 0x3C;
/// Byte offset of `h_chksum[0]`.
pub const H_CHKSUM_OFFSET: usize = 0x10;
const STRUCT: &str = "commit_header";

/// `struct commit_header`, at the start of a commit block.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are jbd2.h's; see journal.rst
pub struct RawCommitHeader {
    pub h_header: RawJournalHeader,
    pub h_chksum_type: u8,
    pub h_chksum_size: u8,
    pub h_padding: [u8; 2],
    pub h_chksum: [U32; 8],
    pub h_commit_sec: U64,
    pub h_commit_nsec: U32,
}
const _: () = assert!(core::mem::size_of::<RawCommitHeader>() == COMMIT_HEADER_SIZE);
const _: () = assert!(core::mem::offset_of!(RawCommitHeader, h_chksum) == H_CHKSUM_OFFSET);
const _: () = assert!(core::mem::offset_of!(RawCommitHeader, h_commit_sec) == 0x30);

impl RawCommitHeader {
    /// Decodes the commit header at the start of `block`.
    ///
    /// # Errors
    /// Truncated; bad `h_magic`; invalid `h_blocktype` (not 2).
    pub fn parse(block: &[u8]) -> Result<Self> {
        RawJournalHeader::parse_kind(block, BlockType::Commit, STRUCT)?;
        Self::read_from_prefix(block)
            .map(|(h, _)| h)
            .map_err(|_| FormatError::truncated(STRUCT, COMMIT_HEADER_SIZE, block.len()))
    }

    /// `h_sequence`: the transaction this block commits.
    pub fn sequence(&self) -> u32 {
        self.h_header.h_sequence.get()
    }
}

/// The v2/v3 commit checksum: crc32c from the journal seed over the whole
/// block with `h_chksum[0]` taken as zero.
pub fn compute_checksum(params: &JournalParams, block: &[u8]) -> u32 {
    let block = block.get(..params.block_size).unwrap_or(block);
    let head = block.get(..H_CHKSUM_OFFSET).unwrap_or(block);
    let crc = crc32c_raw(params.csum_seed, head);
    let crc = crc32c_raw(crc, &[0u8; 4]);
    crc32c_raw(crc, block.get(H_CHKSUM_OFFSET + 4..).unwrap_or(&[]))
}

/// Checks `h_chksum[0]` (no-op without v2/v3 checksums).
///
/// # Errors
/// Truncated if `block` is shorter than a journal block; checksum error on
/// `commit_header.h_chksum` (offset 0x10).
pub fn verify_checksum(params: &JournalParams, block: &[u8]) -> Result<()> {
    if !params.has_csum_v2or3() {
        return Ok(());
    }
    if block.len() < params.block_size.max(COMMIT_HEADER_SIZE) {
        return Err(FormatError::truncated(STRUCT, params.block_size, block.len()));
    }
    let stored = RawCommitHeader::parse(block)?.h_chksum[0].get();
    let computed = compute_checksum(params, block);
    if stored != computed {
        let off = H_CHKSUM_OFFSET;
        return Err(FormatError::checksum(STRUCT, "h_chksum", off, stored, computed));
    }
    Ok(())
}

/// Builds a commit block for transaction `sequence` stamped `sec`.`nsec`,
/// with the v2/v3 checksum set when the journal has one.
pub fn encode(params: &JournalParams, sequence: u32, sec: u64, nsec: u32) -> Vec<u8> {
    let header = RawCommitHeader {
        h_header: RawJournalHeader::new(BlockType::Commit, sequence),
        h_chksum_type: 0,
        h_chksum_size: 0,
        h_padding: [0; 2],
        h_chksum: [U32::new(0); 8],
        h_commit_sec: U64::new(sec),
        h_commit_nsec: U32::new(nsec),
    };
    let mut block = vec![0u8; params.block_size.max(COMMIT_HEADER_SIZE)];
    put(&mut block, 0, header.as_bytes());
    if params.has_csum_v2or3() {
        let csum = compute_checksum(params, &block);
        put(&mut block, H_CHKSUM_OFFSET, &csum.to_be_bytes());
    }
    block
}
