//! Flex-group-aware block allocation (`mb_flex_aware=1`), seed 001 §4.5:
//! "future implementations could go further still and make the various
//! block allocators FLEX_BG grouping aware". With `flex_bg` the bitmaps
//! and inode tables of `s_log_groups_per_flex` groups lie together, so
//! the flex group, not the 128 MiB group, is the unit whose data should
//! stay near its metadata. The kernel's search stays per group: when the
//! goal's group cannot serve a request, its order lists offer the nearest
//! groups *after* the goal, which leave the flex group for the next one
//! while the groups before the goal in the same flex group still have
//! room.
//!
//! Here a request (after its goal) is searched for in three steps:
//! 1. the goal's flex group, its groups by distance from the goal's
//!    group (the one holding its tables last: directories go there),
//!    each criteria pass over all of them before the next pass;
//! 2. the other flex group with the most free blocks (the sum of its
//!    descriptors' `bg_free_blocks_count`, the kernel's `s_flex_groups`
//!    free count), from the group its files start in;
//! 3. the kernel's passes over every group ([`super::criteria`]), so the
//!    option never turns a request the kernel serves into ENOSPC.
//!
//! The loosest pass (`CR_ANY_FREE`) is left to step 3: taking any free
//! block of the home flex group would fragment a file rather than move
//! it. A new file's first goal sits after its flex group's metadata
//! ([`Txn::flex_first_goal`]), wherever mkfs put it (`-E flex_meta=`).

use super::criteria::{Criteria, Request};
use super::groups::order_of;
use super::scan::Found;
use crate::error::Result;
use crate::txn::Txn;

impl Txn<'_> {
    /// Groups per flex group when the flex-aware search is on and the
    /// image packs groups (`flex_bg` with more than one group per flex).
    pub(crate) fn mb_flex_unit(&self) -> Option<u32> {
        let per = self.fs.geo.groups_per_flex;
        (self.fs.opts.alloc.flex_aware && per > 1).then_some(per)
    }

    /// Steps 1 and 2 of the module's search for `req`, whose goal lies in
    /// group `g0`: what was found and by which pass, or `None` when
    /// neither flex group can serve the request.
    pub(crate) fn mb_flex_search(&mut self, g0: u32, req: Request) -> Result<Option<(Criteria, Found)>> {
        let Some(per) = self.mb_flex_unit() else {
            return Ok(None);
        };
        let home = self.home_flex(g0, req.goal, per);
        if let Some(hit) = self.mb_in_flex(home, g0, req)? {
            return Ok(Some(hit));
        }
        let Some(other) = self.roomiest_flex(home, req.want)? else {
            return Ok(None);
        };
        let start = self.flex_data_group(other)?;
        let goal = self.fs.geo.group_first_block(start);
        self.mb_in_flex(other, start, Request { goal, ..req })
    }

    /// The flex group a request belongs to: its goal's, except when the
    /// goal is the very first block of a flex group — the block after a
    /// file that ends exactly at the end of the previous one, whose
    /// blocks (and inode) are there.
    fn home_flex(&self, g0: u32, goal: u64, per: u32) -> u32 {
        let at_start = g0 > 0 && g0.is_multiple_of(per) && goal == self.fs.geo.group_first_block(g0);
        g0 / per - u32::from(at_start)
    }

    /// The criteria passes (all but `CR_ANY_FREE`) over the groups of
    /// flex group `f`, nearest to group `start` first.
    fn mb_in_flex(&mut self, f: u32, start: u32, req: Request) -> Result<Option<(Criteria, Found)>> {
        let meta = self.flex_meta_end(f)?.map(|end| self.group_of(end - 1));
        let groups = search_order(self.flex_members(f), start, meta);
        let goal_at = req.goal.saturating_sub(self.fs.geo.group_first_block(start)) as u32;
        let from = move |g: u32| if g == start { goal_at } else { 0 };
        for cr in self.mb_passes(req.want) {
            let want = match cr {
                Criteria::AnyFree => continue,
                Criteria::BestAvailLen => match self.flex_best_available(&groups, req.want)? {
                    Some(w) => w,
                    None => continue,
                },
                _ => req.want,
            };
            for &g in &groups {
                if !self.flex_good_group(cr, g, want)? {
                    continue;
                }
                self.fs.mb.lock().stats.groups_considered += 1;
                if let Some(found) = self.mb_best_in(g, want, true, from(g))? {
                    return Ok(Some((cr, found)));
                }
            }
        }
        Ok(None)
    }

    /// Whether group `g` may serve `want` blocks in pass `cr`
    /// (`ext4_mb_good_group` on one group's buddy): the descriptor's free
    /// count first, then the buddy's largest chunk or average extent.
    fn flex_good_group(&mut self, cr: Criteria, g: u32, want: u32) -> Result<bool> {
        if self.group(g)?.free_blocks() < want {
            return Ok(false);
        }
        let order = order_of(want);
        let ceil = order + u32::from(!want.is_power_of_two());
        self.with_buddy(g, |b| match cr {
            Criteria::Power2Aligned | Criteria::BestAvailLen => b.largest_order().is_some_and(|k| k >= order),
            Criteria::GoalLenFast => order_of(b.free() / b.fragments().max(1)) >= ceil,
            Criteria::GoalLenSlow | Criteria::AnyFree => true,
        })
    }

    /// `CR_BEST_AVAIL_LEN` inside a flex group: the request cut to the
    /// largest order free in any of `groups`, never below an eighth of
    /// it; `None` when the request fits whole or nothing is that large.
    fn flex_best_available(&mut self, groups: &[u32], want: u32) -> Result<Option<u32>> {
        let mut best = None;
        for &g in groups {
            if self.group(g)?.free_blocks() == 0 {
                continue;
            }
            let k = self.with_buddy(g, |b| b.largest_order())?;
            best = best.max(k);
        }
        let order = order_of(want);
        Ok(best.filter(|&b| b < order && b + 3 >= order).map(|b| 1 << b))
    }

    /// The flex group other than `home` with the most free blocks, if it
    /// has at least `want`.
    fn roomiest_flex(&mut self, home: u32, want: u32) -> Result<Option<u32>> {
        let per = self.fs.geo.groups_per_flex.max(1);
        let flexes = self.fs.geo.group_count.div_ceil(per);
        let mut best: Option<(u64, u32)> = None;
        for f in (0..flexes).filter(|&f| f != home) {
            let mut free = 0u64;
            for g in self.flex_members(f) {
                free += u64::from(self.group(g)?.free_blocks());
            }
            if free >= u64::from(want) && best.is_none_or(|(b, _)| free > b) {
                best = Some((free, f));
            }
        }
        Ok(best.map(|(_, f)| f))
    }

    /// The groups of flex group `f` that exist.
    pub(crate) fn flex_members(&self, f: u32) -> std::ops::Range<u32> {
        let per = self.fs.geo.groups_per_flex.max(1);
        let n = self.fs.geo.group_count;
        let first = f.saturating_mul(per).min(n);
        first..first.saturating_add(per).min(n)
    }

    /// One past the last block of flex group `f`'s inode tables that lie
    /// inside the flex group (`bg_inode_table` + `s_inode_table_blocks`
    /// of each member; mkfs packs them, at the start or, with
    /// `-E flex_meta=middle`, the middle); `None` when none lies inside
    /// (a file system grown by resize2fs may keep them elsewhere).
    pub(crate) fn flex_meta_end(&self, f: u32) -> Result<Option<u64>> {
        let geo = &self.fs.geo;
        let members = self.flex_members(f);
        let lo = geo.group_first_block(members.start);
        let hi = geo.group_first_block(members.end.saturating_sub(1))
            + u64::from(geo.blocks_in_group(members.end.saturating_sub(1)));
        let mut end = None;
        for g in members {
            let t = self.group(g)?.inode_table();
            if (lo..hi).contains(&t) {
                end = end.max(Some(t + u64::from(geo.inode_table_blocks)));
            }
        }
        Ok(end.map(|e| e.min(hi)))
    }

    /// The group where flex group `f`'s files start: the one after the
    /// group holding the end of its metadata (the kernel's "second group
    /// of the flex group" when the metadata is at the start), or the
    /// metadata's own group when it is the last one.
    pub(crate) fn flex_data_group(&self, f: u32) -> Result<u32> {
        let members = self.flex_members(f);
        let Some(end) = self.flex_meta_end(f)? else {
            return Ok((members.start + 1).min(members.end.saturating_sub(1)));
        };
        let g = self.group_of(end.saturating_sub(1));
        Ok((g + 1).min(members.end.saturating_sub(1)))
    }
}

