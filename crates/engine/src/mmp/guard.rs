//! The device the engine writes through while it holds the MMP block: it
//! passes everything on until the block is lost to another holder, then
//! refuses every write, so nothing this session still had queued (the
//! write-back, a commit, the unmount's clean state) lands on a file system
//! someone else now owns. The kernel stops the same way: `ext4_error`
//! aborts the journal and turns the mount read-only.

use std::io;
use std::sync::{Arc, OnceLock};

use crate::device::{BlockDevice, Passthrough};

/// A device whose writes stop once `lost` holds a reason.
pub(crate) struct Guard {
    pub inner: Arc<dyn BlockDevice>,
    /// Why the MMP block was lost, once it is.
    pub lost: Arc<OnceLock<String>>,
}

impl Passthrough for Guard {
    fn inner(&self) -> &dyn BlockDevice {
        &*self.inner
    }
    fn before_write(&self, _offset: u64, _len: u64) -> io::Result<()> {
        match self.lost.get() {
            Some(why) => Err(io::Error::new(io::ErrorKind::ResourceBusy, why.clone())),
            None => Ok(()),
        }
    }
}
