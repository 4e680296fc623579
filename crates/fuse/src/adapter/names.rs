//! Name and attribute operations: lookup, getattr/setattr, creating nodes,
//! links, removal and rename. The ownership of new inodes follows the VFS's
//! `inode_init_owner` (the caller's ids, the group of a setgid directory),
//! since with FUSE that rule is the server's to apply.

use std::time::SystemTime;

use ext4kit_engine::{Attr, Inode, NodeKind, SetAttr};
use ext4kit_format::inode::Timestamp;
use fuser::{Errno, FileAttr, INodeNo, RenameFlags, TimeOrNow};

use super::caller::Caller;

use super::{Ext4Fuse, Res};
use crate::attr::{decode_rdev, request_timestamp, timestamp};
use crate::options::IdMap;

/// The parts of a `setattr` request the engine acts on.
pub(crate) struct Change {
    pub(crate) mode: Option<u32>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) size: Option<u64>,
    pub(crate) atime: Option<NewTime>,
    pub(crate) mtime: Option<NewTime>,
    /// `FATTR_KILL_SUIDGID` (see `killpriv`): ignored when `mode` is set.
    pub(crate) kill_suidgid: bool,
}

impl Change {
    /// Only times change: what the kernel's `fuse_flush_times` sends.
    fn times_only(&self) -> bool {
        let Self {
            mode,
            uid,
            gid,
            size,
            atime: _,
            mtime,
            kill_suidgid,
        } = self;
        mode.is_none() && uid.is_none() && gid.is_none() && size.is_none() && mtime.is_some() && !kill_suidgid
    }
}

/// A time a `setattr` sets: the one given, or the server's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NewTime {
    Now,
    At(Timestamp),
}

impl From<TimeOrNow> for NewTime {
    fn from(t: TimeOrNow) -> Self {
        match t {
            TimeOrNow::SpecificTime(t) => Self::At(request_timestamp(t)),
            TimeOrNow::Now => Self::Now,
        }
    }
}

fn time_of(t: NewTime) -> Timestamp {
    match t {
        NewTime::At(t) => t,
        NewTime::Now => timestamp(SystemTime::now()),
    }
}

impl Ext4Fuse {
    /// The inode `name` names in `dir`, or `None` when there is none.
    pub(super) fn lookup_name(&self, dir: &Inode, name: &[u8]) -> Res<Option<Inode>> {
        match self.fs().lookup(dir, name) {
            Ok(ino) => self.inode(ino).map(Some),
            Err(ext4kit_engine::Error::NotFound(_)) => Ok(None),
            Err(e) => Err(self.errno(e)),
        }
    }

    /// A negative entry: the kernel remembers the name is absent for the
    /// entry timeout (only this mount can create it, and creating through
    /// the kernel drops the negative entry). Saves the LOOKUP before each
    /// create without `O_EXCL` (with it the kernel looks the name up
    /// again whatever it cached).
    pub(crate) fn negative_entry(&self) -> Res<super::Entry> {
        if self.cfg.entry_timeout.is_zero() {
            return Err(Errno::ENOENT);
        }
        let mut attr = crate::attr::file_attr(&empty_metadata(), 0, &self.cfg);
        attr.ino = INodeNo(0);
        Ok(super::Entry {
            attr,
            generation: 0,
            entry_ttl: self.cfg.entry_timeout,
            attr_ttl: self.cfg.entry_timeout,
        })
    }

