//! Is an image in use elsewhere? Two writers of one image destroy each
//! other's changes without either noticing, so a [`FileDevice`] opened for
//! writing claims the image first and refuses it when someone else has it:
//!
//! - **ext4kit's image lock**: an exclusive `flock(2)` on the image itself
//!   (the file, or the device node), taken by every writer: `mount`, the
//!   CLI's edits, `mkfs`, and library users of [`FileDevice::open`]. The
//!   kernel drops it when the holder dies, so a killed server never leaves
//!   a stale lock. Who holds it comes from `/proc/locks` (its pid) and
//!   `/proc/PID/cmdline`; where it is mounted, from the mount table (an
//!   ext4kit mount's source is the image's path).
//! - **The kernel**, found as e2fsprogs' `ext2fs_check_mount_point` finds
//!   it: a mount whose device (`/proc/self/mountinfo`'s `MAJ:MIN`) is the
//!   image's block device, or a loop device whose backing file
//!   (`/sys/block/loopN/loop/backing_file`) is the image (same device and
//!   inode); and for block devices, an `O_EXCL` open, which fails with
//!   `EBUSY` while the kernel holds the device (mounted — also in another
//!   mount namespace —, device mapper, RAID, or another `O_EXCL` opener);
//!   and swap space (`/proc/swaps`). A writable [`FileDevice`] on a block
//!   device keeps its `O_EXCL` open, so the kernel cannot mount the device
//!   while ext4kit writes it.
//!
//! Readers take no lock: [`FileDevice::open`] read-only records what it
//! found ([`FileDevice::in_use`]) so the caller can warn; a long-lived
//! reader (a read-only mount) uses [`FileDevice::open_shared`], a shared
//! lock that keeps writers out while it reads.
//!
//! [`FileDevice`]: super::FileDevice
//! [`FileDevice::open`]: super::FileDevice::open
//! [`FileDevice::open_shared`]: super::FileDevice::open_shared
//! [`FileDevice::in_use`]: super::FileDevice::in_use

mod kernel;
mod lock;

use std::fmt;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub use kernel::{MountEntry, mounts};
use kernel::{kernel_use, loop_backing_file};
use lock::{lock, lock_holder, rename_busy};

/// Who else uses an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InUse {
    /// The kernel has it mounted.
    Mounted {
        /// Where.
        mount_point: PathBuf,
        /// The file-system type the kernel mounted it as.
        fstype: String,
        /// The loop device in between, for an image file.
        loop_device: Option<PathBuf>,
    },
    /// A block device (the image, or a loop device backed by the image
    /// file) that the kernel or another program holds exclusively.
    Held {
        /// The device that refused an exclusive open.
        device: PathBuf,
    },
    /// The kernel swaps to it (`/proc/swaps`).
    Swap,
    /// Another process holds ext4kit's image lock.
    Locked(Holder),
}

/// The holder of an image lock, as far as `/proc` tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its process id (from `/proc/locks`).
    pub pid: Option<u32>,
    /// Its command line.
    pub command: Option<String>,
    /// True for a shared (reader's) lock.
    pub shared: bool,
    /// Where it serves the image, when a FUSE mount names the image as source.
    pub mount_point: Option<PathBuf>,
}

impl fmt::Display for InUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mounted {
                mount_point,
                fstype,
                loop_device,
            } => {
                write!(f, "mounted by the kernel ({fstype}) at {}", mount_point.display())?;
                if let Some(l) = loop_device {
                    write!(f, " through {}", l.display())?;
                }
                Ok(())
            }
            Self::Held { device } => write!(
                f,
                "in use by the kernel: {} is held exclusively (mounted, possibly in another mount namespace, \
                 or claimed by device mapper, RAID or another program)",
                device.display()
            ),
            Self::Swap => write!(f, "in use by the kernel as swap space"),
            Self::Locked(h) => h.fmt(f),
        }
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ext4kit = self.command.as_deref().is_some_and(|c| {
            c.split_whitespace()
                .next()
                .and_then(|a| Path::new(a).file_name())
                .is_some_and(|n| n.to_string_lossy().contains("ext4kit"))
        });
        let Some(pid) = self.pid else {
            return write!(f, "locked by another process");
        };
        let pid = format!("pid {pid}");
        match (&self.mount_point, ext4kit) {
            (Some(mp), _) => {
                let how = if self.shared { "mounted read-only" } else { "mounted" };
                write!(f, "{how} by ext4kit ({pid}) at {}", mp.display())
            }
            (None, _) => {
                let how = if self.shared { "being read" } else { "being written" };
                let who = if ext4kit { "ext4kit" } else { "another process" };
                write!(f, "{how} by {who} ({pid}")?;
                if let Some(c) = &self.command {
                    write!(f, ": {c}")?;
                }
                write!(f, ")")
            }
        }
    }
}

