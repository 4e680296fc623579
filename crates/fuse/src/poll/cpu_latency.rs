//! A CPU wake-up latency request (the kernel's PM QoS `cpu_latency`,
//! through `/dev/cpu_dma_latency`). While it asks for zero, idle CPUs poll
//! in the idle loop instead of halting, so a program blocked on a FUSE
//! reply resumes without an idle exit. On a virtual machine a halted vCPU
//! takes tens of microseconds to restart: more than most requests cost.
//!
//! The request lives as long as the descriptor; writing a 32-bit value
//! updates it. The kernel takes the smallest value any holder asks for, so
//! [`CpuLatency::relax`] only withdraws ours.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// The device the kernel exposes the CPU latency request through.
pub(crate) const DEVICE: &str = "/dev/cpu_dma_latency";

/// "No constraint": `PM_QOS_CPU_LATENCY_DEFAULT_VALUE`, 2·10⁹ µs.
const NO_CONSTRAINT: i32 = 2_000_000_000;

/// One held request.
pub(crate) struct CpuLatency {
    dev: File,
    strict: bool,
}

impl CpuLatency {
    /// Opens a request, asking for nothing yet. Needs root (the device is
    /// mode 0600).
    pub(crate) fn open() -> io::Result<Self> {
        Self::open_at(Path::new(DEVICE))
    }

    fn open_at(path: &Path) -> io::Result<Self> {
        let dev = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(Self { dev, strict: false })
    }

    /// Asks that idle CPUs wake at once.
    pub(crate) fn demand(&mut self) {
        self.set(true);
    }

    /// Withdraws the demand.
    pub(crate) fn relax(&mut self) {
        self.set(false);
    }

    // The kernel reads an `s32` in its own byte order, which is ours.
    #[allow(clippy::host_endian_bytes)]
    fn set(&mut self, strict: bool) {
        if strict == self.strict {
            return;
        }
        let value = if strict { 0 } else { NO_CONSTRAINT };
        match self.dev.write(&value.to_ne_bytes()) {
            Ok(4) => self.strict = strict,
            Ok(n) => log::debug!("ext4kit: {DEVICE} took {n} of 4 bytes"),
            Err(e) => log::debug!("ext4kit: writing {DEVICE}: {e}"),
        }
    }
}

/// The latency every holder together asks for now, in microseconds, read
/// through a request of our own that asks for nothing.
#[cfg(test)]
#[allow(clippy::host_endian_bytes)]
pub(crate) fn current_limit() -> io::Result<i32> {
    use std::io::Read;
    let mut dev = OpenOptions::new().read(true).write(true).open(DEVICE)?;
    let mut b = [0u8; 4];
    dev.read_exact(&mut b)?;
    Ok(i32::from_ne_bytes(b))
}

/// Tests that read the system-wide limit take turns.
#[cfg(test)]
pub(crate) static TEST_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demanding_sets_the_system_limit_to_zero_and_relaxing_withdraws_it() {
        let _turn = TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = match CpuLatency::open() {
            Ok(h) => h,
            Err(e) => {
                ext4kit_testkit::skipped!("demanding_sets_the_system_limit…: cannot open {DEVICE} ({e}); needs root");
                return;
            }
        };
        let before = current_limit().unwrap();
        held.demand();
        assert_eq!(current_limit().unwrap(), 0, "a demand for zero is the limit");
        held.relax();
        assert_eq!(current_limit().unwrap(), before, "relaxing restores the limit");
        held.demand();
        drop(held);
        assert_eq!(current_limit().unwrap(), before, "closing withdraws the demand");
    }

    #[test]
    fn a_missing_device_is_an_error_naming_it() {
        let e = CpuLatency::open_at(Path::new("/nonexistent/cpu_dma_latency"))
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("/nonexistent/cpu_dma_latency"), "{e}");
    }
}
