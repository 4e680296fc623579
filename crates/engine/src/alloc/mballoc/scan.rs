//! Inside one group: the buddy built on demand from the allocator's
//! view, the best fit among its free extents (`ext4_mb_complex_scan_group` with
//! `ext4_mb_measure_extent`'s rule and the `mb_min_to_scan` /
//! `mb_max_to_scan` limits), stripe-aligned runs (`ext4_mb_scan_aligned`),
//! and the found extent taken in the bitmap and the buddy together.

use super::buddy::Buddy;
use crate::error::Result;
use crate::txn::Txn;

/// Free blocks found in a group: `start..start + len` of group `group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    pub group: u32,
    pub start: u32,
    pub len: u32,
}

impl Txn<'_> {
    /// Calls `f` on group `g`'s buddy, building it first when needed.
    pub(crate) fn with_buddy<R>(&mut self, g: u32, f: impl FnOnce(&Buddy) -> R) -> Result<R> {
        if self.fs.mb.lock().cache.get(g).is_none() {
            let view = self.alloc_view(g)?;
            let b = Buddy::build(&view, self.fs.geo.blocks_in_group(g));
            let mut mb = self.fs.mb.lock();
            mb.cache.insert(g, b);
            mb.stats.buddies_built += 1;
        }
        self.mb_touch(g)?;
        let mb = self.fs.mb.lock();
        match mb.cache.get(g) {
            Some(b) => Ok(f(b)),
            None => unreachable!("a buddy just built is held under the same lock"),
        }
    }

    /// The best free extent of group `g` for `want` blocks, by the
    /// kernel's rule: an exact fit at once; else the smallest extent
    /// longer than `want`, or while none is, the longest. With `full`,
    /// only an extent of `want` or more is returned. A stripe that
    /// divides `want` is tried first, at stripe-aligned blocks. The scan
    /// starts at block `from` of the group and wraps: the kernel starts
    /// at the group's first free block, which sends a directory's next
    /// block, or a small file's, to the far end of a goal group whose
    /// front is fragmented; starting at the goal keeps them near it.
    pub(crate) fn mb_best_in(&mut self, g: u32, want: u32, full: bool, from: u32) -> Result<Option<Found>> {
        let stripe = self.mb_stripe();
        let first = self.fs.geo.group_first_block(g);
        let (min_scan, max_scan) = (self.fs.opts.alloc.min_to_scan, self.fs.opts.alloc.max_to_scan);
        self.with_buddy(g, |b| {
            if stripe > 1
                && want.is_multiple_of(stripe)
                && let Some(f) = aligned(b, g, first, stripe, want)
            {
                return Some(f);
            }
            let best = best_fit(b, want, min_scan, max_scan, from)?;
            (!full || best.1 >= want).then_some(Found {
                group: g,
                start: best.0,
                len: best.1.min(want),
            })
        })
    }

    /// The RAID stripe in blocks: the option, else the superblock's
    /// stripe width, else its stride (`ext4_get_stripe_size`).
    pub(crate) fn mb_stripe(&self) -> u32 {
        let opt = self.fs.opts.alloc.stripe;
        if opt > 0 {
            return opt;
        }
        let sb = self.fs.sb.read();
        let (width, stride) = (sb.s_raid_stripe_width.get(), u32::from(sb.s_raid_stride.get()));
        let bpg = self.fs.geo.blocks_per_group;
        [width, stride].into_iter().find(|&s| s > 1 && s <= bpg).unwrap_or(0)
    }

    /// Takes `f` in the group's bitmap, counts and buddy.
    pub(crate) fn mb_take(&mut self, f: Found) -> Result<u64> {
        let map = self.block_bitmap_mut(f.group)?;
        for bit in f.start..f.start + f.len {
            crate::alloc::bitmap::set_bit(map, bit, true);
        }
        self.adjust_group_blocks(f.group, -i64::from(f.len))?;
        self.note_buddy_touched(f.group);
        let mut mb = self.fs.mb.lock();
        // A buddy that disagrees is dropped and rebuilt at its next use.
        mb.cache.mark_used(f.group, f.start, f.len);
        Ok(self.fs.geo.group_first_block(f.group) + u64::from(f.start))
    }
}

/// (start, length) of the best free extent for `want`, looking at no
/// more than `max_scan` extents and stopping once `min_scan` were seen
/// and one of them is long enough; from block `from` on, wrapping.
fn best_fit(b: &Buddy, want: u32, min_scan: u32, max_scan: u32, from: u32) -> Option<(u32, u32)> {
    let mut best: Option<(u32, u32)> = None;
    let mut at = from.min(b.bits());
    let mut wrapped = false;
    let mut seen = 0;
    loop {
        let Some(s) = b.next_free(at).filter(|&s| !wrapped || s < from) else {
            if wrapped || from == 0 {
                break;
            }
            (at, wrapped) = (0, true);
            continue;
        };
        let len = b.run_at(s, b.bits());
        seen += 1;
        if len == want {
            return Some((s, len));
        }
        best = match best {
            None => Some((s, len)),
            Some((_, bl)) if bl < want && len > bl => Some((s, len)),
            Some((_, bl)) if bl >= want && len > want && len < bl => Some((s, len)),
            keep => keep,
        };
        let good = best.is_some_and(|(_, bl)| bl >= want);
        if seen >= max_scan || (good && seen >= min_scan) {
            break;
        }
        at = s + len;
    }
    best
}

/// A run of `want` free blocks starting on a stripe boundary (counted in
/// absolute block numbers, as the RAID sees them).
fn aligned(b: &Buddy, g: u32, first: u64, stripe: u32, want: u32) -> Option<Found> {
    let s64 = u64::from(stripe);
    let mut at = (first.div_ceil(s64) * s64 - first) as u32;
    while at < b.bits() {
        let Some(free) = b.next_free(at) else { break };
        let a = ((first + u64::from(free)).div_ceil(s64) * s64 - first) as u32;
        if b.run_at(a, want) >= want {
            return Some(Found {
                group: g,
                start: a,
                len: want,
            });
        }
        at = a + stripe;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_takes_an_exact_fit_then_the_smallest_that_is_long_enough() {
        let b = Buddy::with_free_runs(&[(0, 3), (10, 40), (100, 8), (200, 12)]);
        assert_eq!(best_fit(&b, 8, 10, 200, 0), Some((100, 8)), "exact");
        assert_eq!(best_fit(&b, 10, 10, 200, 0), Some((200, 12)), "smallest longer");
        assert_eq!(best_fit(&b, 64, 10, 200, 0), Some((10, 40)), "longest while none fits");
        assert_eq!(best_fit(&b, 10, 1, 1, 0), Some((0, 3)), "max_to_scan stops the search");
        assert_eq!(
            best_fit(&b, 10, 2, 200, 0),
            Some((10, 40)),
            "min_to_scan reached with one long enough"
        );
    }

    #[test]
    fn stripe_aligned_runs_start_on_absolute_boundaries() {
        let b = Buddy::with_free_runs(&[(5, 100), (300, 64)]);
        // The group starts at block 1000: boundaries of 16 fall at
        // group offsets 8, 24, …
        let f = aligned(&b, 0, 1000, 16, 64).unwrap();
        assert_eq!((f.start, (1000 + u64::from(f.start)) % 16), (8, 0));
        assert_eq!(aligned(&b, 0, 1000, 16, 128), None);
    }
}
