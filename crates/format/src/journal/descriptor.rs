//! Descriptor blocks: a journal header, then one tag per data block that
//! follows in the log (`journal_block_tag3_t` with `csum_v3`, else
//! `journal_block_tag_t`), each tag without `SAME_UUID` followed by a
//! 16-byte UUID, the last tag flagged `LAST_TAG`, and with v2/v3 checksums a
//! 4-byte block tail.
//!
//! Tag layouts (big-endian):
//! - tag3 (16 bytes): `t_blocknr` u32, `t_flags` u32, `t_blocknr_high` u32,
//!   `t_checksum` u32;
//! - tag (8, 10, 12 or 14 bytes, see [`JournalParams::tag_bytes`]):
//!   `t_blocknr` u32, `t_checksum` u16, `t_flags` u16, then `t_blocknr_high`
//!   u32 with `64bit`.
//!
//! See `Documentation/filesystems/ext4/journal.rst` ("Descriptor Block").

use super::{BlockType, HEADER_SIZE, JournalParams, RawJournalHeader, set_tail, verify_tail};
use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};
use crate::util::{be32, slice};

/// `t_flags`: the data block's first word was the jbd2 magic and was zeroed.
pub const FLAG_ESCAPE: u32 = 1;
/// `t_flags`: same UUID as the previous tag; no UUID follows.
pub const FLAG_SAME_UUID: u32 = 2;
/// `t_flags`: block deleted by this transaction (unused by the kernel).
pub const FLAG_DELETED: u32 = 4;
/// `t_flags`: last tag of the descriptor.
pub const FLAG_LAST_TAG: u32 = 8;
/// Bytes of the UUID that follows a tag without `SAME_UUID`.
pub const UUID_SIZE: usize = 16;

const STRUCT: &str = "journal_descriptor_block";
const TAG: &str = "journal_block_tag_t";

/// One decoded tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    /// Byte offset of the tag within the descriptor block (0 when building).
    pub offset: usize,
    /// Where the data block goes in the file system (`t_blocknr`, joined
    /// with `t_blocknr_high` under `64bit`).
    pub blocknr: u64,
    /// `t_flags` (`FLAG_*`).
    pub flags: u32,
    /// `t_checksum` (16 significant bits for v2 tags).
    pub checksum: u32,
    /// The UUID following the tag, when `SAME_UUID` is clear.
    pub uuid: Option<[u8; UUID_SIZE]>,
}

impl Tag {
    /// True if the data block was escaped (its first 4 bytes must be
    /// restored to the jbd2 magic on replay).
    pub fn escaped(&self) -> bool {
        self.flags & FLAG_ESCAPE != 0
    }
}

/// Iterator over a descriptor block's tags; bounded by the block (minus the
/// tail), stops after `LAST_TAG` or the first error.
#[derive(Debug, Clone)]
pub struct Tags<'a> {
    block: &'a [u8],
    params: JournalParams,
    off: usize,
    done: bool,
}

/// Checks the descriptor header and returns its sequence and tag iterator.
///
/// # Errors
/// Truncated (block shorter than `params.block_size`), bad `h_magic`, or
/// invalid `h_blocktype` (not 1).
pub fn tags<'a>(block: &'a [u8], params: &JournalParams) -> Result<(u32, Tags<'a>)> {
    if block.len() < params.block_size {
        return Err(FormatError::truncated(STRUCT, params.block_size, block.len()));
    }
    let block = block.get(..params.block_size).unwrap_or(block);
    let h = RawJournalHeader::parse_kind(block, BlockType::Descriptor, STRUCT)?;
    let iter = Tags {
        block,
        params: *params,
        off: HEADER_SIZE,
        done: false,
    };
    Ok((h.h_sequence.get(), iter))
}

impl Iterator for Tags<'_> {
    type Item = Result<Tag>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let limit = self.block.len().saturating_sub(self.params.tail_bytes());
        let tag_bytes = self.params.tag_bytes();
        if self.off.saturating_add(tag_bytes) > limit {
            self.done = true;
            return None;
        }
        let item = read_tag(self.block, self.off, limit, &self.params);
        match &item {
            Ok(tag) => {
                let uuid = if tag.uuid.is_some() { UUID_SIZE } else { 0 };
                self.off = self.off.saturating_add(tag_bytes).saturating_add(uuid);
                self.done = tag.flags & FLAG_LAST_TAG != 0;
            }
            Err(_) => self.done = true,
        }
        Some(item)
    }
}

fn be16(buf: &[u8], off: usize) -> Result<u16> {
    let b = slice(buf, off, 2, TAG)?;
    Ok(u16::from_be_bytes([b[0], b[1]]))
}

fn read_tag(block: &[u8], off: usize, limit: usize, p: &JournalParams) -> Result<Tag> {
    let at = |d: usize| off.saturating_add(d);
    let lo = be32(block, off, TAG)?;
    let (flags, checksum) = if p.has_csum_v3() {
        (be32(block, at(4), TAG)?, be32(block, at(12), TAG)?)
    } else {
        (be16(block, at(6))?.into(), be16(block, at(4))?.into())
    };
    let hi = if p.is_64bit() { be32(block, at(8), TAG)? } else { 0 };
    let uuid = if flags & FLAG_SAME_UUID == 0 {
        let start = at(p.tag_bytes());
        if start.saturating_add(UUID_SIZE) > limit {
            return Err(FormatError::invalid(TAG, "t_flags", at(4), flags.into()));
        }
        let mut u = [0u8; UUID_SIZE];
        u.copy_from_slice(slice(block, start, UUID_SIZE, TAG)?);
        Some(u)
    } else {
        None
    };
    let blocknr = (u64::from(hi) << 32) | u64::from(lo);
    Ok(Tag {
        offset: off,
        blocknr,
        flags,
        checksum,
        uuid,
    })
}

