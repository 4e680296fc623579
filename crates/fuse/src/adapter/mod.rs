//! [`Ext4Fuse`]: the FUSE file system over an engine [`Filesystem`], served
//! by either transport: the project's own over `/dev/fuse`
//! ([`crate::transport`], through `dispatch`) or fuser's (the
//! `fuser::Filesystem` implementation here). Both only unpack requests and
//! send replies; each operation is a method in `names`, `files`, `dirs`,
//! `xattrs` or here that returns a `Result` and calls the engine, which
//! holds every rule about the on-disk format.

mod caller;
mod dirs;
pub(crate) mod dispatch;
mod files;
mod killpriv;
mod names;
mod write_back;
mod xattrs;

pub(crate) use caller::Caller;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use ext4kit_engine::{Error, Filesystem, Inode};
use ext4kit_format::inode::flags as fl;
use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo,
    InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::attr::{ext4_ino, file_attr};
use crate::handles::Handles;
use crate::options::{MountConfig, OnError};
use crate::transport::Notifier;
use crate::transport::abi::init;

/// An inode as LOOKUP, MKNOD, CREATE… answer it: its attributes and how
/// long the kernel may keep the name and the attributes.
pub(crate) struct Entry {
    pub(crate) attr: FileAttr,
    pub(crate) generation: u64,
    pub(crate) entry_ttl: std::time::Duration,
    pub(crate) attr_ttl: std::time::Duration,
}

/// What STATX adds to an inode's attributes: its creation time, when it
/// has one, and its `i_flags`.
pub(crate) struct Statx {
    pub(crate) attr: FileAttr,
    pub(crate) crtime: Option<ext4kit_format::inode::Timestamp>,
    pub(crate) flags: u32,
}

/// Largest read or write request (the kernel's `max_pages_limit` of 256 pages).
const MAX_IO: u32 = 1 << 20;

/// How long [`Ext4Fuse::check_space`] waits for background RELEASEs: the
/// kernel sends them at once, so a wait longer than a few milliseconds
/// means the file is open elsewhere.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// The FUSE file system: an engine plus the state a mount needs (handles,
/// options, whether errors made it read-only).
pub struct Ext4Fuse {
    /// The engine, replaced when the image grows (see [`crate::swap`]).
    pub(crate) served: Arc<crate::swap::Served>,
    pub(crate) cfg: MountConfig,
    pub(crate) handles: Handles,
    /// Set by `errors=remount-ro` after corruption is found.
    pub(crate) forced_ro: AtomicBool,
    /// What `mount -o remount,…` changed (see [`crate::remount_request`]).
    pub(crate) live: crate::remount_request::Live,
    /// Tells the kernel when its cached attributes went stale behind its
    /// back (set once the session exists).
    pub(crate) notifier: Arc<OnceLock<Notifier>>,
    /// Inodes written since their attributes were last refreshed.
    pub(crate) written: parking_lot::Mutex<std::collections::HashSet<u32>>,
    /// Inodes whose data failed to reach the image after the write was
    /// answered: their next fsync reports EIO (the kernel's write-back
    /// error).
    pub(crate) lost_writes: parking_lot::Mutex<std::collections::HashSet<u32>>,
    /// Files open for writing, and where their cached data failed.
    pub(crate) write_back: write_back::WriteBack,
    /// Busy-polls `/dev/fuse` while requests keep coming (set once the
    /// session exists, unless `poll=0`).
    pub(crate) poller: Arc<OnceLock<crate::poll::Poller>>,
    /// Room kept for the data the kernel's write-back cache holds.
    pub(crate) space: Arc<crate::space::Space>,
    /// Encrypted directories and symlinks shown to the kernel (see
    /// [`crate::key_caches`]).
    pub(crate) shown: crate::key_caches::Shown,
    /// Files made by TMPFILE without `O_EXCL`, still open and without a
    /// name: the only unlinked inodes a LINK may name.
    pub(crate) linkable: parking_lot::Mutex<std::collections::HashSet<u32>>,
}

type Res<T> = Result<T, Errno>;

/// What a request holds while it is served (see
/// [`Ext4Fuse::request_arrived`]).
type Arrived<'a> = (parking_lot::RwLockReadGuard<'a, ()>, Option<crate::poll::Serving<'a>>);

