//! `auto_da_alloc`: ext4's answer to applications that replace a file by
//! writing a new one and renaming it over the old, or by truncating it to
//! zero and rewriting it, without `fsync`. With delayed allocation the
//! rename or truncate can reach the journal long before the new data, so
//! a crash would leave an empty file where a full one was. As the kernel
//! does (`ext4_alloc_da_blocks` from `ext4_rename` and
//! `ext4_release_file`), the new data is written back first: before the
//! rename that replaces a name, and at the last close of a file that was
//! truncated to zero while open.

use std::collections::HashSet;

use parking_lot::Mutex;

use super::Delalloc;
use crate::error::{Error, Result};
use crate::fs::Filesystem;

/// Files truncated to zero since their last close.
#[derive(Debug, Default)]
pub(crate) struct Truncated(Mutex<HashSet<u32>>);

impl Delalloc {
    /// Notes that `ino` was truncated to zero.
    pub(crate) fn truncated_to_zero(&self, ino: u32) {
        self.truncated.0.lock().insert(ino);
    }

    /// Notes `ino`'s last close; true when it was truncated to zero since.
    pub(crate) fn closed(&self, ino: u32) -> bool {
        self.truncated.0.lock().remove(&ino)
    }
}

impl Filesystem {
    /// Writes back the file named `old_name` when renaming it to
    /// `new_name` replaces an existing name.
    ///
    /// # Errors
    /// Looking the names up, or the write-back.
    pub(crate) fn write_back_replacing(
        &self,
        old_parent: u32,
        old_name: &[u8],
        new_parent: u32,
        new_name: &[u8],
    ) -> Result<()> {
        if !self.opts.alloc.auto_da_alloc || self.delalloc.inodes().is_empty() {
            return Ok(());
        }
        let src = self.lookup_disk(&self.inode(old_parent)?, old_name)?;
        if !self.delalloc.holds(src) {
            return Ok(());
        }
        match self.lookup_disk(&self.inode(new_parent)?, new_name) {
            Ok(_) => self.flush_file(src),
            Err(Error::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// At the last close of `ino`: writes it back when it was truncated to
    /// zero since it was opened.
    ///
    /// # Errors
    /// The write-back's.
    pub(crate) fn write_back_truncated(&self, ino: u32) -> Result<()> {
        if self.delalloc.closed(ino) && self.opts.alloc.auto_da_alloc {
            return self.flush_file(ino);
        }
        Ok(())
    }
}
