//! Files without a name yet (`O_TMPFILE`, `ext4_tmpfile`): a regular
//! file created with no links, on the orphan list, that a later link
//! (`linkat(…, AT_EMPTY_PATH)`, `ext4_link` of an `I_LINKABLE` inode)
//! takes off the list and names. Whatever happens before that link — an
//! error, a crash between commits of a large write — leaves no name
//! behind, and the orphan list frees the file at its last release or at
//! the next writable open. `ext4kit write` builds its files this way, so a
//! file of any size appears whole or not at all.

use ext4kit_format::inode::FileType;

use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::write::{NewInode, set_times, touch_ctime};
use crate::ops::Attr;
use crate::txn::Txn;

impl Filesystem {
    /// A regular file with no name near directory `parent`, counted open
    /// as [`Filesystem::open_file`] would (`ext4_tmpfile` behind
    /// `open(dir, O_TMPFILE)`): [`Filesystem::link_tmpfile`] names it, and
    /// its last [`Filesystem::release_file`] frees it if it never was.
    /// `umask` applies as for [`Filesystem::create_with_umask`].
    ///
    /// # Errors
    /// As [`Filesystem::create`], but for the name.
    pub fn create_tmpfile(&self, parent: u32, attr: Attr, umask: u16) -> Result<Inode> {
        let made = Txn::begin(self).and_then(|mut txn| {
            let inode = txn.create_tmpfile(parent, attr, umask)?;
            txn.commit()?;
            Ok(inode)
        });
        let inode = self.noting_errors("create", made)?;
        // Nobody else knows the number yet: nothing can free it before
        // this count (eviction runs only at a release or at mount).
        *self.open_files.lock().entry(inode.ino).or_insert(0) += 1;
        Ok(inode)
    }

    /// Names `ino`, made by [`Filesystem::create_tmpfile`] and still
    /// without a name, `name` in `parent` (`linkat` of an `I_LINKABLE`
    /// inode): off the orphan list, one link.
    ///
    /// # Errors
    /// As [`Filesystem::link`]; [`Error::InvalidArgument`] when `ino` is
    /// not a file waiting for a name.
    pub fn link_tmpfile(&self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        let linked = Txn::begin(self).and_then(|mut txn| {
            txn.link_tmpfile(ino, parent, name)?;
            txn.commit()
        });
        self.noting_errors("link", linked)
    }

    /// Whether `ino` is counted open ([`Filesystem::open_file`]).
    pub fn is_open(&self, ino: u32) -> bool {
        self.open_files.lock().contains_key(&ino)
    }
}

impl Txn<'_> {
    /// A regular file near directory `parent`, with no name: zero links,
    /// on the orphan list. `umask` and `parent`'s default ACL apply as for
    /// a create there. Having no name, it is placed as a file with no
    /// name: the policies use a name only for top-level directories, and
    /// [`Txn::alloc_inode`] hashes the empty name there instead of the
    /// kernel's random start, so placement stays reproducible.
    pub(crate) fn create_tmpfile(&mut self, parent: u32, attr: Attr, umask: u16) -> Result<Inode> {
        let dir = self.inode(parent)?;
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {parent}")));
        }
        super::require_live(&dir)?;
        super::flags::require_mutable(&dir)?;
        let ino = self.alloc_inode(&dir, None, false)?;
        let n = NewInode {
            file_type: FileType::Regular,
            perm: attr.perm,
            uid: attr.uid,
            gid: attr.gid,
        };
        let mut inode = self.fresh_inode(ino, n)?;
        self.inherit_project(&dir, &mut inode);
        self.inherit_acl(&dir, &mut inode, umask)?;
        inode.raw.i_links_count.set(0);
        // Under a policy the file is encrypted from birth, so the
        // directory's key must be there (`fscrypt_prepare_new_inode`).
        if self.fs.is_encrypted(&dir) {
            self.fs.file_key(&dir)?;
        }
        let crypt = self.encrypt_new_inode(&dir, &mut inode, &crate::ops::NodeKind::Regular)?;
        self.orphan_add(&mut inode)?;
        self.write_inode(&mut inode)?;
        if let Some((ctx, _)) = crypt {
            self.set_encryption_context(ino, &ctx)?;
            inode = self.inode(ino)?;
        }
        Ok(inode)
    }

    /// Names `ino`, made by [`Txn::create_tmpfile`], `name` in `parent`.
    pub(crate) fn link_tmpfile(&mut self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        super::check_new_name(name)?;
        let dir = self.inode(parent)?;
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {parent}")));
        }
        super::require_live(&dir)?;
        super::flags::require_mutable(&dir)?;
        let mut target = self.inode(ino)?;
        // `vfs_link` refuses an immutable or append-only source.
        super::flags::require_changeable(&target)?;
        let disk = self.fs.disk_name(&dir, name, crate::crypt::names::Intent::Create)?;
        let name: &[u8] = &disk;
        self.fs.check_permitted_context(&dir, &target)?;
        let at = match (target.raw.links(), self.orphan_find(ino)?) {
            (0, Some(at)) if target.raw.file_type() == Some(FileType::Regular) => at,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "inode {ino} is not a file waiting for a name"
                )));
            }
        };
        let (found, spot) = self.find_entry(&dir, name)?;
        if found.is_some() {
            return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
        }
        // The orphan list's head moves: no fast commit carries that.
        self.fc_ineligible("tmpfile linked");
        self.orphan_del(&mut target, at)?;
        let mut dir = self.inode(parent)?;
        self.add_dir_name(&mut dir, name, ino, FileType::Regular.dirent_code(), spot)?;
        target.raw.i_links_count.set(1);
        let now = clock::now();
        touch_ctime(&mut target.raw, now);
        self.write_inode(&mut target)?;
        set_times(&mut dir.raw, now, false);
        self.write_inode(&mut dir)
    }
}
