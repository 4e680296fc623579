//! Writing dirty pages back to the inner device: all of them, ascending,
//! at a flush; a run around the victim when a dirty page is evicted; and
//! making room for a new page. Every inner write happens here, under the
//! cache's lock, and bumps the epoch that unlocked miss reads check.

use std::io;

use super::{PageCache, State};
use crate::device::BlockDevice;

/// Largest inner write built by joining pages: the kernel's usual
/// `max_sectors_kb` range (512–1280 KiB), so a modeled disk sees requests
/// of the size a real one would.
pub(super) const MAX_RUN_BYTES: usize = 1 << 20;

impl<D: BlockDevice> PageCache<D> {
    /// Pages per joined write.
    fn max_run(&self) -> u64 {
        (MAX_RUN_BYTES / self.page).max(1) as u64
    }

    /// Writes pages `first..first + n` (held and dirty) as one inner write
    /// and marks them clean.
    fn write_run(&self, st: &mut State, first: u64, n: u64) -> io::Result<()> {
        let State { lru, scratch, .. } = st;
        scratch.clear();
        for p in first..first + n {
            let slot = lru.peek(p).expect("a run holds only cached pages");
            scratch.extend_from_slice(&lru.data(slot)[..self.page_len(p)]);
        }
        let at = first << self.shift;
        st.epoch += 1;
        self.inner.write_at(at, &st.scratch)?;
        st.stats.inner_writes += 1;
        st.stats.inner_write_bytes += st.scratch.len() as u64;
        for p in first..first + n {
            if let Some(slot) = st.lru.peek(p) {
                st.lru.set_clean(slot);
            }
        }
        Ok(())
    }

    /// Writes every dirty page back, ascending, joined into runs of
    /// consecutive pages. On a failed write, the pages not yet written stay
    /// dirty and queued, so a later flush tries them again.
    pub(super) fn write_back_all(&self, st: &mut State) -> io::Result<()> {
        let pages = st.lru.take_dirty();
        let max = self.max_run();
        let mut i = 0;
        while i < pages.len() {
            let mut n = 1;
            while i + n < pages.len() && pages[i + n] == pages[i] + n as u64 && (n as u64) < max {
                n += 1;
            }
            if let Err(e) = self.write_run(st, pages[i], n as u64) {
                st.lru.requeue_dirty(&pages[i..]);
                return Err(e);
            }
            i += n;
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
        self.write_run(st, lo, hi - lo + 1)
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
