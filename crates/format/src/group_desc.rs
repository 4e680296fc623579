//! `struct ext4_group_desc`: the 32-byte (or, with `64bit`, `s_desc_size`
//! byte) record per block group locating its bitmaps and inode table, its free
//! counts, its `bg_flags` and its checksum.
//!
//! See `Documentation/filesystems/ext4/group_descr.rst`.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::checksum::{crc16, crc32c_raw};
use crate::error::{FormatError, Result};
use crate::features::Features;
use crate::util::hilo64;

const STRUCT: &str = "ext4_group_desc";

/// `bg_flags`: inode table and bitmap are not initialised.
pub const BG_INODE_UNINIT: u16 = 0x1;
/// `bg_flags`: block bitmap is not initialised.
pub const BG_BLOCK_UNINIT: u16 = 0x2;
/// `bg_flags`: inode table is zeroed.
pub const BG_INODE_ZEROED: u16 = 0x4;

/// The raw 64-byte group descriptor. With 32-byte descriptors only the first
/// half is on disk; the `_hi` fields then read as zero.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
#[repr(C)]
#[allow(missing_docs)] // kernel field names; see group_descr.rst
pub struct RawGroupDesc {
    pub bg_block_bitmap_lo: U32,
    pub bg_inode_bitmap_lo: U32,
    pub bg_inode_table_lo: U32,
    pub bg_free_blocks_count_lo: U16,
    pub bg_free_inodes_count_lo: U16,
    pub bg_used_dirs_count_lo: U16,
    pub bg_flags: U16,
    pub bg_exclude_bitmap_lo: U32,
    pub bg_block_bitmap_csum_lo: U16,
    pub bg_inode_bitmap_csum_lo: U16,
    pub bg_itable_unused_lo: U16,
    pub bg_checksum: U16,
    pub bg_block_bitmap_hi: U32,
    pub bg_inode_bitmap_hi: U32,
    pub bg_inode_table_hi: U32,
    pub bg_free_blocks_count_hi: U16,
    pub bg_free_inodes_count_hi: U16,
    pub bg_used_dirs_count_hi: U16,
    pub bg_itable_unused_hi: U16,
    pub bg_exclude_bitmap_hi: U32,
    pub bg_block_bitmap_csum_hi: U16,
    pub bg_inode_bitmap_csum_hi: U16,
    pub bg_reserved: U32,
}

const _: () = assert!(core::mem::size_of::<RawGroupDesc>() == 64);
const CSUM_OFFSET: usize = 0x1E;

impl RawGroupDesc {
    /// Decodes a descriptor of `desc_size` bytes (32, or 64 and up) from `buf`.
    /// Bytes past the 64 the kernel defines are not kept: every writer here
    /// stores them as zero, and [`Self::compute_checksum`] counts them so.
    pub fn parse(buf: &[u8], desc_size: usize) -> Result<Self> {
        let mut raw = [0u8; 64];
        let take = desc_size.min(64);
        let src = buf
            .get(..desc_size)
            .ok_or_else(|| FormatError::truncated(STRUCT, desc_size, buf.len()))?;
        raw[..take].copy_from_slice(&src[..take]);
        Self::read_from_bytes(&raw).map_err(|_| FormatError::truncated(STRUCT, 64, take))
    }

    /// Writes the descriptor into `out` (`desc_size` bytes), zeroing what
    /// lies past the 64 defined bytes.
    pub fn encode_into(&self, out: &mut [u8]) {
        let n = out.len().min(64);
        out[..n].copy_from_slice(&self.as_bytes()[..n]);
        out[n..].fill(0);
    }

    /// Location of the block bitmap.
    pub fn block_bitmap(&self) -> u64 {
        hilo64(self.bg_block_bitmap_hi.get(), self.bg_block_bitmap_lo.get())
    }
    /// Location of the inode bitmap.
    pub fn inode_bitmap(&self) -> u64 {
        hilo64(self.bg_inode_bitmap_hi.get(), self.bg_inode_bitmap_lo.get())
    }
    /// First block of the inode table.
    pub fn inode_table(&self) -> u64 {
        hilo64(self.bg_inode_table_hi.get(), self.bg_inode_table_lo.get())
    }
    /// Free blocks in the group.
    pub fn free_blocks(&self) -> u32 {
        join16(self.bg_free_blocks_count_hi.get(), self.bg_free_blocks_count_lo.get())
    }
    /// Free inodes in the group.
    pub fn free_inodes(&self) -> u32 {
        join16(self.bg_free_inodes_count_hi.get(), self.bg_free_inodes_count_lo.get())
    }
    /// Directories in the group.
    pub fn used_dirs(&self) -> u32 {
        join16(self.bg_used_dirs_count_hi.get(), self.bg_used_dirs_count_lo.get())
    }
    /// Unused inodes at the end of the inode table.
    pub fn itable_unused(&self) -> u32 {
        join16(self.bg_itable_unused_hi.get(), self.bg_itable_unused_lo.get())
    }
    /// `bg_flags`.
    pub fn flags(&self) -> u16 {
        self.bg_flags.get()
    }
    /// Stored block-bitmap checksum (16 or 32 bits depending on desc size).
    pub fn block_bitmap_csum(&self) -> u32 {
        join16(self.bg_block_bitmap_csum_hi.get(), self.bg_block_bitmap_csum_lo.get())
    }
    /// Stored inode-bitmap checksum.
    pub fn inode_bitmap_csum(&self) -> u32 {
        join16(self.bg_inode_bitmap_csum_hi.get(), self.bg_inode_bitmap_csum_lo.get())
    }

