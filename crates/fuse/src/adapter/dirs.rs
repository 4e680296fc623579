//! Directory streams. `opendir` lists the directory once; `readdir` and
//! `readdirplus` serve that listing with offsets = index + 1, and a read
//! from offset 0 (`rewinddir`) lists again. With `FOPEN_CACHE_DIR` the
//! kernel keeps the result until the directory changes.

use std::sync::Arc;

use ext4kit_engine::dir::DirEntry;
use fuser::{Errno, FileType, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};

use super::{Ext4Fuse, Res};
use crate::attr::{fuse_ino, fuse_type};
use crate::handles::Handle;

impl Ext4Fuse {
    fn listing(&self, ino: u32) -> Res<Arc<Vec<DirEntry>>> {
        let dir = self.inode(ino)?;
        Ok(Arc::new(self.fs.read_dir(&dir).map_err(|e| self.errno(e))?))
    }

    pub(super) fn open_dir(&self, ino: INodeNo) -> Res<u64> {
        let ino = self.ino(ino)?;
        let entries = self.listing(ino)?;
        Ok(self.handles.insert(Handle::Dir { ino, entries }))
    }

    /// The listing of handle `fh`, taken afresh when reading from the start.
    fn entries(&self, fh: u64, offset: u64) -> Res<Arc<Vec<DirEntry>>> {
        match self.handles.get(fh) {
            Some(Handle::Dir { ino, entries }) if offset == 0 => {
                let _ = entries;
                let fresh = self.listing(ino)?;
                self.handles.replace(
                    fh,
                    Handle::Dir {
                        ino,
                        entries: fresh.clone(),
                    },
                );
                Ok(fresh)
            }
            Some(Handle::Dir { entries, .. }) => Ok(entries),
            _ => Err(Errno::EBADF),
        }
    }

    fn entry_type(&self, e: &DirEntry) -> FileType {
        match e.file_type {
            Some(t) => fuse_type(t),
            None => self
                .fs
                .inode(e.ino)
                .ok()
                .and_then(|i| i.raw.file_type())
                .map_or(FileType::RegularFile, fuse_type),
        }
    }

    pub(super) fn list_dir(&self, fh: u64, offset: u64, mut reply: ReplyDirectory) {
        let entries = match self.entries(fh, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(fuse_ino(e.ino), i as u64 + 1, self.entry_type(e), bytes_name(&e.name)) {
                break;
            }
        }
        reply.ok();
    }

    pub(super) fn list_dir_plus(&self, fh: u64, offset: u64, mut reply: ReplyDirectoryPlus) {
        let entries = match self.entries(fh, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let inode = match self.inode(e.ino) {
                Ok(i) => i,
                Err(err) => return reply.error(err),
            };
            let attr = match self.attr_of(&inode) {
                Ok(a) => a,
                Err(err) => return reply.error(err),
            };
            let generation = Generation(u64::from(inode.raw.i_generation.get()));
            if reply.add(
                fuse_ino(e.ino),
                i as u64 + 1,
                bytes_name(&e.name),
                &self.attr_ttl(&self.cfg.entry_timeout),
                &attr,
                generation,
            ) {
                break;
            }
        }
        reply.ok();
    }
}

fn bytes_name(name: &[u8]) -> &std::ffi::OsStr {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(name)
}
