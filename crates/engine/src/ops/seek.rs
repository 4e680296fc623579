//! `lseek(2)` with `SEEK_DATA` and `SEEK_HOLE` (`ext4_llseek` through
//! `iomap_seek_data`/`iomap_seek_hole`): data is what initialized blocks
//! map; holes are unmapped blocks, unwritten extents (the kernel counts them
//! as holes unless dirty pages sit over them; this engine has no page
//! cache), and the implicit hole at end of file. Inline bodies are all data.
//! Read-only: no transaction.

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::map::Run;

impl Filesystem {
    /// The first byte at or after `offset` of file `ino` that holds data.
    ///
    /// Cost: the mapping walk from `offset` to the end of file.
    ///
    /// # Errors
    /// [`Error::NoSuchOffset`] (`ENXIO`) when `offset` is at or past the
    /// size or no data follows it; corrupt mappings; I/O errors.
    pub fn seek_data(&self, ino: u32, offset: u64) -> Result<u64> {
        self.reading("seek_data", || self.seek_data_unrecorded(ino, offset))
    }

    fn seek_data_unrecorded(&self, ino: u32, offset: u64) -> Result<u64> {
        self.flush_file(ino)?;
        let inode = self.inode(ino)?;
        let size = inode.size();
        if offset >= size {
            return Err(Error::NoSuchOffset { offset });
        }
        if inode.has_inline_data() {
            return Ok(offset);
        }
        let bs = u64::from(self.geo.block_size);
        let first = self
            .data_runs(&inode, offset)?
            .first()
            .map(|r| (r.logical * bs).max(offset));
        match first {
            Some(at) if at < size => Ok(at),
            _ => Err(Error::NoSuchOffset { offset }),
        }
    }

    /// The first byte at or after `offset` of file `ino` in a hole; the
    /// size when data runs to the end of file.
    ///
    /// Cost: the mapping walk from `offset` to the end of file.
    ///
    /// # Errors
    /// [`Error::NoSuchOffset`] (`ENXIO`) when `offset` is at or past the
    /// size; corrupt mappings; I/O errors.
    pub fn seek_hole(&self, ino: u32, offset: u64) -> Result<u64> {
        self.reading("seek_hole", || self.seek_hole_unrecorded(ino, offset))
    }

    fn seek_hole_unrecorded(&self, ino: u32, offset: u64) -> Result<u64> {
        self.flush_file(ino)?;
        let inode = self.inode(ino)?;
        let size = inode.size();
        if offset >= size {
            return Err(Error::NoSuchOffset { offset });
        }
        if inode.has_inline_data() {
            return Ok(size);
        }
        let bs = u64::from(self.geo.block_size);
        let mut at = offset / bs;
        for r in self.data_runs(&inode, offset)? {
            if r.logical > at {
                break;
            }
            at = at.max(r.end());
        }
        Ok((at * bs).clamp(offset, size))
    }

    /// The initialized runs from the block holding `offset` to end of file.
    fn data_runs(&self, inode: &Inode, offset: u64) -> Result<Vec<Run>> {
        let bs = u64::from(self.geo.block_size);
        let first = offset / bs;
        let last = inode.size().div_ceil(bs);
        let mut runs = self.map_range(inode, first, last.saturating_sub(first))?;
        runs.retain(|r| !r.unwritten);
        Ok(runs)
    }
}
