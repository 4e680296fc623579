//! Open file and directory handles. A file handle names its inode (the
//! engine counts it open until release); a directory handle holds the listing taken at `opendir` (and again at offset 0, so
//! `rewinddir` sees new names), which gives `telldir`/`seekdir` offsets that
//! stay valid while the directory changes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ext4kit_engine::dir::DirEntry;
use parking_lot::Mutex;

/// What a handle refers to.
#[derive(Debug, Clone)]
pub(crate) enum Handle {
    /// An open file.
    File {
        /// The ext4 inode.
        ino: u32,
    },
    /// An open directory and its listing.
    Dir {
        /// The ext4 inode.
        ino: u32,
        /// Entries as last listed.
        entries: Arc<Vec<DirEntry>>,
    },
}

/// The table of open handles, shared by every serving thread.
#[derive(Debug, Default)]
pub(crate) struct Handles {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Handle>>,
}

impl Handles {
    pub(crate) fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.map.lock().insert(fh, h);
        fh
    }

    pub(crate) fn get(&self, fh: u64) -> Option<Handle> {
        self.map.lock().get(&fh).cloned()
    }

    pub(crate) fn replace(&self, fh: u64, h: Handle) {
        self.map.lock().insert(fh, h);
    }

    pub(crate) fn remove(&self, fh: u64) -> Option<Handle> {
        self.map.lock().remove(&fh)
    }

    /// Every handle still open (at unmount).
    pub(crate) fn drain(&self) -> Vec<Handle> {
        self.map.lock().drain().map(|(_, h)| h).collect()
    }
}
