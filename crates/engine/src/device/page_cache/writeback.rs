//! Writing dirty pages back to the inner device: all of them, ascending,
//! at a flush, many runs handed over at once; a run around the victim when a dirty page is evicted; and
//! making room for a new page. Every inner write happens here, under the
//! cache's lock, and bumps the epoch that unlocked miss reads check.

use std::io;

use super::{PageCache, State};
use crate::device::BlockDevice;

/// Largest inner write built by joining pages: the kernel's usual
/// `max_sectors_kb` range (512–1280 KiB), so a modeled disk sees requests
/// of the size a real one would.
pub(super) const MAX_RUN_BYTES: usize = 1 << 20;

/// Most bytes of dirty runs handed to the inner device in one
/// [`BlockDevice::write_many`]: enough for an NBD client's 16 requests in
/// flight several times over, while the copy made for it stays small.
const BATCH_BYTES: usize = 16 << 20;

impl<D: BlockDevice> PageCache<D> {
    /// Pages per joined write.
    fn max_run(&self) -> u64 {
        (MAX_RUN_BYTES / self.page).max(1) as u64
    }

    /// Writes each run of pages `(first, n)` (held and dirty) as one
    /// inner write, all handed over at once ([`BlockDevice::write_many`]:
    /// over NBD, all in flight together), and marks them clean once every
    /// one is done.
    fn write_runs(&self, st: &mut State, runs: &[(u64, u64)]) -> io::Result<()> {
        let State { lru, scratch, .. } = st;
        scratch.clear();
        let mut spans = Vec::with_capacity(runs.len());
        for &(first, n) in runs {
            let start = scratch.len();
            for p in first..first + n {
                let slot = lru.peek(p).expect("a run holds only cached pages");
                scratch.extend_from_slice(&lru.data(slot)[..self.page_len(p)]);
            }
            spans.push((first << self.shift, start..scratch.len()));
        }
        let writes: Vec<(u64, &[u8])> = spans.iter().map(|(at, r)| (*at, &st.scratch[r.clone()])).collect();
        st.epoch += 1;
        self.inner.write_many(&writes)?;
        st.stats.inner_writes += runs.len() as u64;
        st.stats.inner_write_bytes += st.scratch.len() as u64;
        for &(first, n) in runs {
            for p in first..first + n {
                if let Some(slot) = st.lru.peek(p) {
                    st.lru.set_clean(slot);
                }
            }
        }
        Ok(())
    }

    /// Joins ascending `pages` into runs of consecutive pages, each at
    /// most [`MAX_RUN_BYTES`].
    fn runs_of(&self, pages: &[u64]) -> Vec<(u64, u64)> {
        let max = self.max_run();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &p in pages {
            match runs.last_mut() {
                Some((first, n)) if *first + *n == p && *n < max => *n += 1,
                _ => runs.push((p, 1)),
            }
        }
        runs
    }

    /// Writes every dirty page back, ascending, joined into runs of
    /// consecutive pages, handed to the inner device [`BATCH_BYTES`] at a
    /// time and each batch awaited whole: when this returns, the inner
    /// device acknowledged every page (so a flush sent next covers them).
    /// On a failed write, the pages of that batch and after stay dirty and
    /// queued, so a later flush tries them again.
    pub(super) fn write_back_all(&self, st: &mut State) -> io::Result<()> {
        let pages = st.lru.take_dirty();
        let runs = self.runs_of(&pages);
        let (mut i, mut done_pages) = (0, 0);
        while i < runs.len() {
            let (mut j, mut bytes) = (i, 0);
            while j < runs.len() && (j == i || bytes + (runs[j].1 as usize) * self.page <= BATCH_BYTES) {
                bytes += runs[j].1 as usize * self.page;
                j += 1;
            }
            if let Err(e) = self.write_runs(st, &runs[i..j]) {
                st.lru.requeue_dirty(&pages[done_pages..]);
                return Err(e);
            }
            done_pages += runs[i..j].iter().map(|r| r.1 as usize).sum::<usize>();
            i = j;
        }
        Ok(())
    }

    /// Writes back the dirty victim in `slot` with the dirty pages held on
    /// either side of it, as one run: pages dirtied in order leave in order,
    /// in large requests, instead of one page per eviction.
    fn write_back_around(&self, st: &mut State, slot: u32) -> io::Result<()> {
        let page = st.lru.page_of(slot);
        let max = self.max_run();
        let (mut lo, mut hi) = (page, page);
        while lo > 0 && hi - lo + 1 < max && st.lru.page_dirty(lo - 1) {
            lo -= 1;
        }
        while hi - lo + 1 < max && st.lru.page_dirty(hi + 1) {
            hi += 1;
        }
        self.write_runs(st, &[(lo, hi - lo + 1)])
    }

    /// A slot for `page` (not held), most recently used, clean: a free one,
    /// or the least recently used page's after writing it back if dirty.
    ///
    /// # Errors
    /// The write-back of a dirty victim failed; it stays cached and dirty.
    pub(super) fn slot_for(&self, st: &mut State, page: u64) -> io::Result<u32> {
        if !st.lru.has_room()
            && let Some(victim) = st.lru.victim()
        {
            if st.lru.is_dirty(victim) {
                self.write_back_around(st, victim)?;
                st.stats.dirty_evictions += 1;
            }
            st.lru.remove(victim);
            st.stats.evictions += 1;
        }
        Ok(st.lru.insert(page))
    }
}
