//! Changing attributes (`ext4_setattr` without size changes) and adding
//! hard links (`ext4_link`).

use ext4kit_format::inode::Timestamp;

use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::write::touch_ctime;
use crate::txn::Txn;

/// Attributes to change; `None` leaves one as it is. ctime becomes now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (07777).
    pub perm: Option<u16>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Access time.
    pub atime: Option<Timestamp>,
    /// Modification time.
    pub mtime: Option<Timestamp>,
}

/// Most hard links to one inode (`EXT4_LINK_MAX`).
const LINK_MAX: u16 = 65000;

impl Filesystem {
    /// Changes the attributes of `ino`; returns the inode as
    /// [`Filesystem::inode`] shows it afterwards.
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::NotPermitted`] for an immutable inode
    /// (or an append-only one, any field set), corruption of the inode.
    pub fn setattr(&self, ino: u32, set: &SetAttr) -> Result<Inode> {
        self.noting_errors("setattr", self.setattr_in_txn(ino, set))
    }

    fn setattr_in_txn(&self, ino: u32, set: &SetAttr) -> Result<Inode> {
        let mut txn = Txn::begin(self)?;
        let inode = txn.setattr(ino, set)?;
        txn.commit()?;
        // An mtime stored here stands over the time of earlier held writes
        // (FUSE's write-back cache sends one with every inode write-back:
        // writing the data back instead would undo delayed allocation).
        if set.mtime.is_some() {
            self.delalloc.forget_times(ino);
        }
        let mut seen = inode;
        self.delalloc.overlay(&mut seen, self.geo.block_size);
        Ok(seen)
    }

    /// Adds the name `name` in `parent` for the existing non-directory `ino`.
    ///
    /// # Errors
    /// [`Error::Exists`], [`Error::NotDir`], [`Error::IsDir`] (hard links to
    /// directories are refused, as `EPERM` in the kernel), [`Error::TooManyLinks`],
    /// [`Error::NotPermitted`] when `ino` is immutable or append-only or
    /// `parent` immutable.
    pub fn link(&self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        self.noting_errors("link", self.link_in_txn(ino, parent, name))
    }

    fn link_in_txn(&self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        super::check_new_name(name)?;
        let mut txn = Txn::begin(self)?;
        txn.link(ino, parent, name)?;
        txn.commit()
    }
}

impl Txn<'_> {
    /// The body of [`Filesystem::setattr`] inside this transaction.
    pub(crate) fn setattr(&mut self, ino: u32, set: &SetAttr) -> Result<Inode> {
        let mut inode = self.inode(ino)?;
        // ext4_setattr: nothing on an immutable inode; on an append-only
        // one no mode, owner or explicit time.
        super::flags::require_mutable(&inode)?;
        if *set != SetAttr::default() {
            super::flags::require_changeable(&inode)?;
        }
        let r = &mut inode.raw;
        if let Some(p) = set.perm {
            r.i_mode.set((r.i_mode.get() & 0o170000) | (p & 0o7777));
        }
        if let Some(u) = set.uid {
            r.i_uid.set(u as u16);
            r.i_uid_high.set((u >> 16) as u16);
        }
        if let Some(g) = set.gid {
            r.i_gid.set(g as u16);
            r.i_gid_high.set((g >> 16) as u16);
        }
        if let Some(t) = set.atime {
            let (s, e) = clock::encode(t);
            r.i_atime.set(s);
            r.i_atime_extra.set(e);
        }
        if let Some(t) = set.mtime {
            let (s, e) = clock::encode(t);
            r.i_mtime.set(s);
            r.i_mtime_extra.set(e);
        }
        touch_ctime(r, clock::now());
        if set.perm.is_some() {
            self.chmod_acl(&mut inode)?;
        }
        self.write_inode(&mut inode)?;
        Ok(inode)
    }

    /// The body of [`Filesystem::link`] inside this transaction.
    pub(crate) fn link(&mut self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        super::check_new_name(name)?;
        let dir = self.inode(parent)?;
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {parent}")));
        }
        super::require_live(&dir)?;
        let mut target = self.inode(ino)?;
        // An unlinked inode, open or not, gets no new name (`vfs_link`).
        super::require_live(&target)?;
        let disk = self.fs.disk_name(&dir, name, crate::crypt::names::Intent::Create)?;
        let name: &[u8] = &disk;
        self.fs.check_permitted_context(&dir, &target)?;
        let shown = || String::from_utf8_lossy(name).into_owned();
        if target.is_dir() {
            return Err(Error::IsDir(shown()));
        }
        super::flags::require_changeable(&target)?;
        super::flags::require_mutable(&dir)?;
        if target.raw.links() >= LINK_MAX {
            return Err(Error::TooManyLinks(shown()));
        }
        let (found, spot) = self.find_entry(&dir, name)?;
        if found.is_some() {
            return Err(Error::Exists(shown()));
        }
        let mut dir = self.inode(parent)?;
        let before = dir.clone();
        self.check_project_move(&dir, &target)?;
        self.add_dir_name(&mut dir, name, ino, target.file_type()?.dirent_code(), spot)?;
        let change =
            crate::journal::fast_commit::NameChange::Link(crate::journal::fast_commit::dentry(parent, ino, name));
        self.fc_name(&before, &dir, change);
        target.raw.i_links_count.set(target.raw.links() + 1);
        let now = clock::now();
        touch_ctime(&mut target.raw, now);
        self.write_inode(&mut target)?;
        crate::inode::write::set_times(&mut dir.raw, now, false);
        self.write_inode(&mut dir)
    }
}
