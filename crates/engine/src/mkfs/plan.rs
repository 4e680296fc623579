//! The pure part of mkfs: from [`MkfsOptions`] and a device size, the
//! geometry of the new file system — block size, block and inode counts,
//! groups, inode-table size, descriptor blocks, reserved GDT blocks, flex
//! group size, journal size — computed the way e2fsprogs' `mke2fs` and
//! `ext2fs_initialize` compute them, so that the same options give the same
//! numbers. Where each group's tables go is [`super::layout`]'s business.
//!
//! See `Documentation/filesystems/ext4/overview.rst` ("Blocks", "Block
//! Groups", "Flexible Block Groups", "Meta Block Groups").

use ext4kit_format::features::{CompatFeatures, Features, IncompatFeatures, RoCompatFeatures};

use super::flexsize::{Device, auto_groups_per_flex};
use super::options::{FlexMeta, MkfsOptions, resolve_features};
use crate::error::{Error, Result};

/// `(1 << 16) - 8`: the most blocks a group may have (`EXT2_MAX_BLOCKS_PER_GROUP`).
const MAX_BLOCKS_PER_GROUP: u32 = (1 << 16) - 8;
/// First non-reserved inode.
pub const FIRST_INO: u32 = 11;

/// The geometry of the file system to create.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Feature sets after mke2fs's adjustments.
    pub features: Features,
    /// Block size in bytes.
    pub block_size: u32,
    /// `log2` of blocks per allocation cluster: 0 without bigalloc
    /// (`s_log_cluster_size - s_log_block_size`).
    pub cluster_bits: u32,
    /// Total blocks (after dropping a too-small last group).
    pub blocks_count: u64,
    /// 1 with 1 KiB blocks, else 0.
    pub first_data_block: u32,
    /// Blocks per group (clusters per group times the cluster ratio).
    pub blocks_per_group: u32,
    /// Number of groups.
    pub group_count: u32,
    /// Inodes per group (a multiple of 8 filling whole table blocks).
    pub inodes_per_group: u32,
    /// Inode-table blocks per group.
    pub inode_blocks_per_group: u32,
    /// Inode record size.
    pub inode_size: u16,
    /// Group descriptor size (32, or 64 with `64bit`).
    pub desc_size: u16,
    /// Blocks of the descriptor table.
    pub desc_blocks: u32,
    /// Reserved GDT blocks for online growth (resize inode).
    pub reserved_gdt: u32,
    /// `s_first_meta_bg` (0 unless `meta_bg`).
    pub first_meta_bg: u32,
    /// `s_log_groups_per_flex` (0 without flex_bg or with `-G 1`).
    pub log_groups_per_flex: u8,
    /// Why `-G auto` chose this flex group size; `None` without it.
    pub flex_reason: Option<String>,
    /// Where each flex group's bitmaps and inode tables go.
    pub flex_meta: FlexMeta,
    /// Blocks reserved for root.
    pub reserved_blocks: u64,
    /// Journal blocks (0: no journal), the fast-commit area included.
    pub journal_blocks: u32,
    /// Of those, the fast-commit blocks at the end (`s_num_fc_blks`).
    pub fc_blocks: u32,
}

