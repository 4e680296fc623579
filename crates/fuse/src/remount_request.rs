//! Remounting a live mount: `mount -o remount,ro DIR`, `remount,rw`, and
//! the options ext4 lets a remount change (`noatime`/`relatime`/
//! `strictatime`, `commit=`, `errors=`; `ext4_remount`).
//!
//! The kernel's remount of a FUSE mount never reaches the server (FUSE has
//! no remount request; `fuse_reconfigure` only syncs), so the request
//! travels like the sync request ([`crate::sync_request`]): the caller
//! (`mount.fuse.ext4kit`, run by mount(8), or `ext4kit mount -o remount,…`)
//! reads the extended attribute [`request_name`] of the mount point, the
//! options in its name, and the server answers [`REMOUNT_REPLY`] once the
//! change is made. The caller also remounts the VFS side (`MS_REMOUNT`,
//! which makes the kernel refuse writes itself): on the way to read-only
//! first, so the kernel writes its dirty pages back while the server still
//! takes them; on the way back after.
//!
//! On the way to read-only the server refuses every change from then on
//! (EROFS) and settles the image ([`ext4kit_engine::Filesystem::settle`]):
//! written back, committed and marked clean, as ext4 leaves it, so
//! `e2fsck -fn` finds it clean while it stays mounted. Back to read-write,
//! the first change marks it in use again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use fuser::Errno;

use crate::adapter::Ext4Fuse;
use crate::options::{AtimeMode, MountConfig, OnError};

/// The prefix of the extended attribute whose reading is a remount
/// request; the options follow after a dot.
pub const REMOUNT_XATTR: &str = "ext4kit.remount";

/// The reply once the mount has changed.
pub const REMOUNT_REPLY: &[u8] = b"ext4kit remounted";

/// Options a remount changes; the others of a mount stay as they were.
pub const CHANGEABLE: &[&str] = &[
    "ro",
    "rw",
    "noatime",
    "nodiratime",
    "relatime",
    "strictatime",
    "atime",
    "commit",
    "errors",
];

/// The attribute name asking for `options` (comma-separated, only
/// [`CHANGEABLE`] ones).
pub fn request_name(options: &str) -> String {
    format!("{REMOUNT_XATTR}.{options}")
}

/// The options of a remount request named `name`, if it is one.
pub(crate) fn parse_request(name: &[u8]) -> Option<&str> {
    let rest = name.strip_prefix(REMOUNT_XATTR.as_bytes())?;
    std::str::from_utf8(rest.strip_prefix(b".")?).ok()
}

/// The settings a remount may change, as the serving threads read them.
#[derive(Debug)]
pub(crate) struct Live {
    /// Read-only: mounted so (`ro`) or remounted so.
    pub(crate) read_only: AtomicBool,
    atime: parking_lot::Mutex<AtimeMode>,
    errors: parking_lot::Mutex<OnError>,
    /// `commit=` in milliseconds, shared with the session's flusher.
    commit_ms: Arc<AtomicU64>,
}

impl Live {
    pub(crate) fn new(cfg: &MountConfig) -> Self {
        Self {
            read_only: AtomicBool::new(cfg.read_only),
            atime: parking_lot::Mutex::new(cfg.atime),
            errors: parking_lot::Mutex::new(cfg.errors),
            commit_ms: Arc::new(AtomicU64::new(cfg.commit.as_millis() as u64)),
        }
    }

    pub(crate) fn atime(&self) -> AtimeMode {
        *self.atime.lock()
    }

    pub(crate) fn errors(&self) -> OnError {
        *self.errors.lock()
    }

    /// The commit interval, which the flusher reads before each wait.
    pub(crate) fn commit_slot(&self) -> Arc<AtomicU64> {
        self.commit_ms.clone()
    }
}

/// Reads the interval out of a [`Live::commit_slot`].
pub(crate) fn commit_interval(slot: &AtomicU64) -> Duration {
    Duration::from_millis(slot.load(Ordering::Relaxed).max(1))
}

impl Ext4Fuse {
    /// Answers a remount request for `options`: a size query gets the
    /// reply's length, a read makes the change first.
    pub(crate) fn remount_request(&self, options: &str, size: u32) -> Result<Vec<u8>, Errno> {
        if size == 0 {
            return Ok(REMOUNT_REPLY.to_vec());
        }
        let mut next = self.cfg.clone();
        next.read_only = self.live.read_only.load(Ordering::Acquire);
        next.atime = self.live.atime();
        next.errors = self.live.errors();
        for opt in options.split(',').filter(|o| !o.is_empty()) {
            let key = opt.split('=').next().unwrap_or_default();
            if !CHANGEABLE.contains(&key) {
                log::error!("ext4kit: remount: `{opt}` cannot change on a live mount");
                return Err(Errno::EINVAL);
            }
            next.apply(opt).map_err(|why| {
                log::error!("ext4kit: remount: {why}");
                Errno::EINVAL
            })?;
        }
        if options.split(',').any(|o| o == "ro" || o == "rw") {
            self.switch_read_only(next.read_only)?;
        }
        *self.live.atime.lock() = next.atime;
        *self.live.errors.lock() = next.errors;
        if options.split(',').any(|o| o.starts_with("commit=")) {
            let ms = next.commit.as_millis() as u64;
            self.live.commit_ms.store(ms, Ordering::Relaxed);
        }
        log::info!("ext4kit: remounted ({options})");
        Ok(REMOUNT_REPLY.to_vec())
    }

    /// Read-only from now on (the image settled clean) or writable again.
    /// A mount opened read-only, or made read-only by `errors=remount-ro`,
    /// stays so (EROFS): the first holds the image shared, the second
    /// needs a check first.
    fn switch_read_only(&self, read_only: bool) -> Result<(), Errno> {
        if read_only {
            if !self.live.read_only.swap(true, Ordering::AcqRel) {
                self.fs().settle().map_err(|e| self.errno(e))?;
            }
            return Ok(());
        }
        if self.forced_ro.load(Ordering::Relaxed) {
            log::error!(
                "ext4kit: remount: errors were found (errors=remount-ro); unmount, check the image and mount it again"
            );
            return Err(Errno::EROFS);
        }
        if !self.live.read_only.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.cfg.read_only {
            log::error!(
                "ext4kit: remount: mounted with -o ro (the image is held shared); unmount and mount it read-write"
            );
            return Err(Errno::EROFS);
        }
        self.live.read_only.store(false, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_names_carry_their_options() {
        let name = request_name("ro,commit=10");
        assert_eq!(parse_request(name.as_bytes()), Some("ro,commit=10"));
        assert_eq!(parse_request(b"ext4kit.remount"), None);
        assert_eq!(parse_request(b"ext4kit.remountx.ro"), None);
        assert_eq!(parse_request(b"user.ext4kit.remount.ro"), None);
    }

    #[test]
    fn a_read_only_mount_starts_read_only() {
        let cfg = MountConfig {
            read_only: true,
            ..MountConfig::default()
        };
        assert!(Live::new(&cfg).read_only.load(Ordering::Relaxed));
        assert!(!Live::new(&MountConfig::default()).read_only.load(Ordering::Relaxed));
    }

    #[test]
    fn the_commit_interval_follows_the_slot() {
        let live = Live::new(&MountConfig::default());
        let slot = live.commit_slot();
        assert_eq!(commit_interval(&slot), MountConfig::default().commit);
        live.commit_ms.store(10_000, Ordering::Relaxed);
        assert_eq!(commit_interval(&slot), Duration::from_secs(10));
    }
}