    pub(crate) fn set_attributes(&self, ino: INodeNo, c: &Change) -> Res<FileAttr> {
        self.writable()?;
        let ino = self.ino(ino)?;
        if c.times_only()
            && let Some(attr) = self.times_held(ino)?
        {
            return Ok(attr);
        }
        if let Some(size) = c.size {
            self.fs().truncate(ino, size).map_err(|e| self.errno(e))?;
            self.truncated(ino, size);
        }
        let set = SetAttr {
            perm: c.mode.map(|m| (m & 0o7777) as u16).or(self.perm_killed(ino, c)?),
            uid: c.uid.map(|u| IdMap::to_image(self.cfg.uid_map, u)),
            gid: c.gid.map(|g| IdMap::to_image(self.cfg.gid_map, g)),
            atime: c.atime.map(time_of),
            mtime: c.mtime.map(time_of),
        };
        let inode = if set == SetAttr::default() && c.size.is_some() {
            self.inode(ino)?
        } else {
            self.fs().setattr(ino, &set).map_err(|e| self.errno(e))?
        };
        self.attr_of(&inode)
    }

    /// The attributes, when a times-only SETATTR has nothing to change.
    /// With the write-back cache the kernel owns a file's times and writes
    /// them back (`fuse_flush_times`) at each close of a written file and
    /// right after an unlink, link or rename (`fuse_update_ctime`). After
    /// an unlink took the last name of a file nothing holds open, the
    /// inode is already free: the times have nowhere to go, and a
    /// transaction would only write them into a free inode.
    fn times_held(&self, ino: u32) -> Res<Option<FileAttr>> {
        let inode = self.inode(ino)?;
        if inode.raw.links() == 0 && !self.fs().is_open(ino) {
            return self.attr_of(&inode).map(Some);
        }
        Ok(None)
    }

    pub(super) fn read_link(&self, ino: INodeNo) -> Res<Vec<u8>> {
        let inode = self.inode(self.ino(ino)?)?;
        self.shown.note(&self.fs(), &inode);
        self.fs().read_link(&inode).map_err(|e| self.errno(e))
    }

    /// Owner and mode bits of a new inode in `parent` (`inode_init_owner`).
    fn owner(&self, req: &Caller, parent: &Inode, mode: u32, is_dir: bool) -> Attr {
        let mut perm = (mode & 0o7777) as u16;
        let setgid_parent = parent.raw.permissions() & 0o2000 != 0;
        let gid = if setgid_parent {
            if is_dir {
                perm |= 0o2000;
            }
            parent.raw.gid()
        } else {
            IdMap::to_image(self.cfg.gid_map, req.gid())
        };
        Attr {
            perm,
            uid: IdMap::to_image(self.cfg.uid_map, req.uid()),
            gid,
        }
    }

    /// Creates a node; with `FUSE_DONT_MASK` the kernel leaves `umask` to
    /// us, and the engine applies it or the directory's default ACL.
    pub(super) fn create_node(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &[u8],
        kind: NodeKind,
        mode: u32,
        umask: u32,
    ) -> Res<Inode> {
        self.quota_caller(req);
        self.writable()?;
        self.check_space()?;
        let parent = self.ino(parent)?;
        let dir = self.inode(parent)?;
        let attr = self.owner(req, &dir, mode, kind == NodeKind::Directory);
        let r = self
            .fs()
            .create_with_umask(parent, name, kind, attr, (umask & 0o777) as u16)
            .map_err(|e| self.errno(e));
        self.space_taken();
        r
    }

    /// TMPFILE: a regular file with no name in `parent`, counted open
    /// (the engine's `create_tmpfile`), owned and masked as a create there.
    pub(super) fn make_tmpfile(&self, req: &Caller, parent: INodeNo, mode: u32, umask: u32) -> Res<Inode> {
        self.quota_caller(req);
        self.writable()?;
        self.check_space()?;
        let parent = self.ino(parent)?;
        let dir = self.inode(parent)?;
        let attr = self.owner(req, &dir, mode, false);
        let r = self
            .fs()
            .create_tmpfile(parent, attr, (umask & 0o777) as u16)
            .map_err(|e| self.errno(e));
        self.space_taken();
        r
    }

