//! The host file system under a sparse image. An image file whose blocks
//! were never written holds no space on the host; every block ext4 fills
//! takes some, so the host can run out while ext4 still counts free
//! blocks. The engine then fails writes with the host's ENOSPC, after the
//! kernel's cache accepted them. So [`crate::space`] counts, besides
//! ext4's free blocks, what the host can still give the image: its free
//! space, less the image's journal (which a sparse image may not hold
//! yet), whenever that is less than the image's unallocated bytes.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long one look at the host stays good: `statvfs` is a system call,
/// and the check runs before every allocation. In between, every block
/// ext4 allocated since is taken off what the host had (a cached writer
/// fills tens of MiB in that time).
const FRESH: Duration = Duration::from_millis(50);

/// A look at the host: when, what it could still store for the image,
/// and ext4's free bytes then.
type Look = (Instant, Option<u64>, u64);

/// The image file and the last look at its host.
#[derive(Debug)]
pub(crate) struct HostSpace {
    image: File,
    /// Host bytes the image may still need for blocks other than file
    /// data (its journal).
    keep: u64,
    last: Mutex<Option<Look>>,
    /// Whether the host's limit was already reported.
    told: AtomicBool,
}

impl HostSpace {
    /// Watches the host of `image` (a regular file; `None` otherwise).
    pub(crate) fn open(image: &Path, journal_bytes: u64) -> Option<Self> {
        let file = File::open(image).ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        Some(Self {
            image: file,
            keep: journal_bytes + (1 << 20),
            last: Mutex::new(None),
            told: AtomicBool::new(false),
        })
    }

    /// Bytes the host can still store for the image, when that is less
    /// than the image could ask for; `None` when the host is not the limit.
    /// `ext4_free` is ext4's free bytes now, `held` the bytes delayed
    /// allocation has reserved but not written: the host still has to
    /// store them, so a fresh look takes them off.
    pub(crate) fn limit(&self, ext4_free: u64, held: u64) -> Option<u64> {
        let mut last = self.last.lock();
        if let Some((at, v, then)) = *last
            && at.elapsed() < FRESH
        {
            let taken = then.saturating_sub(ext4_free);
            return v.map(|host| host.saturating_sub(taken));
        }
        let v = self.look().map(|host| host.saturating_sub(held));
        *last = Some((Instant::now(), v, ext4_free));
        v
    }

    fn look(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let meta = self.image.metadata().ok()?;
        let unallocated = meta.size().saturating_sub(meta.blocks() * 512);
        let vfs = rustix::fs::fstatvfs(&self.image).ok()?;
        let free = vfs.f_bavail.saturating_mul(vfs.f_frsize);
        (free < unallocated).then(|| free.saturating_sub(self.keep))
    }

    /// Says once, in the server's log, that the host is what is full.
    pub(crate) fn report(&self, free: u64) {
        if !self.told.swap(true, Ordering::Relaxed) {
            log::warn!(
                "ext4kit: the host file system holding the image has only {free} bytes left for it: refusing new data (ENOSPC)"
            );
        }
    }
}
