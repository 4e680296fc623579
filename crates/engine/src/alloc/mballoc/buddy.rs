//! One group's buddy (mballoc's `ext4_buddy`, seed 001 figure 5): the
//! group's free space as the allocator sees it — the block bitmap with
//! uncommitted frees and preallocation windows taken — kept twice: as a
//! bitmap, for runs at a given block, and as the canonical buddy
//! decomposition, every free block in exactly one aligned power-of-two
//! chunk whose buddy is not free, with a count per order. The counts give
//! the group's largest free order and its fragment count in O(1), which
//! is what group selection needs; the chunk maps give an aligned chunk of
//! any order without scanning the bitmap.

/// Free space of one group of `bits` blocks (block `i` of the group is
/// bit `i`).
#[derive(Debug, Clone)]
pub(crate) struct Buddy {
    bits: u32,
    /// Bit `i` set: block `i` is in use (or past the group's end).
    used: Vec<u64>,
    /// `chunks[k]` bit `i`: blocks `i << k .. (i + 1) << k` form a free
    /// chunk of order `k` that is not part of a larger one.
    chunks: Vec<Vec<u64>>,
    counts: Vec<u32>,
    free: u32,
    /// Free runs (maximal), as `bb_fragments`.
    fragments: u32,
}

fn get(map: &[u64], i: u32) -> bool {
    map.get((i / 64) as usize).is_some_and(|w| w & (1 << (i % 64)) != 0)
}

