//! Creating inodes: regular files, directories, symbolic links, device
//! nodes, FIFOs and sockets (`ext4_create`, `ext4_mkdir`, `ext4_symlink`,
//! `ext4_mknod`).

use ext4kit_format::inode::{FileType, flags};

use crate::InlinePolicy;
use crate::clock;
use crate::crypt::names::Intent;
use crate::dir::Placement;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::write::{NewInode, set_times};
use crate::txn::Txn;

/// Owner and permissions of a new inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    /// Permission bits (07777).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// What to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKind {
    /// An empty regular file.
    Regular,
    /// An empty directory.
    Directory,
    /// A symbolic link to the target.
    Symlink(Vec<u8>),
    /// A character device (major, minor).
    CharDevice(u32, u32),
    /// A block device (major, minor).
    BlockDevice(u32, u32),
    /// A FIFO.
    Fifo,
    /// A socket.
    Socket,
}

impl NodeKind {
    fn file_type(&self) -> FileType {
        match self {
            Self::Regular => FileType::Regular,
            Self::Directory => FileType::Directory,
            Self::Symlink(_) => FileType::Symlink,
            Self::CharDevice(..) => FileType::CharDevice,
            Self::BlockDevice(..) => FileType::BlockDevice,
            Self::Fifo => FileType::Fifo,
            Self::Socket => FileType::Socket,
        }
    }
}

/// Most links a directory count holds; beyond it `dir_nlink` stores 1.
const LINK_MAX: u16 = 65000;

impl Filesystem {
    /// Creates `name` in directory `parent` and returns the new inode.
    ///
    /// # Errors
    /// [`Error::Exists`], [`Error::NotDir`], [`Error::NameTooLong`],
    /// [`Error::NoSpace`], [`Error::ReadOnly`], [`Error::NotPermitted`] in an
    /// immutable directory; [`Error::Unsupported`] for
    /// layouts the write path does not handle yet (block-mapped or inline
    /// directories, a full htree leaf). Nothing changes on error.
    pub fn create(&self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr) -> Result<Inode> {
        self.create_with_umask(parent, name, kind, attr, 0)
    }

    /// [`Filesystem::create`] as `open(2)`/`mkdir(2)` see it: when `parent`
    /// has a default POSIX ACL the new inode inherits it (and a directory
    /// keeps it as its own default) and `umask` is ignored; otherwise the
    /// bits in `umask` are cleared from `attr.perm`.
    ///
    /// # Errors
    /// As [`Filesystem::create`].
    pub fn create_with_umask(&self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr, umask: u16) -> Result<Inode> {
        let r = self.create_in_txn(parent, name, kind, attr, umask);
        self.noting_errors("create", r)
    }

    /// [`Filesystem::create`] for a caller who knows `name` is not in
    /// `parent` (a host directory being imported, a benchmark's fresh
    /// names): the name is not looked up, so a create costs O(1) directory
    /// blocks amortized in a linear directory where [`Filesystem::create`]
    /// reads every block before the first with room (seed 000 §5.4, the
    /// S_CR736 mode). See [`crate::dir`]'s `new_entry` module for the
    /// placement. Keeping the promise is the caller's responsibility: a
    /// copy of `name` in a block this create reads anyway is still
    /// [`Error::Exists`], but one elsewhere is not seen and the directory
    /// then holds the name twice (structurally consistent, each entry with
    /// its own inode; a lookup finds the first).
    ///
    /// # Errors
    /// As [`Filesystem::create`].
    pub fn create_new(&self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr) -> Result<Inode> {
        let r = self.create_placed(parent, name, kind, attr, Lookup::Skip);
        self.noting_errors("create", r)
    }

    fn create_in_txn(&self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr, umask: u16) -> Result<Inode> {
        super::check_new_name(name)?;
        let mut txn = Txn::begin(self)?;
        let inode = txn.create(parent, name, kind, attr, umask)?;
        txn.commit()?;
        Ok(inode)
    }

    fn create_placed(&self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr, lookup: Lookup) -> Result<Inode> {
        super::check_new_name(name)?;
        let mut txn = Txn::begin(self)?;
        let inode = txn.create_placed(parent, name, kind, attr, 0, lookup)?;
        txn.commit()?;
        Ok(inode)
    }
}

