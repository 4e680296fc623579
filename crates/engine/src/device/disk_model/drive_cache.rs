//! The drive's own cache (seed 004, eq. 2: a hit costs only the interface
//! transfer): read segments filled by read-ahead, and a write cache.
//!
//! Read-ahead: after a read from the media the drive keeps reading to the
//! end of the track (the head is there anyway), so the request and the
//! rest of its last track form one segment. Segments are kept most recent
//! first and dropped least recent first, beyond a count or a byte budget;
//! a read is a hit when one segment, or one run of written data still in
//! the write cache, holds all of it.
//!
//! Write cache: a write completes once it is in the cache. Dirty sectors
//! are kept as merged runs in LBA order (a `BTreeMap`, so the order is the
//! same on every machine); a rewrite of dirty sectors takes no more room.
//! Draining (on a flush, or when a write would not fit) writes the runs in
//! one sweep from the head's position upwards, then wraps to the lowest
//! (C-SCAN): the order an elevator gives, and one pass over the platter.

use std::collections::{BTreeMap, VecDeque};

/// Read segments and dirty runs, in 512-byte sectors `[start, end)`.
#[derive(Debug, Clone)]
pub(super) struct DriveCache {
    segments: VecDeque<(u64, u64)>,
    segment_sectors: u64,
    max_segments: usize,
    read_budget: u64,
    dirty: BTreeMap<u64, u64>,
    dirty_sectors: u64,
    write_budget: u64,
}

impl DriveCache {
    /// A cache of `read_budget` sectors in at most `max_segments`
    /// segments, and `write_budget` sectors of write cache (0: none).
    pub fn new(read_budget: u64, max_segments: usize, write_budget: u64) -> Self {
        Self {
            segments: VecDeque::new(),
            segment_sectors: 0,
            max_segments,
            read_budget,
            dirty: BTreeMap::new(),
            dirty_sectors: 0,
            write_budget,
        }
    }

    /// True when `[start, end)` is in one segment or one dirty run; a
    /// segment hit becomes the most recent.
    pub fn read_hit(&mut self, start: u64, end: u64) -> bool {
        if let Some(i) = self.segments.iter().position(|&(s, e)| s <= start && end <= e) {
            if i > 0 {
                let seg = self.segments.remove(i).expect("index found above");
                self.segments.push_front(seg);
            }
            return true;
        }
        self.dirty.range(..=start).next_back().is_some_and(|(_, &e)| end <= e)
    }

    /// Keeps `[start, end)` as the most recent segment, dropping segments
    /// it covers and then the least recent ones until the limits hold. A
    /// segment larger than the whole budget is not kept.
    pub fn fill(&mut self, start: u64, end: u64) {
        let len = end - start;
        if len > self.read_budget || self.max_segments == 0 {
            return;
        }
        let before = self.segments.len();
        self.segments.retain(|&(s, e)| !(start <= s && e <= end));
        if self.segments.len() != before {
            self.segment_sectors = self.segments.iter().map(|(s, e)| e - s).sum();
        }
        self.segments.push_front((start, end));
        self.segment_sectors += len;
        while self.segments.len() > self.max_segments || self.segment_sectors > self.read_budget {
            let (s, e) = self.segments.pop_back().expect("over a limit, so not empty");
            self.segment_sectors -= e - s;
        }
    }

    /// Forgets every read segment (written data stays).
    pub fn drop_segments(&mut self) {
        self.segments.clear();
        self.segment_sectors = 0;
    }

    /// True when writes of `len` sectors can ever be cached.
    pub fn can_cache_write(&self, len: u64) -> bool {
        len <= self.write_budget
    }

    /// True when `[start, end)` fits beside what is dirty now (sectors
    /// already dirty take no more room).
    pub fn write_fits(&self, start: u64, end: u64) -> bool {
        let mut overlap = 0;
        let first = self.dirty.range(..=start).next_back().map_or(start, |(&s, _)| s);
        for (&s, &e) in self.dirty.range(first..end) {
            overlap += e.min(end).saturating_sub(s.max(start));
        }
        self.dirty_sectors + (end - start) - overlap <= self.write_budget
    }

    /// Marks `[start, end)` dirty, merging it with runs it touches.
    pub fn add_dirty(&mut self, start: u64, end: u64) {
        let (mut lo, mut hi) = (start, end);
        let first = self.dirty.range(..=start).next_back().map_or(start, |(&s, _)| s);
        let touching: Vec<(u64, u64)> = self
            .dirty
            .range(first..=end)
            .filter(|&(_, &e)| e >= start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.dirty.remove(&s);
            self.dirty_sectors -= e - s;
            lo = lo.min(s);
            hi = hi.max(e);
        }
        self.dirty.insert(lo, hi);
        self.dirty_sectors += hi - lo;
    }

    /// Sectors written but not yet on the media.
    pub fn dirty_sectors(&self) -> u64 {
        self.dirty_sectors
    }

    /// Empties the write cache, giving its runs in drain order: upwards
    /// from sector `head`, then from the lowest.
    pub fn take_dirty(&mut self, head: u64) -> Vec<(u64, u64)> {
        let dirty = std::mem::take(&mut self.dirty);
        self.dirty_sectors = 0;
        let (below, above): (Vec<_>, Vec<_>) = dirty.into_iter().partition(|&(s, _)| s < head);
        above.into_iter().chain(below).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_serves_reads_inside_it_only() {
        let mut c = DriveCache::new(1000, 4, 0);
        c.fill(100, 200);
        assert!(c.read_hit(100, 200));
        assert!(c.read_hit(150, 160));
        assert!(!c.read_hit(90, 110));
        assert!(!c.read_hit(190, 201));
    }

    #[test]
    fn the_least_recent_segment_goes_first() {
        let mut c = DriveCache::new(1000, 2, 0);
        c.fill(0, 10);
        c.fill(20, 30);
        assert!(c.read_hit(0, 5), "now the most recent");
        c.fill(40, 50);
        assert!(c.read_hit(0, 5));
        assert!(!c.read_hit(20, 25), "dropped: least recently used");
        let mut small = DriveCache::new(25, 8, 0);
        small.fill(0, 10);
        small.fill(10, 20);
        small.fill(20, 30);
        assert!(!small.read_hit(0, 1), "over the byte budget");
        assert!(small.read_hit(10, 30) || small.read_hit(20, 30));
        small.fill(0, 26);
        assert!(!small.read_hit(0, 1), "larger than the budget: not kept");
    }

    #[test]
    fn dirty_runs_merge_and_count_once() {
        let mut c = DriveCache::new(0, 0, 100);
        c.add_dirty(10, 20);
        c.add_dirty(30, 40);
        c.add_dirty(15, 25);
        assert_eq!(c.dirty_sectors(), 25);
        c.add_dirty(25, 30);
        assert_eq!(c.dirty_sectors(), 30, "adjacent runs join");
        assert!(c.read_hit(12, 38), "one run 10..40 now");
        assert!(c.write_fits(0, 100), "30 dirty + 100 new - 30 overlap");
        assert!(!c.write_fits(0, 101));
        assert!(!c.write_fits(50, 121));
        c.add_dirty(60, 70);
        assert_eq!(
            c.take_dirty(35),
            vec![(60, 70), (10, 40)],
            "upwards from the head, then wrap"
        );
        assert_eq!(c.dirty_sectors(), 0);
    }
}
