//! Replies as `/dev/fuse` takes them: a 16-byte `fuse_out_header` (length,
//! negated errno, the request's `unique`), then the opcode's out struct.
//! A [`Reply`] can only be made by the constructors here, each writing one
//! whole struct of `include/uapi/linux/fuse.h`, so no reply of the wrong
//! length or with an errno out of range can be sent.

use std::time::Duration;

/// `sizeof(struct fuse_out_header)`.
pub(crate) const OUT_HEADER_LEN: usize = 16;
/// `FUSE_NAME_OFFSET`: bytes of `struct fuse_dirent` before the name.
const DIRENT_LEN: usize = 24;
/// `sizeof(struct fuse_entry_out)`.
const ENTRY_OUT_LEN: usize = 128;
/// `enum fuse_notify_code` values sent.
const NOTIFY_INVAL_INODE: i32 = 2;
const NOTIFY_INVAL_ENTRY: i32 = 3;
/// Largest errno the kernel accepts in a reply.
const ERRNO_MAX: i32 = 4095;

/// A time as FUSE carries it: seconds since the epoch (negative before
/// 1970, in two's complement) and nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Time {
    pub(crate) secs: i64,
    pub(crate) nsecs: u32,
}

/// `struct fuse_attr`: what `stat` shows of an inode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Attr {
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) blocks: u64,
    pub(crate) atime: Time,
    pub(crate) mtime: Time,
    pub(crate) ctime: Time,
    /// Type and permission bits, as `st_mode`.
    pub(crate) mode: u32,
    pub(crate) nlink: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) rdev: u32,
    pub(crate) blksize: u32,
}

/// A `fuse_entry_out`: an inode (0 for a cached negative entry) and how
/// long the kernel may keep its name and attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) attr: Attr,
    pub(crate) generation: u64,
    pub(crate) entry_ttl: Duration,
    pub(crate) attr_ttl: Duration,
}

/// What `statx` adds to [`Attr`] (`struct fuse_statx`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StatxExtra {
    /// Creation time, when the inode stores one.
    pub(crate) btime: Option<Time>,
    /// `STATX_ATTR_*` bits set, and those the file system can report.
    pub(crate) attributes: u64,
    pub(crate) attributes_mask: u64,
}

/// `struct fuse_kstatfs`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Statfs {
    pub(crate) blocks: u64,
    pub(crate) bfree: u64,
    pub(crate) bavail: u64,
    pub(crate) files: u64,
    pub(crate) ffree: u64,
    pub(crate) bsize: u32,
    pub(crate) namelen: u32,
    pub(crate) frsize: u32,
}

/// What the server answers to INIT (`struct fuse_init_out`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InitOut {
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) max_readahead: u32,
    pub(crate) flags: u64,
    pub(crate) max_background: u16,
    pub(crate) congestion_threshold: u16,
    pub(crate) max_write: u32,
    pub(crate) time_gran: u32,
    pub(crate) max_pages: u16,
}

/// `STATX_BASIC_STATS` and `STATX_BTIME` of `<linux/stat.h>`.
const STATX_BASIC_STATS: u32 = 0x7ff;
const STATX_BTIME: u32 = 0x800;

/// One reply: header and fixed part, and a borrowed tail (file data,
/// names) written after it with the same `writev`.
#[derive(Debug)]
pub(crate) struct Reply<'a> {
    head: Out,
    tail: &'a [u8],
}

/// Bytes being encoded.
#[derive(Debug, Default)]
struct Out(Vec<u8>);

impl Out {
    fn put_u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn put_u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn put_u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }

    fn entry_out(&mut self, e: &Entry) {
        self.put_u64(e.attr.ino).put_u64(e.generation);
        self.put_u64(e.entry_ttl.as_secs()).put_u64(e.attr_ttl.as_secs());
        self.put_u32(e.entry_ttl.subsec_nanos())
            .put_u32(e.attr_ttl.subsec_nanos());
        self.attr_body(&e.attr);
    }

    fn attr_body(&mut self, a: &Attr) {
        self.put_u64(a.ino).put_u64(a.size).put_u64(a.blocks);
        self.put_u64(a.atime.secs as u64)
            .put_u64(a.mtime.secs as u64)
            .put_u64(a.ctime.secs as u64);
        self.put_u32(a.atime.nsecs)
            .put_u32(a.mtime.nsecs)
            .put_u32(a.ctime.nsecs);
        self.put_u32(a.mode).put_u32(a.nlink).put_u32(a.uid).put_u32(a.gid);
        self.put_u32(a.rdev).put_u32(a.blksize).put_u32(0);
    }

    /// Appends a `fuse_dirent` (after a `fuse_entry_out` for READDIRPLUS)
    /// unless the result would pass `max` bytes.
    fn dirent(&mut self, max: usize, ino: u64, next: u64, dtype: u32, name: &[u8], e: Option<&Entry>) -> bool {
        let plus = if e.is_some() { ENTRY_OUT_LEN } else { 0 };
        let len = (plus + DIRENT_LEN + name.len()).next_multiple_of(8);
        if self.0.len() + len > max || name.is_empty() || name.len() > 255 {
            return false;
        }
        let start = self.0.len();
        if let Some(e) = e {
            self.entry_out(e);
        }
        self.put_u64(ino)
            .put_u64(next)
            .put_u32(name.len() as u32)
            .put_u32(dtype);
        self.0.extend_from_slice(name);
        self.0.resize(start + len, 0);
        true
    }
}

