//! Removing a master key while files under it are open, as
//! `FS_IOC_REMOVE_ENCRYPTION_KEY` does (`fscrypt.rst`, "Removing keys";
//! `keyring.c`): the key leaves the keyring at once, so directories list
//! no-key names and new opens are refused (`ENOKEY`), but each regular
//! file open at that moment keeps its contents until its last close, when
//! the kernel would evict its inode and its per-file key with it. Until
//! then the key is "incompletely removed"
//! (`FSCRYPT_KEY_STATUS_INCOMPLETELY_REMOVED`); after the last close it
//! is gone, as after the kernel's retried removal.
//!
//! The removed key is kept here with the inodes it still serves;
//! [`Filesystem::file_key`] asks here only when the keyring has no key.

use std::collections::{HashMap, HashSet};

use ext4kit_format::fscrypt::KeyRef;
use ext4kit_format::inode::FileType;
use parking_lot::Mutex;

use super::keys::{self, MasterKey};
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// What `FS_IOC_GET_ENCRYPTION_KEY_STATUS` reports of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStatus {
    /// Not added, or removed and no file open under it.
    Absent,
    /// Added.
    Present,
    /// Removed while `busy` files under it were open; they keep their
    /// contents until closed.
    IncompletelyRemoved {
        /// Regular files still open under the key.
        busy: usize,
    },
}

/// Removed keys and the open inodes each still serves.
///
/// Lock order: `open_files`, then this, then the keyring; a caller never
/// holds this while taking `open_files`.
#[derive(Default)]
pub(crate) struct Lingering(Mutex<HashMap<KeyRef, (MasterKey, HashSet<u32>)>>);

impl std::fmt::Debug for Lingering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lingering").field("keys", &self.0.lock().len()).finish()
    }
}

impl Lingering {
    /// The removed key `key` when it still serves inode `ino`.
    pub(crate) fn master_for(&self, key: &KeyRef, ino: u32) -> Option<MasterKey> {
        let map = self.0.lock();
        map.get(key)
            .filter(|(_, inos)| inos.contains(&ino))
            .map(|(k, _)| k.clone())
    }

    /// Inode `ino` was closed for the last time: no removed key serves it
    /// any more, and a key left serving nothing is gone.
    pub(crate) fn closed(&self, ino: u32) {
        let mut map = self.0.lock();
        if map.is_empty() {
            return;
        }
        for (_, inos) in map.values_mut() {
            inos.remove(&ino);
        }
        map.retain(|_, (_, inos)| !inos.is_empty());
    }

    fn busy(&self, key: &KeyRef) -> usize {
        self.0.lock().get(key).map_or(0, |(_, inos)| inos.len())
    }
}

impl Filesystem {
    /// Removes master key `key` as `FS_IOC_REMOVE_ENCRYPTION_KEY`: at once
    /// for everything but the regular files open under it, which keep
    /// their contents until their last [`Filesystem::release_file`].
    /// Returns how many such files were open (the kernel's
    /// `FSCRYPT_KEY_REMOVAL_STATUS_FLAG_FILES_BUSY` when not 0). Removing
    /// an incompletely removed key again reports the files still open.
    ///
    /// # Errors
    /// [`Error::NoKey`] when the key was neither added nor is still
    /// serving open files (the kernel's `ENOKEY`); reading an open
    /// inode's context.
    pub fn remove_key_when_closed(&self, key: &KeyRef) -> Result<usize> {
        let open = self.open_files.lock();
        let Some(master) = self.keyring.0.read().get(key).cloned() else {
            return match self.removed_keys.busy(key) {
                0 => Err(Error::NoKey(format!("{} was not added", keys::describe(key)))),
                n => Ok(n),
            };
        };
        let mut users = HashSet::new();
        for &ino in open.keys() {
            let inode = self.inode(ino)?;
            if inode.raw.file_type() == Some(FileType::Regular)
                && self.encryption_context(&inode)?.is_some_and(|c| c.key == *key)
            {
                users.insert(ino);
            }
        }
        let busy = users.len();
        if busy > 0 {
            let mut map = self.removed_keys.0.lock();
            let entry = map.entry(*key).or_insert_with(|| (master, HashSet::new()));
            entry.1.extend(users);
        }
        self.keyring.0.write().remove(key);
        Ok(busy)
    }

    /// The status of master key `key` (`FS_IOC_GET_ENCRYPTION_KEY_STATUS`).
    pub fn key_status(&self, key: &KeyRef) -> KeyStatus {
        if self.keyring.0.read().contains_key(key) {
            return KeyStatus::Present;
        }
        match self.removed_keys.busy(key) {
            0 => KeyStatus::Absent,
            busy => KeyStatus::IncompletelyRemoved { busy },
        }
    }

    /// Refuses to open encrypted regular file `inode` without its key
    /// (`fscrypt_file_open`: `ENOKEY`), so that what a cache kept of its
    /// plaintext is out of reach once its key is gone.
    ///
    /// # Errors
    /// [`Error::NoKey`] without the key; a corrupt context, or a mode or
    /// flag this code does not implement.
    pub fn require_key_to_open(&self, inode: &Inode) -> Result<()> {
        self.contents_key(inode).map(|_| ())
    }

    /// The master key an encrypted inode's context names; `None` when
    /// `inode` is not encrypted.
    ///
    /// # Errors
    /// As [`Filesystem::encryption_context`].
    pub fn key_of(&self, inode: &Inode) -> Result<Option<KeyRef>> {
        Ok(self.encryption_context(inode)?.map(|c| c.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_key_serves_its_open_files_until_the_last_closes() {
        let l = Lingering::default();
        let k = KeyRef::Descriptor([1; 8]);
        let master = MasterKey::new(&[7; 64]).unwrap();
        l.0.lock().insert(k, (master, HashSet::from([12, 13])));
        assert!(l.master_for(&k, 12).is_some());
        assert!(l.master_for(&k, 14).is_none());
        assert!(l.master_for(&KeyRef::Descriptor([2; 8]), 12).is_none());
        l.closed(12);
        assert!(l.master_for(&k, 12).is_none());
        assert_eq!(l.busy(&k), 1);
        l.closed(13);
        assert_eq!(l.busy(&k), 0);
        assert!(l.0.lock().is_empty());
    }
}
