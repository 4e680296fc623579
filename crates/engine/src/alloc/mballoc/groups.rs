//! The buddy cache of every group and the lists that choose groups
//! without scanning them (`mb_optimize_scan`, kernel 5.13): a group whose
//! buddy is built sits in one list by its largest free order
//! (`s_mb_largest_free_orders`) and one by the order of its average free
//! extent (`s_mb_avg_fragment_size`), so a request of order `k` finds a
//! group that can serve it in O(log groups), however many groups there
//! are. A buddy is derived data: anything that changes the allocator's
//! view of a group other than an allocation made through the buddy
//! (a free becoming reusable, a preallocation window set or dropped, a
//! transaction rolled back) drops it, and the next use rebuilds it from
//! the bitmap.

use std::collections::BTreeSet;

use super::buddy::Buddy;

/// Orders tracked: a group has at most 2^16 blocks per bitmap block of
/// 64 KiB, so order 16 is the largest chunk.
const ORDERS: usize = 17;

/// Built buddies and the group lists.
#[derive(Debug, Default)]
pub(crate) struct BuddyCache {
    buddies: Vec<Option<Buddy>>,
    by_largest: Vec<BTreeSet<u32>>,
    by_average: Vec<BTreeSet<u32>>,
    /// Buddies built since open (`s_mb_buddies_generated`).
    pub(crate) built: u64,
}

/// The order of `n` rounded down (`fls(n) - 1`).
pub(crate) fn order_of(n: u32) -> u32 {
    31 - n.max(1).leading_zeros()
}

impl BuddyCache {
    fn ensure(&mut self, g: u32) {
        if self.buddies.len() <= g as usize {
            self.buddies.resize_with(g as usize + 1, || None);
        }
        if self.by_largest.is_empty() {
            self.by_largest = vec![BTreeSet::new(); ORDERS];
            self.by_average = vec![BTreeSet::new(); ORDERS];
        }
    }

    /// Group `g`'s buddy, when built.
    pub(crate) fn get(&self, g: u32) -> Option<&Buddy> {
        self.buddies.get(g as usize).and_then(Option::as_ref)
    }

    /// Stores `g`'s freshly built buddy.
    pub(crate) fn insert(&mut self, g: u32, b: Buddy) {
        self.ensure(g);
        self.unlist(g);
        self.buddies[g as usize] = Some(b);
        self.built += 1;
        self.list(g);
    }

    /// Forgets `g`'s buddy: its view changed in a way the buddy did not
    /// follow.
    pub(crate) fn invalidate(&mut self, g: u32) {
        if self.get(g).is_some() {
            self.unlist(g);
            self.buddies[g as usize] = None;
        }
    }

    /// Forgets every buddy in groups `first..=last`.
    pub(crate) fn invalidate_range(&mut self, first: u32, last: u32) {
        for g in first..=last.min(self.buddies.len().saturating_sub(1) as u32) {
            self.invalidate(g);
        }
    }

    /// Takes `s..s + len` of group `g` in its buddy; false (and the buddy
    /// dropped) when the buddy is missing or disagrees.
    pub(crate) fn mark_used(&mut self, g: u32, s: u32, len: u32) -> bool {
        self.unlist(g);
        let ok = match self.buddies.get_mut(g as usize).and_then(Option::as_mut) {
            Some(b) => b.mark_used(s, len),
            None => false,
        };
        if ok {
            self.list(g);
        } else {
            self.invalidate(g);
        }
        ok
    }

    /// Blocks `s..s + len` of group `g` were taken outside a buddy
    /// search (from a window, or by exact request): a buddy that shows
    /// them all free learns it, one that shows them all taken (they were
    /// in a window) already knows, and one that shows a mix is dropped.
    pub(crate) fn note_taken(&mut self, g: u32, s: u32, len: u32) {
        let Some(b) = self.get(g) else { return };
        let free = b.run_at(s, len);
        if free == len {
            self.mark_used(g, s, len);
        } else if free > 0 || b.next_free(s).is_some_and(|f| f < s + len) {
            self.invalidate(g);
        }
    }

    fn keys(&self, g: u32) -> Option<(usize, usize)> {
        let b = self.get(g)?;
        let largest = b.largest_order()? as usize;
        let average = order_of(b.free() / b.fragments().max(1)) as usize;
        Some((largest.min(ORDERS - 1), average.min(ORDERS - 1)))
    }

