//! The adapter on the project's own transport: each parsed request
//! ([`crate::transport::abi::Op`]) becomes the adapter call the fuser
//! trait implementation makes for it, and its result one reply
//! ([`crate::transport::reply::Reply`]). FUSE_STATX, which fuser cannot
//! answer, carries the inode's creation time (`i_crtime`) and the
//! `STATX_ATTR_*` bits of its flags.

use std::sync::Arc;
use std::time::SystemTime;

use ext4kit_format::inode::flags as fl;
use fuser::{Errno, FileAttr, FileType, INodeNo, RenameFlags};

use super::names::{Change, NewTime};
use super::xattrs::Sized;
use super::{Caller, Entry, Ext4Fuse, Res};
use crate::attr::timestamp;
use crate::transport::abi::{self, Op, Request, SetTime};
use crate::transport::reply::{self, DirBuf, Reply, StatxExtra};
use crate::transport::session::Serve;
use crate::transport::{Channel, Notifier, Sink};

/// `STATX_ATTR_*` bits and the ext4 `i_flags` they report, as ext4's
/// `getattr` maps them (the values coincide, but are named here).
const STATX_ATTRS: [(u64, u32); 6] = [
    (0x4, 0x4), // COMPRESSED ← EXT4_COMPR_FL
    (0x10, fl::IMMUTABLE),
    (0x20, fl::APPEND),
    (0x40, 0x40), // NODUMP ← EXT4_NODUMP_FL
    (0x800, fl::ENCRYPT),
    (0x10_0000, fl::VERITY),
];

impl Ext4Fuse {
    /// Where the session puts the notifier of its own transport.
    pub(crate) fn set_dev_notifier(&self, chan: Arc<Channel>) {
        let _ = self.notifier.set(Notifier::Dev(chan));
    }

    /// Whether `allow_root` turns the caller of `req` away, as fuser did:
    /// only its owner and root may use the mount, except for the requests
    /// the kernel sends on behalf of no particular user.
    fn refused(&self, req: &Request<'_>) -> bool {
        if !self.cfg.allow_root || self.cfg.allow_other {
            return false;
        }
        let uid = req.header.uid;
        if uid == 0 || uid == rustix::process::getuid().as_raw() {
            return false;
        }
        !matches!(
            req.op,
            Op::Read { .. }
                | Op::Write { .. }
                | Op::Readdir { .. }
                | Op::Fsync { .. }
                | Op::Fsyncdir { .. }
                | Op::Release { .. }
                | Op::Releasedir { .. }
        )
    }
}

impl Serve for Ext4Fuse {
    fn serve(&self, chan: &dyn Sink, req: &Request<'_>) {
        if matches!(req.op, Op::Forget | Op::Interrupt { .. }) {
            // Inode numbers are ext4's own, kept for the kernel's whole
            // lookup count; requests run to the end once started.
            return;
        }
        let unique = req.unique();
        let sent = if self.refused(req) {
            chan.send(&Reply::error(unique, libc::EACCES))
        } else if let Op::Getxattr { size, name } = req.op
            && let Some(blocks) = crate::resize_request::parse_request(name)
        {
            // Before the gate, which a grow takes exclusively.
            let r = blocks.ok_or(Errno::EINVAL).and_then(|b| self.resize_request(b, size));
            self.send_sized(chan, unique, super::xattrs::sized(r, size))
        } else {
            let _serving = self.request_arrived();
            self.answer(chan, req)
        };
        if let Err(e) = sent {
            log::warn!("ext4kit: answering FUSE request {unique}: {e}");
        }
    }

    fn destroy(&self) {
        self.release_all();
    }

    fn spinning(&self) -> bool {
        self.poller.get().is_some_and(crate::poll::Poller::spinning)
    }
}

fn err(unique: u64, e: Errno) -> Reply<'static> {
    Reply::error(unique, e.code())
}

/// The reply of a request answered by success without data.
fn empty(unique: u64, r: Res<()>) -> Reply<'static> {
    r.map_or_else(|e| err(unique, e), |()| Reply::empty(unique))
}

