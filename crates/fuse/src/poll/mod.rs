//! Keeping a busy mount's round trips short. On a virtual machine most of
//! a small request's latency is waking a sleeping thread (an
//! inter-processor interrupt and a halted vCPU to restart), not the work.
//! While requests arrive back to back the mount is *busy*, and three things
//! cut wake-ups out:
//!
//! - **Spinning** (`poll=`): one serving thread picks the next request up
//!   without being woken. With fuser its descriptor is made non-blocking
//!   and fuser retries its read at once on `EAGAIN`; the own transport's
//!   threads share one descriptor, so its spinner instead polls the device
//!   without waiting before each read ([`Poller::spinning`]). It pauses
//!   while threads wait for a CPU ([`load::Pressure`]).
//! - **A CPU latency request** (`cpu_latency=`, [`cpu_latency`]): idle CPUs
//!   poll instead of halting, so the program waiting for a reply resumes at
//!   once too.
//! - **Standby** ([`standby`]): the other serving threads wait on a
//!   condition variable after their request instead of reading again, so
//!   the kernel does not wake one of them for every request the spinner
//!   takes. They come back once the spinner has been held up by one request
//!   for a window, or the spin ends.
//!
//! A request marks the mount busy ([`Poller::request`]); a watcher thread
//! checks once a window whether another came, and ends all three once none
//! did, so an idle mount costs no CPU.
//!
//! `O_NONBLOCK` belongs to the open file description, which a duplicate
//! of `fuser`'s descriptor shares: toggling it on ours switches theirs.

pub(crate) mod cpu_latency;
mod load;
mod standby;

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};

use cpu_latency::CpuLatency;

/// Windows the spin pauses for once threads were seen waiting for a CPU.
/// Without the spinner they may not wait, so a pause longer than one
/// window keeps it from coming back at every other window.
const REST_WINDOWS: u32 = 8;

/// What a busy mount does, and when it is busy.
pub(crate) struct Poller {
    shared: Arc<Shared>,
    watcher: Option<JoinHandle<()>>,
}

struct Shared {
    /// The descriptor to spin on, if spinning.
    spin: Option<OwnedFd>,
    /// Whether `spin` is non-blocking now.
    spinning: AtomicBool,
    /// The name of the thread that reads `spin`.
    spinner: Option<String>,
    /// Nanoseconds after `epoch` at which the spinner began the request it
    /// serves, or 0 between requests.
    spinner_since: AtomicU64,
    /// Whether a thread of that name ever served a request: until one did,
    /// nobody stands by (a thread that takes itself for a bystander while
    /// it is the spinner would leave the device unread).
    spinner_seen: AtomicBool,
    standby: standby::Standby,
    window: Duration,
    epoch: Instant,
    /// Nanoseconds after `epoch` of the last request.
    last: AtomicU64,
    busy: AtomicBool,
    stop: AtomicBool,
}

impl Poller {
    /// Treats the mount as busy for `window` after each request: spins on
    /// `spin` (a duplicate of the `/dev/fuse` descriptor the thread named
    /// `spinner` reads) and holds `latency` meanwhile.
    pub(crate) fn start(
        spin: Option<(OwnedFd, String)>,
        latency: Option<CpuLatency>,
        window: Duration,
    ) -> std::io::Result<Self> {
        Self::start_with(
            spin,
            latency,
            window,
            load::Pressure::new(),
            standby::Standby::default(),
        )
    }

    /// [`Poller::start`] with the CPU pressure source and the standby
    /// given: tests pass a source that never reports a crowd and a long
    /// safety net, so a loaded test machine cannot change what they watch.
    fn start_with(
        spin: Option<(OwnedFd, String)>,
        latency: Option<CpuLatency>,
        window: Duration,
        pressure: load::Pressure,
        standby: standby::Standby,
    ) -> std::io::Result<Self> {
        let (spin, spinner) = spin.unzip();
        Self::start_parts(spin, spinner, latency, window, pressure, standby)
    }

    /// [`Poller::start`] for a spinner that polls the device itself
    /// (`poll(2)` with no wait, then a blocking read) instead of reading a
    /// descriptor made non-blocking: the thread named `spinner` asks
    /// [`Poller::spinning`].
    pub(crate) fn start_polling_thread(
        spinner: String,
        latency: Option<CpuLatency>,
        window: Duration,
    ) -> std::io::Result<Self> {
        let (pressure, standby) = (load::Pressure::new(), standby::Standby::default());
        Self::start_parts(None, Some(spinner), latency, window, pressure, standby)
    }

