//! A file-system-wide sync the server hears of: `ext4kit sync MOUNTPOINT`.
//!
//! `sync(1)`, `sync -f` and `syncfs(2)` on a FUSE mount reach the server
//! only as the write-back of the kernel's dirty pages (WRITE) and times
//! (SETATTR), which look like any other write-back: the kernel sends
//! `FUSE_SYNCFS` only on connections that set `fc->sync_fs`, which only
//! virtiofs does (`fs/fuse/inode.c`, `fuse_sync_fs`). Seen on Linux 6.18
//! with `EXT4KIT_LOG=debug`: `sync` sends nothing, `sync -f FILE` an OPEN
//! and a RELEASE, `syncfs(2)` on the mount an OPENDIR and a RELEASEDIR.
//! Until the journal's next commit (`commit=`, 5 s by default) what they
//! "synced" is not durable.
//!
//! `ext4kit sync` first calls `syncfs(2)`, which writes the kernel's dirty
//! pages to the server and waits for them, then reads the extended
//! attribute [`SYNC_XATTR`] of the mount point. FUSE passes the request to
//! the server unchanged and never caches it; the server commits and
//! flushes everything ([`ext4kit_engine::Filesystem::sync`]) before it
//! answers, with [`SYNC_REPLY`], so the caller knows an ext4kit server
//! answered. The name is outside every namespace the kernel's file
//! systems accept (`user.`, `trusted.`, `security.`, `system.`), so no
//! attribute of an ext4 image can have it, and any other file system
//! refuses it. (A private ioctl would do as well, but every ioctl call is
//! `unsafe` in Rust, which this workspace forbids.)

use fuser::Errno;

use crate::adapter::Ext4Fuse;

/// The extended attribute whose reading is a sync request.
pub const SYNC_XATTR: &str = "ext4kit.sync";

/// Its value, once everything is durable.
pub const SYNC_REPLY: &[u8] = b"ext4kit synced";

impl Ext4Fuse {
    /// Answers a read of [`SYNC_XATTR`] of size `size`: a size query
    /// (`size == 0`) gets the length, a read gets [`SYNC_REPLY`] once
    /// every change is durable.
    pub(crate) fn sync_request(&self, size: u32) -> Result<Vec<u8>, Errno> {
        if size != 0 {
            self.fs().sync().map_err(|e| self.errno(e))?;
        }
        Ok(SYNC_REPLY.to_vec())
    }
}
