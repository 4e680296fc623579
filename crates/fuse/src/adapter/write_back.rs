//! WRITEs from the kernel's write-back cache that fail after `write(2)`
//! accepted their data (no space, an I/O error on the image). The kernel
//! reports such a failure at the file's next `fsync` and `close`, but it
//! keeps the pages and the size it cached, and WRITEs further on in the
//! file may have succeeded (they are served in any order) or still come:
//! the image would hold a hole the program never wrote, read back as
//! zeros. So the file is made to hold what it would had every write from
//! the first failed offset on failed:
//! - from the failure on, no cached WRITE at or past that offset is stored;
//! - at `fsync` and at the last close of the file for writing (the kernel
//!   has written every dirty page back by then), what lies past the
//!   failure is cut off again, down to the size the file had when it was
//!   opened (data older than this session is never cut);
//! - the kernel's cached pages of the file are dropped then, and at the
//!   last close the name of a file created through this mount is dropped
//!   from its cache too, so the next lookup reads the stored size instead
//!   of the one the kernel kept.

use std::collections::HashMap;

use fuser::{Errno, INodeNo};

use crate::transport::Notifier;
use parking_lot::Mutex;

use super::Ext4Fuse;

/// A file open for writing.
#[derive(Debug)]
struct Writing {
    /// Its size when the first of these handles was opened.
    start_size: u64,
    /// Handles open for writing.
    handles: u32,
    /// The first failed offset and the error it met.
    failed: Option<(u64, Errno)>,
    /// Parent and name, for a file created through this mount.
    created: Option<(INodeNo, Vec<u8>)>,
}

/// Files open for writing, by inode.
#[derive(Debug, Default)]
pub(crate) struct WriteBack(Mutex<HashMap<u32, Writing>>);

impl Ext4Fuse {
    /// A handle of `ino` was opened for writing when the file was `size`
    /// bytes long; `created` names a file this very request created.
    pub(crate) fn opened_for_writing(&self, ino: u32, size: u64, created: Option<(INodeNo, &[u8])>) {
        let mut files = self.write_back.0.lock();
        let w = files.entry(ino).or_insert(Writing {
            start_size: size,
            handles: 0,
            failed: None,
            created: None,
        });
        w.handles += 1;
        if let Some((parent, name)) = created {
            w.created = Some((parent, name.to_vec()));
        }
    }

    /// Records a cached WRITE of `len` bytes at `offset` that failed with
    /// `errno`, and drops the file's cached pages. (Pages dirtied through
    /// a mapping can be written after the last close: such a file is
    /// never cut.)
    pub(crate) fn write_back_failed(&self, ino: u32, offset: u64, len: usize, errno: Errno) {
        log::error!("ext4kit: inode {ino}: cached write of {len} bytes at {offset} failed: {errno:?}");
        if let Some(w) = self.write_back.0.lock().get_mut(&ino) {
            let from = w.failed.map_or(offset, |(f, _)| f.min(offset));
            w.failed = Some((from, errno));
        }
        self.drop_cached(ino, None);
    }

    /// The error of an earlier failure when a cached WRITE reaches at or
    /// past where that failure was.
    pub(crate) fn past_failure(&self, ino: u32, offset: u64, len: usize) -> Result<(), Errno> {
        match self.write_back.0.lock().get(&ino).and_then(|w| w.failed) {
            Some((from, errno)) if offset.saturating_add(len as u64) > from => Err(errno),
            _ => Ok(()),
        }
    }

    /// A truncate (also how `O_TRUNC` arrives, after the open): older data
    /// past `size` is gone, and a failure at or past it is forgotten.
    pub(crate) fn truncated(&self, ino: u32, size: u64) {
        if let Some(w) = self.write_back.0.lock().get_mut(&ino) {
            w.start_size = w.start_size.min(size);
            if w.failed.is_some_and(|(from, _)| size <= from) {
                w.failed = None;
            }
        }
    }

    /// After an fsync: the file is cut back to where its data failed.
    pub(crate) fn synced(&self, ino: u32) {
        let cut = self.write_back.0.lock().get(&ino).and_then(keep_to);
        if let Some(keep) = cut {
            self.cut_after_failure(ino, keep);
            self.drop_cached(ino, None);
        }
    }

    /// At the release of a handle open for writing: the last one cuts the
    /// file back to where its data failed and makes the kernel forget it.
    pub(crate) fn closed_for_writing(&self, ino: u32) {
        let mut files = self.write_back.0.lock();
        let Some(w) = files.get_mut(&ino) else { return };
        w.handles = w.handles.saturating_sub(1);
        if w.handles > 0 {
            return;
        }
        let Some(w) = files.remove(&ino) else { return };
        drop(files);
        if let Some(keep) = keep_to(&w) {
            self.cut_after_failure(ino, keep);
            self.drop_cached(ino, w.created);
        }
    }

    fn cut_after_failure(&self, ino: u32, keep: u64) {
        let stored = match self.fs().inode(ino) {
            Ok(i) => i.size(),
            Err(e) => return log::error!("ext4kit: inode {ino} after a failed write: {e}"),
        };
        if stored <= keep {
            return;
        }
        log::warn!("ext4kit: inode {ino}: keeping {keep} of {stored} bytes: the data past them was not all stored");
        if let Err(e) = self.fs().truncate(ino, keep) {
            log::error!("ext4kit: inode {ino}: cutting back to {keep} bytes: {e}");
        }
    }

    /// Drops the kernel's cached pages of `ino` and, when given, its name —
    /// from a thread of its own: the kernel first writes the file's other
    /// dirty pages back, through this server.
    fn drop_cached(&self, ino: u32, name: Option<(INodeNo, Vec<u8>)>) {
        let Some(n) = self.notifier.get().cloned() else { return };
        let spawned = std::thread::Builder::new()
            .name("ext4kit-inval".into())
            .spawn(move || forget(&n, ino, name));
        if let Err(e) = spawned {
            log::warn!("ext4kit: dropping the cached pages of inode {ino}: {e}");
        }
    }
}

/// Where a file whose data failed is cut back to: the failed offset, but
/// never below the size it had before this session wrote to it.
fn keep_to(w: &Writing) -> Option<u64> {
    w.failed.map(|(from, _)| from.max(w.start_size))
}

fn forget(n: &Notifier, ino: u32, name: Option<(INodeNo, Vec<u8>)>) {
    use std::os::unix::ffi::OsStrExt;
    if let Err(e) = n.inval_inode(crate::attr::fuse_ino(ino), 0, 0) {
        log::debug!("ext4kit: dropping the cached pages of inode {ino}: {e}");
    }
    if let Some((parent, name)) = name
        && let Err(e) = n.inval_entry(parent, std::ffi::OsStr::from_bytes(&name))
    {
        log::debug!("ext4kit: dropping the cached name of inode {ino}: {e}");
    }
}
