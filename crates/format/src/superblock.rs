//! `struct ext4_super_block`: the 1024-byte record at byte 1024 of the image
//! (and its backups), and [`Geometry`], the validated numbers every other layer
//! computes with.
//!
//! See `Documentation/filesystems/ext4/super.rst`.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::checksum::{crc32c_raw, fs_csum_seed};
use crate::error::{FormatError, Result};
use crate::features::{CompatFeatures, Features, IncompatFeatures, RoCompatFeatures};
use crate::util::hilo64;

/// Byte offset of the primary superblock in the image.
pub const SUPERBLOCK_OFFSET: u64 = 1024;
/// Size of the superblock record.
pub const SUPERBLOCK_SIZE: usize = 1024;
/// `s_magic`.
pub const EXT4_SUPER_MAGIC: u16 = 0xEF53;
const STRUCT: &str = "ext4_super_block";

/// The raw superblock, every byte kept (`struct ext4_super_block`).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
#[repr(C)]
#[allow(missing_docs)] // field names are the kernel's; see super.rst
pub struct RawSuperblock {
    pub s_inodes_count: U32,
    pub s_blocks_count_lo: U32,
    pub s_r_blocks_count_lo: U32,
    pub s_free_blocks_count_lo: U32,
    pub s_free_inodes_count: U32,
    pub s_first_data_block: U32,
    pub s_log_block_size: U32,
    pub s_log_cluster_size: U32,
    pub s_blocks_per_group: U32,
    pub s_clusters_per_group: U32,
    pub s_inodes_per_group: U32,
    pub s_mtime: U32,
    pub s_wtime: U32,
    pub s_mnt_count: U16,
    pub s_max_mnt_count: U16,
    pub s_magic: U16,
    pub s_state: U16,
    pub s_errors: U16,
    pub s_minor_rev_level: U16,
    pub s_lastcheck: U32,
    pub s_checkinterval: U32,
    pub s_creator_os: U32,
    pub s_rev_level: U32,
    pub s_def_resuid: U16,
    pub s_def_resgid: U16,
    pub s_first_ino: U32,
    pub s_inode_size: U16,
    pub s_block_group_nr: U16,
    pub s_feature_compat: U32,
    pub s_feature_incompat: U32,
    pub s_feature_ro_compat: U32,
    pub s_uuid: [u8; 16],
    pub s_volume_name: [u8; 16],
    pub s_last_mounted: [u8; 64],
    pub s_algorithm_usage_bitmap: U32,
    pub s_prealloc_blocks: u8,
    pub s_prealloc_dir_blocks: u8,
    pub s_reserved_gdt_blocks: U16,
    pub s_journal_uuid: [u8; 16],
    pub s_journal_inum: U32,
    pub s_journal_dev: U32,
    pub s_last_orphan: U32,
    pub s_hash_seed: [U32; 4],
    pub s_def_hash_version: u8,
    pub s_jnl_backup_type: u8,
    pub s_desc_size: U16,
    pub s_default_mount_opts: U32,
    pub s_first_meta_bg: U32,
    pub s_mkfs_time: U32,
    pub s_jnl_blocks: [U32; 17],
    pub s_blocks_count_hi: U32,
    pub s_r_blocks_count_hi: U32,
    pub s_free_blocks_count_hi: U32,
    pub s_min_extra_isize: U16,
    pub s_want_extra_isize: U16,
    pub s_flags: U32,
    pub s_raid_stride: U16,
    pub s_mmp_update_interval: U16,
    pub s_mmp_block: U64,
    pub s_raid_stripe_width: U32,
    pub s_log_groups_per_flex: u8,
    pub s_checksum_type: u8,
    pub s_encryption_level: u8,
    pub s_reserved_pad: u8,
    pub s_kbytes_written: U64,
    pub s_snapshot_inum: U32,
    pub s_snapshot_id: U32,
    pub s_snapshot_r_blocks_count: U64,
    pub s_snapshot_list: U32,
    pub s_error_count: U32,
    pub s_first_error_time: U32,
    pub s_first_error_ino: U32,
    pub s_first_error_block: U64,
    pub s_first_error_func: [u8; 32],
    pub s_first_error_line: U32,
    pub s_last_error_time: U32,
    pub s_last_error_ino: U32,
    pub s_last_error_line: U32,
    pub s_last_error_block: U64,
    pub s_last_error_func: [u8; 32],
    pub s_mount_opts: [u8; 64],
    pub s_usr_quota_inum: U32,
    pub s_grp_quota_inum: U32,
    pub s_overhead_clusters: U32,
    pub s_backup_bgs: [U32; 2],
    pub s_encrypt_algos: [u8; 4],
    pub s_encrypt_pw_salt: [u8; 16],
    pub s_lpf_ino: U32,
    pub s_prj_quota_inum: U32,
    pub s_checksum_seed: U32,
    pub s_wtime_hi: u8,
    pub s_mtime_hi: u8,
    pub s_mkfs_time_hi: u8,
    pub s_lastcheck_hi: u8,
    pub s_first_error_time_hi: u8,
    pub s_last_error_time_hi: u8,
    pub s_first_error_errcode: u8,
    pub s_last_error_errcode: u8,
    pub s_encoding: U16,
    pub s_encoding_flags: U16,
    pub s_orphan_file_inum: U32,
    pub s_reserved: [U32; 94],
    pub s_checksum: U32,
}