impl<'a> Reply<'a> {
    fn new(unique: u64, error: i32, fixed: usize, tail: &'a [u8]) -> Self {
        let mut head = Out(Vec::with_capacity(OUT_HEADER_LEN + fixed));
        let len = (OUT_HEADER_LEN + fixed + tail.len()) as u32;
        head.put_u32(len).put_u32(error as u32).put_u64(unique);
        Self { head, tail }
    }

    /// The parts to write, in order.
    pub(crate) fn parts(&self) -> [&[u8]; 2] {
        [&self.head.0, self.tail]
    }

    /// Total length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.head.0.len() + self.tail.len()
    }

    /// An error; an errno outside 1..=4095 becomes EIO.
    pub(crate) fn error(unique: u64, errno: i32) -> Self {
        let errno = if (1..=ERRNO_MAX).contains(&errno) {
            errno
        } else {
            libc::EIO
        };
        Self::new(unique, -errno, 0, &[])
    }

    /// Success without a body.
    pub(crate) fn empty(unique: u64) -> Self {
        Self::new(unique, 0, 0, &[])
    }

    /// Success with raw bytes (READ, READLINK, GETXATTR, LISTXATTR data).
    pub(crate) fn data(unique: u64, data: &'a [u8]) -> Self {
        Self::new(unique, 0, 0, data)
    }

    pub(crate) fn entry(unique: u64, e: &Entry) -> Self {
        let mut r = Self::new(unique, 0, ENTRY_OUT_LEN, &[]);
        r.head.entry_out(e);
        r
    }

    /// `fuse_attr_out`.
    pub(crate) fn attr(unique: u64, ttl: Duration, a: &Attr) -> Self {
        let mut r = Self::new(unique, 0, 104, &[]);
        r.head.put_u64(ttl.as_secs()).put_u32(ttl.subsec_nanos()).put_u32(0);
        r.head.attr_body(a);
        r
    }

    /// `fuse_statx_out`: the basic fields always, the birth time when the
    /// inode has one.
    pub(crate) fn statx(unique: u64, ttl: Duration, a: &Attr, x: &StatxExtra) -> Self {
        let mut r = Self::new(unique, 0, 288, &[]);
        r.head
            .put_u64(ttl.as_secs())
            .put_u32(ttl.subsec_nanos())
            .put_u32(0)
            .zeros(16);
        let mask = STATX_BASIC_STATS | if x.btime.is_some() { STATX_BTIME } else { 0 };
        r.head.put_u32(mask).put_u32(a.blksize).put_u64(x.attributes);
        r.head.put_u32(a.nlink).put_u32(a.uid).put_u32(a.gid);
        r.head.put_u16(a.mode as u16).put_u16(0);
        r.head
            .put_u64(a.ino)
            .put_u64(a.size)
            .put_u64(a.blocks)
            .put_u64(x.attributes_mask);
        for t in [a.atime, x.btime.unwrap_or_default(), a.ctime, a.mtime] {
            r.head.put_u64(t.secs as u64).put_u32(t.nsecs).put_u32(0);
        }
        let (major, minor) = rdev_parts(a.rdev);
        r.head.put_u32(major).put_u32(minor).zeros(8 + 14 * 8);
        r
    }

    /// `fuse_open_out`.
    pub(crate) fn open(unique: u64, fh: u64, open_flags: u32) -> Self {
        let mut r = Self::new(unique, 0, 16, &[]);
        r.head.put_u64(fh).put_u32(open_flags).put_u32(0);
        r
    }

    /// CREATE: `fuse_entry_out` then `fuse_open_out`.
    pub(crate) fn create(unique: u64, e: &Entry, fh: u64, open_flags: u32) -> Self {
        let mut r = Self::new(unique, 0, ENTRY_OUT_LEN + 16, &[]);
        r.head.entry_out(e);
        r.head.put_u64(fh).put_u32(open_flags).put_u32(0);
        r
    }

    /// `fuse_write_out` (WRITE, COPY_FILE_RANGE).
    pub(crate) fn written(unique: u64, size: u32) -> Self {
        let mut r = Self::new(unique, 0, 8, &[]);
        r.head.put_u32(size).put_u32(0);
        r
    }

    /// `fuse_getxattr_out`: the size a zero-sized GETXATTR/LISTXATTR asks for.
    pub(crate) fn xattr_size(unique: u64, size: u32) -> Self {
        let mut r = Self::new(unique, 0, 8, &[]);
        r.head.put_u32(size).put_u32(0);
        r
    }

    /// `fuse_lseek_out`.
    pub(crate) fn lseek(unique: u64, offset: i64) -> Self {
        let mut r = Self::new(unique, 0, 8, &[]);
        r.head.put_u64(offset as u64);
        r
    }

    /// `fuse_statfs_out`.
    pub(crate) fn statfs(unique: u64, s: &Statfs) -> Self {
        let mut r = Self::new(unique, 0, 80, &[]);
        r.head
            .put_u64(s.blocks)
            .put_u64(s.bfree)
            .put_u64(s.bavail)
            .put_u64(s.files)
            .put_u64(s.ffree);
        r.head.put_u32(s.bsize).put_u32(s.namelen).put_u32(s.frsize).zeros(28);
        r
    }

    /// `fuse_ioctl_out` then the output bytes (a restricted ioctl: no
    /// retry, no iovecs).
    pub(crate) fn ioctl(unique: u64, result: i32, data: &'a [u8]) -> Self {
        let mut r = Self::new(unique, 0, 16, data);
        r.head.put_u32(result as u32).zeros(12);
        r
    }

    /// `fuse_init_out` (64 bytes).
    pub(crate) fn init(unique: u64, i: &InitOut) -> Self {
        let mut r = Self::new(unique, 0, 64, &[]);
        r.head
            .put_u32(i.major)
            .put_u32(i.minor)
            .put_u32(i.max_readahead)
            .put_u32(i.flags as u32);
        r.head.put_u16(i.max_background).put_u16(i.congestion_threshold);
        r.head
            .put_u32(i.max_write)
            .put_u32(i.time_gran)
            .put_u16(i.max_pages)
            .put_u16(0);
        r.head.put_u32((i.flags >> 32) as u32).zeros(28);
        r
    }

    /// `FUSE_NOTIFY_INVAL_INODE` (a notification: `unique` 0, the code
    /// where a reply has its errno).
    pub(crate) fn inval_inode(ino: u64, offset: i64, len: i64) -> Self {
        let mut r = Self::new(0, NOTIFY_INVAL_INODE, 24, &[]);
        r.head.put_u64(ino).put_u64(offset as u64).put_u64(len as u64);
        r
    }

    /// `FUSE_NOTIFY_INVAL_ENTRY`; `None` for a name no directory holds.
    pub(crate) fn inval_entry(parent: u64, name: &[u8]) -> Option<Self> {
        if name.is_empty() || name.len() > 255 || name.contains(&0) {
            return None;
        }
        let mut r = Self::new(0, NOTIFY_INVAL_ENTRY, 16 + name.len() + 1, &[]);
        r.head.put_u64(parent).put_u32(name.len() as u32).put_u32(0);
        r.head.0.extend_from_slice(name);
        r.head.0.push(0);
        Some(r)
    }

    /// A READDIR or READDIRPLUS answer.
    pub(crate) fn dir(unique: u64, d: &'a DirBuf) -> Self {
        Self::new(unique, 0, 0, &d.buf.0)
    }
}

