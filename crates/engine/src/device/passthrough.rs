//! Devices that stand in front of another and change little of what goes
//! through: a byte offset ([`OffsetDevice`](super::OffsetDevice)), a copy
//! of old contents taken before each write
//! ([`UndoDevice`](super::UndoDevice)), writes refused once the MMP block
//! is lost (`mmp::guard`). Each says only what it changes; the one
//! [`BlockDevice`] impl below passes the rest on, so a method added to
//! the device trait is forwarded the same way by all of them.

use std::io;

use super::BlockDevice;

/// A device that passes every access on to [`Passthrough::inner`], from
/// byte [`Passthrough::start`] of it on, after
/// [`Passthrough::before_write`] has let each write go.
pub trait Passthrough: Send + Sync {
    /// The device accesses go to.
    fn inner(&self) -> &dyn BlockDevice;

    /// Byte of the inner device that is byte 0 of this one; the device
    /// ends where the inner one does. Zero unless shifted.
    fn start(&self) -> u64 {
        0
    }

    /// Runs before `len` bytes at `offset` (of this device) are written;
    /// an error refuses the write, which then does not reach the inner
    /// device.
    fn before_write(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }
}

/// Where byte `offset` of `dev` lies on its inner device; past `u64` is
/// `EFBIG`, as a write past the largest file is.
fn shifted<P: Passthrough + ?Sized>(dev: &P, offset: u64) -> io::Result<u64> {
    offset
        .checked_add(dev.start())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))
}

impl<P: Passthrough> BlockDevice for P {
    fn len(&self) -> u64 {
        self.inner().len().saturating_sub(self.start())
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner().read_at(shifted(self, offset)?, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.before_write(offset, buf.len() as u64)?;
        self.inner().write_at(shifted(self, offset)?, buf)
    }
    fn write_gather(&self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        self.before_write(offset, parts.iter().map(|p| p.len() as u64).sum())?;
        self.inner().write_gather(shifted(self, offset)?, parts)
    }
    fn read_uncached(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner().read_uncached(shifted(self, offset)?, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner().flush()
    }
    fn read_only(&self) -> bool {
        self.inner().read_only()
    }
    fn name(&self) -> String {
        self.inner().name()
    }
}