impl Plan {
    /// Computes the geometry for a device of `device_bytes` bytes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for impossible options (block or inode size,
    /// flex size, too many inodes, a device too small), naming the value;
    /// [`Error::Unsupported`] for features mkfs cannot create.
    pub fn new(opts: &MkfsOptions, device_bytes: u64) -> Result<Self> {
        let bytes = opts.size_bytes.unwrap_or(device_bytes);
        if bytes > device_bytes {
            return Err(invalid(format!(
                "size {bytes} is larger than the device ({device_bytes} bytes)"
            )));
        }
        let mut features = resolve_features(opts)?;
        check_feature_combinations(&mut features)?;
        let (type_block_size, inode_ratio) = size_type_defaults(bytes);
        let block_size = opts.block_size.unwrap_or(type_block_size);
        if !block_size.is_power_of_two() || !(1024..=65536).contains(&block_size) {
            return Err(invalid(format!(
                "invalid block size {block_size} (1024 to 65536, a power of two)"
            )));
        }
        let cluster_bits = cluster_bits(opts, &features, block_size)?;
        let cluster_size = block_size << cluster_bits;
        let blocks = bytes / u64::from(block_size);
        if blocks > u64::from(u32::MAX) && !features.incompat.contains(IncompatFeatures::BIT64) {
            return Err(invalid(format!("{blocks} blocks need the 64bit feature")));
        }
        if blocks >= 1 << 48 {
            return Err(invalid(format!("{blocks} blocks is more than ext4 can address")));
        }
        if features.incompat.contains(IncompatFeatures::BIT64) && blocks > u64::from(u32::MAX) {
            // mke2fs: the resize inode's block map cannot reach past 2^32.
            features.compat.0 &= !CompatFeatures::RESIZE_INODE.0;
        }
        let inode_size = opts.inode_size.unwrap_or(256);
        if inode_size < 128 || !inode_size.is_power_of_two() || u32::from(inode_size) > block_size {
            return Err(invalid(format!(
                "invalid inode size {inode_size} (128 to the block size, a power of two)"
            )));
        }
        // mke2fs: the default ratio is at least one cluster.
        let default_ratio = inode_ratio.max(u64::from(cluster_size));
        let ratio = opts.bytes_per_inode.unwrap_or(default_ratio).max(u64::from(block_size));
        let want_inodes = opts
            .inode_count
            .unwrap_or(blocks.saturating_mul(u64::from(block_size)) / ratio);
        if want_inodes > u64::from(u32::MAX) {
            return Err(invalid(format!("{want_inodes} inodes is more than 2^32 - 1")));
        }
        let blocks_per_group = blocks_per_group(block_size, cluster_bits)?;
        let groups = blocks.div_ceil(u64::from(blocks_per_group));
        let (log_groups_per_flex, flex_reason) = flex_log(opts, &features, groups)?;
        let reserved_blocks = (opts.reserved_percent * blocks as f64 / 100.0) as u64;
        if !(0.0..=50.0).contains(&opts.reserved_percent) {
            return Err(invalid(format!(
                "reserved blocks percentage {} is not 0 to 50",
                opts.reserved_percent
            )));
        }
        let mut plan = Self {
            features,
            block_size,
            cluster_bits,
            // ext2fs_initialize: whole clusters from block 0 with bigalloc
            // (a 1 KiB-block superblock then sits in block 1 of cluster 0).
            blocks_count: blocks & !((1u64 << cluster_bits) - 1),
            first_data_block: u32::from(cluster_size == 1024),
            blocks_per_group,
            group_count: 0,
            inodes_per_group: 0,
            inode_blocks_per_group: 0,
            inode_size,
            desc_size: if features.incompat.contains(IncompatFeatures::BIT64) {
                64
            } else {
                32
            },
            desc_blocks: 0,
            reserved_gdt: 0,
            first_meta_bg: 0,
            log_groups_per_flex,
            flex_reason,
            flex_meta: opts.flex_meta,
            reserved_blocks,
            journal_blocks: 0,
            fc_blocks: 0,
        };
        if let Some(shrunk) = plan.fit(want_inodes as u32)? {
            // As ext2fs_initialize: rescaled to the count after the last
            // shrink, even when a later retry restored the count.
            let ratio = 100.0 * reserved_blocks as f64 / blocks as f64;
            plan.reserved_blocks = (ratio * shrunk as f64 / 100.0) as u64;
        }
        let inodes = u64::from(plan.inodes_per_group) * u64::from(plan.group_count);
        if inodes < u64::from(FIRST_INO + 1) {
            // ext2fs_initialize asks for FIRST_INO + 1, but its rounding to
            // whole inode blocks (and to a multiple of 8) can end below:
            // mke2fs then fails writing the reserved inodes; refuse here.
            return Err(invalid(format!(
                "{inodes} inodes are too few: inodes 1 to {} are reserved and lost+found is {FIRST_INO}, \
                 so a file system needs at least {}; give a larger size, a larger -N or a smaller -i",
                FIRST_INO - 1,
                FIRST_INO + 1
            )));
        }
        let (log, fc) = plan.journal_size(opts)?;
        plan.journal_blocks = log + fc;
        plan.fc_blocks = fc;
        if plan.journal_blocks == 0 {
            plan.features.compat.0 &= !CompatFeatures::HAS_JOURNAL.0;
        }
        if plan.journal_blocks == 0 && plan.features.compat.contains(CompatFeatures::ORPHAN_FILE) {
            return Err(invalid(
                "orphan_file needs a journal (has_journal, and room for one)".into(),
            ));
        }
        Ok(plan)
    }