impl Ext4Fuse {
    fn answer(&self, chan: &dyn Sink, req: &Request<'_>) -> std::io::Result<()> {
        let (h, unique) = (&req.header, req.unique());
        let ino = INodeNo(h.nodeid);
        let caller = Caller {
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
        };
        let attr_ttl = self.attr_ttl(&self.cfg.attr_timeout);
        let entry = |r: Res<Entry>| r.map_or_else(|e| err(unique, e), |e| Reply::entry(unique, &wire_entry(&e)));
        let attr =
            |r: Res<FileAttr>| r.map_or_else(|e| err(unique, e), |a| Reply::attr(unique, attr_ttl, &wire_attr(&a)));
        let reply = match req.op {
            Op::Lookup { name } => entry(self.lookup_entry(ino, name)),
            Op::Getattr { fh } => attr(self.getattr_of(ino, fh)),
            Op::Statx { fh, .. } => match self.statx_of(ino, fh) {
                Ok(s) => Reply::statx(unique, attr_ttl, &wire_attr(&s.attr), &statx_extra(&s)),
                Err(e) => err(unique, e),
            },
            Op::Setattr(s) => attr(self.setattr_request(ino, &change_of(&s))),
            Op::Readlink => return self.send_owned(chan, unique, self.read_link(ino)),
            Op::Mknod {
                mode,
                rdev,
                umask,
                name,
            } => entry(
                self.make_node(&caller, ino, name, mode, umask, rdev)
                    .and_then(|i| self.entry_of(&i)),
            ),
            Op::Mkdir { mode, umask, name } => entry(
                self.make_dir(&caller, ino, name, mode, umask)
                    .and_then(|i| self.entry_of(&i)),
            ),
            Op::Symlink { name, target } => entry(
                self.make_symlink(&caller, ino, name, target)
                    .and_then(|i| self.entry_of(&i)),
            ),
            Op::Unlink { name } => empty(unique, self.remove_name(ino, name, false)),
            Op::Rmdir { name } => empty(unique, self.remove_name(ino, name, true)),
            Op::Rename {
                newdir,
                flags,
                name,
                newname,
            } => {
                self.quota_caller(&caller);
                let flags = RenameFlags::from_bits_retain(flags);
                empty(unique, self.rename_entry(ino, name, INodeNo(newdir), newname, flags))
            }
            Op::Link { oldnodeid, newname } => {
                self.quota_caller(&caller);
                entry(
                    self.hard_link(INodeNo(oldnodeid), ino, newname)
                        .and_then(|i| self.entry_of(&i)),
                )
            }
            Op::Open { flags } => match self.open_file(ino, flags as i32) {
                Ok(fh) => Reply::open(unique, fh, self.open_flags_for(&caller, flags as i32).bits()),
                Err(e) => err(unique, e),
            },
            Op::Read { offset, size, .. } => return self.answer_read(chan, unique, ino, offset, size),
            Op::Write {
                offset,
                write_flags,
                data,
                ..
            } => {
                let cached = write_flags & abi::WRITE_CACHE != 0;
                if write_flags & abi::WRITE_KILL_SUIDGID != 0
                    && let Err(e) = self.kill_suidgid(ino)
                {
                    return chan.send(&err(unique, e));
                }
                let mut sent = Ok(());
                self.write_request(&caller, ino, offset, data, cached, |r| {
                    sent = chan.send(&r.map_or_else(|e| err(unique, e), |n| Reply::written(unique, n)));
                });
                return sent;
            }
            Op::Flush { .. } => empty(unique, self.flush_request(ino)),
            Op::Release { fh } => empty(unique, self.release_request(ino, fh)),
            Op::Fsync { .. } => empty(unique, self.fsync_request(ino)),
            Op::Opendir { .. } => match self.open_dir(ino) {
                Ok(fh) => Reply::open(unique, fh, Self::dir_open_flags().bits()),
                Err(e) => err(unique, e),
            },
            Op::Readdir { fh, offset, size, plus } => return self.answer_readdir(chan, unique, fh, offset, size, plus),
            Op::Releasedir { fh } => empty(unique, self.close_handle(fh)),
            Op::Fsyncdir { .. } => empty(unique, self.sync_inode(ino)),
            Op::Statfs => {
                let (blocks, bfree, bavail, files, ffree, bsize, namelen) = self.statfs_request();
                let s = reply::Statfs {
                    blocks,
                    bfree,
                    bavail,
                    files,
                    ffree,
                    bsize,
                    namelen,
                    frsize: bsize,
                };
                Reply::statfs(unique, &s)
            }
            Op::Setxattr { flags, name, value } => {
                empty(unique, self.setxattr_request(&caller, ino, name, value, flags as i32))
            }
            Op::Getxattr { size, name } => {
                return self.send_sized(chan, unique, self.getxattr_request(&caller, ino, name, size));
            }
            Op::Listxattr { size } => {
                return self.send_sized(chan, unique, super::xattrs::sized(self.list_xattrs(ino), size));
            }
            Op::Removexattr { name } => empty(unique, self.remove_xattr(ino, name)),
            // Mounted with default_permissions: the kernel checks access itself.
            Op::Access { .. } => Reply::empty(unique),
            Op::Create {
                flags,
                mode,
                umask,
                name,
            } => match self.create_request(&caller, ino, name, (mode, umask, flags as i32)) {
                Ok((e, fh, open)) => Reply::create(unique, &wire_entry(&e), fh, open.bits()),
                Err(e) => err(unique, e),
            },
            Op::Tmpfile { flags, mode, umask } => {
                match self.tmpfile_request(&caller, ino, (mode, umask, flags as i32)) {
                    Ok((e, fh, open)) => Reply::create(unique, &wire_entry(&e), fh, open.bits()),
                    Err(e) => err(unique, e),
                }
            }
            Op::Ioctl {
                cmd, out_size, data, ..
            } => match self.inode_ioctl(&caller, ino, cmd, data, out_size) {
                Ok(out) => return chan.send(&Reply::ioctl(unique, 0, &out)),
                Err(e) => err(unique, e),
            },
            Op::Fallocate {
                offset, length, mode, ..
            } => {
                self.quota_caller(&caller);
                empty(unique, self.allocate(ino, offset, length, mode as i32))
            }
            Op::Lseek { offset, whence, .. } => match self.seek(ino, offset, whence as i32) {
                Ok(o) => Reply::lseek(unique, o),
                Err(e) => err(unique, e),
            },
            Op::CopyFileRange(c) => {
                self.quota_caller(&caller);
                match self.copy_range(ino, c.off_in, INodeNo(c.nodeid_out), c.off_out, c.len) {
                    Ok(n) => Reply::written(unique, n),
                    Err(e) => err(unique, e),
                }
            }
            // INIT was answered by the session; a second one is refused.
            Op::Init { .. } => err(unique, Errno::EIO),
            Op::Destroy => {
                self.release_all();
                Reply::empty(unique)
            }
            Op::Forget | Op::Interrupt { .. } => return Ok(()),
            Op::Unknown(_) => err(unique, Errno::ENOSYS),
        };
        chan.send(&reply)
    }

