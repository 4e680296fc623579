//! The allocator's own CPU cost (issue 15: under 1 µs per block through
//! delayed 4 KiB writes), counted into [`super::MbStats`] so a benchmark
//! can set it beside the whole write path's. The clock is read twice per
//! request, never per block: with delayed allocation one request maps a
//! whole run, so the counter costs next to nothing where it matters.

use std::time::Instant;

use crate::error::Result;
use crate::txn::Txn;

impl Txn<'_> {
    /// Runs `choose` — one request for a file's new data blocks, returning
    /// (first block, count) — and adds its time and blocks to the
    /// allocator's counts. A failed request adds nothing: it returned no
    /// blocks to charge the time to.
    pub(crate) fn timed_data_alloc(
        &mut self,
        choose: impl FnOnce(&mut Self) -> Result<(u64, u32)>,
    ) -> Result<(u64, u32)> {
        let start = Instant::now();
        let (phys, got) = choose(self)?;
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut mb = self.fs.mb.lock();
        mb.stats.data_requests += 1;
        mb.stats.data_blocks += u64::from(got);
        mb.stats.alloc_ns = mb.stats.alloc_ns.saturating_add(ns);
        Ok((phys, got))
    }
}
