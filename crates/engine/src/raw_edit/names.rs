//! debugfs's `link` and `unlink`: a directory entry added or removed and
//! nothing else — the inode's link count, and a removed inode's blocks,
//! stay as they are (e2fsck's pass 4 reconciles them, or a test wants
//! exactly that mismatch).

use crate::error::{Error, Result};
use crate::fs::Filesystem;

impl Filesystem {
    /// Adds `name` → `ino` to directory `dir`, typed by `ino`'s mode.
    ///
    /// # Errors
    /// [`Error::NotDir`], [`Error::Exists`], a bad name; what the commit meets.
    pub fn link_entry(&self, dir: u32, name: &[u8], ino: u32) -> Result<()> {
        crate::ops::check_new_name(name)?;
        self.in_txn(|txn| {
            let mut d = txn.inode(dir)?;
            if !d.is_dir() {
                return Err(Error::NotDir(format!("inode {dir}")));
            }
            let ft = txn.inode(ino)?.file_type().map_or(0, |t| t.dirent_code());
            let (found, spot) = txn.find_entry(&d, name)?;
            if found.is_some() {
                return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
            }
            txn.add_dir_name(&mut d, name, ino, ft, spot)?;
            txn.write_inode(&mut d)
        })
    }

    /// Removes `name` from directory `dir`; returns the inode it named.
    ///
    /// # Errors
    /// [`Error::NotDir`], [`Error::NotFound`]; what the commit meets.
    pub fn unlink_entry(&self, dir: u32, name: &[u8]) -> Result<u32> {
        self.in_txn(|txn| {
            let mut d = txn.inode(dir)?;
            if !d.is_dir() {
                return Err(Error::NotDir(format!("inode {dir}")));
            }
            let missing = || Error::NotFound(String::from_utf8_lossy(name).into_owned());
            let ino = if d.has_inline_data() {
                txn.remove_inline_entry(&mut d, name)?.ok_or_else(missing)?
            } else {
                let (ino, at) = txn.remove_entry_at(&d, name)?;
                txn.after_removal(&mut d, at)?;
                ino
            };
            txn.write_inode(&mut d)?;
            Ok(ino)
        })
    }
}
