//! Bigalloc (`bigalloc.rst`, ro_compat `BIGALLOC`): the block bitmap has
//! one bit per cluster of `2^cluster_bits` blocks and `bg_free_blocks_count`
//! counts clusters, so every allocation here hands out whole clusters.
//!
//! A file's data follows the rule e2fsck's pass 1 checks
//! (`has_unaligned_cluster_map`) and the kernel keeps with
//! `get_implied_cluster_alloc`: a block's offset in its physical cluster
//! equals its logical block's offset in its logical cluster, and all the
//! mapped blocks of one logical cluster lie in one physical cluster. A new
//! block whose logical cluster already has one takes the block at its
//! offset there, for nothing; otherwise new clusters are taken. A cluster
//! is freed only once no extent of its file uses a block of it (the
//! partial-cluster bookkeeping of `ext4_ext_remove_space`). `i_blocks`
//! counts whole clusters: each data cluster once, each metadata block
//! (extent node, xattr block) as a cluster of its own.
//!
//! Under bigalloc metadata takes clusters by this goal scan, which leaves
//! the preallocation windows alone; mballoc's buddies work in blocks and
//! are not used. A file's data goes, under mballoc, through its
//! normalization and windows in clusters (`cluster_pa`), and under the
//! ext3 allocator through its reservation windows in clusters (`ext3`).

use std::collections::BTreeSet;

use super::bitmap::{free_run, set_bit, test_bit};
pub(crate) use super::cluster_pa::ClusterRequest;
use super::cluster_pa::before_mapped_cluster;
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;
use ext4kit_format::extent::Extent;

/// New blocks for a file: `(physical, count, blocks to charge to i_blocks)`.
pub(crate) type ClusterRun = (u64, u32, i64);

