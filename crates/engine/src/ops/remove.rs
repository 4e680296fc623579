//! Removing names: `unlink` of non-directories and `rmdir` of empty
//! directories. The last link frees the inode and its blocks at once,
//! unless the inode is open ([`Filesystem::open_file`]): then its link
//! count drops to 0 and it goes on the orphan list in the same
//! transaction, to be freed by the last [`Filesystem::release_file`].

use ext4kit_format::inode::FileType;

use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::write::{set_times, touch_ctime};
use crate::txn::Txn;

impl Filesystem {
    /// Removes the non-directory `name` from `parent`.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::IsDir`], [`Error::ReadOnly`],
    /// [`Error::NotPermitted`] when `parent` or the file is immutable or
    /// append-only,
    /// [`Error::Unsupported`] for block-mapped bodies. Nothing changes on error.
    pub fn unlink(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.noting_errors("unlink", self.remove(parent, name, false))
    }

    /// Removes the empty directory `name` from `parent`.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::NotDir`], [`Error::NotEmpty`],
    /// [`Error::ReadOnly`], [`Error::NotPermitted`] (immutable or
    /// append-only). Nothing changes on error.
    pub fn rmdir(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.noting_errors("rmdir", self.remove(parent, name, true))
    }

    fn remove(&self, parent: u32, name: &[u8], want_dir: bool) -> Result<()> {
        self.in_txn(|txn| txn.remove_name(parent, name, want_dir))
    }
}

impl Txn<'_> {
    /// The body of [`Filesystem::unlink`] (`want_dir` false) and
    /// [`Filesystem::rmdir`] (true), as this transaction sees the tree.
    pub(crate) fn remove_name(&mut self, parent: u32, name: &[u8], want_dir: bool) -> Result<()> {
        super::check_new_name(name)?;
        let shown = || String::from_utf8_lossy(name).into_owned();
        let dir = self.inode(parent)?;
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {parent}")));
        }
        let disk = self.fs.disk_name(&dir, name, crate::crypt::names::Intent::Find)?;
        let name: &[u8] = &disk;
        let ino = self.find_entry(&dir, name)?.0.ok_or_else(|| Error::NotFound(shown()))?;
        let mut dir = self.inode(parent)?;
        let before = dir.clone();
        let mut target = self.inode(ino)?;
        super::flags::require_changeable(&dir)?;
        super::flags::require_changeable(&target)?;
        match (target.is_dir(), want_dir) {
            (true, false) => return Err(Error::IsDir(shown())),
            (false, true) => return Err(Error::NotDir(shown())),
            (true, true) if !self.dir_is_empty(&target)? => return Err(Error::NotEmpty(shown())),
            _ => {}
        }
        if dir.has_inline_data() {
            self.remove_inline_entry(&mut dir, name)?
                .ok_or_else(|| Error::NotFound(shown()))?;
        } else {
            let (_, at) = self.remove_entry_at(&dir, name)?;
            self.after_removal(&mut dir, at)?;
        }
        self.fc_note_unlink(&before, &dir, &target, name);
        drop_link(self, &mut target)?;
        if want_dir && dir.raw.links() > 2 {
            dir.raw.i_links_count.set(dir.raw.links() - 1);
        }
        set_times(&mut dir.raw, clock::now(), false);
        self.write_inode(&mut dir)
    }
}

impl Txn<'_> {
    /// Notes the removal of `name` of `target` from `dir` for fast
    /// commits (`ext4_fc_track_unlink`) when `target` keeps another name.
    /// Removing the last one needs a full commit: e2fsck's replay of an
    /// `UNLINK` removes the entry only, and its pass 4 then puts the inode,
    /// still linked on disk, in lost+found.
    pub(crate) fn fc_note_unlink(&mut self, before: &Inode, dir: &Inode, target: &Inode, name: &[u8]) {
        use crate::journal::fast_commit::{NameChange, dentry};
        if target.is_dir() || target.raw.links() <= 1 {
            return self.fc_ineligible("last link removed");
        }
        self.fc_name(before, dir, NameChange::Unlink(dentry(dir.ino, target.ino, name)));
    }
}

/// Drops one name of `inode` (all of a directory's): with the last, frees
/// it — or, when it is open, sets its link count to 0 and puts it on the
/// orphan list (`ext4_orphan_add`); else counts the link off. Writes the inode.
pub(crate) fn drop_link(txn: &mut Txn<'_>, inode: &mut Inode) -> Result<()> {
    let links = inode.raw.links();
    if (inode.is_dir() || links <= 1) && txn.is_open(inode.ino) {
        inode.raw.i_links_count.set(0);
        touch_ctime(&mut inode.raw, clock::now());
        txn.orphan_add(inode)?;
    } else if inode.is_dir() || links <= 1 {
        release(txn, inode)?;
    } else {
        inode.raw.i_links_count.set(links - 1);
        touch_ctime(&mut inode.raw, clock::now());
    }
    txn.write_inode(inode)
}

/// Frees the body and the inode itself (`ext4_evict_inode` for the last link).
pub(crate) fn release(txn: &mut Txn<'_>, inode: &mut Inode) -> Result<()> {
    let ft = inode.file_type()?;
    let has_blocks = inode.raw.i_blocks_lo.get() != 0 || inode.raw.i_blocks_high.get() != 0;
    let fast_symlink = ft == FileType::Symlink && !inode.uses_extents() && inode.size() < 60;
    // The itree's nodes are in no extent tree: they go before block 0,
    // which links them, does.
    txn.itree_free(inode)?;
    // An inline body lives in the inode itself: nothing to free.
    if has_blocks
        && !inode.has_inline_data()
        && !fast_symlink
        && !matches!(ft, FileType::CharDevice | FileType::BlockDevice)
    {
        txn.free_body(inode)?;
    }
    txn.release_value_inodes(inode)?;
    if inode.raw.file_acl() != 0 {
        txn.release_xattr_block(inode)?;
    }
    let (secs, _) = clock::encode(clock::now());
    inode.raw.i_dtime.set(secs);
    inode.raw.i_links_count.set(0);
    inode.raw.set_size(0);
    txn.free_inode(inode.ino, ft == FileType::Directory)
}