/// The order a flex group's groups are tried in: by distance from
/// `start` ([`by_distance`]), but the group holding the end of the flex
/// group's tables (`meta`) last unless the search starts there. That
/// group's room after the tables is where directories go (a directory's
/// first goal); the kernel's search, which goes forward from a file's
/// goal, leaves it to them until it wraps, and so must this one — a
/// first version tried it early and files filled it: compilebench's
/// directories then went elsewhere and its stat and delete phases took
/// 3–5 times as long.
fn search_order(members: std::ops::Range<u32>, start: u32, meta: Option<u32>) -> Vec<u32> {
    let mut order = by_distance(members, start);
    if let Some(m) = meta.filter(|&m| m != order[0])
        && let Some(i) = order.iter().position(|&g| g == m)
    {
        order.remove(i);
        order.push(m);
    }
    order
}

/// The groups of `members`, `start` first, then alternately after and
/// before it by distance (ties after first): with the metadata in the
/// middle of a flex group, the groups on both sides are as near.
pub(crate) fn by_distance(members: std::ops::Range<u32>, start: u32) -> Vec<u32> {
    let start = start.clamp(members.start, members.end.saturating_sub(1));
    let mut out = Vec::with_capacity(members.len());
    out.push(start);
    for d in 1..members.len() as u32 {
        if let Some(after) = start.checked_add(d).filter(|g| members.contains(g)) {
            out.push(after);
        }
        if let Some(before) = start.checked_sub(d).filter(|g| members.contains(g)) {
            out.push(before);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{by_distance, search_order};

    #[test]
    fn groups_are_tried_by_distance_from_the_start_group() {
        assert_eq!(
            by_distance(16..32, 25),
            vec![25, 26, 24, 27, 23, 28, 22, 29, 21, 30, 20, 31, 19, 18, 17, 16]
        );
        assert_eq!(by_distance(0..4, 0), vec![0, 1, 2, 3]);
        assert_eq!(by_distance(0..4, 3), vec![3, 2, 1, 0]);
        assert_eq!(by_distance(8..9, 8), vec![8], "a flex group of one group");
        assert_eq!(by_distance(8..12, 20), vec![11, 10, 9, 8], "a start outside is clamped");
    }

    #[test]
    fn the_group_holding_the_tables_is_tried_last_unless_searched_from() {
        assert_eq!(search_order(0..4, 1, Some(0)), vec![1, 2, 3, 0]);
        assert_eq!(search_order(0..16, 9, Some(8))[..4], [9, 10, 11, 7]);
        assert_eq!(search_order(0..16, 9, Some(8))[15], 8);
        assert_eq!(search_order(0..4, 0, Some(0)), vec![0, 1, 2, 3], "a directory's search");
        assert_eq!(search_order(0..4, 1, None), vec![1, 2, 0, 3]);
    }
}
