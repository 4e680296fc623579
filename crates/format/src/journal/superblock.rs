//! `journal_superblock_t`: the 1024-byte record in the first block of the
//! journal (the first block of inode 8, or of an external journal device).
//!
//! See `Documentation/filesystems/ext4/journal.rst` ("Super Block").

use zerocopy::big_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{BlockType, JBD2_MAGIC, JournalParams, RawJournalHeader, csum_seed};
use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};

/// Size of the journal superblock record.
pub const JOURNAL_SUPERBLOCK_SIZE: usize = 1024;
/// Byte offset of `s_checksum`.
pub const S_CHECKSUM_OFFSET: usize = 0xFC;
/// `s_checksum_type` value for crc32c.
pub const CHECKSUM_TYPE_CRC32C: u8 = 4;
const STRUCT: &str = "journal_superblock_t";

/// The raw journal superblock, every byte kept (`journal_superblock_t`).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
#[repr(C)]
#[allow(missing_docs)] // field names are jbd2.h's; see journal.rst
pub struct RawJournalSuperblock {
    pub s_header: RawJournalHeader,
    pub s_blocksize: U32,
    pub s_maxlen: U32,
    pub s_first: U32,
    pub s_sequence: U32,
    pub s_start: U32,
    pub s_errno: U32,
    pub s_feature_compat: U32,
    pub s_feature_incompat: U32,
    pub s_feature_ro_compat: U32,
    pub s_uuid: [u8; 16],
    pub s_nr_users: U32,
    pub s_dynsuper: U32,
    pub s_max_transaction: U32,
    pub s_max_trans_data: U32,
    pub s_checksum_type: u8,
    pub s_padding2: [u8; 3],
    pub s_num_fc_blks: U32,
    pub s_head: U32,
    pub s_padding: [U32; 40],
    pub s_checksum: U32,
    pub s_users: [u8; 16 * 48],
}
const _: () = assert!(core::mem::size_of::<RawJournalSuperblock>() == JOURNAL_SUPERBLOCK_SIZE);
const _: () = assert!(core::mem::offset_of!(RawJournalSuperblock, s_uuid) == 0x30);
const _: () = assert!(core::mem::offset_of!(RawJournalSuperblock, s_checksum_type) == 0x50);
const _: () = assert!(core::mem::offset_of!(RawJournalSuperblock, s_head) == 0x58);
const _: () = assert!(core::mem::offset_of!(RawJournalSuperblock, s_checksum) == S_CHECKSUM_OFFSET);
const _: () = assert!(core::mem::offset_of!(RawJournalSuperblock, s_users) == 0x100);

impl RawJournalSuperblock {
    /// Decodes the first 1024 bytes of `buf`, checking the header's magic
    /// and that it is a v1 or v2 superblock.
    ///
    /// # Errors
    /// Truncated; bad `h_magic`; invalid `h_blocktype` (offset 4).
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let sb = Self::read_from_prefix(buf)
            .map(|(sb, _)| sb)
            .map_err(|_| FormatError::truncated(STRUCT, JOURNAL_SUPERBLOCK_SIZE, buf.len()))?;
        let magic = sb.s_header.h_magic.get();
        if magic != JBD2_MAGIC {
            return Err(FormatError::bad_magic(STRUCT, "h_magic", 0, magic.into()));
        }
        match sb.s_header.block_type() {
            Some(BlockType::SuperblockV1 | BlockType::SuperblockV2) => Ok(sb),
            _ => {
                let v = sb.s_header.h_blocktype.get().into();
                Err(FormatError::invalid(STRUCT, "h_blocktype", 4, v))
            }
        }
    }

    /// The bytes of this superblock.
    pub fn encode(&self) -> [u8; JOURNAL_SUPERBLOCK_SIZE] {
        let mut out = [0u8; JOURNAL_SUPERBLOCK_SIZE];
        out.copy_from_slice(self.as_bytes());
        out
    }

    /// True for a version-2 superblock (the only one with feature fields).
    pub fn is_v2(&self) -> bool {
        self.s_header.block_type() == Some(BlockType::SuperblockV2)
    }

    /// `s_feature_incompat`, or 0 for a v1 superblock.
    pub fn incompat(&self) -> u32 {
        if self.is_v2() { self.s_feature_incompat.get() } else { 0 }
    }

    /// `s_checksum` as computed: crc32c(~0) over the 1024-byte record with
    /// `s_checksum` taken as zero (`jbd2_superblock_csum`).
    pub fn compute_checksum(&self) -> u32 {
        let bytes = self.as_bytes();
        let crc = crc32c_raw(!0, &bytes[..S_CHECKSUM_OFFSET]);
        let crc = crc32c_raw(crc, &[0u8; 4]);
        crc32c_raw(crc, &bytes[S_CHECKSUM_OFFSET + 4..])
    }

    /// Checks `s_checksum` when the journal has v2/v3 checksums.
    ///
    /// # Errors
    /// Checksum error on `s_checksum` (offset 0xFC).
    pub fn verify_checksum(&self) -> Result<()> {
        if !self.has_csum_v2or3() {
            return Ok(());
        }
        let (stored, computed) = (self.s_checksum.get(), self.compute_checksum());
        if stored != computed {
            let off = S_CHECKSUM_OFFSET;
            return Err(FormatError::checksum(STRUCT, "s_checksum", off, stored, computed));
        }
        Ok(())
    }

    /// Recomputes `s_checksum` when the journal has v2/v3 checksums;
    /// without them the field is left as it is, as `jbd2_superblock_csum_set`
    /// and e2fsprogs leave it.
    pub fn set_checksum(&mut self) {
        if self.has_csum_v2or3() {
            self.s_checksum.set(self.compute_checksum());
        }
    }

    fn has_csum_v2or3(&self) -> bool {
        self.incompat() & (super::INCOMPAT_CSUM_V2 | super::INCOMPAT_CSUM_V3) != 0
    }

    /// Validates what block parsing depends on and returns it.
    ///
    /// # Errors
    /// Invalid `s_blocksize` (offset 0xC) unless a power of two in
    /// 1 KiB–64 KiB; invalid `s_checksum_type` (offset 0x50) when v2/v3
    /// checksums are on but the type is not crc32c (4).
    pub fn params(&self) -> Result<JournalParams> {
        let bs = self.s_blocksize.get();
        if !bs.is_power_of_two() || !(1024..=65536).contains(&bs) {
            return Err(FormatError::invalid(STRUCT, "s_blocksize", 0xC, bs.into()));
        }
        if self.has_csum_v2or3() && self.s_checksum_type != CHECKSUM_TYPE_CRC32C {
            let v = self.s_checksum_type.into();
            return Err(FormatError::invalid(STRUCT, "s_checksum_type", 0x50, v));
        }
        Ok(JournalParams {
            block_size: usize::try_from(bs).unwrap_or(65536),
            incompat: self.incompat(),
            csum_seed: csum_seed(&self.s_uuid),
        })
    }
}