    pub(super) fn make_node(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Res<Inode> {
        let (major, minor) = decode_rdev(rdev);
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => NodeKind::Regular,
            libc::S_IFCHR => NodeKind::CharDevice(major, minor),
            libc::S_IFBLK => NodeKind::BlockDevice(major, minor),
            libc::S_IFIFO => NodeKind::Fifo,
            libc::S_IFSOCK => NodeKind::Socket,
            libc::S_IFDIR => NodeKind::Directory,
            _ => return Err(Errno::EINVAL),
        };
        self.create_node(req, parent, name, kind, mode, umask)
    }

    pub(super) fn make_dir(&self, req: &Caller, parent: INodeNo, name: &[u8], mode: u32, umask: u32) -> Res<Inode> {
        self.create_node(req, parent, name, NodeKind::Directory, mode, umask)
    }

    pub(super) fn make_symlink(&self, req: &Caller, parent: INodeNo, name: &[u8], target: &[u8]) -> Res<Inode> {
        self.create_node(req, parent, name, NodeKind::Symlink(target.to_vec()), 0o777, 0)
    }

    pub(super) fn remove_name(&self, parent: INodeNo, name: &[u8], dir: bool) -> Res<()> {
        self.writable()?;
        let parent = self.ino(parent)?;
        let r = if dir {
            self.fs().rmdir(parent, name)
        } else {
            self.fs().unlink(parent, name)
        };
        self.space_taken();
        r.map_err(|e| self.errno(e))
    }

    pub(super) fn rename_entry(
        &self,
        parent: INodeNo,
        name: &[u8],
        new_parent: INodeNo,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Res<()> {
        self.writable()?;
        self.check_space()?;
        if flags.contains(RenameFlags::RENAME_WHITEOUT) || flags.bits() & !0b111 != 0 {
            return Err(Errno::EINVAL);
        }
        let how = ext4kit_engine::RenameFlags {
            noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
        };
        self.fs()
            .rename(self.ino(parent)?, name, self.ino(new_parent)?, new_name, how)
            .map_err(|e| self.errno(e))
    }

    pub(super) fn hard_link(&self, ino: INodeNo, new_parent: INodeNo, new_name: &[u8]) -> Res<Inode> {
        self.writable()?;
        self.check_space()?;
        let ino = self.ino(ino)?;
        let parent = self.ino(new_parent)?;
        if self.inode(ino)?.raw.links() == 0 {
            return self.link_tmpfile(ino, parent, new_name);
        }
        self.fs().link(ino, parent, new_name).map_err(|e| match e {
            ext4kit_engine::Error::IsDir(_) => Errno::EPERM,
            e => self.errno(e),
        })?;
        self.inode(ino)
    }
}

impl Ext4Fuse {
    /// LINK of a file with no links: only one made by TMPFILE without
    /// `O_EXCL` gets a name (the kernel's `I_LINKABLE`); any other
    /// unlinked file stays unlinked (ENOENT, as `vfs_link` answers).
    fn link_tmpfile(&self, ino: u32, parent: u32, name: &[u8]) -> Res<Inode> {
        let mut linkable = self.linkable.lock();
        if !linkable.contains(&ino) {
            return Err(Errno::ENOENT);
        }
        self.fs().link_tmpfile(ino, parent, name).map_err(|e| self.errno(e))?;
        linkable.remove(&ino);
        drop(linkable);
        self.inode(ino)
    }
}

/// Metadata for a negative entry's placeholder attributes.
pub(super) fn empty_metadata() -> ext4kit_engine::Metadata {
    let zero = ext4kit_format::inode::Timestamp { secs: 0, nsecs: 0 };
    ext4kit_engine::Metadata {
        ino: 0,
        file_type: ext4kit_format::inode::FileType::Regular,
        perm: 0,
        uid: 0,
        gid: 0,
        size: 0,
        nlink: 0,
        blocks: 0,
        atime: zero,
        mtime: zero,
        ctime: zero,
        crtime: None,
        rdev: (0, 0),
        flags: 0,
        generation: 0,
    }
}
