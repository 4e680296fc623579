//! The block-device layer: positioned, `&self` I/O on an image so that many
//! threads can read at once. The engine only ever calls [`BlockDevice`];
//! later layers (disk model, crash simulation, fault injection, I/O
//! statistics) wrap one device in another.

mod crash;
pub mod disk_model;
mod fault;
mod file;
pub mod inuse;
mod mem;
pub mod nbd;
mod offset;
mod page_cache;
mod passthrough;
pub mod undo;

pub use crash::{CrashDevice, Survivors};
pub use disk_model::{DiskModel, DiskProfile, DiskStats};
pub use fault::{FaultControl, FaultDevice};
pub use file::FileDevice;
pub use inuse::{InUse, InUseError};
pub use mem::MemDevice;
pub use nbd::{NbdDevice, NbdOptions};
pub use offset::OffsetDevice;
pub use page_cache::{DEFAULT_PAGE_SIZE, PageCache, PageCacheStats};
pub use passthrough::Passthrough;
pub use undo::{UndoDevice, UndoSync};

use std::io;
use std::sync::Arc;

/// A byte-addressed device holding a file-system image.
pub trait BlockDevice: Send + Sync {
    /// Size in bytes.
    fn len(&self) -> u64;
    /// True when the device holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fills `buf` from byte `offset`. Reading past the end is an error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `buf` at byte `offset`.
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Writes `parts` back to back from byte `offset`. A journal commit or
    /// checkpoint hands over a run of blocks this way: a device that can
    /// gather (a file, with `pwritev`) writes them without joining them
    /// into one buffer first; any other joins them and calls
    /// [`BlockDevice::write_at`] once, so it sees the same single write.
    fn write_gather(&self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        match parts {
            [] => Ok(()),
            [one] => self.write_at(offset, one),
            many => self.write_at(offset, &many.concat()),
        }
    }
    /// Writes each `(offset, bytes)` of `writes` and returns once all are
    /// done, in no promised order among themselves. A page cache writing
    /// back at a flush hands its dirty runs over this way, so a device
    /// with requests in flight (NBD) sends them all before waiting for
    /// the first reply; any other device writes them one by one.
    fn write_many(&self, writes: &[(u64, &[u8])]) -> io::Result<()> {
        writes.iter().try_for_each(|&(offset, buf)| self.write_at(offset, buf))
    }
    /// Fills `buf` from byte `offset` as the medium holds it now, past any
    /// copy a cache in this process keeps: multi-mount protection reads
    /// the MMP block this way to see another host's writes.
    fn read_uncached(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_at(offset, buf)
    }
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// True when writes are refused.
    fn read_only(&self) -> bool;
    /// A name for people: the image path as given, or empty. Multi-mount
    /// protection writes it into the MMP block (`mmp_bdevname`).
    fn name(&self) -> String {
        String::new()
    }
}

/// A shared device is a device: a test keeps one `Arc` to inspect the
/// image (a [`CrashDevice`]'s log, a [`MemDevice`]'s bytes) while the
/// engine owns another in its `Box<dyn BlockDevice>`.
impl<D: BlockDevice + ?Sized> BlockDevice for Arc<D> {
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_at(offset, buf)
    }
    fn write_gather(&self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        (**self).write_gather(offset, parts)
    }
    fn write_many(&self, writes: &[(u64, &[u8])]) -> io::Result<()> {
        (**self).write_many(writes)
    }
    fn read_uncached(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_uncached(offset, buf)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn read_only(&self) -> bool {
        (**self).read_only()
    }
    fn name(&self) -> String {
        (**self).name()
    }
}

fn past_end(offset: u64, len: usize, size: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("access of {len} bytes at {offset} is past the end of the {size}-byte device"),
    )
}
