//! Requests as the kernel writes them to `/dev/fuse` (`include/uapi/linux/fuse.h`,
//! protocol 7.x): a 40-byte `fuse_in_header`, then an opcode's fixed
//! argument struct, then names or data. Every field is read little-endian
//! from the bytes, with bounds checked: a short or inconsistent request is
//! [`Malformed`], never a panic.

/// Protocol major version spoken.
pub(crate) const KERNEL_VERSION: u32 = 7;
/// Highest minor version spoken: 7.39 added `FUSE_STATX`; 7.40 is what
/// fuser 0.18 answered with, so the kernel sends the same struct sizes.
pub(crate) const KERNEL_MINOR: u32 = 40;
/// `sizeof(struct fuse_in_header)`.
pub(crate) const IN_HEADER_LEN: usize = 40;

/// `enum fuse_opcode` values served or recognised.
pub(crate) mod opcode {
    pub(crate) const LOOKUP: u32 = 1;
    pub(crate) const FORGET: u32 = 2;
    pub(crate) const GETATTR: u32 = 3;
    pub(crate) const SETATTR: u32 = 4;
    pub(crate) const READLINK: u32 = 5;
    pub(crate) const SYMLINK: u32 = 6;
    pub(crate) const MKNOD: u32 = 8;
    pub(crate) const MKDIR: u32 = 9;
    pub(crate) const UNLINK: u32 = 10;
    pub(crate) const RMDIR: u32 = 11;
    pub(crate) const RENAME: u32 = 12;
    pub(crate) const LINK: u32 = 13;
    pub(crate) const OPEN: u32 = 14;
    pub(crate) const READ: u32 = 15;
    pub(crate) const WRITE: u32 = 16;
    pub(crate) const STATFS: u32 = 17;
    pub(crate) const RELEASE: u32 = 18;
    pub(crate) const FSYNC: u32 = 20;
    pub(crate) const SETXATTR: u32 = 21;
    pub(crate) const GETXATTR: u32 = 22;
    pub(crate) const LISTXATTR: u32 = 23;
    pub(crate) const REMOVEXATTR: u32 = 24;
    pub(crate) const FLUSH: u32 = 25;
    pub(crate) const INIT: u32 = 26;
    pub(crate) const OPENDIR: u32 = 27;
    pub(crate) const READDIR: u32 = 28;
    pub(crate) const RELEASEDIR: u32 = 29;
    pub(crate) const FSYNCDIR: u32 = 30;
    pub(crate) const ACCESS: u32 = 34;
    pub(crate) const CREATE: u32 = 35;
    pub(crate) const INTERRUPT: u32 = 36;
    pub(crate) const DESTROY: u32 = 38;
    pub(crate) const IOCTL: u32 = 39;
    pub(crate) const BATCH_FORGET: u32 = 42;
    pub(crate) const FALLOCATE: u32 = 43;
    pub(crate) const READDIRPLUS: u32 = 44;
    pub(crate) const RENAME2: u32 = 45;
    pub(crate) const LSEEK: u32 = 46;
    pub(crate) const COPY_FILE_RANGE: u32 = 47;
    /// `open(dir, O_TMPFILE)` (Linux 6.1, protocol 7.37): a CREATE without
    /// a name.
    pub(crate) const TMPFILE: u32 = 51;
    pub(crate) const STATX: u32 = 52;
}

/// INIT flags (`FUSE_*` capability bits; bits 32.. travel in `flags2`).
pub(crate) mod init {
    pub(crate) const ASYNC_READ: u64 = 1 << 0;
    pub(crate) const EXPORT_SUPPORT: u64 = 1 << 4;
    pub(crate) const BIG_WRITES: u64 = 1 << 5;
    pub(crate) const DONT_MASK: u64 = 1 << 6;
    pub(crate) const HAS_IOCTL_DIR: u64 = 1 << 11;
    pub(crate) const DO_READDIRPLUS: u64 = 1 << 13;
    pub(crate) const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub(crate) const ASYNC_DIO: u64 = 1 << 15;
    pub(crate) const WRITEBACK_CACHE: u64 = 1 << 16;
    pub(crate) const PARALLEL_DIROPS: u64 = 1 << 18;
    pub(crate) const POSIX_ACL: u64 = 1 << 20;
    pub(crate) const MAX_PAGES: u64 = 1 << 22;
    pub(crate) const CACHE_SYMLINKS: u64 = 1 << 23;
    pub(crate) const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub(crate) const INIT_EXT: u64 = 1 << 30;
    pub(crate) const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    /// Requests may travel over io_uring queues (`FUSE_OVER_IO_URING`,
    /// offered only while `fuse.enable_uring` is on).
    pub(crate) const OVER_IO_URING: u64 = 1 << 41;
}

