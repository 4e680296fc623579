//! Batches: many operations in one transaction. Each public write method of
//! [`Filesystem`] is a transaction of its own, and every commit rewrites
//! the blocks it touched — the superblock, the group descriptor block, the
//! bitmaps, the inode-table block, the directory block. Building an image
//! (`mkfs -d`, `import`) runs hundreds of thousands of operations that touch
//! the same few such blocks over and over; a [`Batch`] runs them in one
//! [`Txn`] and commits every [`BatchOptions::max_ops`] operations or once
//! [`BatchOptions::max_bytes`] are queued, so each shared block is written
//! once per commit instead of once per operation. The journal issue will
//! gather handles into a running transaction the same way.
//!
//! Inside a batch every operation sees the ones before it: inodes, names
//! (lookups for `EEXIST` go through the transaction's copies of directory
//! blocks), attributes and file data (reads overlay the queued data).

//! What a failure leaves is told at [`Batch`].

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::ops::{Attr, NodeKind, SetAttr, XattrSet};
use crate::txn::Txn;

/// When a [`Batch`] commits on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Commit after this many successful operations (at least 1).
    pub max_ops: u32,
    /// Commit once the transaction would write this many bytes: queued file
    /// data plus its copies of metadata blocks. Bounds the batch's memory.
    pub max_bytes: usize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            max_ops: 16_384,
            max_bytes: 64 << 20,
        }
    }
}

/// Operations sharing one transaction, committed in chunks. Holds the file
/// system's writer lock while open: the thread that owns it must not call
/// [`Filesystem`]'s write methods until it is finished or dropped, and
/// reads through [`Filesystem`] see the image as last committed — read
/// through [`Batch::inode`] and [`Batch::lookup`] to see the batch's own
/// changes.
///
/// ## Failure
///
/// An operation that fails before changing anything (a name that exists,
/// a missing inode, an immutable file, an invalid argument) returns its
/// error and the batch goes on. An operation that fails after it started
/// changing the transaction (no space half-way through a create or a
/// write), and any corruption or I/O error, abandons the batch: the uncommitted
/// operations are discarded and the image stays exactly as the last commit
/// left it — the first [`Batch::committed`] operations, all of them, and
/// nothing after. Every later call then returns [`Error::InvalidArgument`].
/// Dropping a `Batch` without [`Batch::finish`] discards the operations
/// since its last commit in the same way.
#[must_use = "a Batch discards its uncommitted operations when dropped without finish()"]
pub struct Batch<'a> {
    fs: &'a Filesystem,
    txn: Option<Txn<'a>>,
    opts: BatchOptions,
    pending: u64,
    committed: u64,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("pending", &self.pending)
            .field("committed", &self.committed)
            .field("abandoned", &self.txn.is_none())
            .finish_non_exhaustive()
    }
}

impl Filesystem {
    /// Opens a batch with the default [`BatchOptions`].
    ///
    /// # Errors
    /// [`Error::ReadOnly`].
    ///
    /// ```
    /// # use ext4kit_engine::device::MemDevice;
    /// # use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
    /// # use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dev = MemDevice::new(vec![0; 16 << 20]);
    /// # mkfs(&dev, &MkfsOptions::default())?;
    /// # let fs = Filesystem::open(Box::new(dev), OpenOptions::default())?;
    /// let attr = Attr { perm: 0o644, uid: 0, gid: 0 };
    /// let mut b = fs.batch()?;
    /// for i in 0..100 {
    ///     let f = b.create(ROOT_INO, format!("f{i}").as_bytes(), NodeKind::Regular, attr)?;
    ///     b.write(f.ino, 0, b"data")?;
    /// }
    /// b.finish()?;
    /// assert_eq!(fs.read_dir(&fs.inode(ROOT_INO)?)?.len(), 103);
    /// # Ok(()) }
    /// ```
    pub fn batch(&self) -> Result<Batch<'_>> {
        self.batch_with(BatchOptions::default())
    }

    /// Opens a batch that commits as `opts` say.
    ///
    /// # Errors
    /// [`Error::ReadOnly`].
    pub fn batch_with(&self, opts: BatchOptions) -> Result<Batch<'_>> {
        // A batch writes file data directly under the writer lock: no page
        // may be held for delayed allocation under its feet.
        self.flush_all()?;
        Ok(Batch {
            fs: self,
            txn: Some(Txn::begin(self)?),
            opts,
            pending: 0,
            committed: 0,
        })
    }
}