    /// Stores a block-bitmap checksum from [`bitmap_checksum`] (the high
    /// half only exists in 64-byte descriptors and is 0 otherwise).
    pub fn set_block_bitmap_csum(&mut self, c: u32) {
        self.bg_block_bitmap_csum_lo.set(c as u16);
        self.bg_block_bitmap_csum_hi.set((c >> 16) as u16);
    }

    /// Sets the free block count (the high half is dropped by a 32-byte
    /// descriptor's encoding, where counts fit in 16 bits).
    pub fn set_free_blocks(&mut self, n: u32) {
        self.bg_free_blocks_count_lo.set(n as u16);
        self.bg_free_blocks_count_hi.set((n >> 16) as u16);
    }

    /// Sets the free inode count.
    pub fn set_free_inodes(&mut self, n: u32) {
        self.bg_free_inodes_count_lo.set(n as u16);
        self.bg_free_inodes_count_hi.set((n >> 16) as u16);
    }

    /// Sets the directory count.
    pub fn set_used_dirs(&mut self, n: u32) {
        self.bg_used_dirs_count_lo.set(n as u16);
        self.bg_used_dirs_count_hi.set((n >> 16) as u16);
    }

    /// Sets the count of never-used inodes at the end of the table.
    pub fn set_itable_unused(&mut self, n: u32) {
        self.bg_itable_unused_lo.set(n as u16);
        self.bg_itable_unused_hi.set((n >> 16) as u16);
    }

    /// Stores an inode-bitmap checksum from [`bitmap_checksum`].
    pub fn set_inode_bitmap_csum(&mut self, c: u32) {
        self.bg_inode_bitmap_csum_lo.set(c as u16);
        self.bg_inode_bitmap_csum_hi.set((c >> 16) as u16);
    }

    /// The descriptor checksum as the kernel computes it: with
    /// `metadata_csum`, the low 16 bits of crc32c(seed, le32 group, desc with
    /// `bg_checksum` zeroed); with `gdt_csum`, crc16 over uuid, group and the
    /// descriptor minus the checksum field; otherwise 0. Both run over all
    /// `desc_size` bytes, so a descriptor larger than 64 bytes adds its
    /// (zero) tail.
    pub fn compute_checksum(
        &self,
        features: &Features,
        csum_seed: u32,
        uuid: &[u8; 16],
        group: u32,
        desc_size: usize,
    ) -> u16 {
        let bytes = &self.as_bytes()[..desc_size.min(64)];
        let group_le = group.to_le_bytes();
        if features.metadata_csum() {
            let mut c = crc32c_raw(csum_seed, &group_le);
            c = crc32c_raw(c, &bytes[..CSUM_OFFSET]);
            c = crc32c_raw(c, &[0, 0]);
            c = crc32c_raw(c, &bytes[CSUM_OFFSET + 2..]);
            c = crc32c_raw(c, zero_tail(desc_size));
            (c & 0xFFFF) as u16
        } else if features.has_group_csum() {
            let mut c = crc16(!0, uuid);
            c = crc16(c, &group_le);
            c = crc16(c, &bytes[..CSUM_OFFSET]);
            if bytes.len() > CSUM_OFFSET + 2 {
                c = crc16(c, &bytes[CSUM_OFFSET + 2..]);
            }
            crc16(c, zero_tail(desc_size))
        } else {
            0
        }
    }

    /// Checks `bg_checksum` where a checksum feature is on.
    pub fn verify_checksum(
        &self,
        features: &Features,
        csum_seed: u32,
        uuid: &[u8; 16],
        group: u32,
        desc_size: usize,
    ) -> Result<()> {
        if !features.has_group_csum() {
            return Ok(());
        }
        let computed = self.compute_checksum(features, csum_seed, uuid, group, desc_size);
        let stored = self.bg_checksum.get();
        if computed != stored {
            return Err(FormatError::checksum(
                STRUCT,
                "bg_checksum",
                CSUM_OFFSET,
                stored.into(),
                computed.into(),
            ));
        }
        Ok(())
    }
}

/// The zero bytes a `desc_size`-byte descriptor has past the 64 defined
/// ones (EXT4_MAX_DESC_SIZE is 1024).
fn zero_tail(desc_size: usize) -> &'static [u8] {
    const ZEROS: [u8; 1024 - 64] = [0; 1024 - 64];
    &ZEROS[..desc_size.clamp(64, 1024) - 64]
}

fn join16(hi: u16, lo: u16) -> u32 {
    (u32::from(hi) << 16) | u32::from(lo)
}

/// The bitmap checksum stored in a group descriptor: crc32c(seed) over the
/// bitmap's meaningful bytes, truncated to 16 bits when descriptors are 32
/// bytes. `len` is `blocks_per_group / 8` for block bitmaps and
/// `inodes_per_group / 8` for inode bitmaps.
pub fn bitmap_checksum(csum_seed: u32, bitmap: &[u8], len: usize, desc_size: u16) -> u32 {
    let c = crc32c_raw(csum_seed, &bitmap[..len.min(bitmap.len())]);
    if desc_size >= 64 { c } else { c & 0xFFFF }
}
