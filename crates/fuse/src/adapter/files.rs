//! File data operations: open/create/release (the engine counts open files
//! so an unlinked file lives until its last close), read/write, fsync,
//! fallocate, SEEK_DATA/SEEK_HOLE, copy_file_range and the inode-flags
//! ioctls (`chattr`/`lsattr`, with project ids: `chattr -p`, `lsattr -p`).

use ext4kit_engine::NodeKind;
use fuser::{Errno, INodeNo};

use super::caller::Caller;

use super::{Ext4Fuse, MAX_IO, Res};
use crate::handles::Handle;

/// `FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS` (and their 32-bit twins): the
/// kernel forwards `chattr`/`lsattr` as these with a 4-byte value.
const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;

/// `FS_IOC_FSGETXATTR` / `FS_IOC_FSSETXATTR` (`struct fsxattr`, 28 bytes):
/// the kernel asks for these around every flags change (`fileattr_get`).
const FS_IOC_FSGETXATTR: u32 = 0x801C_581F;
const FS_IOC_FSSETXATTR: u32 = 0x401C_5820;

/// Inode flags and their `FS_XFLAG_*` twins (`fileattr_fill_flags`).
const XFLAGS: [(u32, u32); 6] = [
    (0x10, 0x08),         // IMMUTABLE
    (0x20, 0x10),         // APPEND
    (0x08, 0x20),         // SYNC
    (0x80, 0x40),         // NOATIME
    (0x40, 0x80),         // NODUMP
    (0x2000_0000, 0x200), // PROJINHERIT
];

fn to_xflags(flags: u32) -> u32 {
    XFLAGS
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .fold(0, |x, (_, xf)| x | xf)
}

fn from_xflags(old: u32, xflags: u32) -> u32 {
    XFLAGS
        .iter()
        .fold(old, |f, &(fl, xf)| if xflags & xf != 0 { f | fl } else { f & !fl })
}

impl Ext4Fuse {
    pub(super) fn open_file(&self, ino: INodeNo, flags: i32) -> Res<u64> {
        let ino = self.ino(ino)?;
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let truncate = flags & libc::O_TRUNC != 0;
        let mut size = 0;
        if write || truncate {
            self.writable()?;
            let inode = self.inode(ino)?;
            self.fs()
                .check_open(&inode, write, flags & libc::O_APPEND != 0, truncate)
                .map_err(|e| self.errno(e))?;
            size = inode.size();
        }
        // Without its key an encrypted file does not open (ENOKEY).
        self.fs()
            .require_key_to_open(&self.inode(ino)?)
            .map_err(|e| self.errno(e))?;
        self.fs().open_file(ino).map_err(|e| self.errno(e))?;
        if write {
            self.opened_for_writing(ino, size, None);
        }
        if flags & libc::O_ACCMODE != libc::O_WRONLY {
            self.opened_for_reading(ino);
        }
        Ok(self.handles.insert(Handle::File { ino, write }))
    }