    /// The `ext2fs_initialize` loop: groups, inodes per group, reserved GDT
    /// blocks; drops a last group too small for its own metadata. Returns
    /// the block count after the last such drop, if any.
    fn fit(&mut self, want_inodes: u32) -> Result<Option<u64>> {
        let requested_blocks = self.blocks_count;
        let mut shrunk = None;
        loop {
            self.group_count = group_count(self.blocks_count, self.first_data_block, self.blocks_per_group)?;
            self.desc_blocks = self.group_count.div_ceil(self.descs_per_block());
            let ipg = want_inodes.max(FIRST_INO + 1).div_ceil(self.group_count);
            if ipg > self.block_size * 8 {
                if self.cluster_bits > 0 || self.blocks_per_group < 256 {
                    return Err(invalid("too many inodes for the block size".into()));
                }
                self.blocks_per_group -= 8;
                self.blocks_count = requested_blocks;
                debug_assert_eq!(self.cluster_bits, 0, "bigalloc groups never shrink");
                continue;
            }
            self.set_inodes_per_group(ipg);
            self.set_reserved_gdt();
            let overhead = 3 + self.inode_blocks_per_group + self.reserved_gdt + self.desc_blocks_in_group0();
            if overhead > self.blocks_per_group {
                return Err(invalid(
                    "too many inodes: the inode table does not fit in a group".into(),
                ));
            }
            let rem = (self.blocks_count - u64::from(self.first_data_block)) % u64::from(self.blocks_per_group);
            let last_overhead = u64::from(self.last_group_overhead());
            if self.group_count == 1 && rem != 0 && rem < last_overhead {
                return Err(too_small(self.blocks_count));
            }
            if rem != 0 && rem < last_overhead + 50 {
                self.blocks_count -= rem;
                shrunk = Some(self.blocks_count);
                continue;
            }
            return Ok(shrunk);
        }
    }

    fn desc_blocks_in_group0(&self) -> u32 {
        if self.features.incompat.contains(IncompatFeatures::META_BG) {
            1
        } else {
            self.desc_blocks
        }
    }

    fn last_group_overhead(&self) -> u32 {
        let mut overhead = 2 + self.inode_blocks_per_group;
        if self.has_super(self.group_count - 1) {
            overhead += 1 + self.desc_blocks + self.reserved_gdt;
        }
        overhead
    }

    fn set_inodes_per_group(&mut self, ipg: u32) {
        let bs = self.block_size;
        let isz = u32::from(self.inode_size);
        let max_ipg = (1 << 16) - bs / isz;
        let mut ipg = ipg.min(max_ipg);
        loop {
            let blocks = (ipg * isz).div_ceil(bs);
            let mut filled = blocks * bs / isz;
            filled = filled.max(8) & !7;
            if u64::from(filled) * u64::from(self.group_count) > u64::from(u32::MAX) {
                ipg -= 8;
                continue;
            }
            self.inodes_per_group = filled;
            self.inode_blocks_per_group = (filled * isz).div_ceil(bs);
            return;
        }
    }

    /// `calc_reserved_gdt_blocks`: room to grow to 1024 times the size or
    /// 2^32 blocks, whichever is smaller, at most one block of addresses;
    /// then mke2fs's switch to meta_bg when the tables would eat more than
    /// 3/4 of a group.
    fn set_reserved_gdt(&mut self) {
        self.reserved_gdt = 0;
        if self.features.compat.contains(CompatFeatures::RESIZE_INODE) {
            let max_blocks: u64 = if self.blocks_count < u64::from(u32::MAX) / 1024 {
                self.blocks_count * 1024
            } else {
                u64::from(u32::MAX)
            };
            let rsv_groups = (max_blocks - u64::from(self.first_data_block)).div_ceil(u64::from(self.blocks_per_group));
            let rsv_desc = rsv_groups.div_ceil(u64::from(self.descs_per_block()));
            let rsv = rsv_desc.saturating_sub(u64::from(self.desc_blocks));
            // e2fsprogs computes this unsigned: a negative result wraps and is capped.
            let rsv = if rsv_desc < u64::from(self.desc_blocks) {
                u64::MAX
            } else {
                rsv
            };
            self.reserved_gdt = rsv.min(u64::from(self.block_size / 4)) as u32;
        }
        if self.reserved_gdt + self.desc_blocks > self.blocks_per_group * 3 / 4 {
            self.features.incompat.0 |= IncompatFeatures::META_BG.0;
            self.features.compat.0 &= !CompatFeatures::RESIZE_INODE.0;
            self.reserved_gdt = 0;
        }
        // A resize inode of 2 GiB or more (4 KiB blocks and up) is a large
        // file: mke2fs turns large_file on for it whatever -O said
        // (`ext2fs_inode_size_set`).
        if self.features.compat.contains(CompatFeatures::RESIZE_INODE) && self.resize_inode_size() > 0x7FFF_FFFF {
            self.features.ro_compat.0 |= RoCompatFeatures::LARGE_FILE.0;
        }
    }

