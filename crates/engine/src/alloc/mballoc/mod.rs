//! ext4's multiblock allocator (seed 001 §2.3; `fs/ext4/mballoc.c`): a
//! buddy per group built on first use ([`buddy`]), groups chosen from
//! per-order lists ([`groups`]), the criteria passes ([`criteria`]) and
//! the in-group scans ([`scan`]); requests of growing files are
//! normalized to size classes and small files share a locality-group
//! window ([`normalize`], [`locality`]); optionally the search keeps to
//! flex groups ([`flex`]). Everything here is in memory and
//! derived from the bitmaps, which stay the only truth on disk: a crash
//! or an unmount forgets it, and the next open rebuilds it on demand.

pub(crate) mod buddy;
pub(crate) mod criteria;
pub(crate) mod flex;
pub(crate) mod groups;
pub(crate) mod locality;
pub(crate) mod normalize;
pub(crate) mod scan;
mod warm;

use crate::error::Result;
use crate::txn::Txn;
use criteria::{MbStats, Request};
use groups::BuddyCache;

/// The allocator's in-memory state, behind one lock taken only inside
/// transactions (which are serialized), so it is never contended.
#[derive(Debug, Default)]
pub(crate) struct MbState {
    pub cache: BuddyCache,
    pub stats: MbStats,
}

impl Txn<'_> {
    /// Allocates up to `want` blocks near `goal` through the buddies,
    /// taking a run at the goal when it holds `need`; `None` when no
    /// group has a free block the buddies know of.
    pub(crate) fn mb_alloc(&mut self, goal: u64, want: u32, need: u32) -> Result<Option<(u64, u32)>> {
        self.mb_alloc_taking(Request { goal, want, need }, want)
    }

    /// Searches for `req` but takes only the first `take` blocks of what
    /// it finds: a normalized request looks for room the file will grow
    /// into, and the rest stays free for its preallocation window.
    pub(crate) fn mb_alloc_taking(&mut self, req: Request, take: u32) -> Result<Option<(u64, u32)>> {
        self.fs.mb.lock().stats.requests += 1;
        let Some(found) = self.mb_search(req)? else {
            return Ok(None);
        };
        let len = found.len.min(take).max(1);
        let start = self.mb_take(scan::Found { len, ..found })?;
        Ok(Some((start, len)))
    }

    /// Records that this transaction used group `g`'s buddy after
    /// changing the group's bitmap: if it is dropped rather than
    /// committed, the buddy may hold its allocations and is rebuilt. A
    /// buddy built from a bitmap the transaction has not changed is the
    /// committed state and survives it.
    pub(crate) fn mb_touch(&mut self, g: u32) -> Result<()> {
        if self.holds(self.group(g)?.block_bitmap()) {
            self.note_buddy_touched(g);
        }
        Ok(())
    }

    /// Drops the buddies that windows coming and going and commits
    /// releasing busy blocks have made stale.
    pub(crate) fn mb_sync(&mut self) {
        for (s, l) in self.fs.prealloc.take_changed() {
            self.fs.mb_forget(s, l);
        }
        let released = self.fs.busy.take_released();
        if !released.is_empty() {
            let mut mb = self.fs.mb.lock();
            for g in released {
                mb.cache.invalidate(g);
            }
        }
    }
}

impl crate::fs::Filesystem {
    /// The multiblock allocator's counts since open: requests, goal hits,
    /// hits per criteria pass, groups considered, buddies built.
    pub fn mb_stats(&self) -> MbStats {
        let mb = self.mb.lock();
        MbStats {
            buddies_built: mb.cache.built,
            ..mb.stats
        }
    }

    /// Drops the buddies of the groups holding `start..start + len`:
    /// their view changed outside an allocation (a free became reusable,
    /// a window came or went).
    pub(crate) fn mb_forget(&self, start: u64, len: u64) {
        if len == 0 || start < u64::from(self.geo.first_data_block) {
            return;
        }
        let per = u64::from(self.geo.blocks_per_group);
        let first = (start - u64::from(self.geo.first_data_block)) / per;
        let last = (start + len - 1 - u64::from(self.geo.first_data_block)) / per;
        self.mb.lock().cache.invalidate_range(first as u32, last as u32);
    }
}
