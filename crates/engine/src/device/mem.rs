//! An image held in memory: tests, fuzzing, and embedders that build images
//! without touching the disk.

use std::io;

use parking_lot::RwLock;

use super::{BlockDevice, past_end};

/// A memory-backed device.
#[derive(Debug, Default)]
pub struct MemDevice {
    bytes: RwLock<Vec<u8>>,
    read_only: bool,
}

impl MemDevice {
    /// A writable device holding `bytes`.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self {
            bytes: RwLock::new(bytes),
            read_only: false,
        }
    }

    /// A read-only device holding `bytes`.
    pub fn read_only(bytes: Vec<u8>) -> Self {
        Self {
            bytes: RwLock::new(bytes),
            read_only: true,
        }
    }

    /// A copy of the current contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().clone()
    }
}

fn range(offset: u64, len: usize, size: usize) -> io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(offset).map_err(|_| past_end(offset, len, size as u64))?;
    match start.checked_add(len) {
        Some(end) if end <= size => Ok(start..end),
        _ => Err(past_end(offset, len, size as u64)),
    }
}

impl BlockDevice for MemDevice {
    fn len(&self) -> u64 {
        self.bytes.read().len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let bytes = self.bytes.read();
        let r = range(offset, buf.len(), bytes.len())?;
        buf.copy_from_slice(&bytes[r]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        let mut bytes = self.bytes.write();
        let r = range(offset, buf.len(), bytes.len())?;
        bytes[r].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn read_only(&self) -> bool {
        self.read_only
    }
}
