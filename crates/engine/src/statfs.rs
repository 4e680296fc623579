//! `statfs(2)` figures (`ext4_statfs`): sizes in blocks with the metadata
//! overhead taken out, as `df` shows them on a kernel mount.

use ext4kit_format::features::IncompatFeatures;

use std::sync::atomic::Ordering;

use ext4kit_format::superblock::Geometry;

use crate::error::{Error, Result};
use crate::fs::Filesystem;

/// The reserve the kernel computes at mount (`ext4_calculate_resv_clusters`):
/// 2% of the clusters, at most 4096, with extents only (a block-mapped
/// file never splits an extent).
pub(crate) fn default_resv_clusters(geo: &Geometry) -> u64 {
    if !geo.features.incompat.contains(IncompatFeatures::EXTENTS) {
        return 0;
    }
    (geo.blocks_count / u64::from(geo.cluster_ratio()) / 50).min(4096)
}

/// File-system totals for `statfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Block size in bytes.
    pub block_size: u32,
    /// Blocks usable for data: all blocks less the static metadata.
    pub blocks: u64,
    /// Free blocks.
    pub blocks_free: u64,
    /// Free blocks an unprivileged user may take: free less the root
    /// reserve (`s_r_blocks_count`) and ext4's own reserve for extent
    /// splits (2% of the blocks, at most 4096: `ext4_calculate_resv_clusters`).
    pub blocks_available: u64,
    /// Inodes.
    pub files: u64,
    /// Free inodes.
    pub files_free: u64,
    /// Longest name.
    pub name_max: u32,
}

impl Filesystem {
    /// Totals for `statfs`. The overhead is `s_overhead_clusters` when
    /// mke2fs recorded it, else what `ext4_calculate_overhead` counts:
    /// superblock and descriptor copies, bitmaps, inode tables, the journal.
    pub fn statfs(&self) -> StatFs {
        let sb = self.superblock();
        let free = u64::from(sb.s_free_blocks_count_lo.get()) | (u64::from(sb.s_free_blocks_count_hi.get()) << 32);
        // Blocks promised to delayed writes are as good as taken
        // (`s_dirtyclusters_counter` in `ext4_statfs`).
        let free = free.saturating_sub(self.delalloc.reserved());
        let reserved = u64::from(sb.s_r_blocks_count_lo.get()) | (u64::from(sb.s_r_blocks_count_hi.get()) << 32);
        // Both counted in clusters by the kernel (`EXT4_C2B` in
        // `ext4_statfs`), so whole clusters with bigalloc.
        let ratio = u64::from(self.geo.cluster_ratio());
        let overhead = match u64::from(sb.s_overhead_clusters.get()) {
            0 => self.metadata_overhead(),
            n => n * ratio,
        };
        let resv = self.resv_blocks();
        StatFs {
            block_size: self.geo.block_size,
            blocks: self.geo.blocks_count.saturating_sub(overhead),
            blocks_free: free,
            blocks_available: free.saturating_sub(reserved + resv),
            files: u64::from(self.geo.inodes_count),
            files_free: u64::from(sb.s_free_inodes_count.get()),
            name_max: 255,
        }
    }

    /// ext4's own reserve in blocks (`s_resv_clusters`; see
    /// [`default_resv_clusters`] and [`Self::set_reserved_clusters`]).
    /// Ordinary allocations leave it alone, so the extent-tree blocks of
    /// write-back and of hole punching are still found once data has
    /// taken the rest (see `Txn::check_unreserved`).
    pub fn resv_blocks(&self) -> u64 {
        self.resv_clusters.load(Ordering::Relaxed) * u64::from(self.geo.cluster_ratio())
    }

