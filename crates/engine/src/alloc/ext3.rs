//! The ext3 block allocator, kept as a comparison policy (seed 001 §2.1,
//! `-o alloc=ext3`): a file allocates from its own reservation window
//! (`ext3_try_to_allocate_with_rsv`) — physical blocks other files leave
//! alone, kept in memory while the file is open — and when the window
//! has nothing free it gets a new one at the first usable block after
//! its goal. A window starts at 8 blocks and doubles, up to 1,027, each
//! time the file used more than half of the last one
//! (`EXT3_DEFAULT_RESERVE_BLOCKS`, `EXT3_MAX_RESERVE_BLOCKS`). There is
//! no buddy, no normalization and no locality group: small files go where
//! their goal puts them.
//!
//! Under bigalloc the same allocator works in clusters: a window is whole
//! clusters (8 growing to 1,027 of them), searched in the cluster bitmap,
//! and a file's request is rounded out to the clusters its blocks fall in
//! with each block at its offset in its cluster (see [`super::cluster`]).

use super::bitmap::test_bit;
use super::cluster::ClusterRun;
use super::prealloc::Reservation;
use crate::error::{Error, Result};
use crate::txn::Txn;

/// First window size.
const DEFAULT_RESERVE: u64 = 8;
/// Largest window.
const MAX_RESERVE: u64 = 1027;

impl Txn<'_> {
    /// Under bigalloc, up to `want` blocks for logical `lblk` of file
    /// `ino` (none of them in a logical cluster that has its physical
    /// cluster), in new clusters from its window near `goal`, or from any
    /// free cluster once no window can be had.
    ///
    /// # Errors
    /// [`Error::NoSpace`] when no cluster is free.
    pub(crate) fn ext3_alloc_clusters(&mut self, ino: u32, lblk: u64, want: u32, goal: u64) -> Result<ClusterRun> {
        let bits = self.fs.geo.cluster_bits;
        let off = lblk & ((1 << bits) - 1);
        let need = (off + u64::from(want)).div_ceil(1 << bits) as u32;
        let (first, got) = match self.ext3_alloc(ino, goal, need) {
            Err(Error::NoSpace) => self.alloc_clusters(goal, need)?,
            r => r?,
        };
        let blocks = u64::from(want).min((u64::from(got) << bits) - off) as u32;
        Ok((first + off, blocks, i64::from(got) << bits))
    }

    /// Up to `want` units (blocks, or clusters under bigalloc) for file
    /// `ino` near `goal`, from its window: the first block and the units.
    ///
    /// # Errors
    /// [`Error::NoSpace`] when no group has a free block outside other
    /// files' windows.
    pub(crate) fn ext3_alloc(&mut self, ino: u32, goal: u64, want: u32) -> Result<(u64, u32)> {
        let geo = &self.fs.geo;
        let goal = goal.clamp(u64::from(geo.first_data_block), geo.blocks_count - 1);
        if let Some(r) = self.fs.prealloc.reservation(ino)
            && let Some(got) = self.ext3_from_window(ino, r, goal, want)?
        {
            return Ok(got);
        }
        let old = self.fs.prealloc.reservation(ino);
        let u = self.fs.geo.cluster_bits;
        let size = match old {
            Some(r) if r.len > 0 && r.hits * 2 > r.len >> u => (r.goal_size * 2).min(MAX_RESERVE),
            Some(r) => r.goal_size,
            None => DEFAULT_RESERVE,
        };
        let empty = Reservation {
            start: 0,
            len: 0,
            goal_size: size,
            hits: 0,
        };
        self.fs.prealloc.set_reservation(ino, empty);
        let start = self.ext3_usable_block(goal)?.ok_or(Error::NoSpace)?;
        let g = self.group_of(start);
        let group_end = self.fs.geo.group_first_block(g) + (u64::from(self.fs.geo.clusters_in_group(g)) << u);
        let end = (start + (size << u)).min(group_end);
        let end = self.fs.prealloc.first_reserved(ino, start, end).unwrap_or(end);
        let r = Reservation {
            start,
            len: end - start,
            goal_size: size,
            hits: 0,
        };
        self.fs.prealloc.set_reservation(ino, r);
        self.ext3_from_window(ino, r, goal, want)?.ok_or(Error::NoSpace)
    }

    /// Free units from window `r`: from the goal when it lies inside,
    /// else from the window's start; `None` when none is free. A window
    /// never crosses a group's end.
    fn ext3_from_window(&mut self, ino: u32, r: Reservation, goal: u64, want: u32) -> Result<Option<(u64, u32)>> {
        if r.len == 0 {
            return Ok(None);
        }
        let u = self.fs.geo.cluster_bits;
        let g = self.group_of(r.start);
        let first = self.fs.geo.group_first_block(g);
        let view = if u > 0 {
            self.cluster_view(g, false)?
        } else {
            self.view_of_owner(g)?
        };
        let (ws, we) = (((r.start - first) >> u) as u32, ((r.start + r.len - first) >> u) as u32);
        let from = if (r.start..r.start + r.len).contains(&goal) {
            ((goal - first) >> u) as u32
        } else {
            ws
        };
        let free = |i: u32| !test_bit(&view, i);
        let Some(s) = (from..we).chain(ws..from).find(|&i| free(i)) else {
            return Ok(None);
        };
        let n = (s..we).take_while(|&i| free(i)).count().min(want as usize) as u64;
        let at = first + (u64::from(s) << u);
        let taken = if u > 0 {
            self.claim_clusters_at(at, n as u32)?
        } else {
            self.alloc_exact(at, n)?
        };
        if !taken {
            return Ok(None);
        }
        self.fs.prealloc.hit_reservation(ino, n);
        Ok(Some((at, n as u32)))
    }

    /// `find_next_usable_block`: the goal if free; else a free block
    /// before the goal's next 64-block boundary; else the start of a
    /// free, byte-aligned run of 8; else any free block (units, as above) — searching each
    /// group from the goal's on, windows of other files laid over.
    fn ext3_usable_block(&mut self, goal: u64) -> Result<Option<u64>> {
        let g0 = self.group_of(goal);
        let u = self.fs.geo.cluster_bits;
        self.groups_from(g0, 1, |t, g| {
            let first = t.fs.geo.group_first_block(g);
            let from = if g == g0 { ((goal - first) >> u) as u32 } else { 0 };
            let view = if u > 0 {
                t.cluster_view(g, true)?
            } else {
                t.alloc_view(g)?
            };
            let found = usable_in(&view, from, t.fs.geo.clusters_in_group(g));
            Ok(found.map(|i| first + (u64::from(i) << u)))
        })
    }
}

