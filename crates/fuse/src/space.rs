//! Room for what the kernel's write-back cache holds, so `write(2)` fails
//! with ENOSPC instead of accepting data that cannot be stored.
//!
//! With the write-back cache, `write(2)` only copies into the kernel's page
//! cache; the data reaches this server later as WRITE requests, when a
//! failure can only be reported at `fsync` or `close` — and the kernel
//! keeps showing the pages it could not write. Kernel ext4 reserves room
//! for each delayed write at `write(2)` time (delalloc's reservation); a
//! FUSE server never sees that `write(2)`. What it does see:
//!
//! - the kernel holds at most the mount's `max_bytes` of dirty and
//!   in-flight file data (the bdi limit, strict for FUSE: the writer is
//!   throttled there; [`crate::bdi`] sets it from `max_dirty=`);
//! - with the write-back cache, every `write(2)` whose cached attributes
//!   are stale first asks for them: a GETATTR naming the open file
//!   (`fuse_cache_write_iter` → `fuse_update_attributes`), and an error
//!   answer fails the `write(2)` with that error.
//!
//! So the server keeps room free for WRITEs from the cache, which alone
//! may use it: `max_dirty`, a margin (extent blocks; the kernel's
//! throttling overshoots by a few pages), and 1 MiB per file open for
//! writing — a `write(2)` that passed its GETATTR just before the space
//! ran short still copies its whole buffer into the cache. Everything else that allocates
//! — creates, directories, xattrs, `fallocate`, direct writes — is refused
//! with ENOSPC once only the reserve is left, and so is the GETATTR of a
//! file open for writing: the `write(2)` behind it fails. Near that point
//! (within another `max_dirty`) attributes are handed out with no cache
//! time, so every `write(2)` asks, and the attributes the kernel already
//! holds for files open for writing are dropped at the crossing.
//!
//! The price: cached writes stop while up to the reserve is still free (it
//! is what `df` shows as used by nobody), and a GETATTR of a writable handle
//! — also sent by reads past the cached end of file and `SEEK_END` on it —
//! answers ENOSPC while the file system is that full. Each `write(2)`
//! call is checked once, at its start: calls of more than 1 MiB, from
//! several writers at the moment space runs short, can still overrun.
//! The WRITE that then fails is reported at `fsync` and `close`, the file's
//! cached pages are dropped, and nothing past the failure is stored, so
//! the image never holds a hole the program did not write; the kernel
//! may still report the size it cached until it forgets the inode.
//!
//! Space held by an unlinked file whose RELEASE the kernel has not sent yet
//! is waited for before any ENOSPC (`Ext4Fuse::check_space`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ext4kit_engine::Filesystem;
use fuser::Errno;

/// Default `max_dirty` for an image of `fs_bytes`: 1/32 of it, between
/// 1 MiB and 32 MiB. A 1 GiB `dd` + fsync into a 4 GiB image (this
/// project's VM, medians of 6–8 pairs) took 1.03× the time of 64 MiB with
/// 32 MiB, 1.20× with 16 MiB; the kernel's own limit here is ~48 MiB (1 %
/// of its dirty threshold). A small image gives up no more than a few
/// percent of its space.
pub fn default_max_dirty(fs_bytes: u64) -> u64 {
    (fs_bytes / 32).clamp(1 << 20, 32 << 20)
}

/// Room for one `write(2)` call in flight per writer: FUSE's largest
/// request, and the buffer size of `cp`, `dd bs=1M` and most copiers.
const PER_WRITER: u64 = 1 << 20;

/// Writers counted (a thousand open files do not all write at once).
const MAX_WRITERS: u64 = 16;

/// The reserve and whether the file system is near it.
#[derive(Debug)]
pub(crate) struct Space {
    /// Bytes of file data the kernel may hold unsent; 0 without the
    /// write-back cache (nothing to reserve for).
    max_dirty: AtomicU64,
    /// Within `max_dirty` of the reserve: attributes are not cached.
    low: AtomicBool,
    /// The host file system under a sparse image file, once known.
    host: OnceLock<crate::host_space::HostSpace>,
}

impl Space {
    pub(crate) fn new(max_dirty: u64) -> Self {
        Self {
            max_dirty: AtomicU64::new(max_dirty),
            low: AtomicBool::new(false),
            host: OnceLock::new(),
        }
    }

