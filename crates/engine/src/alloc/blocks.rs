//! Data and metadata block allocation: the first free run at or after a
//! goal, searched group by group and wrapping around (the `Goal` policy).

use super::BlockAllocator;
use super::bitmap::{free_run, set_bit, test_bit};
use crate::error::{Error, Location, Result};
use crate::txn::Txn;

impl Txn<'_> {
    /// Allocates up to `want` contiguous blocks, preferring `goal`; returns
    /// the first block and the count (at least 1).
    ///
    /// # Errors
    /// [`Error::NoSpace`] when every group is full.
    pub(crate) fn alloc_blocks(&mut self, goal: u64, want: u32) -> Result<(u64, u32)> {
        if self.bigalloc() {
            return self.alloc_whole_clusters(goal, want);
        }
        match self.alloc_blocks_once(goal, want) {
            // Space kept for streaming files goes before ENOSPC does.
            Err(Error::NoSpace) if self.fs.prealloc.release_all() => self.alloc_blocks(goal, want),
            // Blocks freed but not committed may be all that is left: commit
            // what is published (`ext4_should_retry_alloc`) and look again.
            Err(Error::NoSpace) if !self.fs.busy.is_empty() => {
                self.fs.write_back()?;
                self.alloc_blocks_once(goal, want)
            }
            r => r,
        }
    }

    fn alloc_blocks_once(&mut self, goal: u64, want: u32) -> Result<(u64, u32)> {
        let geo = &self.fs.geo;
        let goal = goal.clamp(u64::from(geo.first_data_block), geo.blocks_count - 1);
        if self.fs.opts.alloc.blocks == BlockAllocator::Mballoc {
            self.mb_sync();
            if let Some(got) = self.mb_alloc(goal, want, want)? {
                return Ok(got);
            }
        }
        self.scan_alloc(goal, want)
    }

    /// The first free run at or after `goal`, group by group, wrapping
    /// around: the ext3 allocator's bitmap search, and mballoc's last
    /// resort (it sees exactly what the buddies see, so it finds nothing
    /// they missed unless they were stale).
    pub(crate) fn scan_alloc(&mut self, goal: u64, want: u32) -> Result<(u64, u32)> {
        if self.bigalloc() {
            return self.alloc_whole_clusters(goal, want);
        }
        let g0 = self.group_of(goal);
        let found = self.groups_from(g0, 1, |t, g| {
            let first = t.fs.geo.group_first_block(g);
            let from = if g == g0 { (goal - first) as u32 } else { 0 };
            let limit = t.fs.geo.blocks_in_group(g);
            let view = t.alloc_view(g)?;
            Ok(free_run(&view, from, limit, want).map(|(s, len)| (g, s, len)))
        })?;
        let Some((g, start, len)) = found else {
            return Err(Error::NoSpace);
        };
        self.claim_bits(g, start, len)?;
        let first = self.fs.geo.group_first_block(g);
        self.fs.mb_forget(first + u64::from(start), u64::from(len));
        Ok((first + u64::from(start), len))
    }

    /// Sets `len` bits of group `g`'s block bitmap from `start` (blocks,
    /// or clusters under bigalloc) and takes them from its free count.
    pub(crate) fn claim_bits(&mut self, g: u32, start: u32, len: u32) -> Result<()> {
        let map = self.block_bitmap_mut(g)?;
        for bit in start..start + len {
            set_bit(map, bit, true);
        }
        self.adjust_group_blocks(g, -i64::from(len))
    }

    /// Calls `f` on every group from `g0` on, wrapping, whose descriptor
    /// counts at least `min_free` free blocks, until it finds something:
    /// the linear walk of the ext3 search, mballoc's slow passes and the
    /// last resort.
    pub(crate) fn groups_from<R>(
        &mut self,
        g0: u32,
        min_free: u32,
        mut f: impl FnMut(&mut Self, u32) -> Result<Option<R>>,
    ) -> Result<Option<R>> {
        let n = self.fs.geo.group_count;
        for step in 0..n {
            let g = (g0 + step) % n;
            if self.group(g)?.free_blocks() < min_free {
                continue;
            }
            if let Some(found) = f(self, g)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The block bitmap of group `g` as the allocator must see it: with
    /// the blocks whose freeing is not committed yet — by this transaction
    /// or an earlier one (see [`crate::alloc::busy`]) — the preallocation
    /// windows and this transaction's holds taken. Read without taking the
    /// bitmap block into the transaction: a search looks at many groups
    /// and changes few.
    pub(crate) fn alloc_view(&mut self, g: u32) -> Result<Vec<u8>> {
        self.view(g, true)
    }

    /// Group `g`'s view for a window's owner: taken blocks and
    /// uncommitted frees, no windows.
    pub(crate) fn view_of_owner(&mut self, g: u32) -> Result<Vec<u8>> {
        self.view(g, false)
    }

    /// [`Self::alloc_view`], with or without the preallocation windows
    /// laid over (a window's owner takes its blocks through them).
    fn view(&mut self, g: u32, windows: bool) -> Result<Vec<u8>> {
        let mut view = self.block_bitmap_read(g)?;
        if windows {
            let first = self.fs.geo.group_first_block(g);
            let bits = u64::from(self.fs.geo.blocks_per_group);
            self.fs.prealloc.lay_over(first, bits, &mut view);
        }
        self.lay_over_busy(g, &mut view);
        self.lay_over_held(g, &mut view);
        Ok(view)
    }

    /// Sets in `view` the ranges this transaction holds off
    /// ([`Txn::hold_off`]).
    fn lay_over_held(&self, g: u32, view: &mut [u8]) {
        let first = self.fs.geo.group_first_block(g);
        let end = first + u64::from(self.fs.geo.blocks_per_group);
        for &(s, l) in self.held_ranges() {
            for b in s.max(first)..(s + l).min(end) {
                set_bit(view, (b - first) as u32, true);
            }
        }
    }

    fn lay_over_busy(&self, g: u32, view: &mut [u8]) {
        if !self.fs.journaling {
            return;
        }
        self.fs.busy.lay_over(g, view);
        let first = self.fs.geo.group_first_block(g);
        let end = first + u64::from(self.fs.geo.blocks_per_group);
        for &(s, l) in self.freed_ranges() {
            for b in s.max(first)..(s + l).min(end) {
                set_bit(view, (b - first) as u32, true);
            }
        }
    }

    /// How many blocks from `start` on are free for a new allocation (as
    /// the allocator sees them: windows and uncommitted frees taken), up
    /// to `max`, across group boundaries while the run goes on.
    pub(crate) fn free_run_at(&mut self, start: u64, max: u64) -> Result<u64> {
        self.free_run(start, max, true)
    }

    fn free_run(&mut self, start: u64, max: u64, windows: bool) -> Result<u64> {
        let geo = self.fs.geo.clone();
        let mut at = start;
        while at < geo.blocks_count && at - start < max {
            let g = self.group_of(at);
            let first = geo.group_first_block(g);
            let view = self.view(g, windows)?;
            let (from, limit) = ((at - first) as u32, geo.blocks_in_group(g));
            // Counted only as far as asked: a one-block take from a window
            // must not walk the rest of the group.
            let want = (max - (at - start)).min(u64::from(limit - from)) as usize;
            let free = (from..limit).take(want).take_while(|&b| !test_bit(&view, b)).count() as u64;
            at += free;
            if from + free as u32 != limit || at - start >= max {
                break;
            }
        }
        Ok((at - start).min(max))
    }

    pub(crate) fn group_of(&self, block: u64) -> u32 {
        let geo = &self.fs.geo;
        ((block - u64::from(geo.first_data_block)) / u64::from(geo.blocks_per_group)) as u32
    }

    /// Allocates exactly `len` blocks from `start` (a preallocation
    /// window's, across groups if it runs on); `false`, changing nothing,
    /// when one of them is no longer free.
    pub(crate) fn alloc_exact(&mut self, start: u64, len: u64) -> Result<bool> {
        if start < u64::from(self.fs.geo.first_data_block) || start + len > self.fs.geo.blocks_count {
            return Ok(false);
        }
        if self.free_run(start, len, false)? < len {
            return Ok(false);
        }
        let geo = self.fs.geo.clone();
        let mut at = start;
        while at < start + len {
            let g = self.group_of(at);
            let first = geo.group_first_block(g);
            let end = (start + len).min(first + u64::from(geo.blocks_in_group(g)));
            let map = self.block_bitmap_mut(g)?;
            for bit in (at - first) as u32..(end - first) as u32 {
                set_bit(map, bit, true);
            }
            self.adjust_group_blocks(g, -((end - at) as i64))?;
            self.fs
                .mb
                .lock()
                .cache
                .note_taken(g, (at - first) as u32, (end - at) as u32);
            self.note_buddy_touched(g);
            at = end;
        }
        Ok(true)
    }

    /// Frees `len` blocks from `start` (all inside one group). With a
    /// journal they stay taken until the commit ([`crate::alloc::busy`]);
    /// without, they are free at once and the buddies must learn it.
    pub(crate) fn free_blocks(&mut self, start: u64, len: u64) -> Result<()> {
        if self.bigalloc() {
            return self.free_clusters_of(start, len);
        }
        self.note_freed(start, len);
        if !self.fs.journaling {
            self.fs.mb_forget(start, len);
            self.note_buddy_touched(self.group_of(start));
        }
        let geo = self.fs.geo.clone();
        let mut b = start;
        while b < start + len {
            let g = ((b - u64::from(geo.first_data_block)) / u64::from(geo.blocks_per_group)) as u32;
            let first = geo.group_first_block(g);
            let end = (start + len).min(first + u64::from(geo.blocks_per_group));
            let map = self.block_bitmap_mut(g)?;
            for x in b..end {
                let bit = (x - first) as u32;
                if !test_bit(map, bit) {
                    return Err(Error::inconsistent(
                        Location::Block { block: x, inode: 0 },
                        "freeing a block that is already free",
                    ));
                }
                set_bit(map, bit, false);
            }
            self.adjust_group_blocks(g, (end - b) as i64)?;
            b = end;
        }
        Ok(())
    }

    /// Adds `delta` to group `g`'s free count (clusters under bigalloc)
    /// and the superblock's (always blocks).
    pub(crate) fn adjust_group_blocks(&mut self, g: u32, delta: i64) -> Result<()> {
        let blocks = delta << self.fs.geo.cluster_bits;
        if delta < 0 {
            self.check_unreserved(blocks.unsigned_abs())?;
        }
        let mut d = self.group(g)?;
        let n = (i64::from(d.free_blocks()) + delta).max(0) as u32;
        d.bg_free_blocks_count_lo.set(n as u16);
        d.bg_free_blocks_count_hi.set((n >> 16) as u16);
        self.set_group(g, d);
        self.count(blocks, 0);
        Ok(())
    }
}
