//! Readahead: a read that misses also fetches the pages around it that
//! are not held, so a slow device (a network export) pays one round trip
//! for what the next reads will want. A miss is widened back to the
//! alignment of the readahead unit (the NBD export's preferred block
//! size, `NBD_INFO_BLOCK_SIZE`) and forward to one window; the window
//! starts at one unit and doubles while misses follow one another
//! (sequential reading), up to a maximum, as the kernel's readahead
//! grows on a stream and falls back on a random read. Widening stops at
//! a held page (never overwritten by a stale read) and at the device's
//! end.

use super::{PageCache, Run, State};
use crate::device::BlockDevice;

/// How far reads look ahead, in pages; zero `max` reads only what is
/// asked.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Policy {
    /// The unit: misses are widened to multiples of it, aligned.
    pub unit: u64,
    /// Largest window.
    pub max: u64,
}

/// Where the last widened miss ended and how wide the window is now.
#[derive(Debug, Default)]
pub(super) struct Stream {
    next: u64,
    window: u64,
}

impl<D: BlockDevice> PageCache<D> {
    /// Widens the missing `runs` of one read (ascending, disjoint) by
    /// readahead; see the module doc.
    pub(super) fn widen(&self, st: &mut State, runs: &mut Vec<Run>) {
        let Policy { unit, max } = self.readahead;
        let Some(first) = runs.first().map(|r| r.first) else {
            return;
        };
        if max == 0 {
            return;
        }
        let asked: u64 = runs.iter().map(|r| r.pages).sum();
        st.ra.window = if first == st.ra.next {
            (st.ra.window.max(asked) * 2).clamp(unit, max)
        } else {
            unit
        };
        let pages = self.len.div_ceil(self.page as u64);
        let mut out: Vec<Run> = Vec::with_capacity(runs.len());
        for r in runs.iter() {
            let mut lo = r.first;
            let floor = (r.first / unit * unit).max(out.last().map_or(0, |p| p.first + p.pages));
            while lo > floor && st.lru.peek(lo - 1).is_none() {
                lo -= 1;
            }
            let want = (r.first + r.pages).max(r.first + st.ra.window).div_ceil(unit) * unit;
            let mut hi = r.first + r.pages;
            while hi < want.min(pages) && st.lru.peek(hi).is_none() {
                hi += 1;
            }
            match out.last_mut() {
                Some(p) if p.first + p.pages >= lo => p.pages = hi - p.first,
                _ => out.push(Run {
                    first: lo,
                    pages: hi - lo,
                }),
            }
        }
        st.ra.next = out.last().map_or(0, |r| r.first + r.pages);
        st.stats.readahead_pages += out.iter().map(|r| r.pages).sum::<u64>() - asked;
        *runs = out;
    }
}
