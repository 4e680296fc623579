//! The search of `ext4_mb_regular_allocator`: first the goal itself,
//! then passes of loosening criteria over groups, as today's kernel
//! names them. Each pass looks only at groups that can satisfy it —
//! from the order lists when `mb_optimize_scan` is on, by the group
//! descriptor's free count otherwise — so the cost of a request does not
//! grow with the number of groups.

use super::groups::{LIST_CANDIDATES, order_of};
use super::scan::Found;
use crate::error::Result;
use crate::txn::Txn;

/// The passes, loosest last (`enum criteria`, fs/ext4/ext4.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Criteria {
    /// A free buddy chunk of exactly the request's power-of-two order.
    Power2Aligned = 0,
    /// Groups whose average free extent is at least the request.
    GoalLenFast = 1,
    /// The request trimmed to the largest order some group still has.
    BestAvailLen = 2,
    /// Every group with enough free blocks, best fit inside each.
    GoalLenSlow = 3,
    /// Any free block.
    AnyFree = 4,
}

/// Counts of one file system's searches (`/proc/fs/ext4/*/mb_stats`):
/// deterministic figures for the benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MbStats {
    /// Requests served.
    pub requests: u64,
    /// Served at their goal block.
    pub goal_hits: u64,
    /// Served by each pass, in [`Criteria`] order.
    pub hits: [u64; 5],
    /// Groups looked at by the passes.
    pub groups_considered: u64,
    /// Buddies built from bitmaps.
    pub buddies_built: u64,
    /// Served inside a flex group by the flex-aware search
    /// (`mb_flex_aware=1`; counted in `hits` too).
    pub flex_hits: u64,
    /// Requests for a file's new data blocks timed by
    /// [`alloc_ns`](Self::alloc_ns), under either block allocator (one per
    /// hole a write maps: per write without delayed allocation, per
    /// contiguous run at write-back with it).
    pub data_requests: u64,
    /// Blocks those requests returned.
    pub data_blocks: u64,
    /// Wall nanoseconds spent choosing those blocks: the goal, the
    /// preallocation window, the search and the bitmap update — not
    /// mapping them into the extent tree nor copying data. Two clock reads
    /// per request, so its cost shows per request, never per block: the
    /// allocator's own CPU cost, which seed 001 credits with a file system
    /// going from 800 to 1,500 MB/s.
    pub alloc_ns: u64,
}

/// One request: `want` blocks (normalized) near `goal`; a free run at
/// the goal itself is taken when it holds at least `need`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    pub goal: u64,
    pub want: u32,
    pub need: u32,
}