    fn send_owned(&self, chan: &dyn Sink, unique: u64, r: Res<Vec<u8>>) -> std::io::Result<()> {
        match r {
            Ok(d) => chan.send(&Reply::data(unique, &d)),
            Err(e) => chan.send(&err(unique, e)),
        }
    }

    fn send_sized(&self, chan: &dyn Sink, unique: u64, r: Res<Sized>) -> std::io::Result<()> {
        match r {
            Ok(Sized::Len(n)) => chan.send(&Reply::xattr_size(unique, n)),
            Ok(Sized::Data(d)) => chan.send(&Reply::data(unique, &d)),
            Err(e) => chan.send(&err(unique, e)),
        }
    }

    fn answer_read(&self, chan: &dyn Sink, unique: u64, ino: INodeNo, offset: u64, size: u32) -> std::io::Result<()> {
        let mut sent = None;
        let r = self.read_data(ino, offset, size, |bytes| {
            sent = Some(chan.send(&Reply::data(unique, bytes)));
        });
        match (r, sent) {
            (_, Some(s)) => s,
            (Err(e), None) => chan.send(&err(unique, e)),
            (Ok(()), None) => chan.send(&Reply::data(unique, &[])),
        }
    }

    fn answer_readdir(
        &self,
        chan: &dyn Sink,
        unique: u64,
        fh: u64,
        offset: u64,
        size: u32,
        plus: bool,
    ) -> std::io::Result<()> {
        let mut buf = DirBuf::new(size);
        let r = if plus {
            self.list_dir_plus(fh, offset, |e, next, kind, name| {
                buf.add_plus(&wire_entry(e), next, dtype(kind), name)
            })
        } else {
            self.list_dir(fh, offset, |ino, next, kind, name| {
                buf.add(ino.0, next, dtype(kind), name)
            })
        };
        match r {
            Ok(()) => chan.send(&Reply::dir(unique, &buf)),
            Err(e) => chan.send(&err(unique, e)),
        }
    }
}

