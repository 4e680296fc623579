//! A file system that starts part-way into its device or file (e2fsprogs'
//! `offset=` I/O option: `e2image -o`, `e2undo -o`, an image inside a
//! partitioned disk file): every access is shifted by a fixed byte offset,
//! and the device seems to end where the underlying one ends.

use std::io;

use super::{BlockDevice, Passthrough};

/// `inner` seen from byte `offset` on.
pub struct OffsetDevice {
    inner: Box<dyn BlockDevice>,
    offset: u64,
}

impl OffsetDevice {
    /// Wraps `inner` so that byte 0 is its byte `offset`.
    ///
    /// # Errors
    /// An offset past the end of `inner`.
    pub fn new(inner: Box<dyn BlockDevice>, offset: u64) -> io::Result<Self> {
        if offset > inner.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("offset {offset} is past the end of the device ({} bytes)", inner.len()),
            ));
        }
        Ok(Self { inner, offset })
    }
}

impl Passthrough for OffsetDevice {
    fn inner(&self) -> &dyn BlockDevice {
        &*self.inner
    }
    fn start(&self) -> u64 {
        self.offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    #[test]
    fn accesses_are_shifted_and_bounded() {
        let mem = std::sync::Arc::new(MemDevice::new((0..=255u8).collect()));
        let dev = OffsetDevice::new(Box::new(mem.clone()), 200).unwrap();
        assert_eq!(dev.len(), 56);
        let mut b = [0u8; 4];
        dev.read_at(10, &mut b).unwrap();
        assert_eq!(b, [210, 211, 212, 213]);
        dev.write_at(0, &[9, 9]).unwrap();
        assert_eq!(&mem.snapshot()[199..203], &[199, 9, 9, 202]);
        assert!(dev.read_at(54, &mut b).is_err());
        assert!(dev.read_at(u64::MAX - 3, &mut b).is_err());
        assert!(OffsetDevice::new(Box::new(mem), 257).is_err());
    }
}