    /// Counts the host file system of the image file too (see
    /// [`crate::host_space`]).
    pub(crate) fn watch_host(&self, host: crate::host_space::HostSpace) {
        let _ = self.host.set(host);
    }

    /// Bytes the host can still give the image, when it is the tighter
    /// limit (for `statfs`).
    pub(crate) fn host_limit(&self, fs: &Filesystem) -> Option<u64> {
        let host = self.host.get()?;
        host.limit(Self::ext4_free(fs), Self::held(fs))
    }

    /// Free bytes data may take: ext4's own reserve stays for the
    /// extent-tree blocks of write-back, so the engine refuses data there.
    fn ext4_free(fs: &Filesystem) -> u64 {
        let blocks = fs.free_blocks().saturating_sub(fs.resv_blocks());
        blocks.saturating_mul(u64::from(fs.geometry().block_size))
    }

    /// Bytes delayed allocation holds: promised by ext4, not yet on the host.
    fn held(fs: &Filesystem) -> u64 {
        fs.delayed_blocks().saturating_mul(u64::from(fs.geometry().block_size))
    }

    /// The kernel's actual limit, once the mount exists and it was set
    /// (or could not be, and the kernel's own was read instead).
    pub(crate) fn set_max_dirty(&self, bytes: u64) {
        self.max_dirty.store(bytes, Ordering::Relaxed);
    }

    pub(crate) fn max_dirty(&self) -> u64 {
        self.max_dirty.load(Ordering::Relaxed)
    }

    /// Bytes kept for the cache's WRITEs while `writers` handles are open
    /// for writing: `max_dirty`, a quarter of it (at least 1 MiB) for
    /// throttling overshoot and extent blocks, and [`PER_WRITER`] each.
    pub(crate) fn reserve(&self, writers: u64) -> u64 {
        match self.max_dirty() {
            0 => 0,
            m => m + (m / 4).max(1 << 20) + writers.min(MAX_WRITERS) * PER_WRITER,
        }
    }

    /// Free bytes: ext4's free blocks, or what the host can still store
    /// for the image when that is less (and then whether it was).
    fn free_bytes(&self, fs: &Filesystem) -> (u64, bool) {
        let ext4 = Self::ext4_free(fs);
        match self.host.get().and_then(|h| h.limit(ext4, Self::held(fs))) {
            Some(host) if host < ext4 => (host, true),
            _ => (ext4, false),
        }
    }

    /// ENOSPC when only the reserve is left: for every allocation that
    /// does not come from the kernel's cache, and for the GETATTR that
    /// precedes a cached `write(2)`.
    /// Without the write-back cache (no reserve) only a full host is
    /// refused here; the engine finds a full ext4 itself.
    pub(crate) fn check(&self, fs: &Filesystem, writers: u64) -> Result<(), Errno> {
        let reserve = self.reserve(writers);
        let (free, host) = self.free_bytes(fs);
        if (reserve != 0 || host) && free <= reserve {
            if host && let Some(h) = self.host.get() {
                h.report(free);
            }
            return Err(Errno::ENOSPC);
        }
        Ok(())
    }

    /// Looks again after a change took space; true when the file system
    /// has just come within `max_dirty` of the reserve (the caller then
    /// drops the attributes the kernel caches for files open for writing).
    pub(crate) fn update(&self, fs: &Filesystem, writers: u64) -> bool {
        let reserve = self.reserve(writers);
        if reserve == 0 {
            return false;
        }
        let low = self.free_bytes(fs).0 <= reserve + self.max_dirty();
        let was = self.low.swap(low, Ordering::Relaxed);
        low && !was
    }

    /// True while every `write(2)` must ask first.
    pub(crate) fn is_low(&self) -> bool {
        self.low.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_scales_with_the_image_within_bounds() {
        assert_eq!(default_max_dirty(64 << 20), 2 << 20);
        assert_eq!(default_max_dirty(8 << 20), 1 << 20);
        assert_eq!(default_max_dirty(1 << 40), 32 << 20);
    }

    #[test]
    fn reserve_adds_a_margin_and_nothing_without_a_cache() {
        assert_eq!(Space::new(0).reserve(3), 0);
        assert_eq!(Space::new(2 << 20).reserve(0), 3 << 20);
        assert_eq!(Space::new(2 << 20).reserve(2), 5 << 20);
        assert_eq!(Space::new(16 << 20).reserve(100), 36 << 20);
    }
}
