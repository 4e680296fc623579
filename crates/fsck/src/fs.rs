//! Raw access to an image's metadata: the superblock in use, the group
//! descriptors, block and inode reads, and where each group keeps its
//! superblock and descriptor copies (`Documentation/filesystems/ext4/
//! blockgroup.rst`, "Flexible Block Groups" and "Meta Block Groups").
//!
//! Nothing here trusts the image: every read is range-checked against the
//! geometry and the device, and fails as an `io::Error` the passes turn into
//! findings.

use std::io;

use ext4kit_engine::BlockDevice;
use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::superblock::{Geometry, RawSuperblock};

/// The image as the checker sees it: a device plus validated geometry.
pub struct RawFs<'a> {
    /// The device.
    pub dev: &'a dyn BlockDevice,
    /// The superblock in use (the primary, or a backup when it is damaged).
    pub sb: RawSuperblock,
    /// Block number of that superblock's group's first block (0 for the primary).
    pub sb_group_block: u64,
    /// Validated geometry.
    pub geo: Geometry,
    /// crc32c seed of the metadata checksums.
    pub seed: u32,
    /// Group descriptors (empty until loaded).
    pub groups: Vec<RawGroupDesc>,
    /// A repair changed [`RawFs::sb`]: write the primary at the end of the run.
    pub dirty_sb: bool,
    /// A repair changed [`RawFs::groups`]: write the primary table.
    pub dirty_groups: bool,
    /// Write every backup superblock and descriptor table too.
    pub dirty_backups: bool,
}

impl RawFs<'_> {
    /// Block size in bytes.
    pub fn bs(&self) -> usize {
        self.geo.block_size as usize
    }

    /// Reads block `blk`; an error if it lies outside the file system or
    /// the device.
    pub fn read_block(&self, blk: u64) -> io::Result<Vec<u8>> {
        if blk >= self.geo.blocks_count {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("block {blk} is past the end"),
            ));
        }
        let mut buf = vec![0u8; self.bs()];
        let off = blk * u64::from(self.geo.block_size);
        if off + buf.len() as u64 > self.dev.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("block {blk} is past the end of the device"),
            ));
        }
        self.dev.read_at(off, &mut buf)?;
        Ok(buf)
    }

    /// True when `blk` may hold data: inside `[s_first_data_block, s_blocks_count)`.
    pub fn valid_block(&self, blk: u64) -> bool {
        blk >= u64::from(self.geo.first_data_block) && blk < self.geo.blocks_count
    }

    /// Number of blocks the group descriptor table fills.
    pub fn gdt_blocks(&self) -> u64 {
        u64::from(self.geo.group_count).div_ceil(u64::from(self.geo.descs_per_block()))
    }

    fn meta_bg(&self) -> bool {
        self.geo.features.incompat.contains(IncompatFeatures::META_BG)
    }

    /// Where group `g`'s superblock copy goes: its first block, except on a
    /// 1 KiB-block bigalloc file system, whose block 0 is the boot block
    /// and whose primary superblock is block 1 (libext2fs's
    /// `ext2fs_super_and_bgd_loc2`).
    pub fn group_base(&self, g: u32) -> u64 {
        let start = self.geo.group_first_block(g);
        if start == 0 && self.geo.block_size == 1024 {
            1
        } else {
            start
        }
    }

    /// Whether `group` holds a superblock copy (sparse_super, sparse_super2).
    pub fn has_super(&self, group: u32) -> bool {
        if self.geo.features.compat.contains(CompatFeatures::SPARSE_SUPER2) {
            return group == 0 || self.sb.s_backup_bgs.iter().any(|b| b.get() == group);
        }
        self.geo.group_has_super_sparse(group)
    }

    /// Where descriptor block `i` of the table lies, reading the copy next
    /// to the superblock in use (with meta_bg, the copy in the first group
    /// of the meta group).
    pub fn desc_block(&self, i: u64) -> u64 {
        let first_meta = u64::from(self.sb.s_first_meta_bg.get());
        if !self.meta_bg() || i < first_meta {
            let base = if self.sb_group_block == 0 {
                self.group_base(0)
            } else {
                self.sb_group_block
            };
            return base + 1 + i;
        }
        let group = i * u64::from(self.geo.descs_per_block());
        let g = u32::try_from(group).unwrap_or(u32::MAX);
        self.group_base(g) + u64::from(self.has_super(g))
    }

    /// The blocks group `g` gives to a superblock copy and descriptor blocks
    /// (old-style copies plus reserved GDT blocks, or its meta_bg copy), as
    /// `ext2fs_reserve_super_and_bgd` counts them.
    pub fn super_and_gdt_blocks(&self, g: u32) -> Vec<u64> {
        let mut out = Vec::new();
        let start = self.group_base(g);
        let has = self.has_super(g);
        if g == 0 && self.geo.first_data_block == 0 {
            out.push(0);
        }
        if has && start != 0 {
            out.push(start);
        }
        let gdt = self.gdt_blocks();
        let first_meta = if self.meta_bg() {
            u64::from(self.sb.s_first_meta_bg.get())
        } else {
            gdt
        };
        if has {
            // A `s_first_meta_bg` past the table still reserves that many
            // old-style blocks, as e2fsck counts them until its repair
            // clears meta_bg; never more than the group.
            let old =
                (first_meta + u64::from(self.sb.s_reserved_gdt_blocks.get())).min(u64::from(self.geo.blocks_per_group));
            out.extend((0..old).map(|i| start + 1 + i));
        }
        if self.meta_bg() {
            let dpb = u64::from(self.geo.descs_per_block());
            let mg = u64::from(g) / dpb;
            let idx = u64::from(g) % dpb;
            if mg >= first_meta && (idx == 0 || idx == 1 || idx == dpb - 1) {
                out.push(start + u64::from(has));
            }
        }
        out.retain(|&b| b < self.geo.blocks_count);
        out
    }

    /// Reads the on-disk record of inode `ino` (`s_inode_size` bytes).
    pub fn inode_record(&self, ino: u32) -> io::Result<Vec<u8>> {
        let (g, idx) = self
            .geo
            .inode_location(ino)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("inode {ino} out of range")))?;
        let gd = self
            .groups
            .get(g as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no descriptor"))?;
        let isz = u64::from(self.geo.inode_size);
        let byte = u64::from(idx) * isz;
        let blk = gd.inode_table() + byte / u64::from(self.geo.block_size);
        let b = self.read_block(blk)?;
        let off = (byte % u64::from(self.geo.block_size)) as usize;
        Ok(b[off..off + isz as usize].to_vec())
    }
}