    pub(super) fn create_file(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Res<(ext4kit_engine::Inode, u64)> {
        let inode = self.create_node(req, parent, name, NodeKind::Regular, mode, umask)?;
        self.fs().open_file(inode.ino).map_err(|e| self.errno(e))?;
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let fh = self.handles.insert(Handle::File { ino: inode.ino, write });
        if write {
            self.opened_for_writing(inode.ino, 0, Some((parent, name)));
        }
        Ok((inode, fh))
    }

    /// TMPFILE: the nameless file made and opened; without `O_EXCL` a
    /// later LINK may name it.
    pub(super) fn tmpfile_file(
        &self,
        req: &Caller,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Res<(ext4kit_engine::Inode, u64)> {
        let inode = self.make_tmpfile(req, parent, mode, umask)?;
        if flags & libc::O_EXCL == 0 {
            self.linkable.lock().insert(inode.ino);
        }
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let fh = self.handles.insert(Handle::File { ino: inode.ino, write });
        if write {
            self.opened_for_writing(inode.ino, 0, None);
        }
        Ok((inode, fh))
    }

    pub(super) fn close_handle(&self, fh: u64) -> Res<()> {
        match self.handles.remove(fh) {
            Some(Handle::File { ino, write }) => {
                if write {
                    self.closed_for_writing(ino);
                }
                let closed = self.fs().release_file(ino).map_err(|e| self.errno(e));
                if !self.fs().is_open(ino) {
                    self.linkable.lock().remove(&ino);
                }
                self.handles.note_release();
                closed
            }
            Some(Handle::Dir { .. }) => Ok(()),
            None => Err(Errno::EBADF),
        }
    }

    /// Closes whatever the kernel left open (at unmount).
    pub(super) fn release_all(&self) {
        for h in self.handles.drain() {
            if let Handle::File { ino, .. } = h
                && let Err(e) = self.fs().release_file(ino)
            {
                log::error!("ext4kit: closing inode {ino} at unmount: {e}");
            }
        }
    }

    /// Reads into this thread's buffer and hands the bytes to `reply`
    /// (one buffer per serving thread: no allocation or zero-fill per read).
    pub(super) fn read_data(&self, ino: INodeNo, offset: u64, size: u32, reply: impl FnOnce(&[u8])) -> Res<()> {
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let ino = self.ino(ino)?;
        let inode = self.inode(ino)?;
        let len = inode.size().saturating_sub(offset).min(u64::from(size.min(MAX_IO))) as usize;
        BUF.with_borrow_mut(|buf| {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            // Reads the inode again under the file's lock: a write or
            // truncate that ran since is seen whole.
            let n = self
                .fs()
                .read_file_at(ino, offset, &mut buf[..len])
                .map_err(|e| self.errno(e))?;
            reply(&buf[..n]);
            Ok::<(), Errno>(())
        })?;
        self.note_access(ino);
        Ok(())
    }

    fn atime_policy(&self) -> ext4kit_engine::AtimePolicy {
        use crate::options::AtimeMode;
        match self.live.atime() {
            AtimeMode::NoAtime => ext4kit_engine::AtimePolicy::NoAtime,
            AtimeMode::Relatime => ext4kit_engine::AtimePolicy::Relatime,
            AtimeMode::Strict => ext4kit_engine::AtimePolicy::Strict,
        }
    }

    /// Updates the access time as the `atime` option says; true when it
    /// changed.
    fn note_access(&self, ino: u32) -> bool {
        if self.writable().is_err() {
            return false;
        }
        self.fs().touch_atime(ino, self.atime_policy()).unwrap_or_else(|e| {
            log::warn!("ext4kit: updating the access time of inode {ino}: {e}");
            false
        })
    }

    /// An open for reading counts as the read that follows: the kernel
    /// serves reads of cached pages (`FOPEN_KEEP_CACHE`, the write-back
    /// cache) without asking, and marks FUSE inodes `S_NOATIME`, so the
    /// server is the only one to apply the atime option and the per-file
    /// `noatime` flag, and the open the last request it is sure to see.
    /// The kernel's cached atime is dropped when it changed.
    fn opened_for_reading(&self, ino: u32) {
        if self.note_access(ino)
            && let Some(n) = self.notifier.get()
            && let Err(e) = n.inval_inode(crate::attr::fuse_ino(ino), -1, 0)
        {
            log::debug!("ext4kit: invalidating attributes of inode {ino}: {e}");
        }
    }

    pub(super) fn write_data(&self, ino: INodeNo, offset: u64, data: &[u8], cached: bool) -> Res<u32> {
        self.writable()?;
        let ino = self.ino(ino)?;
        if cached {
            self.past_failure(ino, offset, data.len())?;
        } else {
            self.check_space()?;
        }
        let n = self.fs().write(ino, offset, data).map_err(|e| self.errno(e))?;
        self.space_taken();
        self.written.lock().insert(ino);
        if self.cfg.sync {
            self.fs().sync_inode(ino).map_err(|e| self.errno(e))?;
        }
        Ok(n as u32)
    }

    /// WRITE without `-o sync`: answered once the engine has published
    /// the change, while the data is still being copied to the image (see
    /// [`ext4kit_engine::Filesystem::write_announcing`]). A copy that fails
    /// after the answer is remembered for the file's next fsync.
    pub(super) fn write_answering_early(
        &self,
        ino: INodeNo,
        offset: u64,
        data: &[u8],
        cached: bool,
        reply: impl FnOnce(Res<u32>),
    ) {
        let e4 = match self.writable().and_then(|()| self.ino(ino)) {
            Ok(i) => i,
            Err(e) => return reply(Err(e)),
        };
        let admitted = if cached {
            self.past_failure(e4, offset, data.len())
        } else {
            self.check_space()
        };
        if let Err(e) = admitted {
            return reply(Err(e));
        }
        let mut reply = Some(reply);
        let r = self.fs().write_announcing(e4, offset, data, |n| {
            self.written.lock().insert(e4);
            if let Some(reply) = reply.take() {
                reply(Ok(n as u32));
            }
        });
        self.space_taken();
        if let Err(e) = r {
            let errno = self.errno(e);
            if cached {
                self.write_back_failed(e4, offset, data.len(), errno);
            }
            match reply.take() {
                Some(reply) => reply(Err(errno)),
                None => {
                    log::error!("ext4kit: writing data of inode {e4} after answering: {errno:?}");
                    self.lost_writes.lock().insert(e4);
                }
            }
        }
    }

    /// fsync: waits for the journal transaction holding the inode's last
    /// change, not for everything other files changed since; EIO once if
    /// data written to it since the last fsync was lost.
    pub(super) fn sync_inode(&self, ino: INodeNo) -> Res<()> {
        let ino = self.ino(ino)?;
        let synced = self.fs().sync_inode(ino).map_err(|e| self.errno(e));
        self.synced(ino);
        if self.lost_writes.lock().remove(&ino) {
            return Err(Errno::EIO);
        }
        synced
    }

    pub(super) fn allocate(&self, ino: INodeNo, offset: u64, len: u64, mode: i32) -> Res<()> {
        self.writable()?;
        let mode = ext4kit_engine::FallocMode::from_linux_flags(mode as u32).map_err(|e| self.errno(e))?;
        if !matches!(mode, ext4kit_engine::FallocMode::PunchHole) {
            self.check_space()?;
        }
        let r = self
            .fs()
            .fallocate(self.ino(ino)?, offset, len, mode)
            .map_err(|e| self.errno(e));
        self.space_taken();
        r
    }

    pub(super) fn seek(&self, ino: INodeNo, offset: i64, whence: i32) -> Res<i64> {
        let ino = self.ino(ino)?;
        let offset = u64::try_from(offset).map_err(|_| Errno::ENXIO)?;
        let r = match whence {
            libc::SEEK_DATA => self.fs().seek_data(ino, offset),
            libc::SEEK_HOLE => self.fs().seek_hole(ino, offset),
            _ => return Err(Errno::EINVAL),
        };
        let pos = r.map_err(|e| self.errno(e))?;
        i64::try_from(pos).map_err(|_| Errno::EOVERFLOW)
    }

    /// Copies in chunks inside the engine's process: one request instead
    /// of a read and a write per page through the kernel.
    pub(super) fn copy_range(
        &self,
        from: INodeNo,
        mut off_in: u64,
        to: INodeNo,
        mut off_out: u64,
        len: u64,
    ) -> Res<u32> {
        self.writable()?;
        self.check_space()?;
        let (from, to) = (self.ino(from)?, self.ino(to)?);
        let len = len.min(u64::from(u32::MAX) & !(u64::from(MAX_IO) - 1));
        let mut done = 0u64;
        while done < len {
            let inode = self.inode(from)?;
            let want = (len - done)
                .min(u64::from(MAX_IO))
                .min(inode.size().saturating_sub(off_in));
            if want == 0 {
                break;
            }
            let mut buf = vec![0u8; want as usize];
            let n = self
                .fs()
                .read_file_at(from, off_in, &mut buf)
                .map_err(|e| self.errno(e))?;
            if n == 0 {
                break;
            }
            self.fs().write(to, off_out, &buf[..n]).map_err(|e| self.errno(e))?;
            self.space_taken();
            done += n as u64;
            off_in += n as u64;
            off_out += n as u64;
        }
        Ok(done as u32)
    }

    /// `fsx_projid` of an `FS_IOC_FSSETXATTR`: a changed project id moves
    /// the inode's usage to the new project, held to its limits
    /// (`ext4_ioctl_setproject`); without the project feature only 0 is
    /// accepted (EOPNOTSUPP otherwise).
    fn set_projid(&self, req: &Caller, ino: u32, input: &[u8]) -> Res<()> {
        let Some(raw) = input.get(12..16).and_then(|b| <[u8; 4]>::try_from(b).ok()) else {
            return Ok(());
        };
        let projid = u32::from_le_bytes(raw);
        let (now, _) = self.fs().project(ino).map_err(|e| self.errno(e))?;
        if projid == now {
            return Ok(());
        }
        self.quota_caller(req);
        self.fs()
            .set_project(ino, Some(projid), None)
            .map_err(|e| self.errno(e))
    }

    pub(super) fn inode_ioctl(
        &self,
        req: &Caller,
        ino: INodeNo,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> Res<Vec<u8>> {
        let ino = self.ino(ino)?;
        match cmd {
            FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => {
                let flags = self.inode(ino)?.raw.flags() & ext4kit_engine::flags::USER_VISIBLE;
                let mut out = flags.to_le_bytes().to_vec();
                out.resize((out_size as usize).clamp(4, 8), 0);
                Ok(out)
            }
            FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
                self.writable()?;
                let raw: [u8; 4] = input.get(..4).and_then(|b| b.try_into().ok()).ok_or(Errno::EINVAL)?;
                let privileged = req.uid() == 0;
                self.fs()
                    .set_flags(ino, u32::from_le_bytes(raw), privileged)
                    .map_err(|e| self.errno(e))?;
                Ok(Vec::new())
            }
            FS_IOC_FSGETXATTR => {
                let mut out = vec![0u8; 28];
                out[..4].copy_from_slice(&to_xflags(self.inode(ino)?.raw.flags()).to_le_bytes());
                let (projid, _) = self.fs().project(ino).map_err(|e| self.errno(e))?;
                out[12..16].copy_from_slice(&projid.to_le_bytes());
                out.truncate(out_size as usize);
                Ok(out)
            }
            FS_IOC_FSSETXATTR => {
                self.writable()?;
                let raw: [u8; 4] = input.get(..4).and_then(|b| b.try_into().ok()).ok_or(Errno::EINVAL)?;
                let old = self.inode(ino)?.raw.flags() & ext4kit_engine::flags::USER_VISIBLE;
                let flags = from_xflags(old, u32::from_le_bytes(raw));
                self.fs()
                    .set_flags(ino, flags, req.uid() == 0)
                    .map_err(|e| self.errno(e))?;
                self.set_projid(req, ino, input)?;
                Ok(Vec::new())
            }
            _ => Err(Errno::ENOTTY),
        }
    }
}
