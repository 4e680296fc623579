//! Open file and directory handles. A file handle names its inode (the
//! engine counts it open until release); a directory handle holds the
//! engine's stream over it, whose positions are the `readdir` offsets
//! (see `adapter::dirs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ext4kit_engine::dir::DirStream;
use parking_lot::{Condvar, Mutex};

/// What a handle refers to.
#[derive(Debug, Clone)]
pub(crate) enum Handle {
    /// An open file.
    File {
        /// The ext4 inode.
        ino: u32,
        /// Opened for writing: the kernel may cache writes to it.
        write: bool,
    },
    /// An open directory and its stream.
    Dir {
        /// The ext4 inode.
        ino: u32,
        /// Where listing stands; the kernel reads one directory handle at
        /// a time, so the lock is uncontended.
        stream: Arc<Mutex<DirStream>>,
    },
}

/// The table of open handles, shared by every serving thread.
#[derive(Debug, Default)]
pub(crate) struct Handles {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Handle>>,
    /// Handles open for writing (see [`crate::space`]).
    writing: AtomicU64,
    /// Counts releases, so a thread told ENOSPC can wait for the next one.
    releases: Mutex<u64>,
    released: Condvar,
}

impl Handles {
    pub(crate) fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        if matches!(h, Handle::File { write: true, .. }) {
            self.writing.fetch_add(1, Ordering::Relaxed);
        }
        self.map.lock().insert(fh, h);
        fh
    }

    pub(crate) fn get(&self, fh: u64) -> Option<Handle> {
        self.map.lock().get(&fh).cloned()
    }

    pub(crate) fn remove(&self, fh: u64) -> Option<Handle> {
        let h = self.map.lock().remove(&fh);
        if matches!(h, Some(Handle::File { write: true, .. })) {
            self.writing.fetch_sub(1, Ordering::Relaxed);
        }
        h
    }

    /// How many file handles were released so far (see [`Self::wait_release`]).
    pub(crate) fn releases(&self) -> u64 {
        *self.releases.lock()
    }

    /// After the engine closed a released file.
    pub(crate) fn note_release(&self) {
        *self.releases.lock() += 1;
        self.released.notify_all();
    }

    /// Waits until more than `seen` releases have been noted, or until
    /// `deadline`; true if one was.
    pub(crate) fn wait_release(&self, seen: u64, deadline: std::time::Instant) -> bool {
        let mut n = self.releases.lock();
        while *n == seen {
            if self.released.wait_until(&mut n, deadline).timed_out() {
                break;
            }
        }
        *n != seen
    }

    /// How many handles are open for writing.
    pub(crate) fn writing(&self) -> u64 {
        self.writing.load(Ordering::Relaxed)
    }

    /// Inodes with a handle open for writing.
    pub(crate) fn writers(&self) -> Vec<u32> {
        let map = self.map.lock();
        let mut inos: Vec<u32> = map
            .values()
            .filter_map(|h| match h {
                Handle::File { ino, write: true } => Some(*ino),
                _ => None,
            })
            .collect();
        inos.sort_unstable();
        inos.dedup();
        inos
    }

    /// Every handle still open (at unmount).
    pub(crate) fn drain(&self) -> Vec<Handle> {
        self.map.lock().drain().map(|(_, h)| h).collect()
    }
}