impl Txn<'_> {
    /// True on a bigalloc image.
    pub(crate) fn bigalloc(&self) -> bool {
        self.fs.geo.cluster_bits > 0
    }

    /// `n` metadata blocks as `i_blocks` counts them: a cluster each.
    pub(crate) fn meta_charge(&self, n: i64) -> i64 {
        n << self.fs.geo.cluster_bits
    }

    /// Up to `want` blocks for logical `lblk` of a file, within one hole:
    /// `near` holds (at least) the file's extents overlapping the logical
    /// clusters of `lblk..lblk + want`; `goal` is where new clusters are
    /// looked for.
    pub(crate) fn alloc_clustered(&mut self, near: &[Extent], lblk: u64, want: u32, goal: u64) -> Result<ClusterRun> {
        let bits = self.fs.geo.cluster_bits;
        let ratio = 1u64 << bits;
        let off = lblk & (ratio - 1);
        if let Some(phys) = implied(near, lblk, bits) {
            return Ok((phys, u64::from(want).min(ratio - off) as u32, 0));
        }
        // The last logical cluster may already have its physical cluster
        // (a hole filled up to a mapped block of it): stop before it.
        let want = u64::from(before_mapped_cluster(near, lblk, want, bits));
        let clusters = (off + want).div_ceil(ratio) as u32;
        let (start, got) = self.alloc_clusters(goal, clusters)?;
        let blocks = want.min((u64::from(got) << bits) - off) as u32;
        Ok((start + off, blocks, i64::from(got) << bits))
    }

    /// [`Self::alloc_clustered`] for a file's data (`req.lblk` not
    /// mapped; `near` as there): a request needing new clusters is, under
    /// mballoc, normalized and served from, or opens, the file's window in
    /// clusters (`cluster_pa`); under the ext3 allocator it takes them from
    /// the file's reservation window.
    pub(crate) fn alloc_clustered_for(
        &mut self,
        inode: &Inode,
        near: &[Extent],
        req: ClusterRequest,
    ) -> Result<ClusterRun> {
        let bits = self.fs.geo.cluster_bits;
        if implied(near, req.lblk, bits).is_some() {
            return self.alloc_clustered(near, req.lblk, req.want, req.goal);
        }
        let want = before_mapped_cluster(near, req.lblk, req.want, bits);
        match self.fs.opts.alloc.blocks {
            super::BlockAllocator::Mballoc => self.alloc_clusters_for(inode, ClusterRequest { want, ..req }),
            super::BlockAllocator::Ext3 => self.ext3_alloc_clusters(inode.ino, req.lblk, want, req.goal),
        }
    }

    /// Metadata (and any caller that does not map file data) under
    /// bigalloc: whole clusters for up to `want` blocks; returns the first
    /// block and the blocks given (at most `want`).
    pub(crate) fn alloc_whole_clusters(&mut self, goal: u64, want: u32) -> Result<(u64, u32)> {
        let bits = self.fs.geo.cluster_bits;
        let (start, got) = self.alloc_clusters(goal, want.max(1).div_ceil(1 << bits))?;
        Ok((start, want.min(got << bits).max(1)))
    }

    /// A new block for logical block `lblk` of directory (or file) `inode`
    /// near `goal`; returns it and the blocks to charge to `i_blocks`.
    pub(crate) fn alloc_file_block(&mut self, inode: &Inode, lblk: u64, goal: u64) -> Result<(u64, i64)> {
        if !self.bigalloc() {
            return Ok((self.alloc_blocks(goal, 1)?.0, 1));
        }
        let bits = self.fs.geo.cluster_bits;
        let lo = (lblk >> bits) << bits;
        let near = self.runs_in(inode, lo, lo + (1 << bits))?;
        let (phys, _, charge) = self.alloc_clustered(&near, lblk, 1, goal)?;
        Ok((phys, charge))
    }

    /// Up to `want` whole clusters at or after `goal`'s: the first block
    /// and the cluster count.
    ///
    /// # Errors
    /// [`Error::NoSpace`] when every group is full.
    pub(crate) fn alloc_clusters(&mut self, goal: u64, want: u32) -> Result<(u64, u32)> {
        match self.scan_clusters(goal, want) {
            // Clusters kept for streaming files go before ENOSPC does.
            Err(Error::NoSpace) if self.fs.prealloc.release_all() => self.alloc_clusters(goal, want),
            // Clusters freed but not committed may be all that is left.
            Err(Error::NoSpace) if !self.fs.busy.is_empty() => {
                self.fs.write_back()?;
                self.scan_clusters(goal, want)
            }
            r => r,
        }
    }

    fn scan_clusters(&mut self, goal: u64, want: u32) -> Result<(u64, u32)> {
        let geo = self.fs.geo.clone();
        let goal = goal.clamp(u64::from(geo.first_data_block), geo.blocks_count - 1);
        let g0 = self.group_of(goal);
        let found = self.groups_from(g0, 1, |t, g| {
            let from = if g == g0 {
                ((goal - geo.group_first_block(g)) >> geo.cluster_bits) as u32
            } else {
                0
            };
            let limit = geo.clusters_in_group(g);
            let view = t.cluster_view(g, true)?;
            Ok(free_run(&view, from, limit, want).map(|(s, len)| (g, s, len)))
        })?;
        let Some((g, start, len)) = found else {
            return Err(Error::NoSpace);
        };
        self.claim_bits(g, start, len)?;
        let first = geo.group_first_block(g) + (u64::from(start) << geo.cluster_bits);
        self.fs.mb_forget(first, u64::from(len) << geo.cluster_bits);
        Ok((first, len))
    }

    /// Group `g`'s cluster bitmap as the allocator must see it: with the
    /// clusters freed but not committed (by this transaction or an
    /// earlier one), this transaction's holds and, with `windows`, the
    /// preallocation windows taken.
    pub(super) fn cluster_view(&mut self, g: u32, windows: bool) -> Result<Vec<u8>> {
        let geo = self.fs.geo.clone();
        let mut view = self.block_bitmap_read(g)?;
        let first = geo.group_first_block(g);
        let end = first + u64::from(geo.blocks_per_group);
        let mut mark = |s: u64, l: u64| {
            for b in (s.max(first)..(s + l).min(end)).step_by(1 << geo.cluster_bits) {
                set_bit(&mut view, ((b - first) >> geo.cluster_bits) as u32, true);
            }
        };
        for &(s, l) in self.held_ranges() {
            mark(s, l);
        }
        if windows {
            for (s, l) in self.fs.prealloc.ranges() {
                mark(s, l);
            }
        }
        if self.fs.journaling {
            for &(s, l) in self.freed_ranges() {
                mark(s, l);
            }
            // The busy bitmaps are kept per block.
            let mut busy = vec![0u8; (geo.blocks_per_group as usize).div_ceil(8)];
            self.fs.busy.lay_over(g, &mut busy);
            for (i, _) in busy.iter().enumerate().filter(|(_, b)| **b != 0) {
                for bit in 0..8 {
                    if busy[i] & (1 << bit) != 0 {
                        mark(first + (i * 8 + bit) as u64, 1);
                    }
                }
            }
        }
        Ok(view)
    }

    /// Frees the clusters holding blocks `start..start + len` (metadata,
    /// or data whose clusters the caller knows unused).
    pub(crate) fn free_clusters_of(&mut self, start: u64, len: u64) -> Result<()> {
        let bits = self.fs.geo.cluster_bits;
        let (c0, c1) = (start >> bits, (start + len.max(1) - 1) >> bits);
        let mut c = c0;
        while c <= c1 {
            let g = self.group_of(c << bits);
            let first = self.fs.geo.group_first_block(g);
            let group_end = (first + u64::from(self.fs.geo.blocks_per_group)) >> bits;
            let stop = (c1 + 1).min(group_end);
            self.note_freed(c << bits, (stop - c) << bits);
            let map = self.block_bitmap_mut(g)?;
            for x in c..stop {
                let bit = (x - (first >> bits)) as u32;
                if !test_bit(map, bit) {
                    return Err(Error::inconsistent(
                        Location::Block {
                            block: x << bits,
                            inode: 0,
                        },
                        "freeing a cluster that is already free",
                    ));
                }
                set_bit(map, bit, false);
            }
            self.adjust_group_blocks(g, (stop - c) as i64)?;
            if !self.fs.journaling {
                self.fs.mb_forget(c << bits, (stop - c) << bits);
            }
            c = stop;
        }
        Ok(())
    }

    /// Frees the data of extents `gone`, which the file no longer maps,
    /// while `kept` stay; returns the blocks to take off `i_blocks`. Under
    /// bigalloc a cluster goes only when no kept extent uses a block of
    /// it: only a kept extent's first and last clusters can be shared.
    pub(crate) fn release_runs(&mut self, gone: &[Extent], kept: &[Extent]) -> Result<i64> {
        if !self.bigalloc() {
            let mut freed = 0;
            for e in gone {
                self.free_blocks(e.physical, u64::from(e.len))?;
                freed += i64::from(e.len);
            }
            return Ok(freed);
        }
        let bits = self.fs.geo.cluster_bits;
        let edges: BTreeSet<u64> = kept
            .iter()
            .filter(|e| e.len > 0)
            .flat_map(|e| [e.physical >> bits, (e.physical + u64::from(e.len) - 1) >> bits])
            .collect();
        let mut clusters = BTreeSet::new();
        for e in gone.iter().filter(|e| e.len > 0) {
            clusters.extend((e.physical >> bits)..=((e.physical + u64::from(e.len) - 1) >> bits));
        }
        let free: Vec<u64> = clusters.into_iter().filter(|c| !edges.contains(c)).collect();
        for &c in &free {
            self.free_clusters_of(c << bits, 1)?;
        }
        Ok((free.len() as i64) << bits)
    }
}

