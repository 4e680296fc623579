//! Inline data (`inline_data` feature): a small file's or directory's bytes
//! kept in the inode itself — first the 60 bytes of `i_block`, then the value
//! of the in-inode xattr `system.data` (index 7, name `data`).
//!
//! For a directory the first 4 bytes of `i_block` hold the parent's inode
//! number (there are no `.` / `..` entries); the other 56 bytes and the whole
//! `system.data` value are two separate regions of ordinary directory
//! entries, each covered exactly by its entries' `rec_len`s.
//!
//! This module assembles the logical content and walks inline directory
//! entries with a minimal, bounds-checked reader of `ext4_dir_entry_2`
//! (entries are not joined across the two regions, as the kernel does not).
//! It does not read the inode or its xattrs: callers pass `i_block` and the
//! `system.data` value (see [`system_data`]).
//!
//! See `Documentation/filesystems/ext4/inlinedata.rst`.

use crate::error::{FormatError, Result};
use crate::util::{le16, le32, slice};
use crate::xattr::{XattrEntry, XattrValue};

/// Bytes of `i_block` (`EXT4_MIN_INLINE_DATA_SIZE`).
pub const I_BLOCK_SIZE: usize = 60;
/// `e_name_index` of `system.data`.
pub const SYSTEM_DATA_INDEX: u8 = 7;
/// Stored name of `system.data`.
pub const SYSTEM_DATA_NAME: &[u8] = b"data";
/// Bytes of the parent inode number that opens an inline directory.
pub const DOTDOT_SIZE: usize = 4;

const DIRENT: &str = "ext4_dir_entry_2";

/// The `system.data` value among parsed in-inode entries, if present and
/// stored inline (the kernel never puts it in an `ea_inode`).
pub fn system_data<'a>(entries: &[XattrEntry<'a>]) -> Option<&'a [u8]> {
    entries.iter().find_map(|e| match e.value {
        XattrValue::Inline(v) if e.index() == SYSTEM_DATA_INDEX && e.name == SYSTEM_DATA_NAME => Some(v),
        _ => None,
    })
}

/// A regular file's (or symlink's) logical content: the first `size` bytes
/// of `i_block` followed by `system_data`.
///
/// # Errors
/// Truncated if `i_block` is not 60 bytes; invalid `ext4_inode.i_size_lo`
/// (offset 4) if `size` exceeds the 60 + `system_data.len()` bytes stored.
pub fn content(i_block: &[u8], system_data: &[u8], size: u64) -> Result<Vec<u8>> {
    let i_block = i_block_bytes(i_block)?;
    let stored = I_BLOCK_SIZE.saturating_add(system_data.len());
    let len = usize::try_from(size)
        .ok()
        .filter(|&s| s <= stored)
        .ok_or_else(|| FormatError::invalid("ext4_inode", "i_size_lo", 4, size))?;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(i_block);
    out.extend_from_slice(system_data);
    out.truncate(len);
    Ok(out)
}

fn i_block_bytes(i_block: &[u8]) -> Result<&[u8]> {
    if i_block.len() != I_BLOCK_SIZE {
        return Err(FormatError::truncated("ext4_inode", I_BLOCK_SIZE, i_block.len()));
    }
    Ok(i_block)
}

/// An inline directory split into its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineDir<'a> {
    /// The parent directory's inode number (`..`).
    pub parent: u32,
    /// Entries stored in `i_block` after the parent (56 bytes).
    pub i_block_entries: &'a [u8],
    /// Entries stored in the `system.data` value (possibly empty).
    pub xattr_entries: &'a [u8],
}

impl<'a> InlineDir<'a> {
    /// Splits an inline directory's `i_block` and `system.data` value.
    ///
    /// # Errors
    /// Truncated if `i_block` is not 60 bytes.
    pub fn parse(i_block: &'a [u8], system_data: &'a [u8]) -> Result<Self> {
        let i_block = i_block_bytes(i_block)?;
        let parent = le32(i_block, 0, "ext4_inode")?;
        let rest = i_block.get(DOTDOT_SIZE..).unwrap_or(&[]);
        Ok(Self {
            parent,
            i_block_entries: rest,
            xattr_entries: system_data,
        })
    }

    /// The live entries of both regions, `i_block` first. Offsets are
    /// relative to the region each entry is in.
    pub fn entries(&self) -> impl Iterator<Item = Result<InlineDirent<'a>>> + 'a {
        dirents(self.i_block_entries).chain(dirents(self.xattr_entries))
    }
}

