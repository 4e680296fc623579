//! Directories: listing (linear blocks, htree leaves and inline directories
//! alike) and name lookup (through the htree index when there is one).
//! See `Documentation/filesystems/ext4/directory.rst`.

pub(crate) mod casefold;
pub(crate) mod drain;
pub(crate) mod hint;
mod htree;
pub(crate) mod htree_insert;
pub mod itree;
mod limits;
mod lookup;
mod modify;
mod new_entry;
mod readdir;
mod shrink;
mod txn_lookup;

pub(crate) use new_entry::Placement;
pub use readdir::{DEFAULT_SNAPSHOT_LIMIT, DirStream, ReadDirOptions, ReadDirOrder};

use ext4kit_format::dir_entry::{self, DirEntryIter};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::FileType;

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// One entry of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode number.
    pub ino: u32,
    /// Name bytes (not necessarily UTF-8).
    pub name: Vec<u8>,
    /// File type from the entry, when the `filetype` feature records it.
    pub file_type: Option<FileType>,
}

pub(crate) fn file_type_code(code: u8) -> Option<FileType> {
    Some(match code {
        1 => FileType::Regular,
        2 => FileType::Directory,
        3 => FileType::CharDevice,
        4 => FileType::BlockDevice,
        5 => FileType::Fifo,
        6 => FileType::Socket,
        7 => FileType::Symlink,
        _ => return None,
    })
}

/// Rejects names no kernel would create: empty, or holding `/` or NUL. A
/// front end joining such a name to a host path could escape its target.
pub(crate) fn check_name(name: &[u8], at: Location, offset: usize) -> Result<()> {
    if name.is_empty() || name.iter().any(|&b| b == b'/' || b == 0) {
        let shown = String::from_utf8_lossy(name);
        return Err(Error::inconsistent(
            at,
            format!("entry at byte {offset} has an invalid name {shown:?}"),
        ));
    }
    Ok(())
}