const _: () = assert!(core::mem::size_of::<RawSuperblock>() == SUPERBLOCK_SIZE);
const _: () = assert!(core::mem::offset_of!(RawSuperblock, s_journal_uuid) == 0xD0);
const _: () = assert!(core::mem::offset_of!(RawSuperblock, s_log_groups_per_flex) == 0x174);
const _: () = assert!(core::mem::offset_of!(RawSuperblock, s_checksum_seed) == 0x270);
const _: () = assert!(core::mem::offset_of!(RawSuperblock, s_orphan_file_inum) == 0x280);
const _: () = assert!(core::mem::offset_of!(RawSuperblock, s_checksum) == 0x3FC);

/// `s_state` bit: cleanly unmounted.
pub const STATE_VALID: u16 = 0x1;
/// `s_state` bit: errors detected.
pub const STATE_ERROR: u16 = 0x2;
/// `s_state` bit: orphans being recovered.
pub const STATE_ORPHAN: u16 = 0x4;
/// `s_flags` bit: signed directory hash.
pub const FLAGS_SIGNED_HASH: u32 = 0x1;
/// `s_flags` bit: unsigned directory hash.
pub const FLAGS_UNSIGNED_HASH: u32 = 0x2;

/// `EXT3_JNL_BACKUP_BLOCKS`: `s_jnl_blocks` holds a copy of the journal
/// inode's `i_block` and size.
pub const JNL_BACKUP_BLOCKS: u8 = 1;

impl RawSuperblock {
    /// Keeps the copy of the journal inode's `i_block` (its 60 bytes) and
    /// size in `s_jnl_blocks` (`EXT3_JNL_BACKUP_BLOCKS`), from which
    /// e2fsck rebuilds a damaged journal inode: mke2fs, tune2fs -j,
    /// e2fsck's journal recreation and resize2fs moving a journal all
    /// write it.
    pub fn set_journal_backup(&mut self, i_block: &[u8], size: u64) {
        self.s_jnl_backup_type = JNL_BACKUP_BLOCKS;
        for (slot, w) in self.s_jnl_blocks.iter_mut().zip(i_block.chunks_exact(4).take(15)) {
            slot.set(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        }
        self.s_jnl_blocks[15].set((size >> 32) as u32);
        self.s_jnl_blocks[16].set(size as u32);
    }

    /// Decodes the first 1024 bytes of `buf` without validating anything.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        Self::read_from_prefix(buf)
            .map(|(sb, _)| sb)
            .map_err(|_| FormatError::truncated(STRUCT, SUPERBLOCK_SIZE, buf.len()))
    }

    /// The bytes of this superblock.
    pub fn encode(&self) -> [u8; SUPERBLOCK_SIZE] {
        let mut out = [0u8; SUPERBLOCK_SIZE];
        out.copy_from_slice(self.as_bytes());
        out
    }

    /// The feature sets.
    pub fn features(&self) -> Features {
        Features {
            compat: CompatFeatures(self.s_feature_compat.get()),
            incompat: IncompatFeatures(self.s_feature_incompat.get()),
            ro_compat: RoCompatFeatures(self.s_feature_ro_compat.get()),
        }
    }