/// `fuse_setattr_in.valid` bits.
pub(crate) mod fattr {
    pub(crate) const MODE: u32 = 1 << 0;
    pub(crate) const UID: u32 = 1 << 1;
    pub(crate) const GID: u32 = 1 << 2;
    pub(crate) const SIZE: u32 = 1 << 3;
    pub(crate) const ATIME: u32 = 1 << 4;
    pub(crate) const MTIME: u32 = 1 << 5;
    pub(crate) const FH: u32 = 1 << 6;
    pub(crate) const ATIME_NOW: u32 = 1 << 7;
    pub(crate) const MTIME_NOW: u32 = 1 << 8;
    pub(crate) const KILL_SUIDGID: u32 = 1 << 11;
}

/// `FUSE_GETATTR_FH`: the GETATTR/STATX request names an open handle.
const GETATTR_FH: u32 = 1 << 0;
/// `FUSE_FSYNC_FDATASYNC`.
const FSYNC_FDATASYNC: u32 = 1 << 0;
/// `FUSE_WRITE_CACHE`: a WRITE of pages from the kernel's write-back cache.
pub(crate) const WRITE_CACHE: u32 = 1 << 0;
/// `FUSE_WRITE_KILL_SUIDGID`: the writer lacks `CAP_FSETID`; the set-id
/// bits go (see `adapter::killpriv`).
pub(crate) const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// The top bit of `unique` marks a request the kernel sent again.
const UNIQUE_RESEND: u64 = 1 << 63;

/// A request that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

/// Little-endian reads from a request's bytes that never run past their
/// end. The bytes may come in two pieces (the opcode's fixed argument and
/// the payload, as a FUSE ring entry holds them): a field, name or rest
/// lies wholly in one piece, and one that would straddle them is
/// [`Malformed`], so nothing is joined or copied.
pub(crate) struct Reader<'a> {
    head: &'a [u8],
    tail: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Self::split(b, &[])
    }

    /// The bytes `head` then `tail`.
    pub(crate) fn split(head: &'a [u8], tail: &'a [u8]) -> Self {
        Self { head, tail }
    }

    /// The piece being read: the tail once the head is used up.
    fn current(&mut self) -> &mut &'a [u8] {
        if self.head.is_empty() {
            self.head = std::mem::take(&mut self.tail);
        }
        &mut self.head
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let cur = self.current();
        if cur.len() < n {
            return Err(Malformed);
        }
        let (head, rest) = cur.split_at(n);
        *cur = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        self.take(N)?.try_into().map_err(|_| Malformed)
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Malformed> {
        self.array().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Malformed> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Malformed> {
        self.array().map(u64::from_le_bytes)
    }

    fn skip(&mut self, n: usize) -> Result<(), Malformed> {
        self.take(n).map(|_| ())
    }

    /// A NUL-terminated name (without its NUL); an empty name is malformed.
    fn name(&mut self) -> Result<&'a [u8], Malformed> {
        let end = self.current().iter().position(|&b| b == 0).ok_or(Malformed)?;
        let name = self.take(end)?;
        self.skip(1)?;
        if name.is_empty() {
            return Err(Malformed);
        }
        Ok(name)
    }

    /// All that is left, which must lie in one piece.
    fn rest(&mut self) -> Result<&'a [u8], Malformed> {
        if !self.head.is_empty() && !self.tail.is_empty() {
            return Err(Malformed);
        }
        Ok(std::mem::take(self.current()))
    }
}

