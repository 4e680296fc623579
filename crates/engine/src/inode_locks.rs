//! Per-inode locks over file data (the VFS's `i_rwsem` as ext4 uses it for
//! buffered writes, truncate and fallocate). [`Filesystem::write`] publishes
//! its metadata under the global writer lock and then writes the file data
//! after releasing it, so two writers of different files overlap on the
//! device; the inode's lock, held exclusive across the whole write, keeps
//! two writes of one file ordered and keeps readers (who take it shared)
//! from reading a newly mapped block before its data is on the device.
//!
//! ## Lock order
//!
//! inode lock → `Filesystem::writer` (a [`crate::txn::Txn`]) → open counts
//! (`Filesystem::open_files`) → `Filesystem::data_in_flight` →
//! `Filesystem::dirty`. A thread holds at most one inode lock, and never
//! takes one while it holds the writer lock: transactions read file bodies
//! they need (symlink targets, xattr inodes) without it.
//!
//! ## Why a map, not a striped array
//!
//! A fixed array of locks indexed by a hash of the inode number needs no
//! allocation, but two files whose numbers collide share a lock: their
//! writers serialize after all, and a thread that holds one file's lock
//! while it reads another (a copy between files) could wait on itself.
//! A map from inode number to a lock of its own, sharded so that lookups of
//! different files rarely meet on one shard mutex, has neither problem; an
//! entry lives only while some thread holds or waits for it, so the map
//! stays as small as the number of files being accessed at once.
//!
//! [`Filesystem::write`]: crate::Filesystem::write

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{ArcRwLockReadGuard, ArcRwLockWriteGuard, Mutex, RawRwLock, RwLock};

/// Shards of the map; a power of two, enough that the threads of a FUSE
/// server rarely queue on one shard's mutex.
const SHARDS: usize = 16;

type Entry = Arc<RwLock<()>>;

/// The table of per-inode locks.
#[derive(Debug, Default)]
pub(crate) struct InodeLocks {
    shards: [Mutex<HashMap<u32, Entry>>; SHARDS],
}

/// A held inode lock, shared or exclusive; released (and the table entry
/// dropped when no other thread uses it) on drop.
pub(crate) struct InodeGuard<'a> {
    table: &'a InodeLocks,
    ino: u32,
    held: Option<Held>,
}

enum Held {
    // The guards are held for their drop alone.
    Shared(#[allow(dead_code)] ArcRwLockReadGuard<RawRwLock, ()>),
    Exclusive(#[allow(dead_code)] ArcRwLockWriteGuard<RawRwLock, ()>),
}

impl InodeLocks {
    fn shard(&self, ino: u32) -> &Mutex<HashMap<u32, Entry>> {
        // Inode numbers of files created together are consecutive: the low
        // bits spread them over the shards.
        &self.shards[ino as usize % SHARDS]
    }

    /// The entry for `ino`, created when absent; the clone the caller holds
    /// keeps it in the table until [`InodeGuard`] drops it.
    fn entry(&self, ino: u32) -> Entry {
        self.shard(ino).lock().entry(ino).or_default().clone()
    }

    /// Takes `ino`'s lock shared (a reader of its data).
    pub(crate) fn read(&self, ino: u32) -> InodeGuard<'_> {
        let held = Held::Shared(self.entry(ino).read_arc());
        InodeGuard {
            table: self,
            ino,
            held: Some(held),
        }
    }

    /// Takes `ino`'s lock exclusive (a writer, truncate, fallocate).
    pub(crate) fn write(&self, ino: u32) -> InodeGuard<'_> {
        let held = Held::Exclusive(self.entry(ino).write_arc());
        InodeGuard {
            table: self,
            ino,
            held: Some(held),
        }
    }

    /// Entries in the table (for tests: it empties when no lock is held).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

impl Drop for InodeGuard<'_> {
    fn drop(&mut self) {
        // Release first, so the count below sees only other users.
        self.held = None;
        let mut shard = self.table.shard(self.ino).lock();
        // Clones are made under this shard mutex, so a count of 1 (the
        // table's own) cannot grow before the entry is removed.
        if shard.get(&self.ino).is_some_and(|e| Arc::strong_count(e) == 1) {
            shard.remove(&self.ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_live_while_held() {
        let t = InodeLocks::default();
        {
            let _a = t.read(5);
            let _b = t.read(5);
            let _c = t.write(6);
            assert_eq!(t.len(), 2);
        }
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn exclusive_excludes_shared() {
        let t = Arc::new(InodeLocks::default());
        let w = t.write(7);
        let (tx, rx) = std::sync::mpsc::channel();
        let t2 = t.clone();
        let h = std::thread::spawn(move || {
            let _r = t2.read(7);
            tx.send(()).unwrap();
        });
        // Another inode is free meanwhile.
        drop(t.write(8));
        assert!(rx.try_recv().is_err());
        drop(w);
        rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap();
        h.join().unwrap();
        assert_eq!(t.len(), 0);
    }
}
