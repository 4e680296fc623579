//! Logical-to-physical mapping of a file body, whatever stores it: an
//! extent tree (`extents`) or an ext2/3 block map (`block_map`). Callers ask
//! for a range of logical blocks and get back the mapped runs in order;
//! anything not covered is a hole.

use crate::error::Result;
use crate::fs::Filesystem;
use crate::inode::Inode;

/// A contiguous mapped run of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// First logical block.
    pub logical: u64,
    /// First physical block.
    pub physical: u64,
    /// Length in blocks.
    pub len: u64,
    /// Preallocated but unwritten: reads as zeros.
    pub unwritten: bool,
}

impl Run {
    /// One past the last logical block.
    pub fn end(&self) -> u64 {
        self.logical + self.len
    }
}

/// Logical blocks a file may address: 2^32 for extents and block maps alike.
pub const MAX_LOGICAL: u64 = 1 << 32;

impl Filesystem {
    /// The mapped runs of `inode` intersecting logical blocks
    /// `start..start + count`, clipped to that range, in logical order.
    ///
    /// Cost: one cached read per tree level touched.
    ///
    /// # Errors
    /// Corruption of an extent node or indirect block (located at its block),
    /// or a mapping that points outside the file system.
    pub fn map_range(&self, inode: &Inode, start: u64, count: u64) -> Result<Vec<Run>> {
        self.reading("map_range", || self.map_range_unrecorded(inode, start, count))
    }

    fn map_range_unrecorded(&self, inode: &Inode, start: u64, count: u64) -> Result<Vec<Run>> {
        let end = start.saturating_add(count).min(MAX_LOGICAL);
        if start >= end || inode.has_inline_data() {
            return Ok(Vec::new());
        }
        let mut runs = if inode.uses_extents() {
            self.extent_runs(inode, start, end)?
        } else {
            self.block_map_runs(inode, start, end)?
        };
        for r in &mut runs {
            let lo = r.logical.max(start);
            let hi = r.end().min(end);
            r.physical += lo - r.logical;
            r.logical = lo;
            r.len = hi - lo;
        }
        runs.retain(|r| r.len > 0);
        Ok(runs)
    }

    /// Every mapped run of the file body within its size.
    pub fn all_runs(&self, inode: &Inode) -> Result<Vec<Run>> {
        let blocks = inode.size().div_ceil(self.geo.block_size.into());
        self.map_range(inode, 0, blocks)
    }
}
