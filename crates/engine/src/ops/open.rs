//! Open files: counts kept in memory per inode, as the VFS keeps `i_count`.
//! An inode whose last name goes while it is open stays allocated, with a
//! link count of 0, on the orphan list (see [`crate::orphan`]); the last
//! [`Filesystem::release_file`] frees it (`ext4_evict_inode`).

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::txn::Txn;

impl Filesystem {
    /// Counts one more open of `ino` (a FUSE `open`/`opendir`, or a kernel
    /// file reference). While any is left, removing the inode's last name
    /// keeps its body readable and writable by inode number.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an inode that is not in use (free, or
    /// unlinked and no longer open); [`Error::InvalidArgument`] for a
    /// number out of range; corruption of the inode.
    pub fn open_file(&self, ino: u32) -> Result<()> {
        // The inode is read under the open counts' lock, which a
        // transaction that asks whether an inode is open holds until its
        // commit is published (`Txn::is_open`): an unlink either sees this
        // open or is committed before the read (no links left then). No
        // writer lock: opens do not queue behind transactions.
        let mut open = self.open_files.lock();
        let inode = self.inode(ino)?;
        let count = open.get(&ino).copied().unwrap_or(0);
        if inode.raw.i_mode.get() == 0 || (inode.raw.links() == 0 && count == 0) {
            return Err(Error::NotFound(format!("inode {ino}")));
        }
        let more = count
            .checked_add(1)
            .ok_or_else(|| Error::InvalidArgument(format!("inode {ino} is open too many times")))?;
        open.insert(ino, more);
        Ok(())
    }

    /// Counts one open of `ino` off; the last of an inode with no links
    /// left frees its body and the inode and takes it off the orphan list,
    /// in one transaction.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `ino` is not open; what freeing
    /// reports (the open is counted off regardless, and the inode stays on
    /// the orphan list for the next writable open to free).
    pub fn release_file(&self, ino: u32) -> Result<()> {
        let unlinked = {
            let mut open = self.open_files.lock();
            match open.get_mut(&ino) {
                None => return Err(Error::InvalidArgument(format!("inode {ino} is not open"))),
                Some(c) if *c > 1 => {
                    *c -= 1;
                    return Ok(());
                }
                Some(_) => {
                    open.remove(&ino);
                    // A removed fscrypt key served it until now.
                    self.removed_keys.closed(ino);
                    // Its last writer is gone: the window goes too
                    // (`ext4_discard_preallocations` at release).
                    self.prealloc.release(ino);
                }
            }
            // Read under the lock, as in `open_file`: with links left, an
            // unlink from now on sees the inode closed and frees it itself,
            // so only an unlinked inode needs the transaction.
            self.inode(ino).map(|i| i.raw.links() == 0)
        };
        if let Ok(false) = unlinked {
            return self.noting_errors("release_file", self.write_back_truncated(ino));
        }
        self.noting_errors("release_file", self.evict(ino))
    }

    /// Whether some open inode has no links left: its blocks come back at
    /// its last [`Self::release_file`]. A FUSE server told ENOSPC right
    /// after an unlink asks this, because the kernel sends the RELEASE of
    /// a closed file in the background and it may not have arrived yet.
    pub fn holds_unlinked_open(&self) -> bool {
        let open = self.open_files.lock();
        open.keys()
            .any(|&ino| self.inode(ino).is_ok_and(|i| i.raw.links() == 0))
    }

    /// Frees `ino`, no longer open, if it has no links and is on the
    /// orphan list (it may have been opened again, or never unlinked).
    pub(crate) fn evict(&self, ino: u32) -> Result<()> {
        if self.read_only_reason.is_some() {
            return Ok(());
        }
        let mut txn = Txn::begin(self)?;
        if txn.is_open(ino) {
            return Ok(());
        }
        let mut inode = txn.inode(ino)?;
        if inode.raw.links() != 0 {
            return Ok(());
        }
        let Some(at) = txn.orphan_find(ino)? else {
            return Ok(());
        };
        txn.orphan_del(&mut inode, at)?;
        super::remove::release(&mut txn, &mut inode)?;
        txn.write_inode(&mut inode)?;
        txn.commit()
    }
}
