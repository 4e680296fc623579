//! What the disk model and the page cache did during one phase of a
//! modeled run: the difference of two readings of their counters. Every
//! figure depends only on the request sequence, so equal runs give equal
//! values on any machine.

use std::path::Path;

use anyhow::{Context, Result, bail};
use ext4kit_engine::device::{DiskStats, PageCacheStats};
use serde::Serialize;

/// The block size an ext2/3/4 image's superblock records: the page size
/// of the page cache in front of its disk model. The kernel tracks cached
/// state per buffer (one block), so a write of one 1 KiB block never reads
/// its page's other blocks; a 4 KiB page over 1 KiB blocks would.
pub fn image_block_size(path: &Path) -> Result<usize> {
    use std::os::unix::fs::FileExt as _;
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // s_log_block_size: offset 24 of the superblock at byte 1024.
    let mut log = [0u8; 4];
    f.read_exact_at(&mut log, 1024 + 24)
        .with_context(|| format!("{}: no superblock", path.display()))?;
    match u32::from_le_bytes(log) {
        l @ 0..=6 => Ok(1024 << l),
        l => bail!("{}: superblock s_log_block_size {l} is out of range", path.display()),
    }
}

/// Device statistics of one phase, from its start to its end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PhaseStats {
    /// Modeled nanoseconds.
    pub modeled_ns: u64,
    /// Disk reads, writes and flushes.
    pub reads: u64,
    /// Writes reaching the disk.
    pub writes: u64,
    /// Flushes reaching the disk.
    pub flushes: u64,
    /// Bytes read from the disk.
    pub bytes_read: u64,
    /// Bytes written to the disk.
    pub bytes_written: u64,
    /// Reads served from the drive's cache.
    pub read_hits: u64,
    /// Mechanical positionings (seek, settle, rotation).
    pub positionings: u64,
    /// Seek distances in cylinders: `[from, to, count]` per non-empty
    /// power-of-two bucket.
    pub seek_histogram: Vec<[u64; 3]>,
    /// Page cache: requests that found every page held.
    pub cache_hits: u64,
    /// Page cache: requests that missed a page.
    pub cache_misses: u64,
    /// Page cache: pages evicted.
    pub cache_evictions: u64,
}

impl PhaseStats {
    /// The difference `after - before` of the two devices' counters.
    pub fn between(d0: &DiskStats, d1: &DiskStats, c0: &PageCacheStats, c1: &PageCacheStats) -> Self {
        let (d, c) = (d1.since(d0), c1.since(c0));
        PhaseStats {
            modeled_ns: d.modeled_ns,
            reads: d.reads,
            writes: d.writes,
            flushes: d.flushes,
            bytes_read: d.bytes_read,
            bytes_written: d.bytes_written,
            read_hits: d.read_hits,
            positionings: d.positionings,
            seek_histogram: d.seek_distances.buckets().map(|(lo, hi, n)| [lo, hi, n]).collect(),
            cache_hits: c.hits,
            cache_misses: c.misses,
            cache_evictions: c.evictions,
        }
    }
}

impl PhaseStats {
    /// Adds the figures of `other` (a later piece of the same phase).
    pub fn add(&mut self, other: &PhaseStats) {
        self.modeled_ns += other.modeled_ns;
        self.reads += other.reads;
        self.writes += other.writes;
        self.flushes += other.flushes;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.read_hits += other.read_hits;
        self.positionings += other.positionings;
        self.cache_hits += other.cache_hits;
        self.cache_misses += other.cache_misses;
        self.cache_evictions += other.cache_evictions;
        for &[lo, hi, n] in &other.seek_histogram {
            match self.seek_histogram.iter_mut().find(|b| b[0] == lo) {
                Some(b) => b[2] += n,
                None => self.seek_histogram.push([lo, hi, n]),
            }
        }
        self.seek_histogram.sort_unstable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_stats_are_the_difference_of_the_counters() {
        let mut d0 = DiskStats::default();
        d0.seek_distances.record(3);
        d0.reads = 2;
        d0.modeled_ns = 1_000;
        let mut d1 = d0.clone();
        d1.seek_distances.record(3);
        d1.seek_distances.record(100);
        d1.reads = 7;
        d1.bytes_written = 8192;
        d1.flushes = 1;
        d1.modeled_ns = 5_000;
        let c = PageCacheStats::default();
        let p = PhaseStats::between(&d0, &d1, &c, &c);
        assert_eq!((p.modeled_ns, p.reads, p.flushes, p.writes), (4_000, 5, 1, 0));
        assert_eq!((p.bytes_read, p.bytes_written), (0, 8192));
        // One more seek of 3 cylinders (bucket 2..=3) and one of 100 (64..=127).
        assert_eq!(p.seek_histogram, vec![[2, 3, 1], [64, 127, 1]]);
        let mut sum = p.clone();
        sum.add(&p);
        assert_eq!((sum.modeled_ns, sum.reads), (8_000, 10));
        assert_eq!(sum.seek_histogram, vec![[2, 3, 2], [64, 127, 2]]);
    }
}
