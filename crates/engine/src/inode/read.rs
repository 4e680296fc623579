//! Reading file bodies: mapped runs are read straight from the device in
//! large requests; holes and unwritten extents read as zeros; inline bodies
//! come from the inode.
//!
//! Readers of a file's data take its inode lock shared
//! ([`crate::inode_locks`]): a write holds it exclusive from before its
//! new blocks are mapped until their data is on the device, so a read never
//! returns what such a block held before.

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

impl Filesystem {
    /// Reads up to `buf.len()` bytes of `inode`'s body at byte `offset`;
    /// returns the count read (0 at or past end of file).
    ///
    /// Cost: the tree walk for the range (cached) plus one device read per
    /// mapped run.
    ///
    /// The inode is read again under the file's lock: `inode` may have
    /// been read before a write-back mapped its held pages
    /// ([`crate::delalloc`]) or another thread changed the file.
    ///
    /// # Errors
    /// Corrupt mappings, I/O errors.
    pub fn read_at(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.reading("read_at", || self.read_at_unrecorded(inode, offset, buf))
    }

    fn read_at_unrecorded(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let _file = self.inode_locks.read(inode.ino);
        self.read_with_held(&self.inode(inode.ino)?, offset, buf)
    }

    /// Reads up to `buf.len()` bytes of file `ino` at byte `offset` as last
    /// committed; returns the count read (0 at or past end of file). The
    /// inode is read under the file's lock, so a concurrent truncate or
    /// write is seen whole or not at all.
    ///
    /// # Errors
    /// As [`Filesystem::inode`] and [`Filesystem::read_at`].
    pub fn read_file_at(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.reading("read_file_at", || self.read_file_at_unrecorded(ino, offset, buf))
    }

    fn read_file_at_unrecorded(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let _file = self.inode_locks.read(ino);
        let inode = self.inode(ino)?;
        self.read_with_held(&inode, offset, buf)
    }

    /// [`Filesystem::read_body`] with the pages held for delayed
    /// allocation laid over what the image holds.
    fn read_with_held(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if let Some(key) = self.contents_key(inode)? {
            // Written whole blocks at a time, never held ([`Filesystem::write`]).
            return self.read_encrypted(inode, &key, offset, buf);
        }
        if crate::verity::is_verity(inode) {
            // Immutable: nothing is held for it.
            return self.read_verified(inode, offset, buf);
        }
        let n = self.read_body(inode, offset, buf)?;
        self.delalloc
            .overlay_read(inode.ino, offset, &mut buf[..n], self.geo.block_size);
        Ok(n)
    }

    /// [`Filesystem::read_at`] without the inode lock: for bodies that are
    /// never written outside a transaction (symlinks, xattr inodes), or
    /// with the lock held.
    pub(crate) fn read_body(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let size = inode.size();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = (size - offset).min(buf.len() as u64) as usize;
        let buf = &mut buf[..n];
        if inode.has_inline_data() {
            let body = self.inline_body(inode)?;
            buf.fill(0);
            let from = (offset as usize).min(body.len());
            let take = (body.len() - from).min(n);
            buf[..take].copy_from_slice(&body[from..from + take]);
            return Ok(n);
        }
        let bs = u64::from(self.geo.block_size);
        let first = offset / bs;
        let last = (offset + n as u64).div_ceil(bs);
        let runs = self.map_range(inode, first, last - first)?;
        // Holes and unwritten runs read as zeros; only the gaps are
        // cleared, so a fully mapped read touches each byte once.
        let mut done = 0usize;
        for r in runs.iter().filter(|r| !r.unwritten) {
            let run_start = r.logical * bs;
            let lo = run_start.max(offset);
            let hi = (r.end() * bs).min(offset + n as u64);
            if lo >= hi {
                continue;
            }
            let (from, to) = ((lo - offset) as usize, (hi - offset) as usize);
            buf[done..from.max(done)].fill(0);
            self.read_bytes(r.physical * bs + (lo - run_start), &mut buf[from..to])?;
            done = done.max(to);
        }
        buf[done..].fill(0);
        Ok(n)
    }

    /// Reads the whole body of `inode` (for symlink targets and directories;
    /// bounded by `limit` bytes).
    pub fn read_all(&self, inode: &Inode, limit: u64) -> Result<Vec<u8>> {
        self.reading("read_all", || self.read_all_unrecorded(inode, limit))
    }

    fn read_all_unrecorded(&self, inode: &Inode, limit: u64) -> Result<Vec<u8>> {
        let _file = self.inode_locks.read(inode.ino);
        let inode = &self.inode(inode.ino)?;
        if let Some(key) = self.contents_key(inode)? {
            let mut body = vec![0u8; inode.size().min(limit) as usize];
            let n = self.read_encrypted(inode, &key, 0, &mut body)?;
            body.truncate(n);
            return Ok(body);
        }
        let mut body = self.read_all_unlocked(inode, limit)?;
        self.delalloc.overlay_read(inode.ino, 0, &mut body, self.geo.block_size);
        Ok(body)
    }

    /// [`Filesystem::read_all`] without the inode lock (see
    /// [`Filesystem::read_body`]): transactions read symlink targets and
    /// xattr inodes with it, as they must not wait for an inode lock.
    pub(crate) fn read_all_unlocked(&self, inode: &Inode, limit: u64) -> Result<Vec<u8>> {
        let size = inode.size();
        if size > limit {
            return Err(Error::inconsistent(
                Location::Inode(inode.ino),
                format!("size {size} exceeds the {limit}-byte limit for this kind of file"),
            ));
        }
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            let n = self.read_body(inode, done as u64, &mut buf[done..])?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(buf)
    }
}
