//! What a [`super::PageCache`] did: requests it took, pages it found or
//! missed, and the requests it sent on. The counts depend only on the
//! sequence of requests, never on timing, so a single-threaded run gives
//! the same figures on every machine.

/// Counters since the cache was made (subtract two readings for a phase).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCacheStats {
    /// Read requests taken.
    pub reads: u64,
    /// Bytes those requests asked for.
    pub read_bytes: u64,
    /// Write requests taken.
    pub writes: u64,
    /// Bytes those requests carried.
    pub write_bytes: u64,
    /// Flushes taken.
    pub flushes: u64,
    /// Pages of read requests served from memory.
    pub hits: u64,
    /// Pages of read requests that had to come from the inner device.
    pub misses: u64,
    /// Pages a write covered only in part and that were not held, read from
    /// the inner device to complete them (read-modify-write).
    pub fills: u64,
    /// Pages read beyond what read requests asked for (readahead).
    pub readahead_pages: u64,
    /// Read requests sent to the inner device (each covers a run of
    /// missing pages, or one page to fill).
    pub inner_reads: u64,
    /// Bytes of those requests.
    pub inner_read_bytes: u64,
    /// Write requests sent to the inner device (each a run of dirty pages).
    pub inner_writes: u64,
    /// Bytes of those requests.
    pub inner_write_bytes: u64,
    /// Pages forgotten to make room for others.
    pub evictions: u64,
    /// Of those, the pages that were dirty and were written back first.
    pub dirty_evictions: u64,
    /// Pages held when the counters were read.
    pub cached_pages: u64,
}

impl PageCacheStats {
    /// The counts of `self` minus those of an earlier reading (`cached_pages`
    /// is kept as it is now).
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            reads: self.reads.saturating_sub(earlier.reads),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            writes: self.writes.saturating_sub(earlier.writes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            flushes: self.flushes.saturating_sub(earlier.flushes),
            hits: self.hits.saturating_sub(earlier.hits),
            misses: self.misses.saturating_sub(earlier.misses),
            fills: self.fills.saturating_sub(earlier.fills),
            readahead_pages: self.readahead_pages.saturating_sub(earlier.readahead_pages),
            inner_reads: self.inner_reads.saturating_sub(earlier.inner_reads),
            inner_read_bytes: self.inner_read_bytes.saturating_sub(earlier.inner_read_bytes),
            inner_writes: self.inner_writes.saturating_sub(earlier.inner_writes),
            inner_write_bytes: self.inner_write_bytes.saturating_sub(earlier.inner_write_bytes),
            evictions: self.evictions.saturating_sub(earlier.evictions),
            dirty_evictions: self.dirty_evictions.saturating_sub(earlier.dirty_evictions),
            cached_pages: self.cached_pages,
        }
    }
}