impl Txn<'_> {
    /// Finds free blocks for `req` without taking them: (group, first
    /// block in the group, length ≥ 1), or `None` when no group has any.
    pub(crate) fn mb_search(&mut self, req: Request) -> Result<Option<Found>> {
        self.mb_sync();
        let geo = &self.fs.geo;
        let goal = req.goal.clamp(u64::from(geo.first_data_block), geo.blocks_count - 1);
        let req = Request { goal, ..req };
        let g0 = self.group_of(req.goal);
        self.mb_build_near(g0)?;
        if let Some(f) = self.mb_at_goal(g0, req)? {
            self.fs.mb.lock().stats.goal_hits += 1;
            return Ok(Some(f));
        }
        if let Some((cr, f)) = self.mb_flex_search(g0, req)? {
            let mut mb = self.fs.mb.lock();
            mb.stats.hits[cr as usize] += 1;
            mb.stats.flex_hits += 1;
            return Ok(Some(f));
        }
        for cr in self.mb_passes(req.want) {
            if let Some(f) = self.mb_pass(cr, g0, req)? {
                self.fs.mb.lock().stats.hits[cr as usize] += 1;
                return Ok(Some(f));
            }
        }
        Ok(None)
    }

    /// Builds the missing buddies of the first groups with free blocks
    /// from `g0` on, so the order lists hold the goal's neighbourhood (the
    /// kernel initializes the groups after the one it scans,
    /// `ext4_mb_prefetch`, and keeps a freed group listed). A buddy is
    /// missing when no search looked at its group yet, or when a commit
    /// releasing blocks or a window coming or going dropped it; without
    /// this the lists offer whichever far groups happen to be built, and
    /// small files' windows land in the directories' group.
    fn mb_build_near(&mut self, g0: u32) -> Result<()> {
        let n = self.fs.geo.group_count;
        let mut seen = 0;
        for g in (0..n).map(|step| (g0 + step) % n) {
            if seen == LIST_CANDIDATES {
                break;
            }
            if self.group(g)?.free_blocks() == 0 {
                continue;
            }
            if self.fs.mb.lock().cache.get(g).is_none() {
                self.with_buddy(g, |_| ())?;
            }
            seen += 1;
        }
        Ok(())
    }

    /// `ext4_mb_find_by_goal`: the run at the goal block when it is long
    /// enough.
    fn mb_at_goal(&mut self, g: u32, req: Request) -> Result<Option<Found>> {
        let at = (req.goal - self.fs.geo.group_first_block(g)) as u32;
        self.with_buddy(g, |b| {
            let run = b.run_at(at, req.want);
            (run >= req.want.min(req.need.max(1))).then_some(Found {
                group: g,
                start: at,
                len: run,
            })
        })
    }

    pub(super) fn mb_passes(&self, want: u32) -> Vec<Criteria> {
        let a = &self.fs.opts.alloc;
        let mut v = Vec::new();
        if want.is_power_of_two() && order_of(want) >= a.order2_req {
            v.push(Criteria::Power2Aligned);
        }
        v.extend([Criteria::GoalLenFast, Criteria::BestAvailLen, Criteria::GoalLenSlow]);
        v.push(Criteria::AnyFree);
        v
    }

    /// Whether group selection uses the order lists.
    fn mb_optimized(&self) -> bool {
        let a = &self.fs.opts.alloc;
        a.optimize_scan.unwrap_or(self.fs.geo.group_count >= 16)
    }

    fn mb_pass(&mut self, cr: Criteria, g0: u32, req: Request) -> Result<Option<Found>> {
        let order = order_of(req.want);
        let optimized = self.mb_optimized();
        let goal_at = (req.goal - self.fs.geo.group_first_block(g0)) as u32;
        let from = move |g: u32| if g == g0 { goal_at } else { 0 };
        match cr {
            // The groups are those holding a free chunk of the order, but
            // inside one the run is chosen as the next pass does: the
            // lowest-order chunk (`ext4_mb_simple_scan_group`) lies
            // anywhere in the group and is aligned, so files created one
            // after another scatter with gaps between them.
            Criteria::Power2Aligned if optimized => {
                let groups = self.fs.mb.lock().cache.with_largest_at_least(order, g0);
                self.try_groups(g0, &groups, |t, g| t.mb_best_in(g, req.want, true, from(g)))
            }
            Criteria::GoalLenFast if optimized => {
                let ceil = order + u32::from(!req.want.is_power_of_two());
                let groups = self.fs.mb.lock().cache.with_average_at_least(ceil, g0);
                self.try_groups(g0, &groups, |t, g| t.mb_best_in(g, req.want, true, from(g)))
            }
            Criteria::BestAvailLen if optimized => self.mb_best_available(g0, req.want, goal_at),
            Criteria::Power2Aligned | Criteria::GoalLenFast | Criteria::BestAvailLen => {
                // Without the lists these passes are the linear one's
                // with tighter checks; the linear pass below covers them.
                Ok(None)
            }
            Criteria::GoalLenSlow => self.mb_linear(g0, req.want, |t, g| t.mb_best_in(g, req.want, true, from(g))),
            Criteria::AnyFree => self.mb_linear(g0, 1, |t, g| t.mb_best_in(g, req.want, false, from(g))),
        }
    }

    /// `CR_BEST_AVAIL_LEN`: the request cut to the largest order still
    /// free somewhere, but never below an eighth of it.
    fn mb_best_available(&mut self, g0: u32, want: u32, goal_at: u32) -> Result<Option<Found>> {
        let order = order_of(want);
        let Some(best) = self.fs.mb.lock().cache.largest_order() else {
            return Ok(None);
        };
        if best >= order || best + 3 < order {
            return Ok(None);
        }
        let trimmed = 1 << best;
        let groups = self.fs.mb.lock().cache.with_largest_at_least(best, g0);
        self.try_groups(g0, &groups, |t, g| {
            t.mb_best_in(g, trimmed, true, if g == g0 { goal_at } else { 0 })
        })
    }

    /// Tries the goal's group first, then `groups` (as the kernel's group
    /// loop starts every pass at the goal's group before it follows the
    /// lists: without that, a small request would leave its goal for the
    /// most fragmented group that fits, scattering a directory's files).
    fn try_groups(
        &mut self,
        g0: u32,
        groups: &[u32],
        mut f: impl FnMut(&mut Self, u32) -> Result<Option<Found>>,
    ) -> Result<Option<Found>> {
        let rest = groups.iter().copied().filter(|&g| g != g0);
        for g in std::iter::once(g0).chain(rest) {
            self.fs.mb.lock().stats.groups_considered += 1;
            if let Some(found) = f(self, g)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// Every group from `g0` on, wrapping, whose descriptor counts at
    /// least `min_free` free blocks, each counted as considered.
    fn mb_linear(
        &mut self,
        g0: u32,
        min_free: u32,
        mut f: impl FnMut(&mut Self, u32) -> Result<Option<Found>>,
    ) -> Result<Option<Found>> {
        self.groups_from(g0, min_free, |t, g| {
            t.fs.mb.lock().stats.groups_considered += 1;
            f(t, g)
        })
    }
}