impl Filesystem {
    fn require_dir(&self, dir: &Inode) -> Result<()> {
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {}", dir.ino)));
        }
        Ok(())
    }

    /// Lists every entry of `dir`, `.` and `..` included, in on-disk order.
    ///
    /// Reads each directory block once. Index blocks of an htree are
    /// recognised and skipped (their fake entries carry inode 0).
    ///
    /// # Errors
    /// [`Error::NotDir`]; corruption or checksum failures at the block.
    pub fn read_dir(&self, dir: &Inode) -> Result<Vec<DirEntry>> {
        self.reading("read_dir", || self.read_dir_unrecorded(dir))
    }

    /// Calls `f` on every entry of `dir`, `.` and `..` included, in on-disk
    /// order, until it returns `Ok(false)`: [`Self::read_dir`] without
    /// collecting, so listing a directory of millions of names holds one
    /// block's entries at a time.
    ///
    /// # Errors
    /// As [`Self::read_dir`], and whatever `f` returns.
    pub fn read_dir_each(&self, dir: &Inode, f: impl FnMut(DirEntry) -> Result<bool>) -> Result<()> {
        self.reading("read_dir", || {
            self.require_dir(dir)?;
            let shown = self.presenter(dir)?;
            let mut f = f;
            self.for_each_dir_entry(dir, |mut e| {
                if !shown.is_plain() {
                    e.name = shown.present(&e.name);
                }
                f(e)
            })
        })
    }

    fn read_dir_unrecorded(&self, dir: &Inode) -> Result<Vec<DirEntry>> {
        self.require_dir(dir)?;
        let mut out = if itree::has_itree(dir) {
            self.read_dir_itree(dir)?
        } else {
            let mut out = Vec::new();
            self.for_each_dir_entry(dir, |e| {
                out.push(e);
                Ok(true)
            })?;
            out
        };
        let shown = self.presenter(dir)?;
        if !shown.is_plain() {
            out.iter_mut().for_each(|e| e.name = shown.present(&e.name));
        }
        Ok(out)
    }

    /// "." and ".." (from the htree root), then every name in inode order.
    fn read_dir_itree(&self, dir: &Inode) -> Result<Vec<DirEntry>> {
        let mut stream = self.dir_stream(dir)?;
        let mut out = Vec::new();
        self.read_dir_from(dir, &mut stream, 0, |e, _| {
            out.push(e.clone());
            Ok(true)
        })?;
        Ok(out)
    }

    /// Calls `f` for each live entry of `dir` until it returns `Ok(false)`.
    pub(crate) fn for_each_dir_entry(&self, dir: &Inode, mut f: impl FnMut(DirEntry) -> Result<bool>) -> Result<()> {
        if dir.has_inline_data() {
            return self.for_each_inline_dir_entry(dir, f);
        }
        for run in self.all_runs(dir)? {
            for i in 0..run.len {
                let block = run.physical + i;
                let buf = self.meta_block(block, dir.ino)?;
                let at = Location::Block { block, inode: dir.ino };
                let entries = self.dir_block_entries(dir, &buf, run.logical + i, at)?;
                for e in entries {
                    if !f(e)? {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// Decodes the live entries of one directory block, verifying its
    /// checksum (leaf tail or dx tail) when `metadata_csum` is on.
    pub(crate) fn dir_block_entries(
        &self,
        dir: &Inode,
        buf: &[u8],
        logical: u64,
        at: Location,
    ) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        self.scan_dir_block(dir, buf, logical, at, |e| {
            out.push(DirEntry {
                ino: e.inode,
                name: e.name.to_vec(),
                file_type: file_type_code(e.file_type),
            });
            false
        })?;
        Ok(out)
    }

    /// Verifies the block (as [`Self::dir_block_entries`]) and calls `f` on
    /// each live, checked entry without copying it, until `f` returns true;
    /// returns the entry's inode number when it does.
    pub(crate) fn scan_dir_block(
        &self,
        dir: &Inode,
        buf: &[u8],
        logical: u64,
        at: Location,
        mut f: impl FnMut(&dir_entry::DirEntry<'_>) -> bool,
    ) -> Result<Option<u32>> {
        let bs = buf.len();
        // Index blocks first: a root converted from a linear block keeps the
        // old leaf tail's bytes at its end, so "has a tail" proves nothing there.
        let dx = self.is_dx_block(dir, buf, logical);
        let tail = !dx && dir_entry::has_tail(buf);
        let csum = self.geo.features.metadata_csum();
        if csum && dx {
            self.verify_dx_block(dir, buf, at)?;
        } else if csum && tail {
            let r = dir_entry::verify_block_checksum(buf, self.inode_csum_seed(dir));
            self.check(at, r)?;
        } else if csum && self.opts.verify_checksums {
            return Err(Error::inconsistent(at, "directory block has no checksum tail"));
        }
        let used = if tail { bs - dir_entry::TAIL_SIZE } else { bs };
        let filetype = self.geo.features.incompat.contains(IncompatFeatures::FILETYPE);
        let hashed = self.hash_in_dirent(dir);
        for e in DirEntryIter::new(&buf[..used], bs, filetype) {
            let e = e.map_err(|e| Error::format(at, e))?;
            if e.inode == 0 {
                continue;
            }
            if e.inode > self.geo.inodes_count {
                let what = format!(
                    "entry at byte {} names inode {} beyond the inode count",
                    e.offset, e.inode
                );
                return Err(Error::inconsistent(at, what));
            }
            // Stored encrypted names are ciphertext: any bytes. They are
            // never shown as stored ([`crate::crypt::names`]).
            if !self.is_encrypted(dir) {
                check_name(e.name, at, e.offset)?;
            } else if hashed && e.name != b"." && e.name != b".." && dir_entry::stored_hash(buf, &e).is_none() {
                let what = format!(
                    "entry at byte {} has no room for its stored hash (rec_len {})",
                    e.offset, e.rec_len
                );
                return Err(Error::inconsistent(at, what));
            }
            if f(&e) {
                return Ok(Some(e.inode));
            }
        }
        Ok(None)
    }
}