    fn start_parts(
        spin: Option<OwnedFd>,
        spinner: Option<String>,
        latency: Option<CpuLatency>,
        window: Duration,
        pressure: load::Pressure,
        standby: standby::Standby,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            spin,
            spinning: AtomicBool::new(false),
            spinner,
            spinner_since: AtomicU64::new(0),
            spinner_seen: AtomicBool::new(false),
            standby,
            window,
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let watcher = std::thread::Builder::new()
            .name("ext4kit-poll".into())
            .spawn(move || s.watch(latency, pressure))?;
        Ok(Self {
            shared,
            watcher: Some(watcher),
        })
    }

    /// A request arrived: the mount is busy from now until a window passes
    /// without one. The request is served while the guard lives.
    pub(crate) fn request(&self) -> Serving<'_> {
        let s = &self.shared;
        let now = s.now();
        // SeqCst here and in the watcher's check: either this sees the
        // mount idle, or the watcher sees this request and stays busy.
        s.last.store(now, Ordering::SeqCst);
        if !s.busy.load(Ordering::SeqCst) && !s.busy.swap(true, Ordering::SeqCst) {
            s.set_spinning(true);
            if let Some(w) = &self.watcher {
                w.thread().unpark();
            }
        }
        let spinner = s.is_spinner();
        if spinner {
            s.spinner_since.store(now.max(1), Ordering::Release);
            s.spinner_seen.store(true, Ordering::Relaxed);
        }
        Serving { shared: s, spinner }
    }
}

/// A request being served; dropped once it is answered.
pub(crate) struct Serving<'a> {
    shared: &'a Shared,
    spinner: bool,
}

impl Poller {
    /// Whether the spinner should busy-poll the device now: the own
    /// transport's spinner checks this before each read, since its
    /// threads share one descriptor that must stay blocking for the others.
    pub(crate) fn spinning(&self) -> bool {
        self.shared.spinning.load(Ordering::Acquire)
    }
}

