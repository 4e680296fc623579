//! mballoc under bigalloc: request normalization and per-inode
//! preallocation windows in clusters, as `ext4_mb_normalize_request`
//! sizes a request in bytes and keeps its goal length in clusters
//! (`EXT4_NUM_B2C`), and an inode's `ext4_prealloc_space` covers whole
//! clusters.
//!
//! A window here is the block-granular [`super::prealloc::Window`] with
//! its logical start, physical start and length all multiples of the
//! cluster, so a block taken from it keeps its offset in its cluster (the
//! rule e2fsck's `has_unaligned_cluster_map` checks). Other allocations
//! (other files, extent-tree blocks) see its clusters as taken; without
//! that, the clusters after a file's newest piece went to the next
//! request of any kind and a stream written in pieces broke into an
//! extent per piece.

use super::bitmap::{find_zero, test_bit};
use super::cluster::{ClusterRun, touches};
use super::mballoc::normalize::{MAX_LEN, normalize};
use super::prealloc::Window;
use crate::error::Result;
use crate::inode::Inode;
use crate::txn::Txn;
use ext4kit_format::extent::Extent;

/// A file's request under bigalloc: logical blocks `lblk..lblk + want`,
/// which the file does not map, none of them in a logical cluster that
/// already has its physical cluster; `goal` is where the file's previous
/// block suggests; `left` and `next` are the file's last mapped logical
/// block before `lblk` and its first after.
pub(crate) struct ClusterRequest {
    pub lblk: u64,
    pub want: u32,
    pub goal: u64,
    pub left: Option<u64>,
    pub next: Option<u64>,
}