/// The physical block of `lblk` when its logical cluster already has a
/// physical cluster among `near`.
fn implied(near: &[Extent], lblk: u64, bits: u32) -> Option<u64> {
    let lc = lblk >> bits;
    let e = near.iter().find(|e| touches(e, lc, bits))?;
    let at = u64::from(e.logical).max(lc << bits);
    let base = ((e.physical + (at - u64::from(e.logical))) >> bits) << bits;
    Some(base + (lblk & ((1 << bits) - 1)))
}

/// True when extent `e` maps a block of logical cluster `lc`.
pub(super) fn touches(e: &Extent, lc: u64, bits: u32) -> bool {
    let (lo, hi) = (u64::from(e.logical), u64::from(e.logical) + u64::from(e.len));
    e.len > 0 && lo < (lc + 1) << bits && hi > lc << bits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(logical: u32, len: u16, physical: u64) -> Extent {
        Extent {
            logical,
            len,
            physical,
            unwritten: false,
        }
    }

    #[test]
    fn implied_block_keeps_the_offset_in_the_cluster() {
        // 16-block clusters: logical 20..24 at physical 164..168.
        let near = [ext(20, 4, 164)];
        assert_eq!(implied(&near, 30, 4), Some(174));
        assert_eq!(implied(&near, 16, 4), Some(160));
        assert_eq!(implied(&near, 32, 4), None);
        // An extent over two clusters: the second one's physical cluster.
        let near = [ext(8, 16, 328)];
        assert_eq!(implied(&near, 30, 4), Some(350));
        assert_eq!(implied(&near, 2, 4), Some(322));
    }
}