/// Whether a create looks its name up first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// `EEXIST` if the name is there ([`Filesystem::create`]).
    Check,
    /// The caller promises the name is new ([`Filesystem::create_new`]).
    Skip,
}

impl Txn<'_> {
    /// The body of [`Filesystem::create_with_umask`] inside this
    /// transaction; returns the new inode as written.
    pub(crate) fn create(&mut self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr, umask: u16) -> Result<Inode> {
        self.create_placed(parent, name, kind, attr, umask, Lookup::Check)
    }

    /// [`Txn::create`], or with [`Lookup::Skip`] the body of
    /// [`Filesystem::create_new`].
    pub(crate) fn create_placed(
        &mut self,
        parent: u32,
        name: &[u8],
        kind: NodeKind,
        attr: Attr,
        umask: u16,
        lookup: Lookup,
    ) -> Result<Inode> {
        super::check_new_name(name)?;
        // Names are checked against the directory as this transaction sees
        // it, before an inline directory is moved to a block (an inline
        // directory is looked up either way: it is one inode, no blocks).
        let dir = self.inode(parent)?;
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {parent}")));
        }
        let disk = self.fs.disk_name(&dir, name, Intent::Create)?;
        let name: &[u8] = &disk;
        super::require_live(&dir)?;
        let before = dir.clone();
        let place = if lookup == Lookup::Skip && !dir.has_inline_data() {
            self.place_new(&dir, name)?
        } else {
            let (found, spot) = self.find_entry(&dir, name)?;
            if found.is_some() {
                return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
            }
            Placement::Looked(spot)
        };
        super::flags::require_mutable(&dir)?;
        let mut dir = self.dir_for_entry(parent, name.len())?;
        let is_dir = kind == NodeKind::Directory;
        if is_dir && dir.raw.links() >= LINK_MAX && !self.dir_nlink() {
            return Err(Error::TooManyLinks(String::from_utf8_lossy(name).into_owned()));
        }
        let ft = kind.file_type();
        let ino = self.alloc_inode(&dir, Some(name), is_dir)?;
        let n = NewInode {
            file_type: ft,
            perm: attr.perm,
            uid: attr.uid,
            gid: attr.gid,
        };
        let mut inode = self.fresh_inode(ino, n)?;
        self.inherit_project(&dir, &mut inode);
        self.fs.inherit_casefold(&dir, &mut inode);
        self.inherit_acl(&dir, &mut inode, umask)?;
        let crypt = self.encrypt_new_inode(&dir, &mut inode, &kind)?;
        let stored_kind = crypt.as_ref().and_then(|(_, k)| k.as_ref()).unwrap_or(&kind);
        self.fill_body(&mut inode, stored_kind, parent)?;
        self.write_inode(&mut inode)?;
        if let Some((ctx, _)) = &crypt {
            self.set_encryption_context(ino, ctx)?;
            inode = self.inode(ino)?;
        }
        if !(dir.has_inline_data() && self.add_inline_entry(&mut dir, name, ino, ft.dirent_code())?) {
            self.add_entry_placed(&mut dir, name, ino, ft.dirent_code(), place)?;
        }
        self.fc_note_create(&before, &dir, &kind, ino, name);
        if is_dir {
            let links = dir.raw.links();
            // 1 means uncounted (dir_nlink): it stays so.
            dir.raw
                .i_links_count
                .set(if links >= LINK_MAX || links == 1 { 1 } else { links + 1 });
        }
        set_times(&mut dir.raw, clock::now(), false);
        self.write_inode(&mut dir)?;
        Ok(inode)
    }

    /// Directory `parent` ready for a new entry of `name_len` bytes: an
    /// inline directory stays inline while the entry fits its `i_block`
    /// entries (mke2fs -d and the kernel keep small directories so), else it
    /// moves to a block ([`Txn::inode_for_change`]).
    fn dir_for_entry(&mut self, parent: u32, name_len: usize) -> Result<Inode> {
        let dir = self.inode(parent)?;
        if dir.has_inline_data() {
            let mut probe = dir.clone();
            if self.add_inline_entry(&mut probe, &vec![b'x'; name_len], parent, 0)? {
                return Ok(dir);
            }
        }
        self.inode_for_change(parent)
    }

    /// A fast commit carries the creation of regular files
    /// (`ext4_fc_track_create`). The others fall back to a full commit:
    /// a replay keeps `i_block` as on disk, so a device number or fast
    /// symlink target would be lost; e2fsck 1.47's replay links no
    /// symlink; and the kernel's replay of a `mkdir` (which 6.18 does
    /// fast-commit) leaves the group's directory count one short, which
    /// e2fsck then reports.
    fn fc_note_create(&mut self, before: &Inode, dir: &Inode, kind: &NodeKind, ino: u32, name: &[u8]) {
        use crate::journal::fast_commit::{NameChange, dentry};
        match kind {
            NodeKind::Regular => self.fc_name(before, dir, NameChange::Create(dentry(dir.ino, ino, name))),
            NodeKind::Directory => self.fc_ineligible("mkdir"),
            _ => self.fc_ineligible("special file or symlink"),
        }
    }

    fn dir_nlink(&self) -> bool {
        self.fs
            .geo
            .features
            .ro_compat
            .contains(ext4kit_format::features::RoCompatFeatures::DIR_NLINK)
    }

    /// The kind-specific part of a new inode.
    fn fill_body(&mut self, inode: &mut Inode, kind: &NodeKind, parent: u32) -> Result<()> {
        match kind {
            // The kernel keeps no encrypted inode inline (its inline
            // readdir does not decrypt names).
            NodeKind::Directory => {
                let inline = self.inline_enabled() && !inode.raw.has_flag(flags::ENCRYPT);
                if !(inline && self.start_inline_dir(inode, parent)?) {
                    let block = self.first_dir_block(inode)?;
                    self.init_dir_block(inode, block, parent)?;
                }
                inode.raw.i_links_count.set(2);
            }
            // Encrypted contents are whole encrypted blocks, never inline.
            NodeKind::Regular if self.inline_enabled() && !inode.raw.has_flag(flags::ENCRYPT) => {
                match self.fs.opts.inline {
                    InlinePolicy::Kernel => self.fs.may_inline.note(inode.ino),
                    InlinePolicy::Mke2fs => {
                        self.start_inline_file(inode)?;
                    }
                }
            }
            NodeKind::Symlink(target) => self.fill_symlink(inode, target)?,
            NodeKind::CharDevice(major, minor) | NodeKind::BlockDevice(major, minor) => {
                encode_device(&mut inode.raw.i_block, *major, *minor);
            }
            NodeKind::Regular | NodeKind::Fifo | NodeKind::Socket => {}
        }
        Ok(())
    }

    fn fill_symlink(&mut self, inode: &mut Inode, target: &[u8]) -> Result<()> {
        let bs = self.fs.geo.block_size as usize;
        if target.is_empty() || target.len() >= bs {
            return Err(Error::NameTooLong(String::from_utf8_lossy(target).into_owned()));
        }
        if target.len() < 60 {
            inode.raw.i_block = [0; 60];
            inode.raw.i_block[..target.len()].copy_from_slice(target);
            inode.raw.set_size(target.len() as u64);
            return Ok(());
        }
        // An encrypted one goes to a block, as the kernel's do.
        if self.inline_enabled() && !inode.raw.has_flag(flags::ENCRYPT) {
            inode.raw.i_flags.set(inode.raw.flags() | flags::INLINE_DATA);
            if self.store_inline_body(inode, target)? {
                inode.raw.set_size(target.len() as u64);
                return Ok(());
            }
            inode.raw.i_flags.set(inode.raw.flags() & !flags::INLINE_DATA);
        }
        if self
            .fs
            .geo
            .features
            .incompat
            .contains(ext4kit_format::features::IncompatFeatures::EXTENTS)
        {
            inode.raw.i_flags.set(inode.raw.flags() | flags::EXTENTS);
            crate::inode::extent_write::init_root(&mut inode.raw);
        }
        self.write_range(inode, 0, target)?;
        inode.raw.set_size(target.len() as u64);
        Ok(())
    }
}

/// Stores a device number the way the kernel does: the old 16-bit form in
/// `i_block[0]` when both numbers fit a byte, else the new form in `i_block[1]`.
fn encode_device(i_block: &mut [u8; 60], major: u32, minor: u32) {
    *i_block = [0; 60];
    if major < 256 && minor < 256 {
        i_block[..4].copy_from_slice(&((major << 8) | minor).to_le_bytes());
    } else {
        let v = (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12);
        i_block[4..8].copy_from_slice(&v.to_le_bytes());
    }
}