impl Ext4Fuse {
    /// Serves `served` with the options in `cfg`.
    pub(crate) fn new(served: Arc<crate::swap::Served>, cfg: MountConfig) -> Self {
        let fs = served.get();
        let geo = fs.geometry();
        let max_dirty = if cfg.writeback_cache && !cfg.read_only {
            let bytes = geo.blocks_count.saturating_mul(u64::from(geo.block_size));
            cfg.max_dirty.unwrap_or_else(|| crate::space::default_max_dirty(bytes))
        } else {
            0
        };
        Self {
            space: Arc::new(crate::space::Space::new(max_dirty)),
            live: crate::remount_request::Live::new(&cfg),
            served,
            cfg,
            handles: Handles::default(),
            forced_ro: AtomicBool::new(false),
            notifier: Arc::new(OnceLock::new()),
            written: Default::default(),
            lost_writes: Default::default(),
            write_back: Default::default(),
            poller: Arc::default(),
            shown: Default::default(),
            linkable: Default::default(),
        }
    }

    /// The `commit=` interval, which a remount may change.
    pub(crate) fn commit_slot(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.live.commit_slot()
    }

    /// Where the session puts its poller.
    pub(crate) fn poller_slot(&self) -> Arc<OnceLock<crate::poll::Poller>> {
        self.poller.clone()
    }

    /// The engine now served; a request holds it no longer than itself.
    pub(crate) fn fs(&self) -> Arc<Filesystem> {
        self.served.get()
    }