impl<'a> Batch<'a> {
    /// Operations committed so far (they are in the image whatever happens
    /// to the rest of the batch).
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Operations done since the last commit.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// [`Filesystem::create`] inside the batch.
    ///
    /// # Errors
    /// As [`Filesystem::create`]; see [`Batch`] for what a failure does
    /// to the batch.
    pub fn create(&mut self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr) -> Result<Inode> {
        self.run(Some("create"), |t| t.create(parent, name, kind, attr, 0))
    }

    /// [`Filesystem::create_new`] inside the batch: `name` is promised
    /// new in `parent` and not looked up.
    ///
    /// # Errors
    /// As [`Filesystem::create_new`]; see [`Batch`] for what a failure does
    /// to the batch.
    pub fn create_new(&mut self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr) -> Result<Inode> {
        self.run(Some("create"), |t| {
            t.create_placed(parent, name, kind, attr, 0, crate::ops::create::Lookup::Skip)
        })
    }

    /// A regular file with no name yet near directory `parent` (as
    /// `O_TMPFILE` makes one), counted open as
    /// [`Filesystem::open_file`] would: name it with
    /// [`Batch::link_tmpfile`], and call [`Filesystem::release_file`] on
    /// it once the batch is finished or dropped — which frees it if it was
    /// never named. A crash before the naming commit leaves it on the
    /// orphan list, freed at the next writable open.
    ///
    /// # Errors
    /// As [`Filesystem::create`], but for the name.
    pub fn create_tmpfile(&mut self, parent: u32, attr: Attr) -> Result<Inode> {
        let inode = self.run(Some("create"), |t| t.create_tmpfile(parent, attr, 0))?;
        *self.fs.open_files.lock().entry(inode.ino).or_insert(0) += 1;
        Ok(inode)
    }

    /// Names `ino`, made by [`Batch::create_tmpfile`], `name` in `parent`.
    ///
    /// # Errors
    /// [`Error::Exists`], [`Error::NotDir`], [`Error::NameTooLong`] and
    /// the like as for [`Filesystem::link`]; [`Error::InvalidArgument`]
    /// when `ino` is not a file waiting for a name.
    pub fn link_tmpfile(&mut self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        self.run(Some("link"), |t| t.link_tmpfile(ino, parent, name))
    }

    /// [`Filesystem::write`] inside the batch.
    ///
    /// # Errors
    /// As [`Filesystem::write`].
    pub fn write(&mut self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let txn = self.txn.as_ref().ok_or_else(abandoned)?;
        let Some(key) = self.fs.contents_key(&txn.inode(ino)?)? else {
            return self.run(None, |t| t.write(ino, offset, data));
        };
        // The blocks the range shares with older data are read back from
        // the device to be re-encrypted: the batch's changes go there first.
        if self.pending > 0 {
            self.commit()?;
        }
        self.run(None, |t| t.write_encrypted(ino, &key, offset, data))
    }

    /// [`Filesystem::truncate`] inside the batch.
    ///
    /// # Errors
    /// As [`Filesystem::truncate`].
    pub fn truncate(&mut self, ino: u32, size: u64) -> Result<()> {
        self.run(Some("truncate"), |t| t.truncate(ino, size))
    }

    /// [`Filesystem::setattr`] inside the batch.
    ///
    /// # Errors
    /// As [`Filesystem::setattr`].
    pub fn setattr(&mut self, ino: u32, set: &SetAttr) -> Result<Inode> {
        self.run(Some("setattr"), |t| t.setattr(ino, set))
    }

    /// [`Filesystem::link`] inside the batch.
    ///
    /// # Errors
    /// As [`Filesystem::link`].
    pub fn link(&mut self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        self.run(Some("link"), |t| t.link(ino, parent, name))
    }

    /// [`Filesystem::unlink`] inside the batch.
    ///
    /// # Errors
    /// As [`Filesystem::unlink`].
    pub fn unlink(&mut self, parent: u32, name: &[u8]) -> Result<()> {
        self.run(Some("unlink"), |t| t.remove_name(parent, name, false))
    }

