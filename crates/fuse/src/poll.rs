//! Busy-polling `/dev/fuse` while requests keep coming. On a virtual
//! machine most of a small request's latency is waking a sleeping server
//! thread (an inter-processor interrupt and a halted vCPU to restart), not
//! the work. While requests arrive back to back, one serving thread's
//! descriptor is made non-blocking: `fuser` then retries its read at once
//! on `EAGAIN`, so that thread spins and picks the next request up without
//! being woken. A request marks the mount busy ([`Poller::request`]); a
//! watcher thread makes the descriptor blocking again once no request came
//! for the poll window, so an idle mount costs no CPU.
//!
//! `O_NONBLOCK` belongs to the open file description, which a duplicate
//! of `fuser`'s descriptor shares: toggling it on ours switches theirs.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};

/// The polled descriptor and when the last request came.
pub(crate) struct Poller {
    shared: Arc<Shared>,
    watcher: Option<JoinHandle<()>>,
}

struct Shared {
    fd: OwnedFd,
    window: Duration,
    epoch: Instant,
    /// Nanoseconds after `epoch` of the last request.
    last: AtomicU64,
    spinning: AtomicBool,
    stop: AtomicBool,
}

impl Poller {
    /// Polls `fd` (a duplicate of one serving thread's `/dev/fuse`
    /// descriptor) for `window` after each request.
    pub(crate) fn start(fd: OwnedFd, window: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            fd,
            window,
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            spinning: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let watcher = std::thread::Builder::new()
            .name("ext4kit-poll".into())
            .spawn(move || s.watch())?;
        Ok(Self {
            shared,
            watcher: Some(watcher),
        })
    }

    /// A request arrived: spin from now until the window passes without one.
    pub(crate) fn request(&self) {
        let s = &self.shared;
        // SeqCst here and in the watcher's check: either this sees the
        // spin stopped, or the watcher sees this request and resumes it.
        s.last.store(s.now(), Ordering::SeqCst);
        if !s.spinning.load(Ordering::SeqCst) && !s.spinning.swap(true, Ordering::SeqCst) {
            s.set_blocking(false);
            if let Some(w) = &self.watcher {
                w.thread().unpark();
            }
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(w) = self.watcher.take() {
            w.thread().unpark();
            let _ = w.join();
        }
    }
}

impl Shared {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Parks until spinning starts, then checks once a window whether a
    /// request came during it; stops the spin when none did.
    fn watch(&self) {
        while !self.stop.load(Ordering::Acquire) {
            if !self.spinning.load(Ordering::Acquire) {
                std::thread::park();
                continue;
            }
            std::thread::sleep(self.window);
            let idle = self.now().saturating_sub(self.last.load(Ordering::Relaxed));
            if idle >= self.window.as_nanos() as u64 {
                self.spinning.store(false, Ordering::SeqCst);
                self.set_blocking(true);
                // A request between the check and the store found the
                // flag still set and did not restart the spin.
                let idle = self.now().saturating_sub(self.last.load(Ordering::SeqCst));
                if idle < self.window.as_nanos() as u64 && !self.spinning.swap(true, Ordering::SeqCst) {
                    self.set_blocking(false);
                }
            }
        }
        self.set_blocking(true);
    }

    fn set_blocking(&self, blocking: bool) {
        let fd = self.fd.as_fd();
        let r = fcntl_getfl(fd).and_then(|mut f| {
            f.set(OFlags::NONBLOCK, !blocking);
            fcntl_setfl(fd, f)
        });
        if let Err(e) = r {
            log::debug!("ext4kit: switching /dev/fuse polling: {e}");
        }
    }
}

/// A duplicate of the newest `/dev/fuse` descriptor of this process that is
/// not in `before`: the one a just-created session reads.
pub(crate) fn session_fd(before: &[i32]) -> Option<OwnedFd> {
    let newest = fuse_fds().into_iter().filter(|fd| !before.contains(fd)).max()?;
    // pidfd_getfd on this very process: a safe dup of a descriptor known
    // only by number.
    let me = pidfd_open(getpid(), PidfdFlags::empty()).ok()?;
    pidfd_getfd(me, newest, PidfdGetfdFlags::empty()).ok()
}

/// This process's descriptors open on `/dev/fuse`.
pub(crate) fn fuse_fds() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let fd: i32 = e.file_name().to_str()?.parse().ok()?;
        (std::fs::read_link(e.path()).ok()? == std::path::Path::new("/dev/fuse")).then_some(fd)
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nonblocking(fd: impl AsFd) -> bool {
        fcntl_getfl(fd).unwrap().contains(OFlags::NONBLOCK)
    }

    /// Waits up to 10 s for `cond`; the window is milliseconds, so this
    /// only turns a watcher that never acts into a failure.
    fn eventually(cond: impl Fn() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn a_request_turns_polling_on_and_an_idle_window_turns_it_off() {
        let (reader, _writer) = std::io::pipe().unwrap();
        let dup = reader.as_fd().try_clone_to_owned().unwrap();
        let p = Poller::start(dup, Duration::from_millis(2)).unwrap();
        assert!(!nonblocking(&reader), "polling before any request");
        p.request();
        assert!(nonblocking(&reader), "the shared description is polled at once");
        assert!(eventually(|| !nonblocking(&reader)), "polling never stopped");
        p.request();
        assert!(nonblocking(&reader), "a later request polls again");
        drop(p);
        assert!(
            !nonblocking(&reader),
            "dropping the poller leaves the descriptor blocking"
        );
    }

    #[test]
    fn fuse_fds_lists_only_the_fuse_device() {
        let (reader, _writer) = std::io::pipe().unwrap();
        use std::os::fd::AsRawFd;
        assert!(!fuse_fds().contains(&reader.as_raw_fd()));
        assert!(
            session_fd(&fuse_fds()).is_none(),
            "no new /dev/fuse descriptor was opened"
        );
    }
}