    /// Every request starts here: it keeps the mount busy and holds off a
    /// grow (see [`crate::swap`]). The request is served while the
    /// returned guard lives.
    fn request_arrived(&self) -> Arrived<'_> {
        // No user is held to quota limits until the request names one
        // ([`Ext4Fuse::quota_caller`]): the caller is per thread, and this
        // thread's last request may have been another user's.
        ext4kit_engine::set_caller_uid(None);
        let gate = self.served.enter();
        (gate, self.poller.get().map(crate::poll::Poller::request))
    }

    /// Names this request's user (its image uid, after `uid=`) to the
    /// engine, which holds that user to quota limits in the transactions
    /// this thread runs for the request.
    pub(crate) fn quota_caller(&self, req: &Caller) {
        let uid = crate::options::IdMap::to_image(self.cfg.uid_map, req.uid());
        ext4kit_engine::set_caller_uid(Some(uid));
    }

    /// [`open_flags`], and direct I/O for a writer held to quota limits
    /// under the write-back cache: cached pages reach us later from the
    /// kernel's flusher, without their writer, too late for EDQUOT.
    fn open_flags_for(&self, req: &Caller, flags: i32) -> FopenFlags {
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let uid = crate::options::IdMap::to_image(self.cfg.uid_map, req.uid());
        if writing && self.cfg.writeback_cache && self.fs().quota_limits_bind(uid) {
            return FopenFlags::FOPEN_DIRECT_IO;
        }
        open_flags(flags)
    }

    /// The reserve for cached writes, which the session sizes once the
    /// mount exists (the kernel's dirty limit is set then).
    pub(crate) fn space_slot(&self) -> Arc<crate::space::Space> {
        self.space.clone()
    }

    /// ENOSPC when only the room kept for the kernel's cached writes is
    /// left (see [`crate::space`]).
    ///
    /// `close(2)` does not wait for its RELEASE (the kernel sends it in the
    /// background), so an `rm` right after closing a file may reach us
    /// first, and the file's blocks stay held until the RELEASE does. Like
    /// `ext4_should_retry_alloc`, which waits for a commit to free blocks,
    /// this waits for releases while an unlinked file is open, for at most
    /// [`RELEASE_WAIT`] in all, before answering ENOSPC.
    pub(crate) fn check_space(&self) -> Res<()> {
        // Every create and uncached write asks: the clock and the release
        // count only once space is short.
        if self.space.check(&self.fs(), self.handles.writing()).is_ok() {
            return Ok(());
        }
        let deadline = std::time::Instant::now() + RELEASE_WAIT;
        loop {
            let seen = self.handles.releases();
            let writing = self.handles.writing();
            if self.space.check(&self.fs(), writing).is_ok() {
                return Ok(());
            }
            if !self.fs().holds_unlinked_open() {
                // The last such file may have been freed since the check.
                return self.space.check(&self.fs(), self.handles.writing());
            }
            if std::time::Instant::now() >= deadline || !self.handles.wait_release(seen, deadline) {
                return Err(Errno::ENOSPC);
            }
        }
    }

    /// After a change that may have taken space: on coming near the
    /// reserve, the attributes the kernel caches for files open for
    /// writing are dropped, so their next `write(2)` asks (see
    /// [`crate::space`]).
    pub(crate) fn space_taken(&self) {
        if !self.space.update(&self.fs(), self.handles.writing()) {
            return;
        }
        log::info!("ext4kit: free space near the reserve for cached writes: write(2) now asks first");
        let Some(n) = self.notifier.get() else { return };
        for ino in self.handles.writers() {
            if let Err(e) = n.inval_inode(crate::attr::fuse_ino(ino), -1, 0) {
                log::debug!("ext4kit: invalidating attributes of inode {ino}: {e}");
            }
        }
    }

    /// How long the kernel may keep attributes: not at all near the
    /// reserve, so that every `write(2)` asks first.
    pub(crate) fn attr_ttl(&self, normal: &std::time::Duration) -> std::time::Duration {
        if self.space.is_low() {
            std::time::Duration::ZERO
        } else {
            *normal
        }
    }

    /// Where the session puts its notifier.
    pub(crate) fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    /// Drops the kernel's cached attributes of `ino` if it was written since
    /// the last time. With the write-back cache the kernel keeps size and
    /// times itself but not `st_blocks`, which changes when its dirty pages
    /// reach us (on fsync and close).
    pub(crate) fn refresh_attrs(&self, ino: INodeNo) {
        let Some(e) = ext4_ino(ino) else { return };
        if !self.written.lock().remove(&e) {
            return;
        }
        if let Some(n) = self.notifier.get()
            && let Err(e) = n.inval_inode(ino, -1, 0)
        {
            log::debug!("ext4kit: invalidating attributes of {ino:?}: {e}");
        }
    }

    /// The errno for an engine error, after applying the `errors=` policy
    /// to corruption.
    pub(crate) fn errno(&self, e: Error) -> Errno {
        if matches!(e, Error::Corrupt(_) | Error::BadChecksum { .. }) {
            log::error!("ext4kit: {e}");
            // Recorded in the superblock before anything else happens.
            if let Err(e) = self.fs().commit_errors() {
                log::error!("ext4kit: recording the error in the superblock: {e}");
            }
            match self.live.errors() {
                OnError::Continue => {}
                OnError::RemountRo => {
                    if !self.forced_ro.swap(true, Ordering::Relaxed) {
                        log::error!("ext4kit: errors=remount-ro: no further changes will be made");
                    }
                }
                OnError::Panic => {
                    log::error!("ext4kit: errors=panic: stopping at once");
                    std::process::exit(70);
                }
            }
        }
        Errno::from_i32(e.errno())
    }

    /// Errors with EROFS unless changes are allowed.
    pub(crate) fn writable(&self) -> Res<()> {
        if self.cfg.read_only || self.forced_ro.load(Ordering::Relaxed) || self.live.read_only.load(Ordering::Acquire) {
            return Err(Errno::EROFS);
        }
        Ok(())
    }

    pub(crate) fn ino(&self, n: INodeNo) -> Res<u32> {
        ext4_ino(n).ok_or(Errno::ENOENT)
    }

    pub(crate) fn inode(&self, ino: u32) -> Res<Inode> {
        self.fs().inode(ino).map_err(|e| self.errno(e))
    }

    pub(crate) fn attr_of(&self, inode: &Inode) -> Res<FileAttr> {
        let m = self.fs().metadata(inode).map_err(|e| self.errno(e))?;
        Ok(file_attr(&m, self.fs().geometry().block_size, &self.cfg))
    }

    pub(crate) fn entry_of(&self, inode: &Inode) -> Res<Entry> {
        Ok(Entry {
            attr: self.attr_of(inode)?,
            generation: u64::from(inode.raw.i_generation.get()),
            entry_ttl: self.cfg.entry_timeout,
            attr_ttl: self.attr_ttl(&self.cfg.attr_timeout),
        })
    }

    /// LOOKUP: the entry, or a negative one the kernel keeps — except in
    /// a casefolded directory, where the kernel's case-sensitive cache
    /// would go on hiding `README` after `readme` is created, and in an
    /// encrypted one, whose names change when a key is added or removed
    /// ([`crate::key_caches`]); without its key neither kind of entry may
    /// be kept.
    pub(crate) fn lookup_entry(&self, parent: INodeNo, name: &[u8]) -> Res<Entry> {
        let dir = self.inode(self.ino(parent)?)?;
        let no_key = self.shown.note(&self.fs(), &dir);
        let entry = match self.lookup_name(&dir, name)? {
            Some(inode) => self.entry_of(&inode),
            None if dir.raw.flags() & (fl::CASEFOLD | fl::ENCRYPT) != 0 => Err(Errno::ENOENT),
            None => self.negative_entry(),
        };
        entry.map(|mut e| {
            if no_key {
                e.entry_ttl = std::time::Duration::ZERO;
            }
            e
        })
    }

    /// The INIT capabilities (`FUSE_*` bits) this server wants.
    pub(crate) fn init_wanted(&self) -> u64 {
        let mut want = init::PARALLEL_DIROPS
            | init::DO_READDIRPLUS
            | init::READDIRPLUS_AUTO
            | init::CACHE_SYMLINKS
            | init::ASYNC_DIO
            | init::EXPORT_SUPPORT
            | init::HAS_IOCTL_DIR
            // The kernel checks permissions against our POSIX ACLs and
            // leaves umask and default-ACL inheritance to the engine.
            | init::POSIX_ACL
            | init::DONT_MASK
            // A file opened with O_DIRECT may be mapped shared, as on
            // ext4: the kernel then flushes and drops the cached pages
            // around each direct read and write, which keeps the map and
            // direct I/O coherent (without this, mmap fails with ENODEV).
            | init::DIRECT_IO_ALLOW_MMAP
            // Set-id bits are dropped here, so the kernel can skip its
            // `security.capability` look-up on most writes (see `killpriv`).
            | init::HANDLE_KILLPRIV_V2;
        if self.cfg.writeback_cache && !self.cfg.read_only {
            want |= init::WRITEBACK_CACHE;
        }
        want
    }

    /// A GETATTR naming a handle open for writing is, with the write-back
    /// cache, how a `write(2)` with stale attributes starts: refused
    /// near full (see [`crate::space`]).
    pub(crate) fn getattr_of(&self, ino: INodeNo, fh: Option<u64>) -> Res<FileAttr> {
        if let Some(fh) = fh
            && let Some(crate::handles::Handle::File { write: true, .. }) = self.handles.get(fh)
        {
            self.check_space()?;
        }
        self.ino(ino).and_then(|i| self.inode(i)).and_then(|i| self.attr_of(&i))
    }

    /// STATX: what GETATTR answers, plus the creation time and flags.
    pub(crate) fn statx_of(&self, ino: INodeNo, fh: Option<u64>) -> Res<Statx> {
        let attr = self.getattr_of(ino, fh)?;
        let m = self
            .fs()
            .metadata(&self.inode(self.ino(ino)?)?)
            .map_err(|e| self.errno(e))?;
        Ok(Statx {
            attr,
            crtime: m.crtime,
            flags: m.flags,
        })
    }

    pub(crate) fn setattr_request(&self, ino: INodeNo, change: &names::Change) -> Res<FileAttr> {
        let r = self.set_attributes(ino, change);
        self.space_taken();
        r
    }

    /// WRITE: `cached` for pages from the kernel's write-back cache.
    pub(crate) fn write_request(
        &self,
        req: &Caller,
        ino: INodeNo,
        offset: u64,
        data: &[u8],
        cached: bool,
        reply: impl FnOnce(Res<u32>),
    ) {
        // A writer's own write colours a new file's first goal by its pid,
        // as ext4 without delalloc does; write-back comes from the
        // kernel's flusher and gets none, as ext4's delalloc gets none.
        ext4kit_engine::set_caller_pid((!cached).then(|| req.pid()));
        if !cached {
            self.quota_caller(req);
        }
        if !self.cfg.sync {
            return self.write_answering_early(ino, offset, data, cached, reply);
        }
        let r = self.write_data(ino, offset, data, cached);
        if let (Err(e), true) = (r, cached) {
            self.write_back_failed(ext4_ino(ino).unwrap_or(0), offset, data.len(), e);
        }
        reply(r);
    }

    /// Nothing to do at close: writes are committed as they arrive, and
    /// with the write-back cache the kernel writes its dirty pages back and
    /// drops the cached `st_blocks` itself before it would ask. Answering
    /// ENOSYS makes it stop sending FLUSH at all, which saves a round trip
    /// on every `close`.
    pub(crate) fn flush_request(&self, ino: INodeNo) -> Res<()> {
        self.written.lock().remove(&ext4_ino(ino).unwrap_or(0));
        Err(Errno::ENOSYS)
    }

    /// Also forgets that the file was written: the kernel dropped its
    /// cached `st_blocks` when it wrote the pages back at close, and FLUSH,
    /// which would say so, is no longer sent. (The set only tells fsync
    /// whether to drop cached attributes; it must not grow with every file
    /// ever written.)
    pub(crate) fn release_request(&self, ino: INodeNo, fh: u64) -> Res<()> {
        self.written.lock().remove(&ext4_ino(ino).unwrap_or(0));
        self.close_handle(fh)
    }

    /// The cached attributes are dropped before the answer: a `stat` right
    /// after `fsync` returns must see the `st_blocks` of the pages it just
    /// wrote back (the kernel processes the notification at once).
    pub(crate) fn fsync_request(&self, ino: INodeNo) -> Res<()> {
        let synced = self.sync_inode(ino);
        self.refresh_attrs(ino);
        synced
    }

    /// The open flags of a directory: its entries are cached with their
    /// offsets (see `dirs`).
    pub(crate) fn dir_open_flags() -> FopenFlags {
        FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR
    }

    /// STATFS: (blocks, free, available, files, free files, block size,
    /// name length).
    pub(crate) fn statfs_request(&self) -> (u64, u64, u64, u64, u64, u32, u32) {
        let fs = self.fs();
        let s = fs.statfs();
        // A full host under a sparse image shows as a full file system.
        let host = self
            .space
            .host_limit(&fs)
            .map_or(u64::MAX, |b| b / u64::from(s.block_size));
        (
            s.blocks,
            s.blocks_free.min(host),
            s.blocks_available.min(host),
            s.files,
            s.files_free,
            s.block_size,
            s.name_max,
        )
    }

    /// SETXATTR, including the name that carries a key for encrypted
    /// directories ([`crate::key_request`]).
    pub(crate) fn setxattr_request(
        &self,
        req: &Caller,
        ino: INodeNo,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Res<()> {
        use crate::key_request as kr;
        if let Some(desc) = kr::parse_request(name) {
            return desc
                .map_err(|()| Errno::EINVAL)
                .and_then(|d| self.add_key_request(d, value));
        }
        if let Some(key) = kr::parse_key_request(kr::REMOVE_KEY_XATTR, name) {
            return key.ok_or(Errno::EINVAL).and_then(|k| self.remove_key_request(ino, &k));
        }
        if name == kr::SET_POLICY_XATTR.as_bytes() {
            return self.set_policy_request(ino, value);
        }
        self.quota_caller(req);
        self.set_xattr(req, ino, name, value, flags)
    }

    /// GETXATTR, including the names that carry this server's own
    /// requests (sync, remount, defrag; resize is taken before the gate).
    pub(crate) fn getxattr_request(&self, req: &Caller, ino: INodeNo, name: &[u8], size: u32) -> Res<xattrs::Sized> {
        let r = if name == crate::sync_request::SYNC_XATTR.as_bytes() {
            self.sync_request(size)
        } else if let Some(options) = crate::remount_request::parse_request(name) {
            self.remount_request(options, size)
        } else if let Some(key) = crate::key_request::parse_key_request(crate::key_request::KEY_STATUS_XATTR, name) {
            key.ok_or(Errno::EINVAL).map(|k| self.key_status_request(&k))
        } else if let Some(opts) = crate::defrag_request::parse_request(name) {
            opts.ok_or(Errno::EINVAL)
                .and_then(|o| self.defrag_request(req, ino, o, size))
        } else {
            self.get_xattr(ino, name)
        };
        xattrs::sized(r, size)
    }

    /// CREATE: the new file's entry, handle and open flags.
    pub(crate) fn create_request(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &[u8],
        (mode, umask, flags): (u32, u32, i32),
    ) -> Res<(Entry, u64, FopenFlags)> {
        let (inode, fh) = self.create_file(req, parent, name, mode, umask, flags)?;
        let mut entry = self.entry_of(&inode)?;
        entry.attr_ttl = self.attr_ttl(&self.cfg.entry_timeout);
        Ok((entry, fh, self.open_flags_for(req, flags)))
    }

    /// TMPFILE: as CREATE, for a file with no name (zero links).
    pub(crate) fn tmpfile_request(
        &self,
        req: &Caller,
        parent: INodeNo,
        (mode, umask, flags): (u32, u32, i32),
    ) -> Res<(Entry, u64, FopenFlags)> {
        let (inode, fh) = self.tmpfile_file(req, parent, mode, umask, flags)?;
        let entry = self.entry_of(&inode)?;
        Ok((entry, fh, self.open_flags_for(req, flags)))
    }
}

