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

use std::fmt;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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

fn lock(path: &Path, file: &File, meta: &Metadata, shared: bool) -> io::Result<()> {
    let r = if shared {
        file.try_lock_shared()
    } else {
        file.try_lock()
    };
    match r {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => {
            // A writer is kept out by any lock, a reader only by a writer's.
            let holder = lock_holder(path, meta, shared).unwrap_or(Holder {
                pid: None,
                command: None,
                shared: false,
                mount_point: None,
            });
            Err(InUseError {
                path: path.to_path_buf(),
                what: InUse::Locked(holder),
            }
            .into_io())
        }
        Err(std::fs::TryLockError::Error(e)) => Err(io::Error::new(
            e.kind(),
            format!("{}: cannot lock the image: {e}", path.display()),
        )),
    }
}

/// A busy error about a loop device's backing file, told about the loop device.
fn rename_busy(e: io::Error, path: &Path) -> io::Error {
    match e.into_inner() {
        Some(inner) => match inner.downcast::<InUseError>() {
            Ok(busy) => InUseError {
                path: path.to_path_buf(),
                what: busy.what,
            }
            .into_io(),
            Err(other) => io::Error::other(other),
        },
        None => io::Error::other(format!("{}: cannot lock the backing file", path.display())),
    }
}

/// The holder of a lock on the image per `/proc/locks` (`FLOCK ADVISORY
/// WRITE|READ PID MAJ:MIN:INODE`, device numbers in hex). `exclusive_only`
/// skips readers' shared locks.
fn lock_holder(path: &Path, meta: &Metadata, exclusive_only: bool) -> Option<Holder> {
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    let (major, minor, ino) = (libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino());
    let mut found = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Waiters are listed as "N: -> FLOCK …".
        if f.len() < 6 || f[1] != "FLOCK" {
            continue;
        }
        let shared = f[3] == "READ";
        if exclusive_only && shared {
            continue;
        }
        let mut id = f[5].split(':');
        let (Some(ma), Some(mi), Some(i)) = (id.next(), id.next(), id.next()) else {
            continue;
        };
        if i.parse::<u64>().ok() != Some(ino) {
            continue;
        }
        let same_dev =
            u32::from_str_radix(ma, 16).ok() == Some(major) && u32::from_str_radix(mi, 16).ok() == Some(minor);
        // Some file systems (btrfs, overlayfs) report another st_dev than
        // the superblock's: then the inode number alone decides.
        if same_dev || found.is_none() {
            found = Some((f[4].parse::<u32>().ok(), shared));
        }
        if same_dev {
            break;
        }
    }
    let (pid, shared) = found?;
    let command = pid.and_then(|p| {
        let raw = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
        let args: Vec<String> = raw
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        (!args.is_empty()).then(|| args.join(" "))
    });
    let canonical = std::fs::canonicalize(path).ok();
    let mount_point = canonical.and_then(|c| {
        mounts()
            .into_iter()
            .find(|m| m.fstype.starts_with("fuse") && Path::new(&m.source) == c)
            .map(|m| m.mount_point)
    });
    Some(Holder {
        pid,
        command,
        shared,
        mount_point,
    })
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone)]
pub struct MountEntry {
    /// `MAJ:MIN` of the mounted file system (for a block-device file
    /// system, the device's number).
    pub dev: (u32, u32),
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// File-system type, with its subtype (`fuse.ext4kit`).
    pub fstype: String,
    /// What was mounted (device, image path, or a FUSE server's fsname).
    pub source: String,
}

/// The mount table of this process's mount namespace, in mount order
/// (empty when `/proc` is not mounted).
pub fn mounts() -> Vec<MountEntry> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines().filter_map(parse_mountinfo).collect()
}

/// `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER_OPTIONS`.
fn parse_mountinfo(line: &str) -> Option<MountEntry> {
    let f: Vec<&str> = line.split(' ').collect();
    let (ma, mi) = f.get(2)?.split_once(':')?;
    let sep = f.iter().position(|&x| x == "-")?;
    Some(MountEntry {
        dev: (ma.parse().ok()?, mi.parse().ok()?),
        mount_point: PathBuf::from(unescape(f.get(4)?)),
        fstype: f.get(sep + 1)?.to_string(),
        source: unescape(f.get(sep + 2)?),
    })
}