impl Drop for Serving<'_> {
    /// The spinner goes back to spinning; another thread stands by while
    /// the spinner keeps up.
    fn drop(&mut self) {
        let s = self.shared;
        if self.spinner {
            s.spinner_since.store(0, Ordering::Release);
        } else if s.spinner_seen.load(Ordering::Relaxed) && s.spinning.load(Ordering::Acquire) && !s.spinner_held_up() {
            s.standby.wait();
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.standby.release();
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

    fn is_spinner(&self) -> bool {
        self.spinner.is_some() && std::thread::current().name() == self.spinner.as_deref()
    }

    /// Whether the spinner has been serving one request for a window.
    fn spinner_held_up(&self) -> bool {
        let since = self.spinner_since.load(Ordering::Acquire);
        since != 0 && self.now().saturating_sub(since) >= self.window.as_nanos() as u64
    }

    fn idle_for_a_window(&self) -> bool {
        let idle = self.now().saturating_sub(self.last.load(Ordering::SeqCst));
        idle >= self.window.as_nanos() as u64
    }

    /// Parks while the mount is idle. While it is busy, checks once a
    /// window whether a request came: if none did, the mount is idle again;
    /// if some did, spins unless threads were kept waiting for a CPU, and
    /// calls the threads on standby back when the spinner is held up.
    fn watch(&self, mut latency: Option<CpuLatency>, mut pressure: load::Pressure) {
        let mut spinning = false;
        let mut rest = 0;
        while !self.stop.load(Ordering::Acquire) {
            if !self.busy.load(Ordering::Acquire) {
                latency.as_mut().map(CpuLatency::relax);
                std::thread::park();
                // A request that made the mount busy also started the spin.
                spinning = self.spinner.is_some();
                rest = 0;
                pressure.restart();
                continue;
            }
            latency.as_mut().map(CpuLatency::demand);
            std::thread::sleep(self.window);
            if self.idle_for_a_window() {
                self.busy.store(false, Ordering::SeqCst);
                self.set_spinning(false);
                self.standby.release();
                spinning = false;
                // A request between the check and the store found the
                // mount still busy and did not start the spin again.
                if !self.idle_for_a_window() && !self.busy.swap(true, Ordering::SeqCst) {
                    spinning = self.set_spinning(true);
                }
            } else if self.spinner.is_some() {
                rest = if pressure.crowded(self.window) {
                    REST_WINDOWS
                } else {
                    rest.saturating_sub(1)
                };
                if spinning != (rest == 0) {
                    spinning = self.set_spinning(rest == 0);
                }
                if !spinning || self.spinner_held_up() {
                    self.standby.release();
                }
            }
        }
        self.set_spinning(false);
    }

    /// Makes the spun descriptor non-blocking or blocking again; returns
    /// whether it now spins.
    fn set_spinning(&self, on: bool) -> bool {
        if self.spinner.is_none() {
            return false;
        }
        self.spinning.store(on, Ordering::Release);
        let Some(fd) = &self.spin else {
            return on;
        };
        let fd = fd.as_fd();
        let r = fcntl_getfl(fd).and_then(|mut f| {
            f.set(OFlags::NONBLOCK, on);
            fcntl_setfl(fd, f)
        });
        if let Err(e) = r {
            log::debug!("ext4kit: switching /dev/fuse polling: {e}");
        }
        on
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

    /// A poller that never sees CPU pressure: the tests run beside others
    /// on a loaded machine, where real pressure would pause the spin
    /// under them.
    fn calm(spin: Option<(OwnedFd, String)>, latency: Option<CpuLatency>) -> std::io::Result<Poller> {
        calm_with(spin, latency, Duration::from_millis(2), standby::LONGEST)
    }

    fn calm_with(
        spin: Option<(OwnedFd, String)>,
        latency: Option<CpuLatency>,
        window: Duration,
        longest: Duration,
    ) -> std::io::Result<Poller> {
        let standby = standby::Standby::with_longest(longest);
        Poller::start_with(spin, latency, window, load::Pressure::never(), standby)
    }

    /// Sets its flag when dropped, so a failed assertion in a scope still
    /// stops the threads the scope waits for instead of hanging the run.
    struct StopOnDrop<'a>(&'a AtomicBool);

    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
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
        let p = calm(Some((dup, "nobody".into())), None).unwrap();
        assert!(!nonblocking(&reader), "polling before any request");
        let serving = p.request();
        assert!(nonblocking(&reader), "the shared description is polled at once");
        drop(serving);
        assert!(eventually(|| !nonblocking(&reader)), "polling never stopped");
        let serving = p.request();
        assert!(nonblocking(&reader), "a later request polls again");
        drop(serving);
        drop(p);
        assert!(
            !nonblocking(&reader),
            "dropping the poller leaves the descriptor blocking"
        );
    }

    /// The window is long enough (200 ms) that a loaded machine cannot
    /// starve the spinner of a request per window, and the safety net
    /// (10 s) long enough that a wait it ends shows as a failure.
    #[test]
    fn other_threads_stand_by_while_the_spinner_serves_and_come_back_when_it_stops() {
        let window = Duration::from_millis(200);
        let (reader, _writer) = std::io::pipe().unwrap();
        let dup = reader.as_fd().try_clone_to_owned().unwrap();
        let p = calm_with(Some((dup, "spinner-t".into())), None, window, Duration::from_secs(10)).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            let _stop_on_failure = StopOnDrop(&stop);
            let spinner = std::thread::Builder::new().name("spinner-t".into());
            let spinner = spinner
                .spawn_scoped(sc, || {
                    while !stop.load(Ordering::Relaxed) {
                        drop(p.request());
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    // Held up by one long request while others still come.
                    let _long = p.request();
                    std::thread::sleep(window * 3);
                })
                .unwrap();
            assert!(
                eventually(|| nonblocking(&reader)),
                "the spinner's requests never started the spin"
            );
            let other = sc.spawn(|| {
                drop(p.request());
            });
            assert!(
                eventually(|| p.shared.standby.waiting() == 1),
                "a thread other than the spinner did not stand by"
            );
            std::thread::sleep(window * 2);
            assert_eq!(
                p.shared.standby.waiting(),
                1,
                "the standby ended while the spinner kept up"
            );
            stop.store(true, Ordering::Relaxed);
            other.join().unwrap();
            assert_eq!(
                p.shared.standby.timeouts(),
                0,
                "only the safety net ended the standby of a held-up spinner"
            );
            let s2 = sc.spawn(|| drop(p.request()));
            s2.join().unwrap();
            spinner.join().unwrap();
        });
    }

    #[test]
    fn a_busy_mount_holds_the_cpu_latency_demand_until_idle() {
        let _turn = cpu_latency::TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let latency = match CpuLatency::open() {
            Ok(l) => l,
            Err(e) => {
                ext4kit_testkit::skipped!("a_busy_mount_holds_the_cpu_latency_demand_until_idle: {e}; needs root");
                return;
            }
        };
        let before = cpu_latency::current_limit().unwrap();
        assert_ne!(before, 0, "another program already demands zero latency");
        let p = calm(None, Some(latency)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            cpu_latency::current_limit().unwrap(),
            before,
            "demanded before any request"
        );
        let busy = || {
            drop(p.request());
            cpu_latency::current_limit().unwrap() == 0
        };
        assert!(eventually(busy), "requests never demanded zero latency");
        assert!(
            eventually(|| cpu_latency::current_limit().unwrap() == before),
            "the demand outlived the busy window"
        );
        assert!(eventually(busy), "later requests demand again");
        drop(p);
        assert_eq!(
            cpu_latency::current_limit().unwrap(),
            before,
            "the demand outlived the poller"
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