impl Txn<'_> {
    /// New clusters for `inode`'s blocks `req`: from its window when the
    /// request falls in it, else the normalized size's room near the goal,
    /// keeping the clusters after them as the file's window.
    pub(crate) fn alloc_clusters_for(&mut self, inode: &Inode, req: ClusterRequest) -> Result<ClusterRun> {
        // Windows coming and going note their ranges for the buddies,
        // which bigalloc does not use: drain them.
        self.mb_sync();
        if let Some(run) = self.take_cluster_window(inode, req.lblk, req.want)? {
            return Ok(run);
        }
        let bits = self.fs.geo.cluster_bits;
        let ratio = 1u64 << bits;
        let off = req.lblk & (ratio - 1);
        // A piece before the window (written out of order) goes just
        // before it; the window stays for the rest.
        let ahead = self.fs.prealloc.get(inode.ino).filter(|w| w.logical > req.lblk);
        // A window behind the request is replaced by the one this opens;
        // its unused tail may be just where the request belongs.
        if ahead.is_none() {
            self.fs.prealloc.release(inode.ino);
        }
        let goal = match ahead {
            Some(w) => w.physical.saturating_sub(w.logical - req.lblk),
            None => req.goal,
        };
        let geo = self.fs.geo.clone();
        let clamp = |b: u64| b.clamp(u64::from(geo.first_data_block), geo.blocks_count - 1);
        let goal = clamp(goal);
        let need = (off + u64::from(req.want)).div_ceil(ratio) as u32;
        let (start, len) = normalize(
            req.lblk,
            req.want,
            inode.size(),
            geo.block_size_log2,
            req.left,
            req.next,
        );
        // The normalized range in whole clusters, none of them `left`'s:
        // its hole before the request joins the window, so pieces that
        // arrive later for it land in place (the inode `pa_lstart` at the
        // normalized start).
        let lc = req.lblk >> bits;
        let lstart = match ahead {
            Some(_) => lc,
            None => (start >> bits).max(req.left.map_or(0, |l| (l >> bits) + 1)).min(lc),
        };
        let pre = (lc - lstart) as u32;
        let span = pre + (off + (start + u64::from(len)).saturating_sub(req.lblk)).div_ceil(ratio) as u32;
        let base_goal = match req.left {
            Some(_) => clamp(goal.saturating_sub(u64::from(pre) << bits)),
            None => goal,
        };
        let base = if self.free_clusters_at(base_goal, pre + need)? >= pre + need {
            Some(base_goal >> bits << bits)
        } else {
            self.find_cluster_run(base_goal, span.max(pre + need))?
        };
        let (first, got, wl) = match base {
            Some(b) if self.claim_clusters_at(b + (u64::from(pre) << bits), need)? => {
                (b + (u64::from(pre) << bits), need, lstart)
            }
            _ => {
                let (f, g) = self.alloc_clusters(goal, need)?;
                (f, g, lc)
            }
        };
        if ahead.is_none() {
            let wphys = first - ((lc - wl) << bits);
            self.open_cluster_window(inode, wl << bits, wphys, (lc + u64::from(got)) << bits);
        }
        let blocks = u64::from(req.want).min((u64::from(got) << bits) - off) as u32;
        Ok((first + off, blocks, i64::from(got) << bits))
    }

    /// Blocks for `lblk..lblk + want` from `inode`'s window, their
    /// clusters allocated; `None` (and the window let go when it is
    /// stale) when the window does not serve them.
    fn take_cluster_window(&mut self, inode: &Inode, lblk: u64, want: u32) -> Result<Option<ClusterRun>> {
        let Some((phys, n, to_end)) = self.fs.prealloc.take(inode.ino, lblk, u64::from(want)) else {
            return Ok(None);
        };
        let bits = self.fs.geo.cluster_bits;
        let first = phys >> bits << bits;
        let clusters = ((phys + n - 1) >> bits) - (phys >> bits) + 1;
        if !self.claim_clusters_at(first, clusters as u32)? {
            self.fs.prealloc.release(inode.ino);
            return Ok(None);
        }
        if to_end {
            self.open_cluster_window(inode, lblk + n, phys + n, lblk + n);
        }
        Ok(Some((phys, n as u32, (clusters << bits) as i64)))
    }

    /// Keeps logical `lblk..end` at physical `phys..` (both
    /// cluster-aligned) and the free clusters after them, up to an
    /// extent's length and within the group, for an open extent file past
    /// `mb_stream_req` blocks (the conditions of the block path's window).
    fn open_cluster_window(&mut self, inode: &Inode, lblk: u64, phys: u64, end: u64) {
        let a = &self.fs.opts.alloc;
        if !a.inode_prealloc || !inode.uses_extents() || end < u64::from(a.stream_req) {
            return;
        }
        if !self.is_open_now(inode.ino) {
            return;
        }
        let bits = self.fs.geo.cluster_bits;
        let after = phys + (end - lblk);
        if after >= self.fs.geo.blocks_count {
            return;
        }
        if let Ok(free) = self.free_clusters_at(after, MAX_LEN >> bits) {
            let w = Window {
                logical: lblk,
                physical: phys,
                len: end - lblk + (u64::from(free) << bits),
            };
            self.fs.prealloc.set(inode.ino, w);
        }
    }

    /// How many clusters from the one holding `block` on are free to a
    /// new allocation (windows taken), up to `max`, within its group.
    fn free_clusters_at(&mut self, block: u64, max: u32) -> Result<u32> {
        let geo = self.fs.geo.clone();
        let g = self.group_of(block);
        let from = ((block - geo.group_first_block(g)) >> geo.cluster_bits) as u32;
        let view = self.cluster_view(g, true)?;
        let limit = geo.clusters_in_group(g);
        Ok((from..limit)
            .take(max as usize)
            .take_while(|&c| !test_bit(&view, c))
            .count() as u32)
    }

    /// The first block of the first run of `len` free clusters at or
    /// after `goal`'s cluster, group by group (never wrapping inside the
    /// goal's group, which the caller's first-fit covers).
    fn find_cluster_run(&mut self, goal: u64, len: u32) -> Result<Option<u64>> {
        let geo = self.fs.geo.clone();
        let g0 = self.group_of(goal);
        self.groups_from(g0, len, |t, g| {
            let first = geo.group_first_block(g);
            let mut at = if g == g0 {
                ((goal - first) >> geo.cluster_bits) as u32
            } else {
                0
            };
            let limit = geo.clusters_in_group(g);
            let view = t.cluster_view(g, true)?;
            while let Some(s) = find_zero(&view, at, limit) {
                let run = (s..limit)
                    .take(len as usize)
                    .take_while(|&c| !test_bit(&view, c))
                    .count() as u32;
                if run >= len {
                    return Ok(Some(first + (u64::from(s) << geo.cluster_bits)));
                }
                at = s + run + 1;
            }
            Ok(None)
        })
    }

    /// Allocates the `n` clusters from the one starting at `first`
    /// (within its group); `false`, changing nothing, when one is not
    /// free (windows aside: the caller owns the window it takes from).
    pub(super) fn claim_clusters_at(&mut self, first: u64, n: u32) -> Result<bool> {
        let geo = self.fs.geo.clone();
        if first + (u64::from(n) << geo.cluster_bits) > geo.blocks_count {
            return Ok(false);
        }
        let g = self.group_of(first);
        let c = ((first - geo.group_first_block(g)) >> geo.cluster_bits) as u32;
        if c + n > geo.clusters_in_group(g) {
            return Ok(false);
        }
        let view = self.cluster_view(g, false)?;
        if (c..c + n).any(|x| test_bit(&view, x)) {
            return Ok(false);
        }
        self.claim_bits(g, c, n)?;
        Ok(true)
    }
}

/// `want` cut so that `lblk..lblk + want` stops before a later logical
/// cluster that already has a physical cluster among `near`.
pub(crate) fn before_mapped_cluster(near: &[Extent], lblk: u64, want: u32, bits: u32) -> u32 {
    let last = (lblk + u64::from(want) - 1) >> bits;
    if last != lblk >> bits && near.iter().any(|e| touches(e, last, bits)) {
        return ((last << bits) - lblk) as u32;
    }
    want
}