/// `(major, minor)` of an encoded `dev_t` (Linux's `new_decode_dev`).
fn rdev_parts(rdev: u32) -> (u32, u32) {
    ((rdev >> 8) & 0xfff, (rdev & 0xff) | ((rdev >> 12) & 0xfff00))
}

/// Directory entries for one READDIR(PLUS) answer, at most the size the
/// kernel asked for: `fuse_dirent`s (or `fuse_direntplus`es), each padded
/// to 8 bytes.
#[derive(Debug)]
pub(crate) struct DirBuf {
    buf: Out,
    max: usize,
}

impl DirBuf {
    pub(crate) fn new(max: u32) -> Self {
        let max = max as usize;
        Self {
            buf: Out(Vec::with_capacity(max.min(1 << 20))),
            max,
        }
    }

    /// Adds an entry; false (and nothing added) when it does not fit.
    /// `dtype` is the `DT_*` type, `next` the offset to continue from.
    pub(crate) fn add(&mut self, ino: u64, next: u64, dtype: u32, name: &[u8]) -> bool {
        self.buf.dirent(self.max, ino, next, dtype, name, None)
    }

    /// Adds a READDIRPLUS entry; false when it does not fit.
    pub(crate) fn add_plus(&mut self, e: &Entry, next: u64, dtype: u32, name: &[u8]) -> bool {
        self.buf.dirent(self.max, e.attr.ino, next, dtype, name, Some(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(r: &Reply<'_>) -> Vec<u8> {
        r.parts().concat()
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn lengths_match_the_kernel_structs() {
        let a = Attr::default();
        let e = Entry {
            attr: a,
            generation: 0,
            entry_ttl: Duration::ZERO,
            attr_ttl: Duration::ZERO,
        };
        let cases = [
            (Reply::entry(1, &e).len(), 16 + 128),
            (Reply::attr(1, Duration::ZERO, &a).len(), 16 + 104),
            (
                Reply::statx(1, Duration::ZERO, &a, &StatxExtra::default()).len(),
                16 + 288,
            ),
            (Reply::open(1, 0, 0).len(), 16 + 16),
            (Reply::create(1, &e, 0, 0).len(), 16 + 144),
            (Reply::statfs(1, &Statfs::default()).len(), 16 + 80),
            (Reply::init(1, &InitOut::default()).len(), 16 + 64),
            (Reply::written(1, 0).len(), 24),
            (Reply::empty(1).len(), 16),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
        for r in [Reply::entry(9, &e), Reply::data(9, b"abc"), Reply::error(9, 2)] {
            let b = bytes(&r);
            assert_eq!(u32_at(&b, 0) as usize, b.len());
            assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 9);
        }
    }

    #[test]
    fn notifications_have_no_unique_and_a_terminated_name() {
        let b = bytes(&Reply::inval_entry(1, b"name").unwrap());
        assert_eq!(u32_at(&b, 0) as usize, b.len());
        assert_eq!((u32_at(&b, 4), &b[8..16]), (3, &[0u8; 8][..]));
        assert_eq!(&b[32..], b"name\0");
        assert!(Reply::inval_entry(1, b"a\0b").is_none());
        assert_eq!(Reply::inval_inode(5, -1, 0).len(), 40);
    }

    #[test]
    fn errors_are_negated_and_bounded() {
        assert_eq!(u32_at(&bytes(&Reply::error(1, libc::ENOENT)), 4) as i32, -libc::ENOENT);
        for bad in [0, -3, 4096, i32::MAX] {
            assert_eq!(u32_at(&bytes(&Reply::error(1, bad)), 4) as i32, -libc::EIO);
        }
    }

    #[test]
    fn statx_carries_btime_and_its_mask_bit() {
        let a = Attr {
            mode: 0o100644,
            blksize: 4096,
            ..Attr::default()
        };
        let x = StatxExtra {
            btime: Some(Time { secs: -3, nsecs: 500 }),
            attributes: 0x10,
            attributes_mask: 0x100874,
        };
        let b = bytes(&Reply::statx(1, Duration::ZERO, &a, &x));
        let stat = 16 + 32;
        assert_eq!(u32_at(&b, stat), STATX_BASIC_STATS | STATX_BTIME);
        assert_eq!(u32_at(&b, stat + 28) & 0xffff, 0o100644);
        // btime follows atime, 64 + 16 bytes into the struct.
        let bt = stat + 80;
        assert_eq!(i64::from_le_bytes(b[bt..bt + 8].try_into().unwrap()), -3);
        assert_eq!(u32_at(&b, bt + 8), 500);
        let none = bytes(&Reply::statx(1, Duration::ZERO, &a, &StatxExtra::default()));
        assert_eq!(u32_at(&none, stat), STATX_BASIC_STATS);
    }

    #[test]
    fn init_splits_flags_into_flags2() {
        let i = InitOut {
            flags: (1 << 36) | 1,
            ..InitOut::default()
        };
        let b = bytes(&Reply::init(1, &i));
        assert_eq!(u32_at(&b, 16 + 12), 1);
        assert_eq!(u32_at(&b, 16 + 32), 1 << 4);
    }

    #[test]
    fn dirents_are_padded_and_stop_at_the_size_asked() {
        let mut d = DirBuf::new(64);
        assert!(d.add(5, 1, 8, b"abc"));
        assert_eq!(d.buf.0.len(), 32);
        assert!(d.add(6, 2, 4, b"defghijk"));
        assert!(!d.add(7, 3, 8, b"x"));
        assert_eq!(d.buf.0.len(), 64);
        assert_eq!(&d.buf.0[24..27], b"abc");
        assert!(!DirBuf::new(4096).add(1, 1, 8, b""));
    }
}