    /// `i_size` of the resize inode: every block its double-indirect map
    /// could address (`ext2fs_create_resize_inode`).
    pub fn resize_inode_size(&self) -> u64 {
        let apb = u64::from(self.addr_per_block());
        (apb * apb + apb + 12) * u64::from(self.block_size)
    }

    /// `figure_journal_size`: (log, fast-commit) blocks, the default
    /// for the size or `-J size=`.
    fn journal_size(&self, opts: &MkfsOptions) -> Result<(u32, u32)> {
        if !self.features.compat.contains(CompatFeatures::HAS_JOURNAL) {
            return Ok((0, 0));
        }
        super::journal::figure_journal_blocks(
            &opts.journal.unwrap_or_default(),
            self.blocks_count,
            self.block_size,
            self.features.compat.contains(CompatFeatures::FAST_COMMIT),
            self.initial_free_blocks(),
        )
    }

    /// Free blocks as `ext2fs_initialize` counts them, before any file:
    /// all but each group's superblock copy, descriptor and reserved GDT
    /// blocks, bitmaps and inode table.
    fn initial_free_blocks(&self) -> u64 {
        let meta_bg = self.features.incompat.contains(IncompatFeatures::META_BG);
        let used: u64 = (0..self.group_count)
            .map(|g| {
                let sb = if self.has_super(g) {
                    1 + u64::from(if meta_bg {
                        0
                    } else {
                        self.desc_blocks + self.reserved_gdt
                    })
                } else {
                    0
                };
                sb + 2 + u64::from(self.inode_blocks_per_group)
            })
            .sum();
        (self.blocks_count - u64::from(self.first_data_block)).saturating_sub(used)
    }

    /// Blocks per cluster (1 without bigalloc).
    pub fn cluster_ratio(&self) -> u32 {
        1 << self.cluster_bits
    }

    /// Clusters per group (`s_clusters_per_group`): the bits of a block bitmap.
    pub fn clusters_per_group(&self) -> u32 {
        self.blocks_per_group >> self.cluster_bits
    }

    /// The block holding the primary superblock: block 1 with 1 KiB
    /// blocks, also under bigalloc where `s_first_data_block` is 0.
    pub fn superblock_block(&self) -> u64 {
        1024 / u64::from(self.block_size)
    }

    /// Descriptors per block.
    pub fn descs_per_block(&self) -> u32 {
        self.block_size / u32::from(self.desc_size)
    }

    /// Groups per flex group (1 without packing).
    pub fn flex_size(&self) -> u32 {
        1 << self.log_groups_per_flex
    }

    /// First block of `group`.
    pub fn group_first_block(&self, group: u32) -> u64 {
        u64::from(self.first_data_block) + u64::from(group) * u64::from(self.blocks_per_group)
    }

    /// Last block of `group` (the last group may be short).
    pub fn group_last_block(&self, group: u32) -> u64 {
        (self.group_first_block(group) + u64::from(self.blocks_per_group) - 1).min(self.blocks_count - 1)
    }

    /// The group holding `block`.
    pub fn group_of_block(&self, block: u64) -> u32 {
        ((block.saturating_sub(u64::from(self.first_data_block))) / u64::from(self.blocks_per_group)) as u32
    }

    /// Whether `group` holds a superblock backup (all of them without
    /// sparse_super; else 0, 1 and powers of 3, 5, 7; with sparse_super2
    /// only the two groups of [`Plan::backup_bgs`]).
    pub fn has_super(&self, group: u32) -> bool {
        if self.features.compat.contains(CompatFeatures::SPARSE_SUPER2) {
            return group == 0 || self.backup_bgs().contains(&group);
        }
        if group <= 1 || !self.features.ro_compat.contains(RoCompatFeatures::SPARSE_SUPER) {
            return true;
        }
        !group.is_multiple_of(2) && [3u32, 5, 7].iter().any(|&b| is_power_of(group, b))
    }

