//! Putting the layout on the device: inode tables (zeroed where needed),
//! block and inode bitmaps with their padding and checksums, group
//! descriptors with their flags and checksums, the descriptor table and its
//! backups, and the superblock and its backups (each with its own
//! `s_block_group_nr`, backups marked not-clean as mke2fs leaves them).
//!
//! See `Documentation/filesystems/ext4/super.rst`, `group_descr.rst` and
//! `bitmaps.rst`.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED, RawGroupDesc, bitmap_checksum};
use ext4kit_format::superblock::{EXT4_SUPER_MAGIC, FLAGS_SIGNED_HASH, RawSuperblock, STATE_VALID, SUPERBLOCK_OFFSET};

use super::Build;
use super::files::Files;
use super::layout::{UsedMap, group_base};
use super::plan::FIRST_INO;
use crate::device::BlockDevice;
use crate::error::{Error, Result};

/// Writes to the device, counting bytes.
pub(crate) struct Writer<'a> {
    dev: &'a dyn BlockDevice,
    pub written: u64,
}

impl<'a> Writer<'a> {
    pub fn new(dev: &'a dyn BlockDevice) -> Self {
        Self { dev, written: 0 }
    }

    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<()> {
        self.dev
            .write_at(offset, buf)
            .map_err(|source| Error::Io { offset, source })?;
        self.written += buf.len() as u64;
        Ok(())
    }

    /// Writes `data` (whole blocks) at block `blk`.
    pub fn write_at_block(&mut self, blk: u64, data: &[u8], bs: usize) -> Result<()> {
        self.write_at(blk * bs as u64, data)
    }

    /// Writes one block.
    pub fn write_block(&mut self, b: &Build, blk: u64, data: &[u8]) -> Result<()> {
        self.write_at_block(blk, data, b.plan.block_size as usize)
    }

    /// Zeroes `n` blocks from `start`, leaving `skip` alone.
    pub fn zero_blocks(&mut self, b: &Build, start: u64, n: u64, skip: Option<u64>) -> Result<()> {
        let bs = u64::from(b.plan.block_size);
        let chunk = (1u64 << 20).max(bs) / bs;
        let zeros = vec![0u8; (chunk * bs) as usize];
        let mut blk = start;
        while blk < start + n {
            if Some(blk) == skip {
                blk += 1;
                continue;
            }
            let mut len = chunk.min(start + n - blk);
            if let Some(s) = skip.filter(|&s| s > blk && s < blk + len) {
                len = s - blk;
            }
            self.write_at(blk * bs, &zeros[..(len * bs) as usize])?;
            blk += len;
        }
        Ok(())
    }

    /// Flushes the device.
    pub fn flush(&mut self) -> Result<()> {
        self.dev.flush().map_err(|source| Error::Io { offset: 0, source })
    }
}

/// Whether inode tables read as zeros once mkfs is done.
fn itables_zeroed(b: &Build) -> bool {
    b.opts.device_zeroed || !b.opts.lazy_itable_init || !b.plan.has_group_csum()
}

/// Zeroes what must read as zeros on a device that may hold old data: the
/// first 1 KiB and every inode table (only the used blocks of group 0 with
/// lazy init, as mke2fs leaves the rest to the kernel).
pub(crate) fn zero_tables(b: &Build, w: &mut Writer<'_>) -> Result<()> {
    if b.opts.device_zeroed {
        return Ok(());
    }
    w.write_at(0, &[0u8; 1024])?;
    let itb = u64::from(b.plan.inode_blocks_per_group);
    if itables_zeroed(b) {
        for t in &b.tables {
            w.zero_blocks(b, t.inode_table, itb, None)?;
        }
    }
    Ok(())
}

/// Per-group counts of the new file system's inodes.
fn inode_usage(b: &Build, g: u32) -> (u32, u32) {
    let ipg = b.plan.inodes_per_group;
    let first = g * ipg + 1;
    let used = b.plan.used_inodes().saturating_sub(first - 1).min(ipg);
    let dirs = [2u32, FIRST_INO].iter().filter(|&&i| (i - 1) / ipg == g).count() as u32;
    (used, dirs)
}