    /// `s_checksum` as computed: crc32c(~0) over bytes 0..0x3FC.
    pub fn compute_checksum(&self) -> u32 {
        crc32c_raw(!0, &self.as_bytes()[..0x3FC])
    }

    /// Checks `s_checksum` when `metadata_csum` is on (`s_checksum_type` 1).
    pub fn verify_checksum(&self) -> Result<()> {
        if !self.features().metadata_csum() {
            return Ok(());
        }
        let (stored, computed) = (self.s_checksum.get(), self.compute_checksum());
        if stored != computed {
            return Err(FormatError::checksum(STRUCT, "s_checksum", 0x3FC, stored, computed));
        }
        Ok(())
    }

    /// Recomputes `s_checksum`.
    pub fn set_checksum(&mut self) {
        self.s_checksum.set(self.compute_checksum());
    }

    /// The seed of every other metadata checksum.
    pub fn csum_seed(&self) -> u32 {
        if self.features().incompat.contains(IncompatFeatures::CSUM_SEED) {
            self.s_checksum_seed.get()
        } else {
            fs_csum_seed(&self.s_uuid)
        }
    }

    /// The volume label, trailing NULs removed.
    pub fn volume_name(&self) -> String {
        c_string(&self.s_volume_name)
    }

    /// The last mount point recorded.
    pub fn last_mounted(&self) -> String {
        c_string(&self.s_last_mounted)
    }
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Validated numbers describing the layout of the file system. Every value
/// here has been range-checked so that later arithmetic cannot overflow or
/// divide by zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Block size in bytes (1 KiB – 64 KiB).
    pub block_size: u32,
    /// `log2(block_size)`.
    pub block_size_log2: u32,
    /// Total blocks.
    pub blocks_count: u64,
    /// First data block (1 for 1 KiB blocks, else 0).
    pub first_data_block: u32,
    /// Blocks per group.
    pub blocks_per_group: u32,
    /// `log2` of blocks per allocation cluster: 0 without bigalloc, else
    /// `s_log_cluster_size - s_log_block_size`.
    pub cluster_bits: u32,
    /// Clusters per group, the bits of one block bitmap
    /// (`s_clusters_per_group`; blocks per group without bigalloc).
    pub clusters_per_group: u32,
    /// Inodes per group.
    pub inodes_per_group: u32,
    /// Total inodes.
    pub inodes_count: u32,
    /// Number of block groups.
    pub group_count: u32,
    /// On-disk inode record size.
    pub inode_size: u16,
    /// Group descriptor size (32 or 64).
    pub desc_size: u16,
    /// First non-reserved inode.
    pub first_ino: u32,
    /// Inode-table blocks per group.
    pub inode_table_blocks: u32,
    /// Groups per flex group (1 without flex_bg).
    pub groups_per_flex: u32,
    /// Feature sets.
    pub features: Features,
}