    /// [`Filesystem::rmdir`] inside the batch.
    ///
    /// # Errors
    /// As [`Filesystem::rmdir`].
    pub fn rmdir(&mut self, parent: u32, name: &[u8]) -> Result<()> {
        self.run(Some("rmdir"), |t| t.remove_name(parent, name, true))
    }

    /// [`Filesystem::set_xattr`] inside the batch.
    ///
    /// # Errors
    /// As [`Filesystem::set_xattr`].
    pub fn set_xattr(&mut self, ino: u32, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        let acl = name.starts_with(b"system.posix_acl_");
        self.run((!acl).then_some("xattr"), |t| t.set_xattr(ino, name, value, how))
    }

    /// [`Filesystem::remove_xattr`] inside the batch.
    ///
    /// # Errors
    /// As [`Filesystem::remove_xattr`].
    pub fn remove_xattr(&mut self, ino: u32, name: &[u8]) -> Result<()> {
        self.run(Some("xattr"), |t| t.remove_xattr(ino, name))
    }

    /// Inode `ino` as the batch sees it.
    ///
    /// # Errors
    /// As [`Filesystem::inode`].
    pub fn inode(&self, ino: u32) -> Result<Inode> {
        self.txn()?.inode(ino)
    }

    /// Finds `name` in directory `dir` as the batch sees it.
    ///
    /// # Errors
    /// [`Error::NotDir`], [`Error::NotFound`], corruption.
    pub fn lookup(&self, dir: u32, name: &[u8]) -> Result<u32> {
        let txn = self.txn()?;
        let dir = txn.inode(dir)?;
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {}", dir.ino)));
        }
        let disk = txn.fs.disk_name(&dir, name, crate::crypt::names::Intent::Find)?;
        match txn.find_entry(&dir, &disk)?.0 {
            Some(ino) => Ok(ino),
            None => Err(Error::NotFound(String::from_utf8_lossy(name).into_owned())),
        }
    }

    /// The entries of directory `dir` as the batch sees it, `.` and `..`
    /// included.
    ///
    /// # Errors
    /// [`Error::NotDir`], corruption.
    pub fn read_dir(&self, dir: u32) -> Result<Vec<crate::dir::DirEntry>> {
        let txn = self.txn()?;
        let dir = txn.inode(dir)?;
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {}", dir.ino)));
        }
        txn.list_dir(&dir)
    }

    /// Commits the operations done so far and goes on.
    ///
    /// # Errors
    /// [`Error::Io`]; the batch is abandoned then.
    pub fn commit(&mut self) -> Result<()> {
        let txn = self.txn.as_mut().ok_or_else(abandoned)?;
        if let Err(e) = txn.commit_and_continue() {
            self.txn = None;
            return Err(e);
        }
        self.committed += self.pending;
        self.pending = 0;
        Ok(())
    }

    /// Commits the rest and ends the batch; returns the number of
    /// operations it committed in all.
    ///
    /// # Errors
    /// [`Error::Io`], or the error that abandoned the batch earlier.
    pub fn finish(mut self) -> Result<u64> {
        self.commit()?;
        Ok(self.committed)
    }

    fn txn(&self) -> Result<&Txn<'a>> {
        self.txn.as_ref().ok_or_else(abandoned)
    }

    /// Runs one operation. `noted` names it for the superblock's error
    /// record when the public method records corruption too.
    fn run<T>(&mut self, noted: Option<&str>, op: impl FnOnce(&mut Txn<'a>) -> Result<T>) -> Result<T> {
        let txn = self.txn.as_mut().ok_or_else(abandoned)?;
        let before = txn.changes();
        match op(txn) {
            Ok(v) => {
                self.pending += 1;
                if self.pending >= u64::from(self.opts.max_ops.max(1)) || txn.queued_bytes() >= self.opts.max_bytes {
                    self.commit()?;
                }
                Ok(v)
            }
            Err(e) => {
                let grave = matches!(e, Error::Corrupt(_) | Error::BadChecksum { .. } | Error::Io { .. });
                if grave || txn.changes() != before {
                    // Half an operation may be in the transaction: drop it
                    // all (and the writer lock, which recording takes).
                    self.txn = None;
                }
                match noted {
                    Some(name) if self.txn.is_none() => self.fs.noting_errors(name, Err(e)),
                    _ => Err(e),
                }
            }
        }
    }
}

fn abandoned() -> Error {
    Error::InvalidArgument("the batch was abandoned after an earlier error".into())
}