fn change_of(s: &abi::SetAttrIn) -> Change {
    let time = |t: SetTime| match t {
        SetTime::Now => NewTime::Now,
        SetTime::At { secs, nsecs } => NewTime::At(ext4kit_format::inode::Timestamp { secs, nsecs }),
    };
    Change {
        mode: s.mode,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        atime: s.atime.map(time),
        mtime: s.mtime.map(time),
        kill_suidgid: s.kill_suidgid,
    }
}

/// `DT_*` of a file type (`S_IFMT >> 12`).
fn dtype(k: FileType) -> u32 {
    mode_type(k) >> 12
}

fn mode_type(k: FileType) -> u32 {
    match k {
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Directory => libc::S_IFDIR,
        FileType::RegularFile => libc::S_IFREG,
        FileType::Symlink => libc::S_IFLNK,
        FileType::Socket => libc::S_IFSOCK,
    }
}

fn wire_time(t: SystemTime) -> reply::Time {
    let t = timestamp(t);
    reply::Time {
        secs: t.secs,
        nsecs: t.nsecs,
    }
}

fn wire_attr(a: &FileAttr) -> reply::Attr {
    reply::Attr {
        ino: a.ino.0,
        size: a.size,
        blocks: a.blocks,
        atime: wire_time(a.atime),
        mtime: wire_time(a.mtime),
        ctime: wire_time(a.ctime),
        mode: mode_type(a.kind) | u32::from(a.perm),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
    }
}

fn wire_entry(e: &Entry) -> reply::Entry {
    reply::Entry {
        attr: wire_attr(&e.attr),
        generation: e.generation,
        entry_ttl: e.entry_ttl,
        attr_ttl: e.attr_ttl,
    }
}

fn statx_extra(s: &super::Statx) -> StatxExtra {
    let (attributes, attributes_mask) = STATX_ATTRS.iter().fold((0, 0), |(set, mask), &(bit, flag)| {
        (if s.flags & flag != 0 { set | bit } else { set }, mask | bit)
    });
    StatxExtra {
        btime: s.crtime.map(|t| reply::Time {
            secs: t.secs,
            nsecs: t.nsecs,
        }),
        attributes,
        attributes_mask,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn statx_attributes_follow_the_inode_flags() {
        let s = super::super::Statx {
            attr: crate::attr::file_attr(&super::super::names::empty_metadata(), 0, &Default::default()),
            crtime: None,
            flags: fl::IMMUTABLE | fl::VERITY | fl::EXTENTS,
        };
        let x = statx_extra(&s);
        assert_eq!(x.attributes, 0x10 | 0x10_0000);
        assert_eq!(x.attributes_mask, 0x4 | 0x10 | 0x20 | 0x40 | 0x800 | 0x10_0000);
        assert_eq!(x.btime, None);
    }

    #[test]
    fn times_before_1970_reach_the_wire_unchanged() {
        let t = UNIX_EPOCH - std::time::Duration::new(2, 0) + std::time::Duration::from_millis(250);
        assert_eq!(
            wire_time(t),
            reply::Time {
                secs: -2,
                nsecs: 250_000_000
            }
        );
    }
}
