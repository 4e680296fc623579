//! Capturing the FUSE tracepoints of one mount while a workload runs, in a
//! tracefs instance of our own (`instances/NAME` has its own ring buffer,
//! event switches, filter and clock), so a capture neither disturbs nor
//! sees another user of the global buffer. The instance uses the `mono`
//! clock: one clock across CPUs, so a send on one CPU and its end on
//! another are comparable. A `trace_marker` line written at a known
//! [`Instant`] ties that clock to the one the workload times its phases
//! with, so phases can be placed among the events.
//!
//! A thread drains `trace_pipe` (opened non-blocking) while the workload
//! runs and pairs events as they come, so the buffer rarely fills; what
//! the kernel still dropped is read from `per_cpu/cpuN/stats` and
//! reported, never hidden.

use std::io::{ErrorKind, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::parse::{marker_time, parse_line};
use super::profile::Pairer;

const TRACEFS: &str = "/sys/kernel/tracing";
/// Per-CPU ring buffer of the instance, KiB: a few seconds of requests
/// at the rates a FUSE mount reaches, between two drains.
const BUFFER_KIB: &str = "16384";
const EVENTS: [&str; 2] = ["fuse_request_send", "fuse_request_end"];
/// The `trace_marker` text that pairs the two clocks.
const MARK: &str = "ext4kit-bench clock";

/// A tracefs instance with the FUSE request events, removed when dropped.
pub struct Tracer {
    dir: PathBuf,
}

/// What one capture gathered.
pub struct Capture {
    /// The paired requests of the mount.
    pub pairer: Pairer,
    /// Events the kernel dropped (buffer full).
    pub lost_events: u64,
    /// An [`Instant`] and the same moment on the trace clock, to place
    /// [`Instant`]s among the events.
    pub clock: (Instant, u64),
}

impl Tracer {
    /// Makes the instance. Fails with what is missing: root, tracefs (it
    /// is mounted at /sys/kernel/tracing when it is not) or the kernel's
    /// FUSE events.
    pub fn new() -> Result<Tracer> {
        if !nix::unistd::geteuid().is_root() {
            bail!("--profile reads the kernel's FUSE tracepoints through tracefs, which needs root");
        }
        let root = Path::new(TRACEFS);
        if !root.join("instances").is_dir() {
            nix::mount::mount(
                Some("nodev"),
                root,
                Some("tracefs"),
                nix::mount::MsFlags::empty(),
                None::<&str>,
            )
            .with_context(|| format!("--profile: no tracefs at {TRACEFS}, and mounting one failed"))?;
        }
        if !root.join("events/fuse/fuse_request_send").is_dir() {
            bail!(
                "--profile: this kernel has no fuse/fuse_request_send tracepoint (Linux 6.14+ with FUSE built in or loaded)"
            );
        }
        let dir = root.join(format!("instances/ext4kit-bench-{}", std::process::id()));
        std::fs::create_dir(&dir)
            .with_context(|| format!("--profile: cannot make tracefs instance {}", dir.display()))?;
        let tracer = Tracer { dir };
        tracer.write("trace_clock", "mono")?;
        tracer.write("buffer_size_kb", BUFFER_KIB)?;
        Ok(tracer)
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let p = self.dir.join(file);
        std::fs::write(&p, value).with_context(|| format!("--profile: cannot write {value:?} to {}", p.display()))
    }

    fn switch(&self, on: bool) -> Result<()> {
        for e in EVENTS {
            self.write(&format!("events/fuse/{e}/enable"), if on { "1" } else { "0" })?;
        }
        Ok(())
    }

    /// Runs `f` with the events of the FUSE mount at `mnt` recorded.
    pub fn capture<T>(&self, mnt: &Path, f: impl FnOnce() -> T) -> Result<(T, Capture)> {
        let conn = connection(mnt)?;
        self.write("trace", "")?;
        self.write("events/fuse/filter", &format!("connection == {conn}"))?;
        let before = self.dropped()?;
        let stop = Arc::new(AtomicBool::new(false));
        let pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(self.dir.join("trace_pipe"))
            .context("--profile: cannot open trace_pipe")?;
        let reader = {
            let stop = stop.clone();
            std::thread::spawn(move || drain(pipe, Pairer::new(conn), &stop))
        };
        let marked = Instant::now();
        let mark = self.write("trace_marker", MARK);
        let switched = mark.and_then(|()| self.switch(true));
        let value = switched.is_ok().then(f);
        let off = self.switch(false);
        stop.store(true, Ordering::Relaxed);
        let (pairer, mark_ns) = reader
            .join()
            .map_err(|_| anyhow::anyhow!("--profile: the trace reader panicked"))??;
        switched?;
        off?;
        let lost_events = self.dropped()?.saturating_sub(before);
        let value = value.ok_or_else(|| anyhow::anyhow!("--profile: the events were not switched on"))?;
        let mark_ns =
            mark_ns.ok_or_else(|| anyhow::anyhow!("--profile: the clock marker never came back through trace_pipe"))?;
        Ok((
            value,
            Capture {
                pairer,
                lost_events,
                clock: (marked, mark_ns),
            },
        ))
    }

    /// Events every CPU's buffer lost so far (`overrun` and `dropped events`).
    fn dropped(&self) -> Result<u64> {
        let mut total = 0;
        let per_cpu = self.dir.join("per_cpu");
        for cpu in std::fs::read_dir(&per_cpu).with_context(|| format!("{}", per_cpu.display()))? {
            let stats = std::fs::read_to_string(cpu?.path().join("stats"))?;
            for line in stats.lines() {
                if let Some(n) = line
                    .strip_prefix("overrun:")
                    .or_else(|| line.strip_prefix("dropped events:"))
                {
                    total += n.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
        Ok(total)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.switch(false);
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            crate::log(&format!("cannot remove tracefs instance {}: {e}", self.dir.display()));
        }
    }
}

/// Reads `pipe` into `pairer` until `stop` is set and the pipe is empty;
/// gives it and the time of the clock marker.
fn drain(mut pipe: std::fs::File, mut pairer: Pairer, stop: &AtomicBool) -> Result<(Pairer, Option<u64>)> {
    let mut mark = None;
    let mut buf = vec![0u8; 1 << 16];
    let mut partial: Vec<u8> = Vec::new();
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => std::thread::sleep(Duration::from_millis(5)),
            Ok(n) => {
                partial.extend_from_slice(&buf[..n]);
                let end = partial.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                for line in String::from_utf8_lossy(&partial[..end]).lines() {
                    if mark.is_none() {
                        mark = marker_time(line, MARK);
                    }
                    if let Some(e) = parse_line(line).map_err(anyhow::Error::msg)? {
                        pairer.push(e);
                    }
                }
                partial.drain(..end);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return Ok((pairer, mark));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("--profile: reading trace_pipe"),
        }
    }
}

/// The FUSE connection of the mount at `mnt`: its device number in the
/// kernel's own encoding (major << 20 | minor), as the events print it.
fn connection(mnt: &Path) -> Result<u32> {
    let dev = std::fs::metadata(mnt)
        .with_context(|| format!("--profile: stat {}", mnt.display()))?
        .dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    u32::try_from((major << 20) | minor).context("--profile: the mount's device number does not fit a dev_t")
}

/// `at` on the trace clock, from a pairing `(instant, ns)` of both clocks.
pub fn on_trace_clock(clock: (Instant, u64), at: Instant) -> u64 {
    let (base, ns) = clock;
    match at.checked_duration_since(base) {
        Some(d) => ns.saturating_add(d.as_nanos() as u64),
        None => ns.saturating_sub(base.duration_since(at).as_nanos() as u64),
    }
}