impl Geometry {
    /// Validates the layout fields of `sb`.
    ///
    /// # Errors
    /// Bad magic, block sizes outside 1 KiB–64 KiB, zero or impossible group
    /// sizes, descriptor or inode sizes that are not powers of two in range,
    /// and counts inconsistent with each other, each naming the field.
    pub fn from_superblock(sb: &RawSuperblock) -> Result<Self> {
        let bad = |field, off, v: u64| FormatError::invalid(STRUCT, field, off, v);
        if sb.s_magic.get() != EXT4_SUPER_MAGIC {
            return Err(FormatError::bad_magic(STRUCT, "s_magic", 0x38, sb.s_magic.get().into()));
        }
        let log = sb.s_log_block_size.get();
        if log > 6 {
            return Err(bad("s_log_block_size", 0x18, log.into()));
        }
        let block_size_log2 = 10 + log;
        let block_size = 1u32 << block_size_log2;
        let features = sb.features();
        let bit64 = features.incompat.contains(IncompatFeatures::BIT64);
        let blocks_count = if bit64 {
            hilo64(sb.s_blocks_count_hi.get(), sb.s_blocks_count_lo.get())
        } else {
            sb.s_blocks_count_lo.get().into()
        };
        if blocks_count == 0 || blocks_count >= 1 << 48 {
            return Err(bad("s_blocks_count_lo", 0x4, blocks_count));
        }
        let first_data_block = sb.s_first_data_block.get();
        if u64::from(first_data_block) >= blocks_count || first_data_block > 1 {
            return Err(bad("s_first_data_block", 0x14, first_data_block.into()));
        }
        let (blocks_per_group, cluster_bits, clusters_per_group) = group_size(sb, block_size)?;
        let inodes_per_group = sb.s_inodes_per_group.get();
        if inodes_per_group == 0 || inodes_per_group > block_size.saturating_mul(8) {
            return Err(bad("s_inodes_per_group", 0x28, inodes_per_group.into()));
        }
        let inode_size = if sb.s_rev_level.get() == 0 {
            128
        } else {
            sb.s_inode_size.get()
        };
        if inode_size < 128 || !inode_size.is_power_of_two() || u32::from(inode_size) > block_size {
            return Err(bad("s_inode_size", 0x58, inode_size.into()));
        }
        let desc_size = if bit64 { sb.s_desc_size.get() } else { 32 };
        // With `64bit` the kernel and e2fsprogs take any power of two from
        // EXT4_MIN_DESC_SIZE_64BIT (64) to EXT4_MAX_DESC_SIZE (1024).
        if desc_size != 32 && !(desc_size.is_power_of_two() && (64..=1024).contains(&desc_size)) {
            return Err(bad("s_desc_size", 0xFE, desc_size.into()));
        }
        let data_blocks = blocks_count - u64::from(first_data_block);
        let group_count = data_blocks.div_ceil(u64::from(blocks_per_group));
        let group_count = u32::try_from(group_count).map_err(|_| bad("s_blocks_count_lo", 0x4, blocks_count))?;
        let inodes_count = sb.s_inodes_count.get();
        if u64::from(inodes_count) != u64::from(group_count) * u64::from(inodes_per_group) {
            return Err(bad("s_inodes_count", 0x0, inodes_count.into()));
        }
        let first_ino = if sb.s_rev_level.get() == 0 {
            11
        } else {
            sb.s_first_ino.get()
        };
        if first_ino < 11 || first_ino > inodes_count {
            return Err(bad("s_first_ino", 0x54, first_ino.into()));
        }
        let itable_bytes = u64::from(inodes_per_group) * u64::from(inode_size);
        let inode_table_blocks = u32::try_from(itable_bytes.div_ceil(u64::from(block_size)))
            .map_err(|_| bad("s_inodes_per_group", 0x28, inodes_per_group.into()))?;
        let groups_per_flex = if features.incompat.contains(IncompatFeatures::FLEX_BG) {
            let l = sb.s_log_groups_per_flex;
            if l > 31 {
                return Err(bad("s_log_groups_per_flex", 0x174, l.into()));
            }
            1u32 << l
        } else {
            1
        };
        Ok(Self {
            block_size,
            block_size_log2,
            blocks_count,
            first_data_block,
            blocks_per_group,
            cluster_bits,
            clusters_per_group,
            inodes_per_group,
            inodes_count,
            group_count,
            inode_size,
            desc_size,
            first_ino,
            inode_table_blocks,
            groups_per_flex,
            features,
        })
    }

    /// Blocks per cluster (1 without bigalloc).
    pub fn cluster_ratio(&self) -> u32 {
        1 << self.cluster_bits
    }

    /// The cluster holding `blk`, as the block bitmaps number them.
    pub fn cluster_of(&self, blk: u64) -> u64 {
        blk >> self.cluster_bits
    }

    /// Clusters in `group`: the bits of its block bitmap that stand for
    /// blocks of the file system (the last group may be short).
    pub fn clusters_in_group(&self, group: u32) -> u32 {
        self.blocks_in_group(group).div_ceil(self.cluster_ratio())
    }

    /// Group descriptors per block.
    pub fn descs_per_block(&self) -> u32 {
        self.block_size / u32::from(self.desc_size)
    }

    /// The group holding `ino` and its index within the group, or `None` for
    /// an inode number out of range.
    pub fn inode_location(&self, ino: u32) -> Option<(u32, u32)> {
        if ino == 0 || ino > self.inodes_count {
            return None;
        }
        let idx = ino - 1;
        Some((idx / self.inodes_per_group, idx % self.inodes_per_group))
    }

    /// First block of `group`.
    pub fn group_first_block(&self, group: u32) -> u64 {
        u64::from(self.first_data_block) + u64::from(group) * u64::from(self.blocks_per_group)
    }