/// `struct fuse_in_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InHeader {
    pub(crate) len: u32,
    pub(crate) opcode: u32,
    pub(crate) unique: u64,
    pub(crate) nodeid: u64,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) pid: u32,
    /// Length of request extensions at the end, in units of 8 bytes.
    pub(crate) total_extlen: u16,
}

impl InHeader {
    fn parse(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let h = Self {
            len: r.u32()?,
            opcode: r.u32()?,
            unique: r.u64()?,
            nodeid: r.u64()?,
            uid: r.u32()?,
            gid: r.u32()?,
            pid: r.u32()?,
            total_extlen: r.u16()?,
        };
        r.skip(2)?;
        Ok(h)
    }
}

/// A time from SETATTR: the one given, or the server's now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetTime {
    Now,
    At { secs: i64, nsecs: u32 },
}

/// `struct fuse_setattr_in`, reduced to what is valid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SetAttrIn {
    pub(crate) fh: Option<u64>,
    pub(crate) size: Option<u64>,
    pub(crate) mode: Option<u32>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) atime: Option<SetTime>,
    pub(crate) mtime: Option<SetTime>,
    /// `FATTR_KILL_SUIDGID`: drop the set-id bits too.
    pub(crate) kill_suidgid: bool,
}

/// `struct fuse_copy_file_range_in`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CopyRangeIn {
    pub(crate) fh_in: u64,
    pub(crate) off_in: u64,
    pub(crate) nodeid_out: u64,
    pub(crate) fh_out: u64,
    pub(crate) off_out: u64,
    pub(crate) len: u64,
}

/// One request's operation and arguments; names and data borrow the
/// buffer the request was read into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op<'a> {
    Init {
        major: u32,
        minor: u32,
        max_readahead: u32,
        flags: u64,
    },
    Destroy,
    Forget,
    Interrupt {
        unique: u64,
    },
    Lookup {
        name: &'a [u8],
    },
    Getattr {
        fh: Option<u64>,
    },
    Statx {
        fh: Option<u64>,
        flags: u32,
        mask: u32,
    },
    Setattr(SetAttrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        mode: u32,
        rdev: u32,
        umask: u32,
        name: &'a [u8],
    },
    Mkdir {
        mode: u32,
        umask: u32,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        flags: u32,
        name: &'a [u8],
        newname: &'a [u8],
    },
    Link {
        oldnodeid: u64,
        newname: &'a [u8],
    },
    Open {
        flags: u32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        write_flags: u32,
        data: &'a [u8],
    },
    Statfs,
    Release {
        fh: u64,
    },
    Fsync {
        fh: u64,
        datasync: bool,
    },
    Setxattr {
        flags: u32,
        name: &'a [u8],
        value: &'a [u8],
    },
    Getxattr {
        size: u32,
        name: &'a [u8],
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush {
        fh: u64,
    },
    Opendir {
        flags: u32,
    },
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
        plus: bool,
    },
    Releasedir {
        fh: u64,
    },
    Fsyncdir {
        fh: u64,
        datasync: bool,
    },
    Access {
        mask: u32,
    },
    Create {
        flags: u32,
        mode: u32,
        umask: u32,
        name: &'a [u8],
    },
    /// The `fuse_create_in` of a CREATE; the kernel's name for the new
    /// dentry (`/`) is no name in the directory and is not kept.
    Tmpfile {
        flags: u32,
        mode: u32,
        umask: u32,
    },
    Ioctl {
        fh: u64,
        flags: u32,
        cmd: u32,
        out_size: u32,
        data: &'a [u8],
    },
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
    },
    Lseek {
        fh: u64,
        offset: i64,
        whence: u32,
    },
    CopyFileRange(CopyRangeIn),
    /// An opcode this server does not implement (answered ENOSYS).
    Unknown(u32),
}

/// A request read from the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request<'a> {
    pub(crate) header: InHeader,
    pub(crate) op: Op<'a>,
}

