//! Why the file system refuses writes: fixed at open (an unknown
//! `ro_compat` feature, a read-only device) or set once at run time when a
//! device write fails — the kernel's `errors=remount-ro` (`ext4_handle_error`
//! after an I/O error): once a write may have left the image half-updated,
//! writing more on top of it could only spread the damage, so every later
//! transaction is refused with [`Error::ReadOnly`] until the image is
//! checked and opened again. The first reason wins.

use std::io;
use std::sync::{Arc, OnceLock};

use crate::error::Error;
use crate::fs::Filesystem;

/// The reason writes are refused, if they are. Shared with the thread
/// that keeps the MMP block ([`ReadOnlyReason::share`]), which sets it when
/// another host takes the file system.
#[derive(Debug, Default)]
pub(crate) struct ReadOnlyReason(Arc<OnceLock<String>>);

impl From<Option<String>> for ReadOnlyReason {
    fn from(why: Option<String>) -> Self {
        let r = Self::default();
        if let Some(w) = why {
            r.set(w);
        }
        r
    }
}

impl ReadOnlyReason {
    /// True when writes are refused.
    pub(crate) fn is_some(&self) -> bool {
        self.0.get().is_some()
    }

    /// Another handle on the same reason.
    pub(crate) fn share(&self) -> Self {
        Self(Arc::clone(&self.0))
    }

    /// The reason, if any.
    pub(crate) fn as_deref(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    /// Refuses writes from now on for `why`, unless already refused.
    pub(crate) fn set(&self, why: String) {
        let _ = self.0.set(why);
    }
}

impl Filesystem {
    /// The error for a device write (or flush) that failed at byte
    /// `offset`; the file system turns read-only first.
    pub(crate) fn write_failed(&self, offset: u64, source: io::Error) -> Error {
        self.read_only_reason.set(format!(
            "a device write failed at byte {offset} ({source}); the image must be checked before it is written again"
        ));
        Error::Io { offset, source }
    }
}