    /// `s_backup_bgs` with sparse_super2: mke2fs's default of two backups,
    /// in group 1 and the last group, clamped to the groups there are, a
    /// repeat dropped to 0 and the pair in ascending order; `[0, 0]`
    /// without the feature.
    pub fn backup_bgs(&self) -> [u32; 2] {
        if !self.features.compat.contains(CompatFeatures::SPARSE_SUPER2) {
            return [0, 0];
        }
        let last = self.group_count.saturating_sub(1);
        let (a, mut b) = (1.min(last), last);
        if a == b {
            b = 0;
        }
        [a.min(b), a.max(b)]
    }

    /// True with `uninit_bg` or `metadata_csum`: groups carry flags and checksums.
    pub fn has_group_csum(&self) -> bool {
        self.features.has_group_csum()
    }

    /// Inodes in use on the new file system: 1–11, and 12 for the orphan file.
    pub fn used_inodes(&self) -> u32 {
        if self.features.compat.contains(CompatFeatures::ORPHAN_FILE) {
            FIRST_INO + 1
        } else {
            FIRST_INO
        }
    }

    /// Pointers per block (`EXT2_ADDR_PER_BLOCK`).
    pub fn addr_per_block(&self) -> u32 {
        self.block_size / 4
    }
}

fn is_power_of(mut n: u32, base: u32) -> bool {
    while n > 1 && n.is_multiple_of(base) {
        n /= base;
    }
    n == 1
}

fn group_count(blocks: u64, first: u32, bpg: u32) -> Result<u32> {
    if blocks <= u64::from(first) {
        return Err(too_small(blocks));
    }
    u32::try_from((blocks - u64::from(first)).div_ceil(u64::from(bpg))).map_err(|_| invalid("too many groups".into()))
}

/// mke2fs's size types (`floppy`, `small`, `default`, `big`, `huge`) as
/// `/etc/mke2fs.conf` defines them: (block size, bytes per inode).
fn size_type_defaults(bytes: u64) -> (u32, u64) {
    const MIB: u64 = 1 << 20;
    match bytes {
        _ if bytes < 3 * MIB => (1024, 8192),
        _ if bytes < 512 * MIB => (1024, 4096),
        _ if bytes < 4 << 40 => (4096, 16384),
        _ if bytes < 16 << 40 => (4096, 32768),
        _ => (4096, 65536),
    }
}

/// `-O bigalloc` and `-C`: the cluster's `log2` in blocks, as mke2fs
/// checks them (16 blocks by default, a power of two from the block size
/// to 512 MiB, never 1 KiB; bigalloc needs extents).
fn cluster_bits(opts: &MkfsOptions, f: &Features, block_size: u32) -> Result<u32> {
    if !f.ro_compat.contains(RoCompatFeatures::BIGALLOC) {
        return match opts.cluster_size {
            Some(_) => Err(invalid(
                "specifying a cluster size (-C) needs the bigalloc feature".into(),
            )),
            None => Ok(0),
        };
    }
    if !f.incompat.contains(IncompatFeatures::EXTENTS) {
        return Err(invalid("bigalloc needs the extent feature".into()));
    }
    let size = opts.cluster_size.unwrap_or(block_size.saturating_mul(16));
    if !size.is_power_of_two() || size <= 1024 || size > 1 << 29 {
        return Err(invalid(format!(
            "invalid cluster size {size} (2048 to 512M, a power of two)"
        )));
    }
    if size < block_size {
        return Err(invalid(format!(
            "the cluster size {size} may not be smaller than the block size {block_size}"
        )));
    }
    Ok((size / block_size).trailing_zeros())
}

/// `s_blocks_per_group`: 8 × block size blocks, or with bigalloc that many
/// clusters (one less byte of bitmap for clusters of 128 MiB and up), at
/// most 65528 either way (`ext2fs_initialize`).
fn blocks_per_group(block_size: u32, cluster_bits: u32) -> Result<u32> {
    if cluster_bits == 0 {
        return Ok((block_size * 8).min(MAX_BLOCKS_PER_GROUP));
    }
    let log_cluster = (block_size << cluster_bits).trailing_zeros() - 10;
    let cpg = if log_cluster + 15 < 32 {
        block_size * 8
    } else {
        (block_size - 1) * 8
    };
    let bpg = u64::from(cpg.min(MAX_BLOCKS_PER_GROUP)) << cluster_bits;
    u32::try_from(bpg).map_err(|_| invalid(format!("{bpg} blocks per group is more than 2^32 - 1")))
}

