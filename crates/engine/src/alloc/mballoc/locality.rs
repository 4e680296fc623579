//! Locality-group preallocation (seed 001 §2.3, `ext4_mb_use_group_pa`):
//! requests of small files — fewer than `mb_stream_req` blocks once
//! served — are cut from one window of `mb_group_prealloc` free blocks,
//! front first, so small files written one after another lie packed with
//! no gap between them (the seed's figure 7) instead of each starting at
//! its own goal. The window lives in memory only
//! ([`crate::alloc::prealloc::Preallocs`]): other allocations treat it as
//! taken, and it is let go before ENOSPC is reported.
//!
//! The kernel keeps one group per CPU; a user-space engine serving
//! requests from any thread has no stable CPU, so there is one window per
//! file system: every writer's small files pack together.

use crate::error::Result;
use crate::txn::Txn;

use super::criteria::Request;

impl Txn<'_> {
    /// Up to `want` blocks for a small file from the locality window,
    /// making a new window near `goal` when the current one cannot serve
    /// `want` whole; `None` when the buddies find no free block.
    pub(crate) fn lg_alloc(&mut self, goal: u64, want: u32) -> Result<Option<(u64, u32)>> {
        if let Some((s, l)) = self.fs.prealloc.locality()
            && l >= u64::from(want)
            && self.alloc_exact(s, u64::from(want))?
        {
            self.fs.prealloc.advance_locality(u64::from(want));
            return Ok(Some((s, want)));
        }
        self.fs.prealloc.set_locality(None);
        let size = self.lg_size().max(want);
        self.mb_sync();
        let req = Request {
            goal,
            want: size,
            need: size,
        };
        let Some(found) = self.mb_search(req)? else {
            return Ok(None);
        };
        let start = self.fs.geo.group_first_block(found.group) + u64::from(found.start);
        let got = found.len.min(size);
        if got <= want {
            return Ok(Some((self.mb_take(super::scan::Found { len: got, ..found })?, got)));
        }
        self.fs.prealloc.set_locality(Some((start, u64::from(got))));
        self.mb_sync();
        if !self.alloc_exact(start, u64::from(want))? {
            self.fs.prealloc.set_locality(None);
            return Ok(None);
        }
        self.fs.prealloc.advance_locality(u64::from(want));
        Ok(Some((start, want)))
    }

    /// `mb_group_prealloc`, rounded up to the stripe when one is set
    /// (the kernel's `s_mb_group_prealloc` follows `s_stripe`).
    fn lg_size(&self) -> u32 {
        let gp = self.fs.opts.alloc.group_prealloc.max(1);
        match self.mb_stripe() {
            0 | 1 => gp,
            s => gp.div_ceil(s) * s,
        }
    }
}
