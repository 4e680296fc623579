//! Whether threads wait for a CPU: the spinning server thread must give
//! its CPU back when the programs it serves need every CPU. The measure is
//! the kernel's pressure stall information (`/proc/pressure/cpu`, the
//! "some" line): microseconds during which at least one runnable thread
//! had no CPU. A count of runnable threads (`/proc/loadavg`) was tried
//! first; one sample a window was too noisy to tell one program thread
//! from two.

use std::time::Duration;

/// The pressure file.
const CPU_PRESSURE: &str = "/proc/pressure/cpu";

/// Share of a window that threads may wait for a CPU before the spinner
/// is deemed in their way: a quarter.
const CROWDED_SHARE: u64 = 4;

/// Stall time since the last look.
pub(crate) struct Pressure {
    /// Kept open: a look is then one `pread(2)` from offset 0, which makes
    /// the kernel generate the text afresh.
    file: Option<std::fs::File>,
    last: Option<u64>,
}

impl Pressure {
    pub(crate) fn new() -> Self {
        let mut p = Self {
            file: std::fs::File::open(CPU_PRESSURE).ok(),
            last: None,
        };
        p.restart();
        p
    }

    /// A source that never reports a crowd, as on a kernel without PSI.
    #[cfg(test)]
    pub(crate) fn never() -> Self {
        Self { file: None, last: None }
    }

    /// Forgets the stall before now: the next look covers only what
    /// follows.
    pub(crate) fn restart(&mut self) {
        self.last = self.total_stall_us();
    }

    fn total_stall_us(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 256];
        let n = self.file.as_ref()?.read_at(&mut buf, 0).ok()?;
        parse(std::str::from_utf8(&buf[..n]).ok()?)
    }

    /// Whether threads waited for a CPU during a quarter or more of
    /// `window` since the last call. Without PSI (a kernel built without
    /// it, or `psi=0`): never.
    pub(crate) fn crowded(&mut self, window: Duration) -> bool {
        let now = self.total_stall_us();
        let stalled = match (self.last, now) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        };
        self.last = now;
        crowded(stalled, window)
    }
}

fn crowded(stalled_us: u64, window: Duration) -> bool {
    stalled_us.saturating_mul(CROWDED_SHARE) >= window.as_micros() as u64
}

/// The `total=` of the "some" line.
fn parse(pressure: &str) -> Option<u64> {
    let some = pressure.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_some_total() {
        let text = "some avg10=12.10 avg60=15.10 avg300=11.46 total=1134013073\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse(text), Some(1_134_013_073));
        assert_eq!(parse("full avg10=0.00 total=5\n"), None);
        assert_eq!(parse("some avg10=0.00 total=x\n"), None);
    }

    #[test]
    fn a_quarter_of_the_window_stalled_is_crowded() {
        let w = Duration::from_micros(500);
        assert!(!crowded(0, w));
        assert!(!crowded(124, w));
        assert!(crowded(125, w));
        assert!(crowded(600, w));
    }

    #[test]
    fn two_threads_spinning_on_one_cpu_stall() {
        let mut p = Pressure::new();
        if p.total_stall_us().is_none() {
            ext4kit_testkit::skipped!("two_threads_spinning_on_one_cpu_stall: no {CPU_PRESSURE}");
            return;
        }
        // More spinning threads than CPUs: some always wait.
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()) + 1;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let window = Duration::from_millis(50);
        let crowded = std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(|| {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                });
            }
            std::thread::sleep(window);
            let _ = p.crowded(window);
            std::thread::sleep(window);
            let c = p.crowded(window);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            c
        });
        assert!(crowded, "{n} spinning threads on {} CPUs did not stall", n - 1);
    }
}
