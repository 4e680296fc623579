//! Name lookup: through the htree index when the directory has one (one
//! index block per level, then a single leaf block), else by scanning.

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

impl Filesystem {
    /// Finds `name` in `dir`; returns its inode number.
    ///
    /// # Errors
    /// [`Error::NotDir`], [`Error::NameTooLong`] (over 255 bytes),
    /// [`Error::NotFound`], or corruption of the blocks read.
    pub fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<u32> {
        self.reading("lookup", || self.lookup_unrecorded(dir, name))
    }

    fn lookup_unrecorded(&self, dir: &Inode, name: &[u8]) -> Result<u32> {
        self.require_dir(dir)?;
        if name.len() > 255 {
            return Err(Error::NameTooLong(String::from_utf8_lossy(name).into_owned()));
        }
        let disk = self.disk_name(dir, name, crate::crypt::names::Intent::Find)?;
        self.lookup_disk(dir, &disk).map_err(|e| {
            if matches!(e, Error::NotFound(_)) {
                Error::NotFound(String::from_utf8_lossy(name).into_owned())
            } else {
                e
            }
        })
    }

    /// [`Self::lookup`] of a name as stored (ciphertext in an encrypted
    /// directory).
    pub(crate) fn lookup_disk(&self, dir: &Inode, name: &[u8]) -> Result<u32> {
        if name.len() > 255 {
            return Err(Error::NameTooLong(String::from_utf8_lossy(name).into_owned()));
        }
        if let Some(found) = self.htree_lookup(dir, name)? {
            return found.ok_or_else(|| Error::NotFound(String::from_utf8_lossy(name).into_owned()));
        }
        self.linear_lookup(dir, name)?
            .ok_or_else(|| Error::NotFound(String::from_utf8_lossy(name).into_owned()))
    }

    /// Scans every block of a directory without an index for `name`,
    /// comparing in place: a lookup copies no entry (a PostMark-sized
    /// directory block holds a hundred).
    fn linear_lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<u32>> {
        let key = self.name_key(dir, name);
        if dir.has_inline_data() {
            let mut hit = None;
            self.for_each_dir_entry(dir, |e| {
                hit = key.matches(&e.name).then_some(e.ino);
                Ok(hit.is_none())
            })?;
            return Ok(hit);
        }
        for run in self.all_runs(dir)? {
            for i in 0..run.len {
                let block = run.physical + i;
                let buf = self.meta_block(block, dir.ino)?;
                let at = Location::Block { block, inode: dir.ino };
                if let Some(ino) = self.scan_dir_block(dir, &buf, run.logical + i, at, |e| key.matches(e.name))? {
                    return Ok(Some(ino));
                }
            }
        }
        Ok(None)
    }
}