fn reply_entry(r: Res<Entry>, reply: ReplyEntry) {
    match r {
        Ok(e) => reply.entry_with_ttls(&e.entry_ttl, &e.attr_ttl, &e.attr, Generation(e.generation)),
        Err(e) => reply.error(e),
    }
}

fn reply_attr(r: Res<FileAttr>, ttl: std::time::Duration, reply: ReplyAttr) {
    match r {
        Ok(a) => reply.attr(&ttl, &a),
        Err(e) => reply.error(e),
    }
}

fn reply_sized(r: Res<xattrs::Sized>, reply: ReplyXattr) {
    match r {
        Ok(xattrs::Sized::Len(n)) => reply.size(n),
        Ok(xattrs::Sized::Data(d)) => reply.data(&d),
        Err(e) => reply.error(e),
    }
}

fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

/// How the kernel should cache an open file: keep its pages across opens
/// (only this server changes the image), except with `O_DIRECT`, whose I/O
/// then goes straight to us.
fn open_flags(flags: i32) -> FopenFlags {
    if flags & libc::O_DIRECT != 0 {
        FopenFlags::FOPEN_DIRECT_IO
    } else {
        FopenFlags::FOPEN_KEEP_CACHE
    }
}

fn reply_empty(r: Res<()>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl fuser::Filesystem for Ext4Fuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // fuser's SETATTR does not pass FATTR_KILL_SUIDGID on: without it
        // a chown or truncate could not drop the set-id bits.
        let want = InitFlags::from_bits_retain(self.init_wanted() & !init::HANDLE_KILLPRIV_V2);
        let have = config.capabilities();
        let _ = config.add_capabilities(want & have);
        let _ = config.set_max_write(MAX_IO);
        let _ = config.set_max_readahead(MAX_IO);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        let _ = config.set_time_granularity(std::time::Duration::from_nanos(1));
        Ok(())
    }

    fn destroy(&mut self) {
        self.release_all();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _serving = self.request_arrived();
        reply_entry(self.lookup_entry(parent, name_bytes(name)), reply);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let _serving = self.request_arrived();
        let r = self.getattr_of(ino, fh.map(|f| f.0));
        reply_attr(r, self.attr_ttl(&self.cfg.attr_timeout), reply);
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _serving = self.request_arrived();
        let change = names::Change {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(Into::into),
            mtime: mtime.map(Into::into),
            kill_suidgid: false,
        };
        let r = self.setattr_request(ino, &change);
        reply_attr(r, self.attr_ttl(&self.cfg.attr_timeout), reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _serving = self.request_arrived();
        match self.read_link(ino) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let _serving = self.request_arrived();
        let r = self.make_node(&req.into(), parent, name_bytes(name), mode, umask, rdev);
        reply_entry(r.and_then(|i| self.entry_of(&i)), reply);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let _serving = self.request_arrived();
        let r = self.make_dir(&req.into(), parent, name_bytes(name), mode, umask);
        reply_entry(r.and_then(|i| self.entry_of(&i)), reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _serving = self.request_arrived();
        reply_empty(self.remove_name(parent, name_bytes(name), false), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _serving = self.request_arrived();
        reply_empty(self.remove_name(parent, name_bytes(name), true), reply);
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let _serving = self.request_arrived();
        let r = self.make_symlink(
            &req.into(),
            parent,
            name_bytes(link_name),
            target.as_os_str().as_bytes(),
        );
        reply_entry(r.and_then(|i| self.entry_of(&i)), reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _serving = self.request_arrived();
        self.quota_caller(&req.into());
        let r = self.rename_entry(parent, name_bytes(name), newparent, name_bytes(newname), flags);
        reply_empty(r, reply);
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let _serving = self.request_arrived();
        self.quota_caller(&req.into());
        let r = self.hard_link(ino, newparent, name_bytes(newname));
        reply_entry(r.and_then(|i| self.entry_of(&i)), reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _serving = self.request_arrived();
        match self.open_file(ino, flags.0) {
            Ok(fh) => reply.opened(FileHandle(fh), self.open_flags_for(&req.into(), flags.0)),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _serving = self.request_arrived();
        let mut reply = Some(reply);
        let r = self.read_data(ino, offset, size, |bytes| {
            if let Some(r) = reply.take() {
                r.data(bytes);
            }
        });
        if let (Err(e), Some(r)) = (r, reply.take()) {
            r.error(e);
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _serving = self.request_arrived();
        let cached = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        self.write_request(&req.into(), ino, offset, data, cached, |r| match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        });
    }

    fn flush(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        let _serving = self.request_arrived();
        reply_empty(self.flush_request(ino), reply);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _serving = self.request_arrived();
        reply_empty(self.release_request(ino, fh.0), reply);
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let _serving = self.request_arrived();
        reply_empty(self.fsync_request(ino), reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _serving = self.request_arrived();
        match self.open_dir(ino) {
            Ok(fh) => reply.opened(FileHandle(fh), Self::dir_open_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let _serving = self.request_arrived();
        let r = self.list_dir(fh.0, offset, |ino, next, kind, name| {
            !reply.add(ino, next, kind, OsStr::from_bytes(name))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let _serving = self.request_arrived();
        let r = self.list_dir_plus(fh.0, offset, |e, next, _kind, name| {
            !reply.add(
                e.attr.ino,
                next,
                OsStr::from_bytes(name),
                &e.attr_ttl,
                &e.attr,
                Generation(e.generation),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        let _serving = self.request_arrived();
        reply_empty(self.close_handle(fh.0), reply);
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let _serving = self.request_arrived();
        reply_empty(self.sync_inode(ino), reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _serving = self.request_arrived();
        let (blocks, bfree, bavail, files, ffree, bsize, namelen) = self.statfs_request();
        reply.statfs(blocks, bfree, bavail, files, ffree, bsize, namelen, bsize);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _serving = self.request_arrived();
        reply_empty(
            self.setxattr_request(&Caller::from(req), ino, name_bytes(name), value, flags),
            reply,
        );
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        // Before the gate, which a grow takes exclusively.
        if let Some(blocks) = crate::resize_request::parse_request(name_bytes(name)) {
            let r = blocks.ok_or(Errno::EINVAL).and_then(|b| self.resize_request(b, size));
            return reply_sized(xattrs::sized(r, size), reply);
        }
        let _serving = self.request_arrived();
        reply_sized(self.getxattr_request(&req.into(), ino, name_bytes(name), size), reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _serving = self.request_arrived();
        reply_sized(xattrs::sized(self.list_xattrs(ino), size), reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _serving = self.request_arrived();
        reply_empty(self.remove_xattr(ino, name_bytes(name)), reply);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        let _serving = self.request_arrived();
        // Mounted with default_permissions: the kernel checks access itself.
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _serving = self.request_arrived();
        match self.create_request(&req.into(), parent, name_bytes(name), (mode, umask, flags)) {
            Ok((e, fh, open)) => reply.created(&e.attr_ttl, &e.attr, Generation(e.generation), FileHandle(fh), open),
            Err(e) => reply.error(e),
        }
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let _serving = self.request_arrived();
        match self.inode_ioctl(&req.into(), ino, cmd, in_data, out_size) {
            Ok(out) => reply.ioctl(0, &out),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _serving = self.request_arrived();
        self.quota_caller(&req.into());
        reply_empty(self.allocate(ino, offset, length, mode), reply);
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        let _serving = self.request_arrived();
        match self.seek(ino, offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(e),
        }
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _serving = self.request_arrived();
        self.quota_caller(&req.into());
        match self.copy_range(ino_in, offset_in, ino_out, offset_out, len) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }
}
