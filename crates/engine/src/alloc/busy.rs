//! Blocks freed by transactions the journal has not committed yet (the
//! kernel's `ext4_free_data` list, released in `ext4_process_freed_data`
//! once the freeing transaction commits). They read as free in the bitmaps
//! but must not be handed out: new file data is written in place at once,
//! and a crash before the commit would replay the old owner back onto
//! those blocks — one file would then hold another's data. After the
//! commit, replay can no longer give them back to their old owner, and the
//! journal's revoke records keep old logged copies of freed metadata off
//! them.
//!
//! Kept as one bitmap per group, like mballoc's in-core buddy bitmaps that
//! only learn of a free at commit: the allocator searches the group's
//! bitmap with these bits laid over it, word by word, however many ranges
//! were freed. Two generations, as jbd2 has a running and a committing
//! transaction: blocks freed while a commit is being written wait for the
//! commit after it.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Freed, uncommitted blocks: group → bitmap (bit `i` = block `i` of the
/// group), for a file system whose groups of `per_group` blocks start at
/// block `first_data`.
#[derive(Debug)]
pub(crate) struct BusyBlocks {
    generations: Mutex<Generations>,
    first_data: u64,
    per_group: u64,
}

/// Group bitmaps of the blocks freed by the running transaction, and by
/// the committing one.
#[derive(Debug, Default)]
struct Generations {
    running: HashMap<u32, Vec<u8>>,
    committing: HashMap<u32, Vec<u8>>,
    /// Groups whose busy blocks became free since the allocator last
    /// asked: their buddies must learn of it.
    released: Vec<u32>,
}

impl BusyBlocks {
    /// No busy blocks yet, on a file system of that geometry.
    pub(crate) fn new(first_data: u32, per_group: u32) -> Self {
        Self {
            generations: Mutex::default(),
            first_data: first_data.into(),
            per_group: u64::from(per_group).max(1),
        }
    }

    /// Records `len` blocks from `start` as freed and not yet committed.
    pub(crate) fn add(&self, start: u64, len: u64) {
        let (first_data, per_group) = (self.first_data, self.per_group);
        let mut gens = self.generations.lock();
        let m = &mut gens.running;
        for b in start..start.saturating_add(len) {
            let Some(rel) = b.checked_sub(first_data) else { continue };
            let g = (rel / per_group) as u32;
            let bit = (rel % per_group) as usize;
            let map = m.entry(g).or_insert_with(|| vec![0; (per_group as usize).div_ceil(8)]);
            map[bit / 8] |= 1 << (bit % 8);
        }
    }

    /// The running transaction becomes the committing one: what it
    /// freed is released by [`Self::end_commit`]. A committing generation
    /// left by a failed commit stays busy with it.
    pub(crate) fn start_commit(&self) {
        let mut gens = self.generations.lock();
        let running = std::mem::take(&mut gens.running);
        if gens.committing.is_empty() {
            gens.committing = running;
            return;
        }
        for (g, map) in running {
            let into = gens.committing.entry(g).or_insert_with(|| vec![0; map.len()]);
            for (i, b) in into.iter_mut().zip(map) {
                *i |= b;
            }
        }
    }

    /// The committing transaction is durable: what it freed may be reused.
    pub(crate) fn end_commit(&self) {
        let mut gens = self.generations.lock();
        let done = std::mem::take(&mut gens.committing);
        gens.released.extend(done.into_keys());
    }

    /// The groups whose busy blocks were released since the last call.
    pub(crate) fn take_released(&self) -> Vec<u32> {
        std::mem::take(&mut self.generations.lock().released)
    }

    /// True when no freed block waits for a commit.
    pub(crate) fn is_empty(&self) -> bool {
        let gens = self.generations.lock();
        gens.running.is_empty() && gens.committing.is_empty()
    }

    /// Sets in `map` (a bitmap of group `g`) the bits of its busy blocks.
    pub(crate) fn lay_over(&self, g: u32, map: &mut [u8]) {
        let gens = self.generations.lock();
        for busy in [gens.running.get(&g), gens.committing.get(&g)].into_iter().flatten() {
            for (m, b) in map.iter_mut().zip(busy) {
                *m |= b;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_ranges_show_in_their_groups_bitmap_only() {
        let b = BusyBlocks::new(0, 32768);
        b.add(32768 + 8, 3);
        let mut g0 = vec![0u8; 4096];
        b.lay_over(0, &mut g0);
        assert!(g0.iter().all(|&x| x == 0));
        let mut g1 = vec![0u8; 4096];
        b.lay_over(1, &mut g1);
        assert_eq!((g1[0], g1[1]), (0, 0b111));
        b.start_commit();
        b.end_commit();
        assert!(b.is_empty());
    }

    #[test]
    fn blocks_freed_during_a_commit_wait_for_the_next() {
        let b = BusyBlocks::new(0, 64);
        b.add(1, 1);
        b.start_commit();
        b.add(2, 1);
        let mut map = vec![0u8; 8];
        b.lay_over(0, &mut map);
        assert_eq!(map[0], 0b110);
        b.end_commit();
        let mut map = vec![0u8; 8];
        b.lay_over(0, &mut map);
        assert_eq!(map[0], 0b100);
        b.start_commit();
        b.end_commit();
        assert!(b.is_empty());
    }
}