fn descriptor(b: &Build, g: u32, w: &mut Writer<'_>) -> Result<RawGroupDesc> {
    let p = &b.plan;
    let t = b.tables[g as usize];
    let (lo, hi) = (p.group_first_block(g), p.group_last_block(g) + 1);
    let used = b.map.used_in(lo, hi) >> p.cluster_bits;
    let csum = p.has_group_csum();
    let (inodes_used, dirs) = inode_usage(b, g);
    let last = g + 1 == p.group_count;
    let block_uninit = csum && !last && used == own_metadata_clusters(b, g, lo, hi);
    let inode_uninit = csum && inodes_used == 0;
    let mut d = RawGroupDesc::default();
    d.bg_block_bitmap_lo.set(t.block_bitmap as u32);
    d.bg_block_bitmap_hi.set((t.block_bitmap >> 32) as u32);
    d.bg_inode_bitmap_lo.set(t.inode_bitmap as u32);
    d.bg_inode_bitmap_hi.set((t.inode_bitmap >> 32) as u32);
    d.bg_inode_table_lo.set(t.inode_table as u32);
    d.bg_inode_table_hi.set((t.inode_table >> 32) as u32);
    // bg_free_blocks_count counts clusters.
    let free = ((hi - lo) >> p.cluster_bits) - used;
    d.bg_free_blocks_count_lo.set(free as u16);
    d.bg_free_blocks_count_hi.set((free >> 16) as u16);
    let free_inodes = p.inodes_per_group - inodes_used;
    d.bg_free_inodes_count_lo.set(free_inodes as u16);
    d.bg_free_inodes_count_hi.set((free_inodes >> 16) as u16);
    d.bg_used_dirs_count_lo.set(dirs as u16);
    // mke2fs records zeroed tables even without a checksum feature.
    let mut flags = if itables_zeroed(b) { BG_INODE_ZEROED } else { 0 };
    if csum {
        d.bg_itable_unused_lo.set(free_inodes as u16);
        d.bg_itable_unused_hi.set((free_inodes >> 16) as u16);
        if block_uninit {
            flags |= BG_BLOCK_UNINIT;
        }
        if inode_uninit {
            flags |= BG_INODE_UNINIT;
        }
    }
    d.bg_flags.set(flags);
    if !block_uninit {
        let bitmap = block_bitmap(b, g, lo, hi);
        w.write_block(b, t.block_bitmap, &bitmap)?;
        if p.features.metadata_csum() {
            let c = bitmap_checksum(b.csum_seed, &bitmap, (p.clusters_per_group() / 8) as usize, p.desc_size);
            d.set_block_bitmap_csum(c);
        }
    }
    if !inode_uninit {
        let bitmap = inode_bitmap(b, inodes_used);
        w.write_block(b, t.inode_bitmap, &bitmap)?;
        if p.features.metadata_csum() {
            let c = bitmap_checksum(b.csum_seed, &bitmap, (p.inodes_per_group / 8) as usize, p.desc_size);
            d.set_inode_bitmap_csum(c);
        }
    }
    let c = d.compute_checksum(&p.features, b.csum_seed, &b.uuid, g, usize::from(p.desc_size));
    d.bg_checksum.set(c);
    Ok(d)
}

fn set_bits(buf: &mut [u8], from: u64, to: u64, on: bool) {
    for bit in from..to {
        let (byte, mask) = ((bit / 8) as usize, 1u8 << (bit % 8));
        if on { buf[byte] |= mask } else { buf[byte] &= !mask }
    }
}

/// Clusters of group `g` (blocks `lo..hi`) its superblock and descriptor
/// copies and its own bitmaps and inode table take: what a group holding
/// nothing else uses.
fn own_metadata_clusters(b: &Build, g: u32, lo: u64, hi: u64) -> u64 {
    let p = &b.plan;
    let t = b.tables[g as usize];
    let base = group_base(p, g);
    let mut own = UsedMap::new(p);
    let ranges = [
        base.super_block.map(|s| (s, 1)),
        base.old_desc,
        base.meta_desc.map(|s| (s, 1)),
        Some((t.block_bitmap, 1)),
        Some((t.inode_bitmap, 1)),
        Some((t.inode_table, u64::from(p.inode_blocks_per_group))),
    ];
    for (s, n) in ranges.into_iter().flatten() {
        own.mark(s, n);
    }
    own.to_clusters(p.cluster_bits);
    own.used_in(lo, hi) >> p.cluster_bits
}

