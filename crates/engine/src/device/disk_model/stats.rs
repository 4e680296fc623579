//! What a modeled run reports: I/O counts, bytes, drive-cache hits, the
//! modeled time split by eq. (3)–(4)'s components, and a histogram of
//! seek distances; and the meter that charges time to the virtual clock.

/// Counts and modeled time since the model was made or last reset.
/// Every time is in ns of the virtual clock; equal request sequences give
/// equal values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Total modeled time: the sum of the [`TimeSplit`] parts.
    pub modeled_ns: u64,
    /// Read requests.
    pub reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Flush requests.
    pub flushes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Reads served from the drive cache (interface time only).
    pub read_hits: u64,
    /// Writes that completed into the write cache (interface time only).
    pub cached_writes: u64,
    /// Times the write cache was drained because a write did not fit.
    pub forced_drains: u64,
    /// Head positionings (a seek sample each, distance 0 included).
    pub positionings: u64,
    /// Modeled time by component.
    pub time: TimeSplit,
    /// Cylinder distance of each positioning.
    pub seek_distances: SeekHistogram,
}

impl DiskStats {
    /// Requests the drive cache served: read hits and cached writes.
    pub fn cache_hits(&self) -> u64 {
        self.read_hits + self.cached_writes
    }

    /// What happened between an earlier reading and this one: a phase's
    /// own figures.
    pub fn since(&self, earlier: &Self) -> Self {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let (t, e) = (&self.time, &earlier.time);
        Self {
            modeled_ns: d(self.modeled_ns, earlier.modeled_ns),
            reads: d(self.reads, earlier.reads),
            writes: d(self.writes, earlier.writes),
            flushes: d(self.flushes, earlier.flushes),
            bytes_read: d(self.bytes_read, earlier.bytes_read),
            bytes_written: d(self.bytes_written, earlier.bytes_written),
            read_hits: d(self.read_hits, earlier.read_hits),
            cached_writes: d(self.cached_writes, earlier.cached_writes),
            forced_drains: d(self.forced_drains, earlier.forced_drains),
            positionings: d(self.positionings, earlier.positionings),
            time: TimeSplit {
                command_ns: d(t.command_ns, e.command_ns),
                seek_ns: d(t.seek_ns, e.seek_ns),
                settle_ns: d(t.settle_ns, e.settle_ns),
                rotation_ns: d(t.rotation_ns, e.rotation_ns),
                media_ns: d(t.media_ns, e.media_ns),
                interface_ns: d(t.interface_ns, e.interface_ns),
            },
            seek_distances: SeekHistogram(std::array::from_fn(|k| {
                d(self.seek_distances.0[k], earlier.seek_distances.0[k])
            })),
        }
    }
}

/// Modeled time by the components of seed 004's eq. (3)–(4), in ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeSplit {
    /// Command decoding (an SSD's per-request latency counts here too).
    pub command_ns: u64,
    /// Arm movement (the seek curve).
    pub seek_ns: u64,
    /// Head settling after a seek or head switch.
    pub settle_ns: u64,
    /// Waiting for the sector to come round.
    pub rotation_ns: u64,
    /// Reading or writing the media (an SSD's bandwidth time too).
    pub media_ns: u64,
    /// Moving the data over the host interface.
    pub interface_ns: u64,
}

impl TimeSplit {
    /// The sum of the parts.
    pub fn total_ns(&self) -> u64 {
        self.command_ns + self.seek_ns + self.settle_ns + self.rotation_ns + self.media_ns + self.interface_ns
    }
}

/// Seek distances in log2 buckets: bucket 0 counts distance 0, bucket
/// `k >= 1` distances `2^(k-1) ..= 2^k - 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeekHistogram([u64; 65]);

impl Default for SeekHistogram {
    fn default() -> Self {
        Self([0; 65])
    }
}

impl SeekHistogram {
    /// The bucket of `distance`.
    pub fn bucket(distance: u64) -> usize {
        (u64::BITS - distance.leading_zeros()) as usize
    }

    /// Counts one seek of `distance` cylinders.
    pub fn record(&mut self, distance: u64) {
        self.0[Self::bucket(distance)] += 1;
    }

    /// Seeks counted in `bucket` (0 past the last).
    pub fn count(&self, bucket: usize) -> u64 {
        self.0.get(bucket).copied().unwrap_or(0)
    }

    /// The non-empty buckets as (lowest distance, highest distance, count).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(k, &n)| match k {
                0 => (0, 0, n),
                64 => (1 << 63, u64::MAX, n),
                _ => (1 << (k - 1), (1 << k) - 1, n),
            })
    }

    /// Seeks counted in all.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Charges time to the virtual clock and to the statistics together.
pub(super) struct Meter<'a> {
    pub clock_ns: &'a mut u64,
    pub stats: &'a mut DiskStats,
}

impl Meter<'_> {
    /// The virtual clock now.
    pub fn now(&self) -> u64 {
        *self.clock_ns
    }

    fn advance(&mut self, ns: u64) {
        *self.clock_ns += ns;
        self.stats.modeled_ns += ns;
    }

    pub fn command(&mut self, ns: u64) {
        self.advance(ns);
        self.stats.time.command_ns += ns;
    }

    /// One positioning: a move of `distance` cylinders taking `ns`.
    pub fn seek(&mut self, distance: u64, ns: u64) {
        self.advance(ns);
        self.stats.time.seek_ns += ns;
        self.stats.positionings += 1;
        self.stats.seek_distances.record(distance);
    }

    pub fn settle(&mut self, ns: u64) {
        self.advance(ns);
        self.stats.time.settle_ns += ns;
    }

    pub fn rotation(&mut self, ns: u64) {
        self.advance(ns);
        self.stats.time.rotation_ns += ns;
    }

    pub fn media(&mut self, ns: u64) {
        self.advance(ns);
        self.stats.time.media_ns += ns;
    }

    pub fn interface(&mut self, ns: u64) {
        self.advance(ns);
        self.stats.time.interface_ns += ns;
    }
}

/// `bytes` at `per_sec` bytes a second, in ns (rounded down).
pub(super) fn transfer_ns(bytes: u64, per_sec: u64) -> u64 {
    (u128::from(bytes) * 1_000_000_000 / u128::from(per_sec)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        let mut h = SeekHistogram::default();
        for d in [0, 1, 2, 3, 4, 7, 8, 1000, u64::MAX] {
            h.record(d);
        }
        let b: Vec<_> = h.buckets().collect();
        assert_eq!(
            b,
            vec![
                (0, 0, 1),
                (1, 1, 1),
                (2, 3, 2),
                (4, 7, 2),
                (8, 15, 1),
                (512, 1023, 1),
                (1 << 63, u64::MAX, 1)
            ]
        );
        assert_eq!(h.total(), 9);
        assert_eq!(h.count(SeekHistogram::bucket(5)), 2);
    }
}
