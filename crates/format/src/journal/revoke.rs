//! Revoke blocks (`jbd2_journal_revoke_header_t`): a journal header,
//! `r_count` (bytes used, header included), then block numbers that replay
//! must not write for this and earlier transactions — 8 bytes each with
//! `64bit`, else 4 — and with v2/v3 checksums a 4-byte block tail.
//!
//! See `Documentation/filesystems/ext4/journal.rst` ("Revocation Block").

use super::descriptor::put;
use super::{BlockType, JournalParams, RawJournalHeader, set_tail, verify_tail};
use crate::error::{FormatError, Result};
use crate::util::be32;

/// Size of `jbd2_journal_revoke_header_t` (header + `r_count`).
pub const REVOKE_HEADER_SIZE: usize = 16;
const STRUCT: &str = "jbd2_journal_revoke_header_t";

/// Iterator over the revoked block numbers, bounded by `r_count`.
#[derive(Debug, Clone)]
pub struct Revoked<'a> {
    records: core::slice::ChunksExact<'a, u8>,
}

impl Iterator for Revoked<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let r = self.records.next()?;
        Some(r.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }
}

/// Checks the revoke header and returns the transaction sequence and the
/// revoked block numbers.
///
/// # Errors
/// Truncated (block shorter than `params.block_size`); bad `h_magic`;
/// invalid `h_blocktype` (not 5); invalid `r_count` (offset 12) when smaller
/// than the header or reaching into the block tail.
pub fn revoked<'a>(block: &'a [u8], params: &JournalParams) -> Result<(u32, Revoked<'a>)> {
    if block.len() < params.block_size.max(REVOKE_HEADER_SIZE) {
        return Err(FormatError::truncated(STRUCT, params.block_size, block.len()));
    }
    let h = RawJournalHeader::parse_kind(block, BlockType::Revoke, STRUCT)?;
    let count = be32(block, 12, STRUCT)?;
    let limit = params.block_size.saturating_sub(params.tail_bytes());
    let used = usize::try_from(count).unwrap_or(usize::MAX);
    if used < REVOKE_HEADER_SIZE || used > limit {
        return Err(FormatError::invalid(STRUCT, "r_count", 12, count.into()));
    }
    let record = if params.is_64bit() { 8 } else { 4 };
    let body = block.get(REVOKE_HEADER_SIZE..used).unwrap_or(&[]);
    Ok((
        h.h_sequence.get(),
        Revoked {
            records: body.chunks_exact(record),
        },
    ))
}

/// Checks the revoke block's tail (no-op without v2/v3 checksums).
///
/// # Errors
/// Checksum error on `t_checksum` at `block_size − 4`.
pub fn verify_checksum(block: &[u8], params: &JournalParams) -> Result<()> {
    verify_tail(params, block.get(..params.block_size).unwrap_or(block), STRUCT)
}

/// Builds a revoke block for transaction `sequence` listing `blocks`, with
/// the tail checksum set when the journal has one.
///
/// # Errors
/// Truncated on the revoke header when the records do not fit; invalid
/// `r_count` for a block number ≥ 2³² without `64bit`.
pub fn encode(params: &JournalParams, sequence: u32, blocks: &[u64]) -> Result<Vec<u8>> {
    let record = if params.is_64bit() { 8 } else { 4 };
    let used = blocks.len().saturating_mul(record).saturating_add(REVOKE_HEADER_SIZE);
    let limit = params.block_size.saturating_sub(params.tail_bytes());
    if used > limit {
        return Err(FormatError::truncated(STRUCT, used, limit));
    }
    let mut block = vec![0u8; params.block_size];
    let header = RawJournalHeader::new(BlockType::Revoke, sequence);
    put(&mut block, 0, zerocopy::IntoBytes::as_bytes(&header));
    let count = u32::try_from(used).map_err(|_| FormatError::truncated(STRUCT, used, limit))?;
    put(&mut block, 12, &count.to_be_bytes());
    for (i, &b) in blocks.iter().enumerate() {
        let at = REVOKE_HEADER_SIZE.saturating_add(i.saturating_mul(record));
        if params.is_64bit() {
            put(&mut block, at, &b.to_be_bytes());
        } else {
            let b32 = u32::try_from(b).map_err(|_| FormatError::invalid(STRUCT, "r_count", at, b))?;
            put(&mut block, at, &b32.to_be_bytes());
        }
    }
    set_tail(params, &mut block);
    Ok(block)
}