impl<'a> Request<'a> {
    /// Parses one request, which must fill `buf` exactly. The header alone
    /// may parse when the arguments do not: [`parse_header`] lets the
    /// caller still answer EIO.
    pub(crate) fn parse(buf: &'a [u8]) -> Result<Self, Malformed> {
        let (header, body) = buf.split_at(IN_HEADER_LEN.min(buf.len()));
        Self::parse_parts(header, body, &[])
    }

    /// Parses one request held in three pieces, as a FUSE ring entry
    /// holds it (`struct fuse_uring_req_header` and the payload buffer):
    /// the `fuse_in_header`, the opcode's fixed argument, and the payload
    /// (names, data, then the request extensions). The header's `len`
    /// must be the three lengths together. Nothing is copied: names and
    /// data borrow from the pieces.
    pub(crate) fn parse_parts(header: &'a [u8], arg: &'a [u8], payload: &'a [u8]) -> Result<Self, Malformed> {
        let h = InHeader::parse(&mut Reader::new(header))?;
        let total = header
            .len()
            .checked_add(arg.len())
            .and_then(|n| n.checked_add(payload.len()));
        if header.len() != IN_HEADER_LEN || total != Some(h.len as usize) {
            return Err(Malformed);
        }
        let (arg, payload) = without_extensions(arg, payload, usize::from(h.total_extlen) * 8)?;
        let op = parse_op(h.opcode, &mut Reader::split(arg, payload))?;
        Ok(Self { header: h, op })
    }

    /// The `unique` of the request, without the resend mark.
    pub(crate) fn unique(&self) -> u64 {
        self.header.unique
    }
}

/// The header of `buf`, checked against its length.
pub(crate) fn parse_header(buf: &[u8]) -> Result<InHeader, Malformed> {
    let h = InHeader::parse(&mut Reader::new(buf))?;
    if h.len as usize != buf.len() {
        return Err(Malformed);
    }
    Ok(h)
}

/// `arg` and `payload` without the `ext` bytes of request extensions
/// that end the request (in the payload, or in `arg` when there is no
/// payload).
fn without_extensions<'a>(arg: &'a [u8], payload: &'a [u8], ext: usize) -> Result<(&'a [u8], &'a [u8]), Malformed> {
    let cut = |b: &'a [u8]| b.len().checked_sub(ext).map(|n| &b[..n]).ok_or(Malformed);
    if payload.is_empty() {
        Ok((cut(arg)?, payload))
    } else {
        Ok((arg, cut(payload)?))
    }
}

fn handle_if(flags: u32, bit: u32, fh: u64) -> Option<u64> {
    (flags & bit != 0).then_some(fh)
}

