//! What the kernel caches of encrypted directories, and dropping it when a
//! key comes or goes, as the kernel's own fscrypt does for ext4
//! (`fscrypt_d_revalidate`, and the dentry and inode eviction of
//! `FS_IOC_REMOVE_ENCRYPTION_KEY`).
//!
//! Through FUSE the kernel keeps names (dentries), directory listings
//! (`FOPEN_CACHE_DIR`) and symlink targets (`FUSE_CACHE_SYMLINKS`) that
//! the server gave it. So the server remembers the encrypted directories
//! it showed, and whether with or without their key:
//! - no-key names, and names found missing, are given with no time to
//!   live, so the kernel asks again before each use (once the key is
//!   there, the no-key name no longer exists and the plaintext one does);
//!   a key added drops the listings and symlink targets shown without it
//!   (FUSE_NOTIFY_INVAL_INODE);
//! - a key removed drops every plaintext name shown under it
//!   (FUSE_NOTIFY_INVAL_ENTRY), the listings, and the symlink targets.
//!
//! Regular files need nothing: without the key they cannot be opened
//! ([`ext4kit_engine::Filesystem::require_key_to_open`]), so their cached
//! pages are out of reach; files open at the removal keep working, as on
//! the kernel.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use ext4kit_engine::{Filesystem, Inode, KeyStatus};
use ext4kit_format::fscrypt::KeyRef;
use ext4kit_format::inode::{FileType, flags};
use parking_lot::Mutex;

use crate::attr::fuse_ino;
use crate::transport::Notifier;

/// Encrypted inodes whose names or targets reached the kernel.
#[derive(Debug, Default)]
pub(crate) struct Shown {
    /// Directories whose plaintext names were given.
    with_key: Mutex<HashSet<u32>>,
    /// Directories and symlinks shown in their no-key form.
    without_key: Mutex<HashSet<u32>>,
}

/// A plaintext name the kernel may hold, to drop after a removal.
struct Cached {
    dir: u32,
    name: Vec<u8>,
    /// A symlink whose target the kernel may hold.
    link: Option<u32>,
}

impl Shown {
    /// Notes that the kernel is shown `inode` (a directory's names or a
    /// symlink's target); returns whether in no-key form.
    pub(crate) fn note(&self, fs: &Filesystem, inode: &Inode) -> bool {
        if !inode.raw.has_flag(flags::ENCRYPT) {
            return false;
        }
        let keyed = matches!(fs.key_of(inode), Ok(Some(k)) if fs.key_status(&k) == KeyStatus::Present);
        if keyed && inode.is_dir() {
            self.with_key.lock().insert(inode.ino);
        } else if !keyed {
            self.without_key.lock().insert(inode.ino);
        }
        !keyed
    }

    /// The key `key` was added: drops what the kernel holds in no-key form
    /// under it (listings, symlink targets, attributes).
    pub(crate) fn key_added(&self, fs: &Filesystem, n: Option<&Notifier>, key: &KeyRef) {
        let inos = take_under(&self.without_key, fs, key);
        for ino in inos {
            inval_inode(n, ino);
        }
    }

    /// Before removing `key`: the plaintext names the kernel may hold
    /// under it (read while the key is still there).
    fn cached_under(&self, fs: &Filesystem, key: &KeyRef) -> (Vec<u32>, Vec<Cached>) {
        let dirs = take_under(&self.with_key, fs, key);
        let mut names = Vec::new();
        for &dir in &dirs {
            let Ok(inode) = fs.inode(dir) else { continue };
            let listed = fs.read_dir_each(&inode, |e| {
                if e.name != b"." && e.name != b".." {
                    let link = (e.file_type == Some(FileType::Symlink)).then_some(e.ino);
                    names.push(Cached {
                        dir,
                        name: e.name,
                        link,
                    });
                }
                Ok(true)
            });
            if let Err(e) = listed {
                log::warn!("ext4kit: listing directory {dir} before a key removal: {e}");
            }
        }
        (dirs, names)
    }

    /// Removes `key` from `fs` (see
    /// [`Filesystem::remove_key_when_closed`]), then drops every plaintext
    /// name, listing and symlink target the kernel holds under it.
    /// Returns the files still open under the key.
    pub(crate) fn remove_key(
        &self,
        fs: &Filesystem,
        n: Option<&Notifier>,
        key: &KeyRef,
    ) -> ext4kit_engine::Result<usize> {
        let (dirs, names) = self.cached_under(fs, key);
        let busy = fs.remove_key_when_closed(key);
        if busy.is_err() {
            self.with_key.lock().extend(&dirs);
        }
        for c in &names {
            if let Some(n) = n
                && let Err(e) = n.inval_entry(fuse_ino(c.dir), OsStr::from_bytes(&c.name))
            {
                log::debug!("ext4kit: dropping a name of directory {}: {e}", c.dir);
            }
            if let Some(l) = c.link {
                inval_inode(n, l);
            }
        }
        for d in dirs {
            inval_inode(n, d);
        }
        busy
    }
}

/// Takes out of `set` the inodes whose context names `key` (and those
/// gone or no longer readable, which need nothing more).
fn take_under(set: &Mutex<HashSet<u32>>, fs: &Filesystem, key: &KeyRef) -> Vec<u32> {
    let inos: Vec<u32> = set.lock().iter().copied().collect();
    let under: Vec<u32> = inos
        .into_iter()
        .filter(|&ino| !matches!(fs.inode(ino).and_then(|i| fs.key_of(&i)), Ok(Some(k)) if k != *key))
        .collect();
    let mut s = set.lock();
    for ino in &under {
        s.remove(ino);
    }
    under
}

/// Drops the kernel's attributes and cached pages (a listing, a symlink
/// target) of `ino`.
fn inval_inode(n: Option<&Notifier>, ino: u32) {
    if let Some(n) = n
        && let Err(e) = n.inval_inode(fuse_ino(ino), 0, 0)
    {
        log::debug!("ext4kit: dropping the cache of inode {ino}: {e}");
    }
}
