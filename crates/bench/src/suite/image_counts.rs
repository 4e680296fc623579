//! How a workload left an image, counted offline by the engine's library
//! once the image is unmounted: extents per regular file (as `filefrag`
//! counts them) and the free space as runs (as `e2freefrag` does). Counts,
//! not times, so one image always gives the same figures, and an image the
//! kernel wrote is measured by exactly the code that measures the
//! engine's — the comparison is of the allocators, not of two meters.

use std::path::Path;

use anyhow::{Context, Result};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::frag::FreeSpace;
use ext4kit_engine::{Filesystem, OpenOptions};
use serde_json::json;

use super::Outcome;

/// What an image holds, counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageCounts {
    /// Block size in bytes.
    pub block_size: u64,
    /// Regular files.
    pub files: u64,
    /// Their extents, summed.
    pub extents: u64,
    /// The most extents one file has.
    pub max_extents: u64,
    /// Files in more than one extent.
    pub multi_extent_files: u64,
    /// Free blocks as the superblock counts them (`s_free_blocks_count`),
    /// beside the bitmaps' count in `free`: the two agree on a clean image.
    pub superblock_free: u64,
    /// The free space, run by run, from the block bitmaps.
    pub free: FreeSpace,
}

impl ImageCounts {
    /// Opens the image at `path` read-only and counts.
    pub fn of(path: &Path) -> Result<Self> {
        let dev = FileDevice::open(path, false).with_context(|| format!("opening {}", path.display()))?;
        let fs = Filesystem::open(Box::new(dev), OpenOptions::default())
            .with_context(|| format!("opening {} with the engine", path.display()))?;
        Self::count(&fs).with_context(|| format!("counting the layout of {}", path.display()))
    }

    /// Counts on an open file system.
    pub fn count(fs: &Filesystem) -> Result<Self> {
        let mut c = Self {
            block_size: fs.block_size() as u64,
            files: 0,
            extents: 0,
            max_extents: 0,
            multi_extent_files: 0,
            superblock_free: fs.free_blocks(),
            free: fs.free_space()?,
        };
        for (_, inode) in fs.regular_files()? {
            let f = fs.file_frag(&inode)?;
            c.files += 1;
            c.extents += f.extents;
            c.max_extents = c.max_extents.max(f.extents);
            c.multi_extent_files += u64::from(f.extents > 1);
        }
        Ok(c)
    }

    /// Extents per regular file (0 with no files).
    pub fn avg_extents(&self) -> f64 {
        self.extents as f64 / self.files.max(1) as f64
    }

    /// Share of the blocks in use, by the bitmaps.
    pub fn fullness(&self) -> f64 {
        let total = self.free.total_blocks.max(1);
        total.saturating_sub(self.free.free_blocks) as f64 / total as f64
    }

    /// Adds the counts to a workload's result values.
    pub fn record(&self, out: &mut Outcome) {
        let v = &mut out.values;
        v.insert("files".into(), self.files.into());
        v.insert("extents".into(), self.extents.into());
        v.insert("avg_extents_per_file".into(), self.avg_extents().into());
        v.insert("max_extents_per_file".into(), self.max_extents.into());
        v.insert("files_in_several_extents".into(), self.multi_extent_files.into());
        v.insert("free_extents".into(), self.free.free_runs.into());
        v.insert("largest_free_extent_blocks".into(), self.free.largest_run.into());
        v.insert("free_blocks".into(), self.free.free_blocks.into());
        v.insert("free_blocks_superblock".into(), self.superblock_free.into());
        v.insert("total_blocks".into(), self.free.total_blocks.into());
        v.insert("block_size".into(), self.block_size.into());
        v.insert("fullness".into(), self.fullness().into());
        let hist: Vec<_> = self
            .free
            .buckets
            .iter()
            .map(|b| json!({"min_blocks": b.min, "max_blocks": b.max, "free_extents": b.runs, "blocks": b.blocks}))
            .collect();
        v.insert("free_extent_histogram".into(), hist.into());
    }
}

/// [`super::Workload::inspect`] for workloads judged by their layout:
/// the counts, and `e2freefrag`'s count of free extents beside them when
/// it is installed (a note says when not).
pub fn inspect(image: &Path, out: &mut Outcome) -> Result<()> {
    ImageCounts::of(image)?.record(out);
    match crate::system::e2freefrag_extents(image)? {
        Some(n) => {
            out.values.insert("free_extents_e2freefrag".into(), n.into());
        }
        None => out
            .notes
            .push("e2freefrag not found: the free extents were counted by the engine alone".into()),
    }
    Ok(())
}
