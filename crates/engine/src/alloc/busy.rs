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
//! were freed.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Freed, uncommitted blocks: group → bitmap (bit `i` = block `i` of the
/// group).
#[derive(Debug, Default)]
pub(crate) struct BusyBlocks(Mutex<HashMap<u32, Vec<u8>>>);

impl BusyBlocks {
    /// Records `len` blocks from `start` as freed and not yet committed,
    /// on a file system whose groups of `per_group` blocks start at block
    /// `first_data`.
    pub(crate) fn add(&self, (first_data, per_group): (u64, u64), start: u64, len: u64) {
        let mut m = self.0.lock();
        for b in start..start.saturating_add(len) {
            let Some(rel) = b.checked_sub(first_data) else { continue };
            let g = (rel / per_group) as u32;
            let bit = (rel % per_group) as usize;
            let map = m.entry(g).or_insert_with(|| vec![0; (per_group as usize).div_ceil(8)]);
            map[bit / 8] |= 1 << (bit % 8);
        }
    }

    /// Everything freed so far is committed.
    pub(crate) fn clear(&self) {
        self.0.lock().clear();
    }

    /// True when no freed block waits for a commit.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }

    /// Sets in `map` (a bitmap of group `g`) the bits of its busy blocks.
    pub(crate) fn lay_over(&self, g: u32, map: &mut [u8]) {
        if let Some(busy) = self.0.lock().get(&g) {
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
        let b = BusyBlocks::default();
        b.add((0, 32768), 32768 + 8, 3);
        let mut g0 = vec![0u8; 4096];
        b.lay_over(0, &mut g0);
        assert!(g0.iter().all(|&x| x == 0));
        let mut g1 = vec![0u8; 4096];
        b.lay_over(1, &mut g1);
        assert_eq!((g1[0], g1[1]), (0, 0b111));
        b.clear();
        assert!(b.is_empty());
    }
}