/// The ext3 search order inside one group's view (bit set = taken).
fn usable_in(view: &[u8], from: u32, limit: u32) -> Option<u32> {
    let free = |i: u32| i < limit && !test_bit(view, i);
    if free(from) {
        return Some(from);
    }
    let boundary = (from / 64 + 1) * 64;
    if let Some(i) = (from..boundary.min(limit)).find(|&i| free(i)) {
        return Some(i);
    }
    let byte_from = from.div_ceil(8) as usize;
    let whole = (byte_from..(limit / 8) as usize).find(|&b| view.get(b) == Some(&0));
    if let Some(b) = whole {
        // Back to the first free block of the run the byte starts.
        let mut i = (b * 8) as u32;
        while i > from && free(i - 1) {
            i -= 1;
        }
        return Some(i);
    }
    (from..limit).chain(0..from).find(|&i| free(i))
}

#[cfg(test)]
mod tests {
    use super::usable_in;

    #[test]
    fn the_search_prefers_the_goal_then_nearby_then_eight_free() {
        let mut view = vec![0xFFu8; 32];
        view[20] = 0; // blocks 160..168 free
        view[1] = 0b1111_1101; // block 9 free
        view[30] = 0b1110_1111; // block 244 free
        assert_eq!(usable_in(&view, 9, 256), Some(9), "the goal");
        assert_eq!(usable_in(&view, 3, 256), Some(9), "before the 64-block boundary");
        assert_eq!(usable_in(&view, 70, 256), Some(160), "a free byte");
        view[20] = 0b0000_0001;
        assert_eq!(usable_in(&view, 70, 256), Some(161), "any free block");
        assert_eq!(usable_in(&view, 250, 256), Some(9), "wrapping");
    }
}
