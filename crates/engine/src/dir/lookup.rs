//! Name lookup: through the htree index when the directory has one (one
//! index block per level, then a single leaf block), else by scanning.

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

impl Filesystem {
    /// Finds `name` in `dir`; returns its inode number.
    ///
    /// # Errors
    /// [`Error::NotDir`], [`Error::NameTooLong`] (over 255 bytes),
    /// [`Error::NotFound`], or corruption of the blocks read.
    pub fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<u32> {
        self.require_dir(dir)?;
        if name.len() > 255 {
            return Err(Error::NameTooLong(String::from_utf8_lossy(name).into_owned()));
        }
        if let Some(found) = self.htree_lookup(dir, name)? {
            return found.ok_or_else(|| Error::NotFound(String::from_utf8_lossy(name).into_owned()));
        }
        let mut hit = None;
        self.for_each_dir_entry(dir, |e| {
            if e.name == name {
                hit = Some(e.ino);
                return Ok(false);
            }
            Ok(true)
        })?;
        hit.ok_or_else(|| Error::NotFound(String::from_utf8_lossy(name).into_owned()))
    }
}