/// The error of an open refused because the image is in use: kind
/// [`io::ErrorKind::ResourceBusy`] (`EBUSY`), this value inside.
#[derive(Debug)]
pub struct InUseError {
    /// The image as the caller named it.
    pub path: PathBuf,
    /// Who uses it.
    pub what: InUse,
}

impl fmt::Display for InUseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is {}", self.path.display(), self.what)
    }
}

impl std::error::Error for InUseError {}

impl InUseError {
    /// The `io::Error` carrying it.
    pub fn into_io(self) -> io::Error {
        io::Error::new(io::ErrorKind::ResourceBusy, self)
    }
}

/// What a writer holds while it writes: its lock on the image, and for a
/// loop device also the lock on the loop device's backing file (so that
/// ext4kit writing the file and ext4kit writing the loop device exclude
/// each other).
#[derive(Debug)]
pub(super) struct Claim {
    _backing: Option<File>,
}

/// Claims `file` (opened from `path`, described by `meta`) for writing:
/// takes the image lock, then refuses a kernel mount. For a block device
/// the caller opened it with `O_EXCL` already.
pub(super) fn claim_for_writing(path: &Path, file: &File, meta: &Metadata) -> io::Result<Claim> {
    lock(path, file, meta, false)?;
    if let Some(what) = kernel_use(meta, true) {
        return Err(InUseError {
            path: path.to_path_buf(),
            what,
        }
        .into_io());
    }
    let backing = match loop_backing_file(meta) {
        Some(b) => {
            let f = File::open(&b)?;
            let m = f.metadata()?;
            lock(&b, &f, &m, false).map_err(|e| rename_busy(e, path))?;
            Some(f)
        }
        None => None,
    };
    Ok(Claim { _backing: backing })
}

/// A reader's shared lock on `file`: writers are refused while it is held.
pub(super) fn claim_for_reading(path: &Path, file: &File, meta: &Metadata) -> io::Result<()> {
    lock(path, file, meta, true)
}

/// What uses the image, for a reader that takes no lock: the kernel, or a
/// writer holding the image lock (other readers do not count). Never
/// fails: what cannot be read (no `/proc`) counts as unused.
pub fn check(path: &Path) -> Option<InUse> {
    let meta = std::fs::metadata(path).ok()?;
    kernel_use(&meta, false).or_else(|| lock_holder(path, &meta, true).map(InUse::Locked))
}

/// Who holds ext4kit's image lock, a reader's shared lock included.
pub fn lock_holder_of(path: &Path) -> Option<Holder> {
    let meta = std::fs::metadata(path).ok()?;
    lock_holder(path, &meta, false)
}

/// Opens the image (flags as given); a block device opened for writing is
/// opened with `O_EXCL`, and an `EBUSY` from that names what holds it.
pub(super) fn open_image(path: &Path, writable: bool, exclusive: bool) -> io::Result<(File, Metadata)> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let before = std::fs::metadata(path).map_err(named)?;
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(writable);
    if exclusive && writable && before.file_type().is_block_device() {
        o.custom_flags(libc::O_EXCL);
    }
    let file = match o.open(path) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            let what = kernel_use(&before, false)
                .or_else(|| lock_holder(path, &before, false).map(InUse::Locked))
                .unwrap_or(InUse::Held {
                    device: path.to_path_buf(),
                });
            return Err(InUseError {
                path: path.to_path_buf(),
                what,
            }
            .into_io());
        }
        Err(e) => return Err(named(e)),
    };
    let meta = file.metadata()?;
    Ok((file, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_messages() {
        let h = Holder {
            pid: Some(42),
            command: Some("/usr/bin/ext4kit mount -d disk.img /mnt".into()),
            shared: false,
            mount_point: Some("/mnt".into()),
        };
        assert_eq!(h.to_string(), "mounted by ext4kit (pid 42) at /mnt");
        let w = Holder {
            mount_point: None,
            command: Some("ext4kit write disk.img /a".into()),
            ..h
        };
        assert_eq!(
            w.to_string(),
            "being written by ext4kit (pid 42: ext4kit write disk.img /a)"
        );
    }
}