/// Undoes the kernel's octal escapes (`\040` for a space, …).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = b[i + 1..i + 4].iter().fold(0u16, |v, c| v * 8 + u16::from(c - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Loop devices whose backing file is the file `meta` describes: the
/// device node and its number.
fn loops_backed_by(meta: &Metadata) -> Vec<(PathBuf, (u32, u32))> {
    let Ok(dir) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let Ok(backing) = std::fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        let Ok(b) = std::fs::metadata(backing.trim_end_matches('\n')) else {
            continue;
        };
        if b.dev() != meta.dev() || b.ino() != meta.ino() {
            continue;
        }
        let Some(num) = std::fs::read_to_string(e.path().join("dev")).ok().and_then(|d| {
            let (a, b) = d.trim().split_once(':')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        }) else {
            continue;
        };
        out.push((PathBuf::from("/dev").join(&name), num));
    }
    out
}

/// The backing file of the loop device `meta` describes, if it is one.
fn loop_backing_file(meta: &Metadata) -> Option<PathBuf> {
    if !meta.file_type().is_block_device() {
        return None;
    }
    let rdev = meta.rdev();
    let sys = format!(
        "/sys/dev/block/{}:{}/loop/backing_file",
        libc::major(rdev),
        libc::minor(rdev)
    );
    let b = std::fs::read_to_string(sys).ok()?;
    let b = b.trim_end_matches('\n');
    (!b.ends_with(" (deleted)")).then(|| PathBuf::from(b))
}

/// True when `/proc/swaps` lists the image (same device number for a
/// block device, same device and inode for a file), as e2fsprogs checks.
fn is_swap(meta: &Metadata) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/swaps") else {
        return false;
    };
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .any(|name| {
            std::fs::metadata(unescape(name)).is_ok_and(|m| {
                if meta.file_type().is_block_device() {
                    m.file_type().is_block_device() && m.rdev() == meta.rdev()
                } else {
                    m.dev() == meta.dev() && m.ino() == meta.ino()
                }
            })
        })
}

/// The kernel's use of the image: a mount of its block device, or of a
/// loop device backed by it; with `writing`, also a loop device backed
/// by the image file that someone holds exclusively (`O_EXCL` → `EBUSY`).
fn kernel_use(meta: &Metadata, writing: bool) -> Option<InUse> {
    if is_swap(meta) {
        return Some(InUse::Swap);
    }
    let table = mounts();
    let mounted_at = |dev: (u32, u32)| table.iter().rev().find(|m| m.dev == dev);
    if meta.file_type().is_block_device() {
        let rdev = meta.rdev();
        let m = mounted_at((libc::major(rdev), libc::minor(rdev)))?;
        return Some(InUse::Mounted {
            mount_point: m.mount_point.clone(),
            fstype: m.fstype.clone(),
            loop_device: None,
        });
    }
    if !meta.is_file() {
        return None;
    }
    let loops = loops_backed_by(meta);
    for (dev, num) in &loops {
        if let Some(m) = mounted_at(*num) {
            return Some(InUse::Mounted {
                mount_point: m.mount_point.clone(),
                fstype: m.fstype.clone(),
                loop_device: Some(dev.clone()),
            });
        }
    }
    if writing {
        for (dev, _) in loops {
            let held = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_EXCL)
                .open(&dev)
                .err()
                .is_some_and(|e| e.raw_os_error() == Some(libc::EBUSY));
            if held {
                return Some(InUse::Held { device: dev });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let m = parse_mountinfo("36 35 7:3 / /mnt/my\\040disk rw,relatime shared:1 - ext4 /dev/loop3 rw,seclabel")
            .expect("parsed");
        assert_eq!(m.dev, (7, 3));
        assert_eq!(m.mount_point, Path::new("/mnt/my disk"));
        assert_eq!(m.fstype, "ext4");
        assert_eq!(m.source, "/dev/loop3");
        let f = parse_mountinfo("40 1 0:50 / /m rw - fuse.ext4kit /srv/a\\134b.img rw").expect("parsed");
        assert_eq!(f.fstype, "fuse.ext4kit");
        assert_eq!(f.source, "/srv/a\\b.img");
        assert!(parse_mountinfo("garbage").is_none());
    }

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
