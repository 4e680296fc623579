//! An image file (or a block device node) accessed with `pread`/`pwrite`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{BlockDevice, past_end};

/// A file-backed device.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    len: u64,
    read_only: bool,
}

impl FileDevice {
    /// Opens `path` read-only or read-write.
    ///
    /// # Errors
    /// The OS error of `open`, with the path in the message.
    pub fn open(path: &Path, writable: bool) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: is a directory, not an image", path.display()),
            ));
        }
        let len = device_len(&file)?;
        Ok(Self {
            file,
            len,
            read_only: !writable,
        })
    }
}

fn device_len(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    // Seeking to the end works for regular files and block devices alike.
    let mut f = file;
    let len = f.seek(SeekFrom::End(0))?;
    f.seek(SeekFrom::Start(0))?;
    Ok(len)
}

impl BlockDevice for FileDevice {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if offset.checked_add(buf.len() as u64).is_none_or(|end| end > self.len) {
            return Err(past_end(offset, buf.len(), self.len));
        }
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        self.file.write_all_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        if self.read_only { Ok(()) } else { self.file.sync_data() }
    }

    fn read_only(&self) -> bool {
        self.read_only
    }
}
