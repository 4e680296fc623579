//! Directory streams. `opendir` reads nothing: the handle holds an engine
//! [`DirStream`], and `readdir`/`readdirplus` list from the offset the
//! kernel passes, which is the position the engine handed out with the
//! last entry the kernel kept. Offset 0 (`rewinddir`) starts a new pass.
//! Positions stay valid while the directory changes (hash positions for
//! indexed directories, byte offsets for linear ones, snapshot indices for
//! `-o readdir=inode`), which is what `FOPEN_CACHE_DIR` needs: the kernel
//! caches the entries with their offsets and asks for more from the last.

use std::sync::Arc;

use ext4kit_engine::dir::DirEntry;
use fuser::{Errno, FileType, INodeNo};
use parking_lot::Mutex;

use super::{Ext4Fuse, Res};
use crate::attr::{fuse_ino, fuse_type};
use crate::handles::Handle;

impl Ext4Fuse {
    pub(super) fn open_dir(&self, ino: INodeNo) -> Res<u64> {
        let ino = self.ino(ino)?;
        let dir = self.inode(ino)?;
        let stream = self.fs().dir_stream(&dir).map_err(|e| self.errno(e))?;
        Ok(self.handles.insert(Handle::Dir {
            ino,
            stream: Arc::new(Mutex::new(stream)),
        }))
    }

    /// Lists handle `fh` from `offset` into `add`, which returns false when
    /// the reply is full. Errors of `add` itself are returned as they are.
    /// `add` also learns whether the names are no-key names (see
    /// [`crate::key_caches`]).
    fn stream_dir(&self, fh: u64, offset: u64, mut add: impl FnMut(&DirEntry, u64, bool) -> Res<bool>) -> Res<()> {
        let Some(Handle::Dir { ino, stream }) = self.handles.get(fh) else {
            return Err(Errno::EBADF);
        };
        let dir = self.inode(ino)?;
        let no_key = self.shown.note(&self.fs(), &dir);
        let mut stream = stream.lock();
        let mut failed = None;
        let listed = self
            .fs()
            .read_dir_from(&dir, &mut stream, offset, |e, next| match add(e, next, no_key) {
                Ok(more) => Ok(more),
                Err(errno) => {
                    failed = Some(errno);
                    Ok(false)
                }
            });
        match (failed, listed) {
            (Some(errno), _) => Err(errno),
            (None, Err(e)) => Err(self.errno(e)),
            (None, Ok(())) => Ok(()),
        }
    }

    fn entry_type(&self, e: &DirEntry) -> FileType {
        match e.file_type {
            Some(t) => fuse_type(t),
            None => self
                .fs()
                .inode(e.ino)
                .ok()
                .and_then(|i| i.raw.file_type())
                .map_or(FileType::RegularFile, fuse_type),
        }
    }

    /// Lists handle `fh` from `offset` into `add` (ino, next offset,
    /// type, name), which returns false once the reply is full.
    pub(crate) fn list_dir(
        &self,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(INodeNo, u64, FileType, &[u8]) -> bool,
    ) -> Res<()> {
        self.stream_dir(fh, offset, |e, next, _| {
            Ok(add(fuse_ino(e.ino), next, self.entry_type(e), &e.name))
        })
    }

    /// [`Ext4Fuse::list_dir`] with each entry's attributes (READDIRPLUS).
    pub(crate) fn list_dir_plus(
        &self,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(&super::Entry, u64, FileType, &[u8]) -> bool,
    ) -> Res<()> {
        self.stream_dir(fh, offset, |e, next, no_key| {
            let inode = self.inode(e.ino)?;
            let mut entry = self.entry_of(&inode)?;
            // One time to live for both, as fuser's READDIRPLUS gave; none
            // for a no-key name.
            entry.attr_ttl = self.attr_ttl(&self.cfg.entry_timeout);
            entry.entry_ttl = if no_key {
                std::time::Duration::ZERO
            } else {
                entry.attr_ttl
            };
            Ok(add(&entry, next, self.entry_type(e), &e.name))
        })
    }
}
