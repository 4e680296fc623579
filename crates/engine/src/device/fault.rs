//! Fault injection: a wrapper that makes chosen reads, writes or flushes of
//! any device fail with `EIO`, as a failing disk does, so tests can check
//! that the engine reports the error and never corrupts the image.
//!
//! The plan is changed through a [`FaultControl`] shared with the test,
//! since the engine owns the device itself.

use std::io;
use std::sync::Arc;

use parking_lot::Mutex;

use super::BlockDevice;

/// A device whose accesses fail when its [`FaultControl`] says so.
#[derive(Debug)]
pub struct FaultDevice<D> {
    inner: D,
    ctl: FaultControl,
}

/// The shared handle that arms faults and counts accesses. Cloning it
/// gives another handle to the same plan.
#[derive(Debug, Clone, Default)]
pub struct FaultControl(Arc<Mutex<Plan>>);

#[derive(Debug, Default)]
struct Plan {
    reads: Rule,
    writes: Rule,
    fail_flushes: bool,
    read_count: u64,
    write_count: u64,
    failures: u64,
}

/// When accesses of one kind fail.
#[derive(Debug, Default, Clone, Copy)]
enum Rule {
    #[default]
    Never,
    /// The access after `skip` more successful ones fails, then none.
    Once { skip: u64 },
    /// Every access after `skip` more successful ones fails.
    From { skip: u64 },
}

impl Rule {
    /// Counts one access; true when it must fail.
    fn strike(&mut self) -> bool {
        match self {
            Self::Never => false,
            Self::Once { skip: 0 } => {
                *self = Self::Never;
                true
            }
            Self::From { skip: 0 } => true,
            Self::Once { skip } | Self::From { skip } => {
                *skip -= 1;
                false
            }
        }
    }
}

/// The error a failing disk gives: `EIO`.
fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl<D: BlockDevice> FaultDevice<D> {
    /// Wraps `inner` with no fault armed; the handle arms them.
    pub fn new(inner: D) -> (Self, FaultControl) {
        let ctl = FaultControl::default();
        (
            Self {
                inner,
                ctl: ctl.clone(),
            },
            ctl,
        )
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

impl FaultControl {
    /// The write after the next `skip` writes fails; later ones succeed.
    pub fn fail_one_write(&self, skip: u64) {
        self.0.lock().writes = Rule::Once { skip };
    }

    /// Every write after the next `skip` writes fails (a dead disk).
    pub fn fail_writes_from(&self, skip: u64) {
        self.0.lock().writes = Rule::From { skip };
    }

    /// The read after the next `skip` reads fails; later ones succeed.
    pub fn fail_one_read(&self, skip: u64) {
        self.0.lock().reads = Rule::Once { skip };
    }

    /// Every read after the next `skip` reads fails.
    pub fn fail_reads_from(&self, skip: u64) {
        self.0.lock().reads = Rule::From { skip };
    }

    /// Makes every flush fail (`on`) or succeed.
    pub fn fail_flushes(&self, on: bool) {
        self.0.lock().fail_flushes = on;
    }

    /// Disarms every fault; the counts are kept.
    pub fn clear(&self) {
        let mut p = self.0.lock();
        p.reads = Rule::Never;
        p.writes = Rule::Never;
        p.fail_flushes = false;
    }

    /// Writes attempted so far, failed ones included.
    pub fn writes(&self) -> u64 {
        self.0.lock().write_count
    }

    /// Reads attempted so far, failed ones included.
    pub fn reads(&self) -> u64 {
        self.0.lock().read_count
    }

    /// Accesses (reads, writes, flushes) failed on purpose so far.
    pub fn failures(&self) -> u64 {
        self.0.lock().failures
    }

    fn read_fails(&self) -> bool {
        let mut p = self.0.lock();
        p.read_count += 1;
        let fail = p.reads.strike();
        p.failures += u64::from(fail);
        fail
    }

    fn write_fails(&self) -> bool {
        let mut p = self.0.lock();
        p.write_count += 1;
        let fail = p.writes.strike();
        p.failures += u64::from(fail);
        fail
    }

    fn flush_fails(&self) -> bool {
        let mut p = self.0.lock();
        p.failures += u64::from(p.fail_flushes);
        p.fail_flushes
    }
}

impl<D: BlockDevice> BlockDevice for FaultDevice<D> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.ctl.read_fails() {
            return Err(eio());
        }
        self.inner.read_at(offset, buf)
    }

    /// A failed write changes nothing on the inner device.
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if self.ctl.write_fails() {
            return Err(eio());
        }
        self.inner.write_at(offset, buf)
    }

    fn flush(&self) -> io::Result<()> {
        if self.ctl.flush_fails() {
            return Err(eio());
        }
        self.inner.flush()
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    fn dev() -> (FaultDevice<Arc<MemDevice>>, FaultControl, Arc<MemDevice>) {
        let mem = Arc::new(MemDevice::new(vec![0; 4096]));
        let (d, c) = FaultDevice::new(mem.clone());
        (d, c, mem)
    }

    fn is_eio(r: io::Result<()>) -> bool {
        r.is_err_and(|e| e.raw_os_error() == Some(libc::EIO))
    }

    #[test]
    fn one_write_fails_then_writes_work() {
        let (d, c, mem) = dev();
        c.fail_one_write(2);
        assert!(d.write_at(0, &[1]).is_ok());
        assert!(d.write_at(1, &[1]).is_ok());
        assert!(is_eio(d.write_at(2, &[1])));
        assert!(d.write_at(3, &[1]).is_ok());
        assert_eq!(&mem.snapshot()[..4], &[1, 1, 0, 1], "the failed write changed nothing");
        assert_eq!((c.writes(), c.failures()), (4, 1));
    }

    #[test]
    fn writes_fail_from_a_point_on() {
        let (d, c, _) = dev();
        c.fail_writes_from(1);
        assert!(d.write_at(0, &[1]).is_ok());
        for i in 1..5 {
            assert!(is_eio(d.write_at(i, &[1])));
        }
        let mut b = [0u8; 1];
        assert!(d.read_at(0, &mut b).is_ok(), "reads are unaffected");
        c.clear();
        assert!(d.write_at(9, &[1]).is_ok());
        assert_eq!(c.failures(), 4);
    }

    #[test]
    fn reads_fail_on_demand() {
        let (d, c, _) = dev();
        let mut b = [0u8; 8];
        c.fail_one_read(0);
        assert!(is_eio(d.read_at(0, &mut b)));
        assert!(d.read_at(0, &mut b).is_ok());
        c.fail_reads_from(1);
        assert!(d.read_at(0, &mut b).is_ok());
        assert!(is_eio(d.read_at(0, &mut b)));
        assert!(is_eio(d.read_at(8, &mut b)));
        assert!(d.write_at(0, &[1]).is_ok(), "writes are unaffected");
        assert_eq!(c.reads(), 5);
    }

    #[test]
    fn flushes_fail_on_demand() {
        let (d, c, _) = dev();
        c.fail_flushes(true);
        assert!(is_eio(d.flush()));
        c.fail_flushes(false);
        assert!(d.flush().is_ok());
    }
}