    /// Sets the reserve to `clusters`, as root does on a kernel mount
    /// through `/sys/fs/ext4/DEV/reserved_clusters` (0 gives data every
    /// free block). Not stored on disk: the next open computes it anew.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for the whole file system or more, as
    /// the kernel's `EINVAL`.
    pub fn set_reserved_clusters(&self, clusters: u64) -> Result<()> {
        let total = self.geo.blocks_count / u64::from(self.geo.cluster_ratio());
        if clusters >= total {
            return Err(Error::InvalidArgument(format!(
                "reserved clusters {clusters}: the file system has {total}"
            )));
        }
        self.resv_clusters.store(clusters, Ordering::Relaxed);
        Ok(())
    }

    /// Free blocks now (`s_free_blocks_count`), without the rest of
    /// [`Self::statfs`]: cheap enough to ask before every allocation.
    /// Blocks reserved for data held by delayed allocation are not free.
    pub fn free_blocks(&self) -> u64 {
        self.free_blocks_on_disk().saturating_sub(self.delalloc.reserved())
    }

    /// Blocks reserved for file data held by delayed allocation: taken
    /// from [`Self::free_blocks`], and not yet written to the device (a
    /// sparse image's host has yet to store them).
    pub fn delayed_blocks(&self) -> u64 {
        self.delalloc.reserved()
    }

    /// `s_free_blocks_count` as last published.
    pub(crate) fn free_blocks_on_disk(&self) -> u64 {
        let sb = self.sb.read();
        u64::from(sb.s_free_blocks_count_lo.get()) | (u64::from(sb.s_free_blocks_count_hi.get()) << 32)
    }

    /// Blocks that never hold file data.
    fn metadata_overhead(&self) -> u64 {
        let sb = self.superblock();
        let meta_bg = self.geo.features.incompat.contains(IncompatFeatures::META_BG);
        let gdt_blocks = if meta_bg {
            u64::from(sb.s_first_meta_bg.get())
        } else {
            u64::from(self.geo.group_count.div_ceil(self.geo.descs_per_block()))
        };
        let per_copy = 1 + gdt_blocks + u64::from(sb.s_reserved_gdt_blocks.get());
        let journal = self
            .journal_info()
            .superblock
            .as_ref()
            .map_or(0, |j| u64::from(j.max_len));
        if self.geo.cluster_bits > 0 {
            // The kernel's cluster count leaves the reserved GDT blocks out.
            return self.metadata_clusters(1 + gdt_blocks) * u64::from(self.geo.cluster_ratio())
                + journal.next_multiple_of(u64::from(self.geo.cluster_ratio()));
        }
        let copies = (0..self.geo.group_count).filter(|&g| self.group_has_super(g)).count() as u64;
        let tables = u64::from(self.geo.group_count) * (2 + u64::from(self.geo.inode_table_blocks));
        u64::from(self.geo.first_data_block) + copies * per_copy + tables + journal
    }

    /// Clusters holding static metadata with bigalloc, each counted once
    /// however many metadata blocks share it, as `count_overhead` sets
    /// them in a cluster bitmap: a group's superblock and descriptor copy
    /// (`per_copy` blocks from its start), every bitmap and inode table.
    /// Checked against the kernel's `statfs` (`bigalloc.rs`).
    fn metadata_clusters(&self, per_copy: u64) -> u64 {
        let geo = &self.geo;
        let itb = u64::from(geo.inode_table_blocks);
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut add = |start: u64, len: u64| {
            if len > 0 {
                runs.push((geo.cluster_of(start), geo.cluster_of(start + len - 1)));
            }
        };
        for (g, d) in self.groups.read().iter().enumerate() {
            let g = g as u32;
            if self.group_has_super(g) {
                add(geo.group_first_block(g), per_copy);
            }
            add(d.block_bitmap(), 1);
            add(d.inode_bitmap(), 1);
            add(d.inode_table(), itb);
        }
        runs.sort_unstable();
        let (mut total, mut end) = (0u64, None::<u64>);
        for (a, b) in runs {
            let from = end.map_or(a, |e| a.max(e + 1));
            if b >= from {
                total += b - from + 1;
            }
            end = Some(end.map_or(b, |e| e.max(b)));
        }
        total
    }
}