    fn list(&mut self, g: u32) {
        if let Some((l, a)) = self.keys(g) {
            self.by_largest[l].insert(g);
            self.by_average[a].insert(g);
        }
    }

    fn unlist(&mut self, g: u32) {
        if let Some((l, a)) = self.keys(g) {
            self.by_largest[l].remove(&g);
            self.by_average[a].remove(&g);
        }
    }

    /// Built groups whose largest free chunk is of order `order` or more,
    /// the smallest such order first, each order's groups from `from` on
    /// and wrapping: the candidates of `CR_POWER2_ALIGNED`.
    pub(crate) fn with_largest_at_least(&self, order: u32, from: u32) -> Vec<u32> {
        Self::from_lists(&self.by_largest, order, from)
    }

    /// Built groups whose average free extent is of order `order` or more
    /// (`CR_GOAL_LEN_FAST`).
    pub(crate) fn with_average_at_least(&self, order: u32, from: u32) -> Vec<u32> {
        Self::from_lists(&self.by_average, order, from)
    }

    /// The largest free order of any built group.
    pub(crate) fn largest_order(&self) -> Option<u32> {
        (0..self.by_largest.len())
            .rev()
            .find(|&k| !self.by_largest[k].is_empty())
            .map(|k| k as u32)
    }

    /// At most [`LIST_CANDIDATES`] groups of the lists of `order` and up,
    /// nearest after `from` first whatever their list. The kernel empties
    /// the lowest list first; on a fresh file system the groups holding a
    /// backup superblock have a lower order than empty ones, so that sends
    /// consecutive windows to every other group and doubles the seeks
    /// between files written one after another.
    fn from_lists(lists: &[BTreeSet<u32>], order: u32, from: u32) -> Vec<u32> {
        let mut out: Vec<u32> = lists
            .iter()
            .skip(order as usize)
            .flat_map(|list| {
                list.range(from..)
                    .chain(list.range(..from))
                    .take(LIST_CANDIDATES)
                    .copied()
            })
            .collect();
        out.sort_unstable_by_key(|&g| (g < from, g));
        out.truncate(LIST_CANDIDATES);
        out
    }
}

/// Groups a list pass tries before the next pass: a group in the list
/// can serve the request, so the first nearly always does; the bound
/// keeps a pass O(log groups) even when the lists are long.
pub(crate) const LIST_CANDIDATES: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_listed_by_largest_and_average_order_and_follow_changes() {
        let mut c = BuddyCache::default();
        c.insert(3, Buddy::with_free_runs(&[(0, 256)]));
        c.insert(5, Buddy::with_free_runs(&[(0, 16), (64, 16)]));
        c.insert(9, Buddy::with_free_runs(&[(512, 512)]));
        c.insert(11, Buddy::with_free_runs(&[(256, 256)]));
        assert_eq!(c.with_largest_at_least(8, 0), vec![3, 9, 11], "every order that serves");
        let near_goal = c.with_largest_at_least(8, 4);
        assert_eq!(near_goal, vec![9, 11, 3], "nearest after the goal, whatever the order");
        assert_eq!(c.with_largest_at_least(9, 0), vec![9]);
        assert_eq!(c.with_average_at_least(4, 6), vec![9, 11, 3, 5]);
        assert_eq!(c.largest_order(), Some(9));
        assert!(c.mark_used(9, 512, 300));
        assert_eq!(c.with_largest_at_least(9, 0), Vec::<u32>::new());
        assert!(!c.mark_used(9, 512, 1), "already taken");
        assert!(c.get(9).is_none(), "a buddy that disagrees is dropped");
        c.invalidate(3);
        assert_eq!(c.with_largest_at_least(0, 0), vec![5, 11]);
        assert_eq!(c.built, 4);
    }

    #[test]
    fn blocks_taken_outside_a_search_update_or_drop_the_buddy() {
        let mut c = BuddyCache::default();
        c.insert(1, Buddy::with_free_runs(&[(0, 64), (128, 64)]));
        c.note_taken(1, 10, 4);
        assert_eq!(c.get(1).map(|b| b.free()), Some(124), "all free: taken in the buddy");
        c.note_taken(1, 70, 8);
        assert_eq!(
            c.get(1).map(|b| b.free()),
            Some(124),
            "all taken already: nothing to learn"
        );
        c.note_taken(1, 60, 8);
        assert!(c.get(1).is_none(), "a mix: dropped, to be rebuilt");
    }
}