/// One live directory entry (`ext4_dir_entry_2` with a nonzero inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineDirent<'a> {
    /// Byte offset of the entry within its region.
    pub offset: usize,
    /// `inode`.
    pub inode: u32,
    /// `rec_len`.
    pub rec_len: u16,
    /// `file_type` (1 regular, 2 directory, 7 symlink…).
    pub file_type: u8,
    /// `name`, `name_len` bytes.
    pub name: &'a [u8],
}

/// Iterates the live entries of one region, skipping unused ones (inode 0).
/// Each step advances by a checked `rec_len` ≥ 12, so the walk is bounded;
/// it stops after the first error.
pub fn dirents(region: &[u8]) -> impl Iterator<Item = Result<InlineDirent<'_>>> + '_ {
    let mut off = 0usize;
    let mut failed = false;
    core::iter::from_fn(move || {
        while !failed && off < region.len() {
            match read_dirent(region, off) {
                Ok((entry, rec_len)) => {
                    off = off.saturating_add(rec_len);
                    if entry.inode != 0 {
                        return Some(Ok(entry));
                    }
                }
                Err(e) => {
                    failed = true;
                    return Some(Err(e));
                }
            }
        }
        None
    })
}

/// `EXT4_DIR_REC_LEN`: 8-byte header plus name, rounded up to 4.
fn rec_len_for(name_len: u8) -> usize {
    (8usize.saturating_add(name_len.into()).saturating_add(3)) & !3
}

fn read_dirent(region: &[u8], off: usize) -> Result<(InlineDirent<'_>, usize)> {
    let inode = le32(region, off, DIRENT)?;
    let rec_len = le16(region, off.saturating_add(4), DIRENT)?;
    let head = slice(region, off.saturating_add(6), 2, DIRENT)?;
    let (name_len, file_type) = (head[0], head[1]);
    let len = usize::from(rec_len);
    let fits = off.checked_add(len).is_some_and(|end| end <= region.len());
    if len < rec_len_for(1) || !len.is_multiple_of(4) || len < rec_len_for(name_len) || !fits {
        let at = off.saturating_add(4);
        return Err(FormatError::invalid(DIRENT, "rec_len", at, rec_len.into()));
    }
    let name = slice(region, off.saturating_add(8), name_len.into(), DIRENT)?;
    let entry = InlineDirent {
        offset: off,
        inode,
        rec_len,
        file_type,
        name,
    };
    Ok((entry, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirent(inode: u32, rec_len: u16, name: &[u8]) -> Vec<u8> {
        let mut d = inode.to_le_bytes().to_vec();
        d.extend_from_slice(&rec_len.to_le_bytes());
        d.extend_from_slice(&[name.len() as u8, 1]);
        d.extend_from_slice(name);
        d.resize(usize::from(rec_len), 0);
        d
    }

    #[test]
    fn file_content_joins_i_block_and_xattr() {
        let i_block: Vec<u8> = (0..60).collect();
        let got = content(&i_block, b"tail", 62).unwrap();
        assert_eq!(got.len(), 62);
        assert_eq!(&got[60..], b"ta");
        assert_eq!(content(&i_block, b"", 10).unwrap(), &i_block[..10]);
        let err = content(&i_block, b"tail", 65).unwrap_err();
        assert_eq!(err.field, "i_size_lo");
        assert!(content(&i_block[..59], b"", 1).is_err());
    }

    #[test]
    fn dir_entries_from_both_regions() {
        let mut i_block = 2u32.to_le_bytes().to_vec();
        i_block.extend(dirent(12, 12, b"a"));
        i_block.extend(dirent(0, 44, b""));
        let xattr = [dirent(13, 16, b"bbbbb"), dirent(0, 16, b"")].concat();
        let dir = InlineDir::parse(&i_block, &xattr).unwrap();
        assert_eq!(dir.parent, 2);
        let names: Vec<&[u8]> = dir.entries().map(|e| e.unwrap().name).collect();
        assert_eq!(names, [&b"a"[..], b"bbbbb"]);
    }

    #[test]
    fn bad_rec_len_is_reported_not_looped() {
        for bad in [0u16, 6, 13, 200] {
            let mut region = dirent(12, 12, b"a");
            region[4..6].copy_from_slice(&bad.to_le_bytes());
            let all: Vec<_> = dirents(&region).collect();
            assert_eq!(all.len(), 1);
            let err = all[0].unwrap_err();
            assert_eq!((err.field, err.offset), ("rec_len", 4));
        }
        // A name longer than rec_len allows.
        let mut region = dirent(12, 12, b"a");
        region[6] = 9;
        assert_eq!(dirents(&region).next().unwrap().unwrap_err().field, "rec_len");
    }
}
