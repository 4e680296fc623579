//! The device the engine writes through while it holds the MMP block: it
//! passes everything on until the block is lost to another holder, then
//! refuses every write, so nothing this session still had queued (the
//! write-back, a commit, the unmount's clean state) lands on a file system
//! someone else now owns. The kernel stops the same way: `ext4_error`
//! aborts the journal and turns the mount read-only.

use std::io;
use std::sync::{Arc, OnceLock};

use crate::device::BlockDevice;

/// A device whose writes stop once `lost` holds a reason.
pub(crate) struct Guard {
    pub inner: Arc<dyn BlockDevice>,
    /// Why the MMP block was lost, once it is.
    pub lost: Arc<OnceLock<String>>,
}

impl BlockDevice for Guard {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if let Some(why) = self.lost.get() {
            return Err(io::Error::new(io::ErrorKind::ResourceBusy, why.clone()));
        }
        self.inner.write_at(offset, buf)
    }

    fn write_gather(&self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        if let Some(why) = self.lost.get() {
            return Err(io::Error::new(io::ErrorKind::ResourceBusy, why.clone()));
        }
        self.inner.write_gather(offset, parts)
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn name(&self) -> String {
        self.inner.name()
    }
}