    /// The block holding `group`'s superblock copy (when it has one): the
    /// group's first block, but for group 0 the block holding byte 1024 —
    /// block 1 with 1 KiB blocks even under bigalloc, where
    /// `s_first_data_block` is 0 (`ext2fs_super_and_bgd_loc2`). The group's
    /// descriptor copies follow it.
    pub fn superblock_block(&self, group: u32) -> u64 {
        self.group_first_block(group).max(1024 / u64::from(self.block_size))
    }

    /// Number of blocks in `group` (the last group may be short).
    pub fn blocks_in_group(&self, group: u32) -> u32 {
        let first = self.group_first_block(group);
        let left = self.blocks_count.saturating_sub(first);
        u32::try_from(left.min(u64::from(self.blocks_per_group))).unwrap_or(self.blocks_per_group)
    }

    /// True with `sparse_super`: whether `group` holds a superblock backup
    /// (groups 0, 1 and powers of 3, 5 and 7). Without the feature every
    /// group does. `sparse_super2` is decided by the caller from `s_backup_bgs`.
    pub fn group_has_super_sparse(&self, group: u32) -> bool {
        if !self.features.ro_compat.contains(RoCompatFeatures::SPARSE_SUPER) {
            return true;
        }
        if group <= 1 {
            return true;
        }
        if group.is_multiple_of(2) {
            return false;
        }
        [3u32, 5, 7].iter().any(|&base| is_power_of(group, base))
    }
}

/// Blocks per group, cluster bits and clusters per group. With bigalloc
/// (`bigalloc.rst`) the block bitmap holds one bit per cluster of
/// `2^s_log_cluster_size` KiB, so `s_clusters_per_group` is bounded by the
/// bitmap and `s_blocks_per_group` must be exactly that many clusters, as
/// the kernel's `ext4_fill_super` requires.
fn group_size(sb: &RawSuperblock, block_size: u32) -> Result<(u32, u32, u32)> {
    let bad = |field, off, v: u64| FormatError::invalid(STRUCT, field, off, v);
    let blocks_per_group = sb.s_blocks_per_group.get();
    if !sb.features().ro_compat.contains(RoCompatFeatures::BIGALLOC) {
        if blocks_per_group == 0 || blocks_per_group > block_size.saturating_mul(8) {
            return Err(bad("s_blocks_per_group", 0x20, blocks_per_group.into()));
        }
        return Ok((blocks_per_group, 0, blocks_per_group));
    }
    let (log_block, log_cluster) = (sb.s_log_block_size.get(), sb.s_log_cluster_size.get());
    // Clusters of up to 512 MiB, libext2fs's EXT2_MAX_CLUSTER_LOG_SIZE.
    if log_cluster < log_block || log_cluster > 19 {
        return Err(bad("s_log_cluster_size", 0x1C, log_cluster.into()));
    }
    let cluster_bits = log_cluster - log_block;
    let clusters_per_group = sb.s_clusters_per_group.get();
    if clusters_per_group == 0 || clusters_per_group > block_size.saturating_mul(8) {
        return Err(bad("s_clusters_per_group", 0x24, clusters_per_group.into()));
    }
    let want = u64::from(clusters_per_group) << cluster_bits;
    if u64::from(blocks_per_group) != want {
        return Err(bad("s_blocks_per_group", 0x20, blocks_per_group.into()));
    }
    Ok((blocks_per_group, cluster_bits, clusters_per_group))
}

fn is_power_of(mut n: u32, base: u32) -> bool {
    while n > 1 && n.is_multiple_of(base) {
        n /= base;
    }
    n == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_groups_are_powers_of_3_5_7() {
        let hits: Vec<u32> = (0..100)
            .filter(|&g| g <= 1 || (g % 2 == 1 && [3, 5, 7].iter().any(|&b| is_power_of(g, b))))
            .collect();
        assert_eq!(hits, vec![0, 1, 3, 5, 7, 9, 25, 27, 49, 81]);
    }

    #[test]
    fn garbage_is_rejected_not_panicking() {
        let buf = [0u8; 1024];
        let sb = RawSuperblock::parse(&buf).unwrap();
        let err = Geometry::from_superblock(&sb).unwrap_err();
        assert_eq!(err.field, "s_magic");
        assert!(RawSuperblock::parse(&buf[..100]).is_err());
    }
}