/// The block bitmap of a group: a bit per cluster (per block without
/// bigalloc), used ones set, and every bit past the group's last cluster
/// set as padding.
fn block_bitmap(b: &Build, _g: u32, lo: u64, hi: u64) -> Vec<u8> {
    let bits = b.plan.cluster_bits;
    let mut buf = vec![0xffu8; b.plan.block_size as usize];
    let n = (hi - lo) >> bits;
    buf[..(n / 8) as usize].fill(0);
    set_bits(&mut buf, n / 8 * 8, n, false);
    b.map.for_each_in(lo, hi, |s, e| {
        set_bits(&mut buf, (s - lo) >> bits, (e - lo).div_ceil(1 << bits), true)
    });
    buf
}

/// An inode bitmap with the first `used` inodes set and the bits past
/// `inodes_per_group` set as padding.
fn inode_bitmap(b: &Build, used: u32) -> Vec<u8> {
    let mut buf = vec![0xffu8; b.plan.block_size as usize];
    buf[..(b.plan.inodes_per_group / 8) as usize].fill(0);
    set_bits(&mut buf, 0, u64::from(used), true);
    buf
}

/// Writes bitmaps, descriptors (all copies) and superblocks (all copies).
/// Returns the free block count and the journal length.
pub(crate) fn write_metadata(b: &Build, files: &Files, w: &mut Writer<'_>) -> Result<(u64, u32)> {
    let p = &b.plan;
    let bs = p.block_size as usize;
    let dsz = usize::from(p.desc_size);
    let mut table = vec![0u8; p.desc_blocks as usize * bs];
    let mut free_blocks = 0u64;
    for g in 0..p.group_count {
        let d = descriptor(b, g, w)?;
        // s_free_blocks_count counts blocks: whole free clusters.
        free_blocks += u64::from(d.free_blocks()) << p.cluster_bits;
        d.encode_into(&mut table[g as usize * dsz..(g as usize + 1) * dsz]);
    }
    let meta_bg = p.features.incompat.contains(IncompatFeatures::META_BG);
    for g in 0..p.group_count {
        let base = group_base(p, g);
        if let Some((s, n)) = base.old_desc {
            let n = n.min(u64::from(p.desc_blocks)) as usize;
            w.write_block(b, s, &table[..n * bs])?;
        }
        if let Some(s) = base.meta_desc.filter(|_| meta_bg) {
            let k = (g / p.descs_per_block()) as usize;
            w.write_block(b, s, &table[k * bs..(k + 1) * bs])?;
        }
    }
    let mut sb = superblock(b, files, free_blocks);
    // mke2fs 1.47 leaves s_kbytes_written and s_checksum zero without
    // metadata_csum; with it, the total including the superblock copies.
    let csum = p.features.metadata_csum();
    let copies = (0..p.group_count).filter(|&g| p.has_super(g)).count() as u64;
    if csum {
        sb.s_kbytes_written.set((w.written + copies * 1024) / 1024);
    }
    for g in (1..p.group_count).filter(|&g| p.has_super(g)) {
        let mut copy = sb;
        copy.s_block_group_nr.set(g.min(65535) as u16);
        copy.s_state.set(0);
        if csum {
            copy.set_checksum();
        }
        w.write_at(p.group_first_block(g) * bs as u64, &copy.encode())?;
    }
    if csum {
        sb.set_checksum();
    }
    w.write_at(SUPERBLOCK_OFFSET, &sb.encode())?;
    Ok((free_blocks, p.journal_blocks))
}