fn flex_log(opts: &MkfsOptions, f: &Features, groups: u64) -> Result<(u8, Option<String>)> {
    let flex = f.incompat.contains(IncompatFeatures::FLEX_BG);
    match opts.groups_per_flex {
        Some(_) if !flex => Err(invalid("-G needs the flex_bg feature".into())),
        Some(g) if !g.is_power_of_two() || g > 1 << 31 => {
            Err(invalid(format!("flex_bg size {g} is not a power of two")))
        }
        Some(g) => Ok((g.trailing_zeros() as u8, None)),
        None if flex && opts.flex_auto => {
            let d = Device {
                groups: u32::try_from(groups).unwrap_or(u32::MAX),
                media: opts.media,
                stride: opts.stride,
                stripe_width: opts.stripe_width,
            };
            let (n, why) = auto_groups_per_flex(&d);
            Ok((n.trailing_zeros() as u8, Some(why)))
        }
        None if flex => Ok((4, None)),
        None => Ok((0, None)),
    }
}

/// The feature rules of mke2fs that refuse or adjust combinations.
fn check_feature_combinations(f: &mut Features) -> Result<()> {
    if f.incompat.contains(IncompatFeatures::META_BG) && f.compat.contains(CompatFeatures::RESIZE_INODE) {
        return Err(invalid(
            "the resize_inode and meta_bg features are not compatible (add ^resize_inode)".into(),
        ));
    }
    if f.incompat.contains(IncompatFeatures::CSUM_SEED) && !f.metadata_csum() {
        return Err(invalid("metadata_csum_seed needs metadata_csum".into()));
    }
    if f.compat.contains(CompatFeatures::RESIZE_INODE) && !f.ro_compat.contains(RoCompatFeatures::SPARSE_SUPER) {
        return Err(invalid(
            "reserved online resize blocks need sparse_super (add ^resize_inode)".into(),
        ));
    }
    if f.incompat.contains(IncompatFeatures::BIT64) && !f.incompat.contains(IncompatFeatures::EXTENTS) {
        return Err(invalid(
            "extents must be enabled for a 64-bit file system (add -O extent or ^64bit)".into(),
        ));
    }
    if f.metadata_csum() {
        // metadata_csum supersedes uninit_bg.
        f.ro_compat.0 &= !RoCompatFeatures::GDT_CSUM.0;
    }
    Ok(())
}