fn put(map: &mut [u64], i: u32, on: bool) {
    if let Some(w) = map.get_mut((i / 64) as usize) {
        if on {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }
}

/// The first index at or after `from`, below `limit`, whose bit in `map`
/// equals `want`, a word at a time.
fn find(map: &[u64], from: u32, limit: u32, want: bool) -> Option<u32> {
    let mut i = from;
    while i < limit {
        let w = map.get((i / 64) as usize).copied().unwrap_or(!0);
        let w = if want { w } else { !w } >> (i % 64);
        if w == 0 {
            i = (i / 64 + 1) * 64;
            continue;
        }
        let at = i + w.trailing_zeros();
        return (at < limit).then_some(at);
    }
    None
}

impl Buddy {
    /// The buddy of a group whose allocator view is `view` (a bitmap in
    /// on-disk order, bit set = taken) over `bits` blocks.
    pub(crate) fn build(view: &[u8], bits: u32) -> Self {
        let words = bits.div_ceil(64) as usize;
        let mut used = vec![0u64; words];
        for (i, w) in used.iter_mut().enumerate() {
            let mut bytes = [0xFFu8; 8];
            for (j, b) in bytes.iter_mut().enumerate() {
                if let Some(v) = view.get(i * 8 + j) {
                    *b = *v;
                }
            }
            *w = u64::from_le_bytes(bytes);
        }
        for i in bits..(words as u32) * 64 {
            put(&mut used, i, true);
        }
        let orders = Self::orders_for(bits);
        let mut b = Self {
            bits,
            used,
            chunks: (0..orders)
                .map(|k| vec![0; (bits >> k).div_ceil(64).max(1) as usize])
                .collect(),
            counts: vec![0; orders as usize],
            free: 0,
            fragments: 0,
        };
        let mut at = 0;
        while let Some(s) = find(&b.used, at, bits, false) {
            let e = find(&b.used, s, bits, true).unwrap_or(bits);
            b.add_range(s, e);
            b.free += e - s;
            b.fragments += 1;
            at = e;
        }
        b
    }

    /// Orders 0 up to the largest chunk that fits the group.
    fn orders_for(bits: u32) -> u32 {
        32 - bits.max(1).leading_zeros()
    }

    /// Blocks in the group.
    pub(crate) fn bits(&self) -> u32 {
        self.bits
    }

    /// Free blocks.
    pub(crate) fn free(&self) -> u32 {
        self.free
    }

    /// Maximal free runs.
    pub(crate) fn fragments(&self) -> u32 {
        self.fragments
    }

    /// The largest order with a free chunk (`bb_largest_free_order`).
    pub(crate) fn largest_order(&self) -> Option<u32> {
        (0..self.counts.len() as u32)
            .rev()
            .find(|&k| self.counts[k as usize] > 0)
    }

    /// True when block `i` is free.
    pub(crate) fn is_free(&self, i: u32) -> bool {
        i < self.bits && !get(&self.used, i)
    }

    /// The first free block at or after `from`.
    pub(crate) fn next_free(&self, from: u32) -> Option<u32> {
        find(&self.used, from, self.bits, false)
    }

    /// How many blocks from `at` on are free, up to `max`.
    pub(crate) fn run_at(&self, at: u32, max: u32) -> u32 {
        if !self.is_free(at) {
            return 0;
        }
        let end = find(&self.used, at, self.bits, true).unwrap_or(self.bits);
        (end - at).min(max)
    }

    /// The first free chunk of order `k` or more: (its first block, its
    /// order). The tests check the chunks with it; the passes choose runs
    /// by position instead (see `criteria`).
    #[cfg(test)]
    pub(crate) fn chunk_of_order(&self, k: u32) -> Option<(u32, u32)> {
        for order in k..self.counts.len() as u32 {
            if self.counts[order as usize] == 0 {
                continue;
            }
            let map = &self.chunks[order as usize];
            let i = find(map, 0, (map.len() * 64) as u32, true)?;
            return Some((i << order, order));
        }
        None
    }

    /// Records `s..e` (all free) as aligned chunks, merging each with its
    /// buddy while the buddy is free at the same order.
    fn add_range(&mut self, s: u32, e: u32) {
        let mut p = s;
        while p < e {
            let mut k = 0;
            while k + 1 < self.counts.len() as u32 && p.is_multiple_of(1 << (k + 1)) && p + (2 << k) <= e {
                k += 1;
            }
            self.add_chunk(p >> k, k);
            p += 1 << k;
        }
    }

    fn add_chunk(&mut self, mut i: u32, mut k: u32) {
        while k + 1 < self.counts.len() as u32
            && get(&self.chunks[k as usize], i ^ 1)
            && ((i | 1) + 1) << k <= self.bits
        {
            put(&mut self.chunks[k as usize], i ^ 1, false);
            self.counts[k as usize] -= 1;
            i >>= 1;
            k += 1;
        }
        put(&mut self.chunks[k as usize], i, true);
        self.counts[k as usize] += 1;
    }

    /// The chunk holding free block `b`: (index at its order, order).
    fn chunk_holding(&self, b: u32) -> Option<(u32, u32)> {
        (0..self.counts.len() as u32)
            .find(|&k| get(&self.chunks[k as usize], b >> k))
            .map(|k| (b >> k, k))
    }

    /// Takes `s..s + len`; false, changing nothing, unless every block of
    /// it is free (`mb_mark_used`).
    pub(crate) fn mark_used(&mut self, s: u32, len: u32) -> bool {
        let e = s.saturating_add(len);
        if len == 0 || e > self.bits || self.run_at(s, len) < len {
            return false;
        }
        let before = s > 0 && self.is_free(s - 1);
        let after = self.is_free(e);
        self.fragments = match (before, after) {
            (true, true) => self.fragments + 1,
            (false, false) => self.fragments - 1,
            _ => self.fragments,
        };
        let mut p = s;
        while p < e {
            let Some((i, k)) = self.chunk_holding(p) else {
                return false;
            };
            put(&mut self.chunks[k as usize], i, false);
            self.counts[k as usize] -= 1;
            let (cs, ce) = (i << k, (i + 1) << k);
            self.add_range(cs, p);
            let stop = ce.min(e);
            self.add_range(stop, ce);
            p = stop;
        }
        for b in s..e {
            put(&mut self.used, b, true);
        }
        self.free -= len;
        true
    }

    /// A group of 1,024 blocks whose only free blocks are `runs` (start,
    /// length), for tests.
    #[cfg(test)]
    pub(crate) fn with_free_runs(runs: &[(u32, u32)]) -> Self {
        let mut map = vec![0xFFu8; 128];
        for &(s, l) in runs {
            for x in s..s + l {
                map[(x / 8) as usize] &= !(1 << (x % 8));
            }
        }
        Self::build(&map, 1024)
    }

    /// Every chunk, as (first block, order), for checks.
    #[cfg(test)]
    fn all_chunks(&self) -> Vec<(u32, u32)> {
        let mut v = Vec::new();
        for (k, map) in self.chunks.iter().enumerate() {
            for i in 0..(map.len() * 64) as u32 {
                if get(map, i) {
                    v.push((i << k, k as u32));
                }
            }
        }
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::bitmap::{set_bit, test_bit};

    /// The invariants, checked against the bitmap alone: chunks tile the
    /// free blocks exactly, are aligned, and no two buddies are both free
    /// chunks of one order; counts, free and fragments agree.
    fn check(b: &Buddy) {
        let mut covered = vec![false; b.bits as usize];
        for (s, k) in b.all_chunks() {
            assert!(s.is_multiple_of(1 << k), "chunk {s} of order {k} is not aligned");
            for x in s..s + (1 << k) {
                assert!(x < b.bits && b.is_free(x), "chunk {s}/{k} holds used block {x}");
                assert!(!covered[x as usize], "block {x} in two chunks");
                covered[x as usize] = true;
            }
            let buddy = (s >> k) ^ 1;
            assert!(
                !get(&b.chunks[k as usize], buddy),
                "chunk {s}/{k} and its buddy are both free"
            );
        }
        let free: Vec<u32> = (0..b.bits).filter(|&x| b.is_free(x)).collect();
        assert_eq!(free.len() as u32, b.free);
        assert!(free.iter().all(|&x| covered[x as usize]));
        let runs = (0..b.bits)
            .filter(|&x| b.is_free(x) && (x == 0 || !b.is_free(x - 1)))
            .count();
        assert_eq!(runs as u32, b.fragments);
        for (k, c) in b.counts.iter().enumerate() {
            let n = b.all_chunks().iter().filter(|(_, o)| *o as usize == k).count();
            assert_eq!(*c as usize, n, "count of order {k}");
        }
    }

    /// A reproducible pseudo-random sequence (xorshift).
    fn rng(seed: &mut u64) -> u32 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed >> 16) as u32
    }

    #[test]
    fn an_empty_group_is_one_chunk_and_a_full_one_none() {
        let b = Buddy::build(&[0u8; 128], 1024);
        assert_eq!(b.all_chunks(), vec![(0, 10)]);
        assert_eq!((b.free(), b.fragments(), b.largest_order()), (1024, 1, Some(10)));
        let full = Buddy::build(&[0xFF; 128], 1024);
        assert_eq!((full.free(), full.largest_order()), (0, None));
        check(&full);
    }

    #[test]
    fn a_group_that_is_no_power_of_two_has_no_chunk_past_its_end() {
        let b = Buddy::build(&[0u8; 128], 1000);
        check(&b);
        assert_eq!(b.free(), 1000);
        assert_eq!(b.chunk_of_order(9), Some((0, 9)));
        assert_eq!(b.chunk_of_order(10), None);
    }

    #[test]
    fn taking_keeps_the_invariants_against_a_plain_bitmap() {
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        for bits in [64u32, 1000, 8192] {
            let mut map = vec![0u8; (bits as usize).div_ceil(8)];
            for _ in 0..bits / 3 {
                set_bit(&mut map, rng(&mut seed) % bits, true);
            }
            let mut b = Buddy::build(&map, bits);
            check(&b);
            for _ in 0..400 {
                let s = rng(&mut seed) % bits;
                let len = 1 + rng(&mut seed) % 40;
                let all_free = (s..s + len).all(|x| x < bits && !test_bit(&map, x));
                assert_eq!(b.mark_used(s, len), all_free, "used {s}+{len}");
                if all_free {
                    (s..s + len).for_each(|x| set_bit(&mut map, x, true));
                }
                check(&b);
                assert!((0..bits).all(|x| b.is_free(x) != test_bit(&map, x)));
            }
            let rebuilt = Buddy::build(&map, bits);
            assert_eq!(rebuilt.all_chunks(), b.all_chunks(), "incremental equals rebuilt");
        }
    }

    #[test]
    fn runs_and_chunks_are_found_where_they_are() {
        let mut map = vec![0xFFu8; 128];
        for x in 100..164 {
            set_bit(&mut map, x, false);
        }
        for x in 300..303 {
            set_bit(&mut map, x, false);
        }
        let b = Buddy::build(&map, 1024);
        assert_eq!(b.next_free(0), Some(100));
        assert_eq!(b.next_free(164), Some(300));
        assert_eq!(b.run_at(100, 1000), 64);
        assert_eq!(b.run_at(120, 10), 10);
        assert_eq!(b.run_at(99, 10), 0);
        assert_eq!(b.chunk_of_order(5), Some((128, 5)));
        assert_eq!(b.chunk_of_order(6), None);
        assert_eq!(b.fragments(), 2);
    }
}
