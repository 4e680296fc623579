//! An image file (or a block device node) accessed with `pread`/`pwrite`.
//! Opening one for writing claims the image (see [`super::inuse`]).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::inuse::{self, Claim, InUse};
use super::{BlockDevice, past_end};

/// Most buffers one `pwritev` takes (Linux's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// A file-backed device.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    len: u64,
    read_only: bool,
    /// What a read-only open found using the image; `None` for writers,
    /// which are refused instead.
    in_use: Option<InUse>,
    _claim: Option<Claim>,
    /// The path as given, for [`BlockDevice::name`].
    name: String,
}

impl FileDevice {
    /// Opens `path` read-only or read-write. Writing claims the image
    /// for as long as the device lives: it takes ext4kit's image lock
    /// (released by the kernel at the latest when this process ends) and
    /// refuses an image the kernel has mounted or holds (an `O_EXCL` open
    /// of a block device). Reading takes no lock and records in
    /// [`Self::in_use`] who else uses the image.
    ///
    /// # Errors
    /// The OS error of `open`, with the path in the message; for an image
    /// in use elsewhere, kind [`io::ErrorKind::ResourceBusy`] carrying an
    /// [`inuse::InUseError`] that names the holder.
    pub fn open(path: &Path, writable: bool) -> io::Result<Self> {
        let (file, meta) = inuse::open_image(path, writable, true)?;
        let (claim, in_use) = if writable {
            (Some(inuse::claim_for_writing(path, &file, &meta)?), None)
        } else {
            (None, inuse::check(path))
        };
        Self::new(path, file, &meta, writable, in_use, claim)
    }

    /// Opens `path` read-only under a shared lock: writers that claim the
    /// image are refused while this device lives, so a long-lived reader
    /// (a read-only mount) sees one consistent image.
    ///
    /// # Errors
    /// As [`Self::open`]; busy while a writer holds the image.
    pub fn open_shared(path: &Path) -> io::Result<Self> {
        let (file, meta) = inuse::open_image(path, false, false)?;
        inuse::claim_for_reading(path, &file, &meta)?;
        let in_use = inuse::check(path);
        Self::new(path, file, &meta, false, in_use, None)
    }

    /// Opens `path` without the lock and without looking for other users:
    /// the caller answers for there being no other writer (an image only
    /// this program can reach, a test).
    ///
    /// # Errors
    /// The OS error of `open`, with the path in the message.
    pub fn open_unlocked(path: &Path, writable: bool) -> io::Result<Self> {
        let (file, meta) = inuse::open_image(path, writable, false)?;
        Self::new(path, file, &meta, writable, None, None)
    }

    fn new(
        path: &Path,
        file: File,
        meta: &std::fs::Metadata,
        writable: bool,
        in_use: Option<InUse>,
        claim: Option<Claim>,
    ) -> io::Result<Self> {
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
            in_use,
            _claim: claim,
            name: path.display().to_string(),
        })
    }

    /// Who else used the image when it was opened read-only (the kernel,
    /// or an ext4kit writer): what this device reads may be out of date
    /// or caught half-written.
    pub fn in_use(&self) -> Option<&InUse> {
        self.in_use.as_ref()
    }

    /// Sets the length of an image file (`ftruncate`): zero then the
    /// length wanted leaves a file that reads as zeros (what `mkfs` lays
    /// out on), under the claim this device holds.
    ///
    /// # Errors
    /// The device is read-only or a block device; the OS error.
    pub fn set_len(&mut self, len: u64) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        if !self.file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "only an image file can be resized, not a device",
            ));
        }
        self.file.set_len(len)?;
        self.len = len;
        Ok(())
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

    fn write_gather(&self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        let mut slices: Vec<io::IoSlice<'_>> = parts.iter().map(|p| io::IoSlice::new(p)).collect();
        let mut rest = &mut slices[..];
        let mut at = offset;
        while !rest.is_empty() {
            let batch = rest.len().min(IOV_MAX);
            let pos = libc::off_t::try_from(at).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
            let n = match nix::sys::uio::pwritev(&self.file, &rest[..batch], pos) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            };
            at += n as u64;
            io::IoSlice::advance_slices(&mut rest, n);
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        if self.read_only { Ok(()) } else { self.file.sync_data() }
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}