fn invalid(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

fn too_small(blocks: u64) -> Error {
    invalid(format!("the device is too small for a file system ({blocks} blocks)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mkfs::options::FsType;

    fn plan(size: u64, edit: impl FnOnce(&mut MkfsOptions)) -> Plan {
        let mut o = MkfsOptions::default();
        edit(&mut o);
        Plan::new(&o, size).unwrap()
    }

    // Expected values are mke2fs 1.47.0's, read with dumpe2fs -h.
    #[test]
    fn ext4_64m_matches_mke2fs() {
        let p = plan(64 << 20, |_| {});
        assert_eq!((p.block_size, p.blocks_count, p.group_count), (1024, 65536, 8));
        assert_eq!((p.inodes_per_group, p.inode_blocks_per_group), (2048, 512));
        assert_eq!((p.reserved_gdt, p.reserved_blocks, p.journal_blocks), (256, 3276, 4096));
    }

    #[test]
    fn ext3_64m_has_32_byte_descriptors() {
        let p = plan(64 << 20, |o| o.fs_type = FsType::Ext3);
        assert_eq!((p.desc_size, p.reserved_gdt), (32, 255));
    }

    #[test]
    fn one_gib_and_one_mib() {
        let p = plan(1 << 30, |_| {});
        assert_eq!(
            (p.block_size, p.inodes_per_group, p.reserved_gdt, p.journal_blocks),
            (4096, 8192, 127, 8192)
        );
        let p = plan(1 << 20, |_| {});
        assert_eq!((p.inodes_per_group, p.reserved_gdt, p.journal_blocks), (128, 7, 0));
        assert!(!p.features.compat.contains(CompatFeatures::HAS_JOURNAL));
    }

    #[test]
    fn sixteen_tib_drops_resize_inode() {
        let p = plan(16 << 40, |_| {});
        assert_eq!(
            (p.blocks_count, p.group_count, p.inodes_per_group),
            (1 << 32, 131072, 2048)
        );
        assert!(!p.features.compat.contains(CompatFeatures::RESIZE_INODE));
        assert_eq!((p.desc_blocks, p.journal_blocks), (2048, 262144));
    }

    #[test]
    fn too_small_and_bad_options_are_errors() {
        let o = MkfsOptions::default();
        assert!(Plan::new(&o, 8 << 10).is_err());
        let mut o = MkfsOptions::default();
        o.add_features("meta_bg");
        assert!(
            Plan::new(&o, 64 << 20)
                .unwrap_err()
                .to_string()
                .contains("resize_inode")
        );
        let o = MkfsOptions {
            block_size: Some(3000),
            ..Default::default()
        };
        assert!(Plan::new(&o, 64 << 20).is_err());
    }

    #[test]
    fn many_inodes_shrink_the_groups_like_mke2fs() {
        // mke2fs -t ext4 -N 100000 on 64 MiB: 13 groups of 5296 blocks.
        let p = plan(64 << 20, |o| o.inode_count = Some(100_000));
        assert_eq!(
            (p.blocks_per_group, p.group_count, p.inodes_per_group),
            (5296, 13, 7696)
        );
        assert_eq!(
            (p.blocks_count, p.inode_blocks_per_group, p.reserved_blocks),
            (65536, 1924, 3181)
        );
    }

    #[test]
    fn flex_auto_follows_the_media_and_an_explicit_g_wins() {
        use crate::mkfs::flexsize::Media;
        let p = plan(64 << 30, |o| {
            o.flex_auto = true;
            o.media = Some(Media::Ssd);
        });
        assert_eq!(p.flex_size(), 64, "512 groups on flash: 8 flex groups of 64");
        assert!(p.flex_reason.as_deref().is_some_and(|r| r.contains("flash")));
        let p = plan(64 << 30, |o| {
            o.flex_auto = true;
            o.media = Some(Media::Hdd);
        });
        assert_eq!(p.flex_size(), 16);
        let p = plan(64 << 30, |o| {
            o.flex_auto = true;
            o.groups_per_flex = Some(4);
        });
        assert_eq!((p.flex_size(), p.flex_reason), (4, None));
    }

    #[test]
    fn bigalloc_geometry_matches_mke2fs() {
        // mke2fs -t ext4 -b 1024 -O bigalloc, 64 MiB: 16 KiB clusters,
        // 8192 clusters (131072 blocks) per group, first data block 0.
        let p = plan(64 << 20, |o| {
            o.block_size = Some(1024);
            o.add_features("bigalloc");
        });
        assert_eq!(
            (p.cluster_bits, p.blocks_per_group, p.clusters_per_group()),
            (4, 131072, 8192)
        );
        assert_eq!(
            (p.first_data_block, p.superblock_block(), p.blocks_count),
            (0, 1, 65536)
        );
        assert_eq!((p.inodes_per_group, p.reserved_gdt, p.group_count), (4096, 31, 1));
        // -C 64K with 4 KiB blocks: the size is cut to whole clusters.
        let p = plan((64 << 20) + 12288, |o| {
            o.block_size = Some(4096);
            o.cluster_size = Some(65536);
            o.add_features("bigalloc");
        });
        assert_eq!((p.cluster_bits, p.blocks_count, p.first_data_block), (4, 16384, 0));
        let bad = |edit: fn(&mut MkfsOptions)| {
            let mut o = MkfsOptions::default();
            edit(&mut o);
            Plan::new(&o, 64 << 20).unwrap_err().to_string()
        };
        assert!(bad(|o| o.cluster_size = Some(65536)).contains("bigalloc"));
        assert!(
            bad(|o| {
                o.add_features("bigalloc");
                o.cluster_size = Some(3072);
            })
            .contains("invalid cluster size")
        );
    }

    #[test]
    fn short_last_group_is_dropped() {
        // 8 MiB + 40 KiB: a 40-block last group cannot hold its own tables.
        let p = plan((8 << 20) + (40 << 10), |o| o.fs_type = FsType::Ext2);
        assert_eq!(p.blocks_count, 8193);
    }
}
