//! Which value inodes hold which value hash: the engine's counterpart of
//! the kernel's `ea_inode` mbcache (`EA_INODE_CACHE`), through which
//! `ext4_xattr_inode_lookup_create` finds an existing value inode with the
//! same contents and takes a reference on it instead of creating another.
//!
//! Like the kernel's cache it knows only the value inodes this session has
//! met: those it created and those whose entries it read (the hash is in
//! each value inode's `i_atime`). Finding a candidate costs one map look-up
//! per set, never a scan of the inode tables; a value whose twin was not
//! met is stored in a new value inode, which is as valid on disk (e2fsck
//! counts references per value inode) and is what the kernel does after a
//! remount too. An entry is only a hint: the candidate is read and compared
//! before it is shared ([`crate::txn::Txn::shared_ea_inode`]), so a stale
//! one (a rolled-back transaction, an inode freed since) costs a read.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Hashes remembered at once; the map starts over when full (a few
/// hundred KiB at most).
const MAX_HASHES: usize = 16384;

/// Value inodes remembered per hash (distinct values of one hash are rare).
const MAX_PER_HASH: usize = 4;

/// Value inodes of one file system by value hash.
#[derive(Debug, Default)]
pub(crate) struct EaInodeCache {
    map: Mutex<HashMap<u32, Vec<u32>>>,
}

impl EaInodeCache {
    /// Records that value inode `inum` holds a value of hash `hash`.
    pub(crate) fn note(&self, hash: u32, inum: u32) {
        let mut map = self.map.lock();
        if map.len() >= MAX_HASHES && !map.contains_key(&hash) {
            map.clear();
        }
        let list = map.entry(hash).or_default();
        if !list.contains(&inum) {
            if list.len() >= MAX_PER_HASH {
                list.remove(0);
            }
            list.push(inum);
        }
    }

    /// Forgets value inode `inum` (freed).
    pub(crate) fn forget(&self, hash: u32, inum: u32) {
        let mut map = self.map.lock();
        if let Some(list) = map.get_mut(&hash) {
            list.retain(|&i| i != inum);
            if list.is_empty() {
                map.remove(&hash);
            }
        }
    }

    /// The value inodes known to hold a value of hash `hash`.
    pub(crate) fn candidates(&self, hash: u32) -> Vec<u32> {
        self.map.lock().get(&hash).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_forgets_and_stays_bounded() {
        let c = EaInodeCache::default();
        c.note(7, 12);
        c.note(7, 12);
        c.note(7, 13);
        assert_eq!(c.candidates(7), vec![12, 13]);
        c.forget(7, 12);
        assert_eq!(c.candidates(7), vec![13]);
        for i in 0..10 {
            c.note(9, 100 + i);
        }
        assert_eq!(c.candidates(9).len(), MAX_PER_HASH);
        for h in 0..(MAX_HASHES as u32 + 10) {
            c.note(1000 + h, 1);
        }
        assert!(c.map.lock().len() <= MAX_HASHES);
    }
}
