//! The project's own FUSE transport: requests read from `/dev/fuse` and
//! replies written back, with no FUSE library between the kernel and the
//! adapter. [`abi`] parses requests from bytes, [`reply`] encodes answers
//! (only whole, well-formed ones), [`session`] mounts, negotiates INIT and
//! runs the serving threads; `crate::adapter::dispatch` turns each request
//! into a call of the adapter. [`uring`] carries the same messages over
//! FUSE's io_uring queues instead; both hand requests to the same adapter
//! and take its replies through a [`Sink`].

pub(crate) mod abi;
mod fusermount;
pub(crate) mod reply;
pub(crate) mod session;
pub(crate) mod uring;

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use fuser::INodeNo;

use reply::Reply;

/// An open `/dev/fuse` connection: requests come from it, replies and
/// notifications go to it. Any number of threads may use it at once.
#[derive(Debug)]
pub(crate) struct Channel {
    dev: File,
}

impl Channel {
    pub(crate) fn new(dev: File) -> Self {
        Self { dev }
    }

    pub(crate) fn device(&self) -> &File {
        &self.dev
    }

    /// Writes one reply with a single `writev`, as the device requires.
    /// ENOENT (the request was interrupted and is gone) is not an error.
    pub(crate) fn send(&self, r: &Reply<'_>) -> io::Result<()> {
        let [head, tail] = r.parts();
        let slices = [io::IoSlice::new(head), io::IoSlice::new(tail)];
        match rustix::io::writev(&self.dev, &slices) {
            Ok(n) if n == r.len() => Ok(()),
            Ok(n) => Err(io::Error::other(format!("/dev/fuse took {n} of {} bytes", r.len()))),
            Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Where the reply to one request goes: the `/dev/fuse` device, or the
/// ring entry that brought the request.
pub(crate) trait Sink {
    /// Sends `r`, the one reply to the request being served.
    fn send(&self, r: &Reply<'_>) -> io::Result<()>;
}

impl Sink for Channel {
    fn send(&self, r: &Reply<'_>) -> io::Result<()> {
        Channel::send(self, r)
    }
}

/// Tells the kernel that what it caches of an inode or a name went stale,
/// on whichever transport serves the mount.
#[derive(Clone)]
pub(crate) enum Notifier {
    Fuser(fuser::Notifier),
    Dev(Arc<Channel>),
}

impl Notifier {
    /// FUSE_NOTIFY_INVAL_INODE: drop the attributes of `ino` and, for
    /// `offset` ≥ 0, its cached pages from `offset` for `len` bytes (0: to
    /// the end).
    pub(crate) fn inval_inode(&self, ino: INodeNo, offset: i64, len: i64) -> io::Result<()> {
        match self {
            Self::Fuser(n) => n.inval_inode(ino, offset, len),
            Self::Dev(c) => c.send(&Reply::inval_inode(ino.0, offset, len)),
        }
    }

    /// FUSE_NOTIFY_INVAL_ENTRY: drop the cached name `name` in `parent`.
    pub(crate) fn inval_entry(&self, parent: INodeNo, name: &OsStr) -> io::Result<()> {
        match self {
            Self::Fuser(n) => n.inval_entry(parent, name),
            Self::Dev(c) => match Reply::inval_entry(parent.0, name.as_bytes()) {
                Some(r) => c.send(&r),
                None => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            },
        }
    }
}