/// Checks the descriptor's block tail (no-op without v2/v3 checksums).
///
/// # Errors
/// Checksum error on `t_checksum` at `block_size − 4`.
pub fn verify_checksum(block: &[u8], params: &JournalParams) -> Result<()> {
    verify_tail(params, block.get(..params.block_size).unwrap_or(block), STRUCT)
}

/// The checksum of a logged data block (`jbd2_block_tag_csum_*`): crc32c
/// from the journal seed over the big-endian transaction sequence, then
/// over the block as stored in the journal (escaped or not).
pub fn data_checksum(params: &JournalParams, sequence: u32, data: &[u8]) -> u32 {
    let crc = crc32c_raw(params.csum_seed, &sequence.to_be_bytes());
    crc32c_raw(crc, data)
}

/// Checks a tag's `t_checksum` against its data block: all 32 bits with
/// `csum_v3`, the low 16 with `csum_v2`; a no-op without either.
///
/// # Errors
/// Checksum error on `journal_block_tag_t.t_checksum` at the field's offset
/// in the descriptor block.
pub fn verify_data(params: &JournalParams, tag: &Tag, sequence: u32, data: &[u8]) -> Result<()> {
    if !params.has_csum_v2or3() {
        return Ok(());
    }
    let full = data_checksum(params, sequence, data);
    let (computed, field_off) = if params.has_csum_v3() {
        (full, 12)
    } else {
        (full & 0xFFFF, 4)
    };
    if tag.checksum != computed {
        let off = tag.offset.saturating_add(field_off);
        return Err(FormatError::checksum(TAG, "t_checksum", off, tag.checksum, computed));
    }
    Ok(())
}

/// Builds a descriptor block for transaction `sequence` holding `tags` in
/// order. `LAST_TAG` is set on the last tag only and `SAME_UUID` exactly on
/// tags whose `uuid` is `None`; the other flags and checksums are the
/// caller's. The block tail is set with v2/v3 checksums.
///
/// # Errors
/// Truncated on `journal_descriptor_block` when the tags do not fit.
pub fn encode(params: &JournalParams, sequence: u32, tags: &[Tag]) -> Result<Vec<u8>> {
    let size = params.block_size;
    let mut block = vec![0u8; size];
    let header = RawJournalHeader::new(BlockType::Descriptor, sequence);
    put(&mut block, 0, zerocopy::IntoBytes::as_bytes(&header));
    let limit = size.saturating_sub(params.tail_bytes());
    let mut off = HEADER_SIZE;
    for (i, tag) in tags.iter().enumerate() {
        let uuid_len = if tag.uuid.is_some() { UUID_SIZE } else { 0 };
        let need = off.saturating_add(params.tag_bytes()).saturating_add(uuid_len);
        if need > limit {
            let want = need.saturating_add(params.tail_bytes());
            return Err(FormatError::truncated(STRUCT, want, size));
        }
        let last = i.saturating_add(1) == tags.len();
        write_tag(&mut block, off, params, tag, last);
        off = need;
    }
    set_tail(params, &mut block);
    Ok(block)
}

fn write_tag(block: &mut [u8], off: usize, p: &JournalParams, tag: &Tag, last: bool) {
    let mut flags = tag.flags & !(FLAG_LAST_TAG | FLAG_SAME_UUID);
    if last {
        flags |= FLAG_LAST_TAG;
    }
    if tag.uuid.is_none() {
        flags |= FLAG_SAME_UUID;
    }
    let at = |d: usize| off.saturating_add(d);
    let lo = u32::try_from(tag.blocknr & 0xFFFF_FFFF).unwrap_or(0);
    let hi = u32::try_from(tag.blocknr >> 32).unwrap_or(0);
    put(block, off, &lo.to_be_bytes());
    if p.has_csum_v3() {
        put(block, at(4), &flags.to_be_bytes());
        put(block, at(12), &tag.checksum.to_be_bytes());
    } else {
        let csum16 = u16::try_from(tag.checksum & 0xFFFF).unwrap_or(0);
        let flags16 = u16::try_from(flags & 0xFFFF).unwrap_or(0);
        put(block, at(4), &csum16.to_be_bytes());
        put(block, at(6), &flags16.to_be_bytes());
    }
    if p.is_64bit() {
        put(block, at(8), &hi.to_be_bytes());
    }
    if let Some(uuid) = &tag.uuid {
        put(block, at(p.tag_bytes()), uuid);
    }
}

/// Copies `src` to `buf[at..]` when it fits (callers check room first).
pub(super) fn put(buf: &mut [u8], at: usize, src: &[u8]) {
    if let Some(dst) = buf.get_mut(at..at.saturating_add(src.len())) {
        dst.copy_from_slice(src);
    }
}