fn parse_op<'a>(code: u32, r: &mut Reader<'a>) -> Result<Op<'a>, Malformed> {
    use opcode as o;
    Ok(match code {
        o::INIT => parse_init(r)?,
        o::DESTROY => Op::Destroy,
        o::FORGET | o::BATCH_FORGET => Op::Forget,
        o::INTERRUPT => Op::Interrupt {
            unique: r.u64()? & !UNIQUE_RESEND,
        },
        o::LOOKUP => Op::Lookup { name: r.name()? },
        o::GETATTR => {
            let (flags, _, fh) = (r.u32()?, r.u32()?, r.u64()?);
            Op::Getattr {
                fh: handle_if(flags, GETATTR_FH, fh),
            }
        }
        o::STATX => {
            let (flags, _, fh) = (r.u32()?, r.u32()?, r.u64()?);
            Op::Statx {
                fh: handle_if(flags, GETATTR_FH, fh),
                flags: r.u32()?,
                mask: r.u32()?,
            }
        }
        o::SETATTR => Op::Setattr(parse_setattr(r)?),
        o::READLINK => Op::Readlink,
        o::SYMLINK => Op::Symlink {
            name: r.name()?,
            target: r.name()?,
        },
        o::MKNOD => {
            let (mode, rdev, umask) = (r.u32()?, r.u32()?, r.u32()?);
            r.skip(4)?;
            Op::Mknod {
                mode,
                rdev,
                umask,
                name: r.name()?,
            }
        }
        o::MKDIR => Op::Mkdir {
            mode: r.u32()?,
            umask: r.u32()?,
            name: r.name()?,
        },
        o::UNLINK => Op::Unlink { name: r.name()? },
        o::RMDIR => Op::Rmdir { name: r.name()? },
        o::RENAME | o::RENAME2 => {
            let newdir = r.u64()?;
            let flags = if code == o::RENAME2 { r.u64()? as u32 } else { 0 };
            Op::Rename {
                newdir,
                flags,
                name: r.name()?,
                newname: r.name()?,
            }
        }
        o::LINK => Op::Link {
            oldnodeid: r.u64()?,
            newname: r.name()?,
        },
        o::OPEN => Op::Open { flags: r.u32()? },
        o::OPENDIR => Op::Opendir { flags: r.u32()? },
        o::READ => {
            let (fh, offset, size) = (r.u64()?, r.u64()?, r.u32()?);
            Op::Read { fh, offset, size }
        }
        o::WRITE => parse_write(r)?,
        o::STATFS => Op::Statfs,
        o::RELEASE => Op::Release { fh: r.u64()? },
        o::RELEASEDIR => Op::Releasedir { fh: r.u64()? },
        o::FSYNC | o::FSYNCDIR => {
            let (fh, flags) = (r.u64()?, r.u32()?);
            let datasync = flags & FSYNC_FDATASYNC != 0;
            if code == o::FSYNC {
                Op::Fsync { fh, datasync }
            } else {
                Op::Fsyncdir { fh, datasync }
            }
        }
        o::SETXATTR => {
            // The 8-byte `fuse_setxattr_in` of servers that did not ask
            // for FUSE_SETXATTR_EXT.
            let (size, flags) = (r.u32()?, r.u32()?);
            let name = r.name()?;
            let value = r.rest()?;
            if value.len() != size as usize {
                return Err(Malformed);
            }
            Op::Setxattr { flags, name, value }
        }
        o::GETXATTR => {
            let size = r.u32()?;
            r.skip(4)?;
            Op::Getxattr { size, name: r.name()? }
        }
        o::LISTXATTR => Op::Listxattr { size: r.u32()? },
        o::REMOVEXATTR => Op::Removexattr { name: r.name()? },
        o::FLUSH => Op::Flush { fh: r.u64()? },
        o::READDIR | o::READDIRPLUS => {
            let (fh, offset, size) = (r.u64()?, r.u64()?, r.u32()?);
            Op::Readdir {
                fh,
                offset,
                size,
                plus: code == o::READDIRPLUS,
            }
        }
        o::ACCESS => Op::Access { mask: r.u32()? },
        o::CREATE => {
            let (flags, mode, umask) = (r.u32()?, r.u32()?, r.u32()?);
            r.skip(4)?;
            Op::Create {
                flags,
                mode,
                umask,
                name: r.name()?,
            }
        }
        o::TMPFILE => {
            let (flags, mode, umask) = (r.u32()?, r.u32()?, r.u32()?);
            r.skip(4)?;
            r.name()?;
            Op::Tmpfile { flags, mode, umask }
        }
        o::IOCTL => parse_ioctl(r)?,
        o::FALLOCATE => Op::Fallocate {
            fh: r.u64()?,
            offset: r.u64()?,
            length: r.u64()?,
            mode: r.u32()?,
        },
        o::LSEEK => Op::Lseek {
            fh: r.u64()?,
            offset: r.u64()? as i64,
            whence: r.u32()?,
        },
        o::COPY_FILE_RANGE => Op::CopyFileRange(CopyRangeIn {
            fh_in: r.u64()?,
            off_in: r.u64()?,
            nodeid_out: r.u64()?,
            fh_out: r.u64()?,
            off_out: r.u64()?,
            len: r.u64()?,
        }),
        other => Op::Unknown(other),
    })
}

/// `struct fuse_init_in`: the 16-byte form of older kernels, or with
/// `flags2` when the kernel sets FUSE_INIT_EXT.
fn parse_init<'a>(r: &mut Reader<'a>) -> Result<Op<'a>, Malformed> {
    let (major, minor, max_readahead, flags) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
    let mut flags = u64::from(flags);
    if flags & init::INIT_EXT != 0 {
        flags |= u64::from(r.u32()?) << 32;
    }
    Ok(Op::Init {
        major,
        minor,
        max_readahead,
        flags,
    })
}