fn superblock(b: &Build, files: &Files, free_blocks: u64) -> RawSuperblock {
    let p = &b.plan;
    let mut sb = RawSuperblock::parse(&[0u8; 1024]).expect("a zero superblock parses");
    let inodes = p.inodes_per_group * p.group_count;
    sb.s_inodes_count.set(inodes);
    sb.s_blocks_count_lo.set(p.blocks_count as u32);
    sb.s_blocks_count_hi.set((p.blocks_count >> 32) as u32);
    sb.s_r_blocks_count_lo.set(p.reserved_blocks as u32);
    sb.s_r_blocks_count_hi.set((p.reserved_blocks >> 32) as u32);
    sb.s_free_blocks_count_lo.set(free_blocks as u32);
    sb.s_free_blocks_count_hi.set((free_blocks >> 32) as u32);
    sb.s_free_inodes_count.set(inodes - p.used_inodes());
    sb.s_first_data_block.set(p.first_data_block);
    let log = p.block_size.trailing_zeros() - 10;
    sb.s_log_block_size.set(log);
    sb.s_log_cluster_size.set(log + p.cluster_bits);
    sb.s_blocks_per_group.set(p.blocks_per_group);
    sb.s_clusters_per_group.set(p.clusters_per_group());
    sb.s_inodes_per_group.set(p.inodes_per_group);
    sb.s_wtime.set(b.now);
    sb.s_max_mnt_count.set(0xFFFF);
    sb.s_magic.set(EXT4_SUPER_MAGIC);
    sb.s_state.set(STATE_VALID);
    sb.s_errors.set(1);
    sb.s_lastcheck.set(b.now);
    sb.s_rev_level.set(1);
    sb.s_first_ino.set(FIRST_INO);
    sb.s_inode_size.set(p.inode_size);
    sb.s_feature_compat.set(p.features.compat.0);
    sb.s_feature_incompat.set(p.features.incompat.0);
    sb.s_feature_ro_compat.set(p.features.ro_compat.0);
    sb.s_uuid = b.uuid;
    let label = b.opts.label.as_bytes();
    sb.s_volume_name[..label.len().min(16)].copy_from_slice(&label[..label.len().min(16)]);
    sb.s_reserved_gdt_blocks.set(p.reserved_gdt as u16);
    for (i, c) in b.hash_seed.chunks(4).enumerate() {
        sb.s_hash_seed[i].set(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    }
    sb.s_def_hash_version = 1; // half_md4
    if p.features.incompat.contains(IncompatFeatures::BIT64) {
        sb.s_desc_size.set(p.desc_size);
    }
    sb.s_default_mount_opts.set(0x0004 | 0x0008); // user_xattr, acl
    sb.s_first_meta_bg.set(p.first_meta_bg);
    let bgs = p.backup_bgs();
    sb.s_backup_bgs[0].set(bgs[0]);
    sb.s_backup_bgs[1].set(bgs[1]);
    sb.s_mkfs_time.set(b.now);
    if p.inode_size > 128 {
        sb.s_min_extra_isize.set(32);
        sb.s_want_extra_isize.set(32);
    }
    sb.s_flags.set(FLAGS_SIGNED_HASH);
    if p.features.incompat.contains(IncompatFeatures::CASEFOLD) {
        sb.s_encoding.set(ext4kit_format::casefold::ENCODING_UTF8_12_1);
        sb.s_encoding_flags.set(b.opts.encoding_flags.unwrap_or(0));
    }
    if p.features.incompat.contains(IncompatFeatures::ENCRYPT) {
        // mke2fs records the default modes here; the kernel never reads them.
        sb.s_encrypt_algos[0] = ext4kit_format::fscrypt::mode::AES_256_XTS;
        sb.s_encrypt_algos[1] = ext4kit_format::fscrypt::mode::AES_256_CTS;
    }
    sb.s_raid_stride.set(b.opts.stride as u16);
    sb.s_raid_stripe_width.set(b.opts.stripe_width);
    if p.features.incompat.contains(IncompatFeatures::FLEX_BG) {
        sb.s_log_groups_per_flex = p.log_groups_per_flex;
    }
    if p.features.metadata_csum() {
        sb.s_checksum_type = 1;
    }
    if p.features.incompat.contains(IncompatFeatures::CSUM_SEED) {
        sb.s_checksum_seed.set(b.csum_seed);
    }
    let mut overhead = b.overhead;
    if let Some(j) = files
        .journal
        .as_ref()
        .filter(|_| p.features.compat.contains(CompatFeatures::HAS_JOURNAL))
    {
        sb.s_journal_inum.set(8);
        sb.set_journal_backup(&j.i_block, u64::from(p.journal_blocks) * u64::from(p.block_size));
        overhead += u64::from(p.journal_blocks).div_ceil(u64::from(p.cluster_ratio()));
    }
    sb.s_overhead_clusters.set(overhead as u32);
    // mke2fs copies the interval given even without mmp.
    sb.s_mmp_update_interval.set(b.opts.mmp_update_interval.unwrap_or(0));
    if let Some((blk, interval)) = files.mmp {
        sb.s_mmp_block.set(blk);
        sb.s_mmp_update_interval.set(interval);
    }
    if p.features.compat.contains(CompatFeatures::ORPHAN_FILE) {
        sb.s_orphan_file_inum.set(FIRST_INO + 1);
    }
    sb
}
