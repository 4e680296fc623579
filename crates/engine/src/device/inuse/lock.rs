//! ext4kit's image lock: an `flock(2)` on the image, and who holds it
//! as `/proc/locks` and `/proc/PID/cmdline` tell.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{Holder, InUse, InUseError};

/// Takes the image lock on `file`, exclusive or `shared`, without waiting;
/// refused, the error names the holder.
pub(super) fn lock(path: &Path, file: &File, meta: &Metadata, shared: bool) -> io::Result<()> {
    let try_lock = || {
        if shared {
            file.try_lock_shared()
        } else {
            file.try_lock()
        }
    };
    let mut r = try_lock();
    // A lock this very process holds may be a copy: a child forked by
    // another thread keeps the image's descriptor, and its lock, until it
    // runs exec. Such a copy goes within milliseconds (it may be gone
    // before `/proc/locks` is read, which then names no holder); a real
    // holder stays.
    for _ in 0..50 {
        let transient = || match lock_holder(path, meta, shared) {
            Some(h) => h.pid == Some(std::process::id()),
            None => true,
        };
        if !matches!(r, Err(std::fs::TryLockError::WouldBlock)) || !transient() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        r = try_lock();
    }
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
pub(super) fn rename_busy(e: io::Error, path: &Path) -> io::Error {
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
pub(super) fn lock_holder(path: &Path, meta: &Metadata, exclusive_only: bool) -> Option<Holder> {
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
        super::mounts()
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