fn parse_setattr(r: &mut Reader<'_>) -> Result<SetAttrIn, Malformed> {
    let valid = r.u32()?;
    r.skip(4)?;
    let (fh, size, _lock_owner) = (r.u64()?, r.u64()?, r.u64()?);
    let (atime, mtime, _ctime) = (r.u64()? as i64, r.u64()? as i64, r.u64()?);
    let (atimensec, mtimensec, _ctimensec) = (r.u32()?, r.u32()?, r.u32()?);
    let mode = r.u32()?;
    r.skip(4)?;
    let (uid, gid) = (r.u32()?, r.u32()?);
    let time = |set: u32, now: u32, secs: i64, nsecs: u32| -> Result<Option<SetTime>, Malformed> {
        if valid & now != 0 {
            return Ok(Some(SetTime::Now));
        }
        if valid & set == 0 {
            return Ok(None);
        }
        if nsecs >= 1_000_000_000 {
            return Err(Malformed);
        }
        Ok(Some(SetTime::At { secs, nsecs }))
    };
    let some = |bit: u32| valid & bit != 0;
    Ok(SetAttrIn {
        fh: some(fattr::FH).then_some(fh),
        size: some(fattr::SIZE).then_some(size),
        mode: some(fattr::MODE).then_some(mode),
        uid: some(fattr::UID).then_some(uid),
        gid: some(fattr::GID).then_some(gid),
        atime: time(fattr::ATIME, fattr::ATIME_NOW, atime, atimensec)?,
        mtime: time(fattr::MTIME, fattr::MTIME_NOW, mtime, mtimensec)?,
        kill_suidgid: some(fattr::KILL_SUIDGID),
    })
}

fn parse_write<'a>(r: &mut Reader<'a>) -> Result<Op<'a>, Malformed> {
    let (fh, offset, size, write_flags) = (r.u64()?, r.u64()?, r.u32()?, r.u32()?);
    r.skip(16)?;
    let data = r.rest()?;
    if data.len() != size as usize {
        return Err(Malformed);
    }
    Ok(Op::Write {
        fh,
        offset,
        write_flags,
        data,
    })
}

