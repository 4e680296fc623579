//! Byte-order listing (the kernel's `ext4_readdir` for directories that
//! are not `is_dx_dir`): a position is the byte offset of the record to
//! resume at, `logical block * block size + offset in block`.
//!
//! Entries of such a directory never move: a new name takes the slack of
//! an existing record, a removed one is merged into the record before it.
//! A position left inside a merged record resumes at the next record
//! boundary after it, as the kernel's rescan of the block does.

use super::{fill, scratch};
use crate::dir::DirEntry;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

impl Filesystem {
    /// Lists `dir` in byte order from offset `pos`.
    pub(super) fn linear_from(
        &self,
        dir: &Inode,
        pos: u64,
        mut f: impl FnMut(&DirEntry, u64) -> Result<bool>,
    ) -> Result<()> {
        if dir.has_inline_data() {
            return self.inline_from(dir, pos, f);
        }
        let bs = u64::from(self.geo.block_size);
        let blocks = dir.size().div_ceil(bs);
        let first = pos / bs;
        let mut entry = scratch();
        let mut next = first;
        for run in self.map_range(dir, first, blocks.saturating_sub(first))? {
            if run.logical > next {
                return Err(hole(dir, next));
            }
            next = run.logical + run.len;
            for i in 0..run.len {
                let logical = run.logical + i;
                let skip = if logical == first { pos % bs } else { 0 };
                let go_on = self.linear_block(dir, run.physical + i, logical, skip, &mut entry, &mut f)?;
                if !go_on {
                    return Ok(());
                }
            }
        }
        if next < blocks {
            return Err(hole(dir, next));
        }
        Ok(())
    }

    /// Emits the records of one block at or after byte `skip` of it;
    /// false when `f` asked to stop.
    fn linear_block(
        &self,
        dir: &Inode,
        block: u64,
        logical: u64,
        skip: u64,
        entry: &mut DirEntry,
        f: &mut impl FnMut(&DirEntry, u64) -> Result<bool>,
    ) -> Result<bool> {
        let buf = self.meta_block(block, dir.ino)?;
        let at = Location::Block { block, inode: dir.ino };
        let base = logical << self.geo.block_size_log2;
        let mut failed = None;
        let stopped = self.scan_dir_block(dir, &buf, logical, at, |e| {
            if (e.offset as u64) < skip {
                return false;
            }
            let next = base + (e.offset + e.rec_len) as u64;
            match f(fill(entry, e.inode, e.file_type, e.name), next) {
                Ok(go_on) => !go_on,
                Err(err) => {
                    failed = Some(err);
                    true
                }
            }
        })?;
        match failed {
            Some(err) => Err(err),
            None => Ok(stopped.is_none()),
        }
    }

    /// An inline directory without `dir_index`: positions are entry
    /// numbers (`.` is 0), since its records have no block to be offsets in.
    fn inline_from(&self, dir: &Inode, pos: u64, mut f: impl FnMut(&DirEntry, u64) -> Result<bool>) -> Result<()> {
        let mut n = 0u64;
        self.for_each_inline_dir_entry(dir, |e| {
            n += 1;
            if n <= pos {
                return Ok(true);
            }
            f(&e, n)
        })
    }
}

/// A directory never has holes: the kernel's `ext4_readdir` reports
/// "directory contains a hole at lblk N", and block 0 is where `.` and
/// `..` must be. Listing on past one would hide the damage.
fn hole(dir: &Inode, logical: u64) -> Error {
    Error::inconsistent(
        Location::Inode(dir.ino),
        format!(
            "directory contains a hole at block {logical} (its size says it has {} bytes)",
            dir.size()
        ),
    )
}