fn parse_ioctl<'a>(r: &mut Reader<'a>) -> Result<Op<'a>, Malformed> {
    let (fh, flags, cmd, _arg) = (r.u64()?, r.u32()?, r.u32()?, r.u64()?);
    let (in_size, out_size) = (r.u32()?, r.u32()?);
    let data = r.rest()?;
    if data.len() != in_size as usize {
        return Err(Malformed);
    }
    Ok(Op::Ioctl {
        fh,
        flags,
        cmd,
        out_size,
        data,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request as the kernel would write it.
    pub(crate) fn request(opcode: u32, unique: u64, nodeid: u64, body: &[u8]) -> Vec<u8> {
        let len = (IN_HEADER_LEN + body.len()) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&opcode.to_le_bytes());
        b.extend_from_slice(&unique.to_le_bytes());
        b.extend_from_slice(&nodeid.to_le_bytes());
        for v in [1000u32, 100, 4242] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(body);
        b
    }

    fn le(fields: &[u64], widths: &[usize]) -> Vec<u8> {
        let mut b = Vec::new();
        for (v, w) in fields.iter().zip(widths) {
            b.extend_from_slice(&v.to_le_bytes()[..*w]);
        }
        b
    }

    #[test]
    fn lookup_reads_header_and_name() {
        let buf = request(opcode::LOOKUP, 7, 1, b"file\0");
        let r = Request::parse(&buf).unwrap();
        assert_eq!(r.header.unique, 7);
        assert_eq!(r.header.nodeid, 1);
        assert_eq!((r.header.uid, r.header.gid, r.header.pid), (1000, 100, 4242));
        assert_eq!(r.op, Op::Lookup { name: b"file" });
    }

    #[test]
    fn write_data_must_match_its_size() {
        let mut body = le(&[3, 4096, 5, WRITE_CACHE as u64, 0, 0], &[8, 8, 4, 4, 8, 8]);
        body.extend_from_slice(b"hello");
        let buf = request(opcode::WRITE, 1, 12, &body);
        let Op::Write { data, write_flags, .. } = Request::parse(&buf).unwrap().op else {
            panic!()
        };
        assert_eq!((data, write_flags), (&b"hello"[..], WRITE_CACHE));
        let short = request(opcode::WRITE, 1, 12, &body[..body.len() - 1]);
        assert_eq!(Request::parse(&short), Err(Malformed));
    }

    #[test]
    fn statx_keeps_handle_only_when_flagged() {
        let body = le(&[1, 0, 99, 0, 0xfff], &[4, 4, 8, 4, 4]);
        let buf = request(opcode::STATX, 2, 12, &body);
        let op = Request::parse(&buf).unwrap().op;
        assert_eq!(
            op,
            Op::Statx {
                fh: Some(99),
                flags: 0,
                mask: 0xfff
            }
        );
    }

    #[test]
    fn setattr_takes_only_valid_fields() {
        let valid = fattr::SIZE | fattr::MTIME | fattr::ATIME_NOW | fattr::KILL_SUIDGID;
        let mut body = le(
            &[valid as u64, 0, 5, 1234, 0, 1, (-5i64) as u64, 0],
            &[4, 4, 8, 8, 8, 8, 8, 8],
        );
        body.extend(le(&[0, 250, 0, 0o644, 0, 7, 8, 0], &[4; 8]));
        let buf = request(opcode::SETATTR, 3, 12, &body);
        let Op::Setattr(s) = Request::parse(&buf).unwrap().op else {
            panic!()
        };
        assert_eq!(s.size, Some(1234));
        assert_eq!(s.fh, None);
        assert_eq!(s.mode, None);
        assert_eq!(s.atime, Some(SetTime::Now));
        assert_eq!(s.mtime, Some(SetTime::At { secs: -5, nsecs: 250 }));
        assert!(s.kill_suidgid);
    }

    #[test]
    fn init_reads_flags2_only_with_init_ext() {
        let body = le(&[7, 44, 1 << 17, init::INIT_EXT | init::ASYNC_READ, 1 << 4], &[4; 5]);
        let buf = request(opcode::INIT, 1, 0, &[body, vec![0; 44]].concat());
        let Op::Init { flags, minor, .. } = Request::parse(&buf).unwrap().op else {
            panic!()
        };
        assert_eq!(minor, 44);
        assert_eq!(flags, init::INIT_EXT | init::ASYNC_READ | init::DIRECT_IO_ALLOW_MMAP);
    }

    #[test]
    fn rename2_and_symlink_read_two_names() {
        let mut body = le(&[5, 1], &[8, 8]);
        body.extend_from_slice(b"a\0b\0");
        let buf = request(opcode::RENAME2, 1, 2, &body);
        assert_eq!(
            Request::parse(&buf).unwrap().op,
            Op::Rename {
                newdir: 5,
                flags: 1,
                name: b"a",
                newname: b"b"
            }
        );
        let buf = request(opcode::SYMLINK, 1, 2, b"l\0/t\0");
        assert_eq!(
            Request::parse(&buf).unwrap().op,
            Op::Symlink {
                name: b"l",
                target: b"/t"
            }
        );
    }

    /// A request in pieces (as a ring entry holds it) parses to what the
    /// same bytes in one piece (as `/dev/fuse` delivers them) parse to,
    /// whatever its fixed argument's length; a name or data that would
    /// straddle the pieces is Malformed.
    #[test]
    fn pieces_parse_as_the_whole_request() {
        let mut write = le(&[3, 4096, 5, 0, 0, 0], &[8, 8, 4, 4, 8, 8]);
        write.extend_from_slice(b"hello");
        let mut mkdir = le(&[0o755, 0o22], &[4, 4]);
        mkdir.extend_from_slice(b"dir\0");
        let mut setxattr = le(&[3, 0], &[4, 4]);
        setxattr.extend_from_slice(b"user.a\0xyz");
        let cases: [(u32, Vec<u8>, usize); 5] = [
            (opcode::WRITE, write, 40),
            (opcode::MKDIR, mkdir, 8),
            (opcode::SETXATTR, setxattr, 8),
            (opcode::LOOKUP, b"name\0".to_vec(), 0),
            (opcode::GETATTR, le(&[1, 0, 9], &[4, 4, 8]), 16),
        ];
        for (code, body, arg_len) in cases {
            let whole = request(code, 4, 2, &body);
            let (header, rest) = whole.split_at(IN_HEADER_LEN);
            let (arg, payload) = rest.split_at(arg_len);
            assert_eq!(
                Request::parse_parts(header, arg, payload),
                Request::parse(&whole),
                "opcode {code}"
            );
            assert!(Request::parse(&whole).is_ok(), "opcode {code}");
            if !payload.is_empty() && arg_len > 0 {
                let (arg, payload) = rest.split_at(arg_len - 1);
                assert_eq!(
                    Request::parse_parts(header, arg, payload),
                    Err(Malformed),
                    "opcode {code}"
                );
            }
        }
        let mut write = le(&[3, 0, 8, 0, 0, 0], &[8, 8, 4, 4, 8, 8]);
        write.extend_from_slice(b"datadata");
        let whole = request(opcode::WRITE, 4, 2, &write);
        assert!(Request::parse(&whole).is_ok());
        let (header, rest) = whole.split_at(IN_HEADER_LEN);
        let (arg, payload) = rest.split_at(44);
        assert_eq!(
            Request::parse_parts(header, arg, payload),
            Err(Malformed),
            "data in two pieces"
        );
        assert_eq!(Request::parse_parts(&header[..39], rest, &[]), Err(Malformed));
    }

    #[test]
    fn tmpfile_reads_create_in_and_drops_the_name() {
        let mut body = le(&[0o100002, 0o100600, 0o022, 0], &[4; 4]);
        body.extend_from_slice(b"/\0");
        let buf = request(opcode::TMPFILE, 9, 2, &body);
        assert_eq!(
            Request::parse(&buf).unwrap().op,
            Op::Tmpfile {
                flags: 0o100002,
                mode: 0o100600,
                umask: 0o022
            }
        );
        let nameless = request(opcode::TMPFILE, 9, 2, &body[..16]);
        assert_eq!(Request::parse(&nameless), Err(Malformed));
    }

    #[test]
    fn unknown_opcodes_parse_for_an_enosys_answer() {
        let buf = request(4096, 1, 0, &[]);
        assert_eq!(Request::parse(&buf).unwrap().op, Op::Unknown(4096));
    }

    /// Every prefix of every request, and every length field, is either a
    /// request or Malformed: nothing panics.
    #[test]
    fn truncated_and_lying_requests_are_malformed_not_panics() {
        let bodies: Vec<(u32, Vec<u8>)> = vec![
            (opcode::LOOKUP, b"name\0".to_vec()),
            (opcode::SETATTR, vec![0xff; 88]),
            (opcode::WRITE, le(&[0, 0, 3, 0, 0, 0], &[8, 8, 4, 4, 8, 8])),
            (opcode::SETXATTR, le(&[2, 0], &[4, 4])),
            (opcode::IOCTL, le(&[0, 0, 0, 0, 9, 0], &[8, 4, 4, 8, 4, 4])),
            (opcode::INIT, le(&[7, 40, 0, init::INIT_EXT], &[4; 4])),
            (opcode::RENAME2, vec![1; 16]),
            (opcode::COPY_FILE_RANGE, vec![0; 50]),
        ];
        for opcode in 0..60u32 {
            for (_, body) in &bodies {
                let full = request(opcode, 1, 1, body);
                for cut in 0..=full.len() {
                    let _ = Request::parse(&full[..cut]);
                }
                let mut lying = full.clone();
                lying[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
                assert_eq!(Request::parse(&lying), Err(Malformed));
                let mut ext = full.clone();
                ext[36..38].copy_from_slice(&u16::MAX.to_le_bytes());
                assert_eq!(Request::parse(&ext), Err(Malformed));
            }
        }
    }
}
