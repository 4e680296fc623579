//! Collapse range and insert range (`FALLOC_FL_COLLAPSE_RANGE`,
//! `FALLOC_FL_INSERT_RANGE`; the kernel's `ext4_collapse_range` and
//! `ext4_insert_range`): a whole number of clusters is cut out of a file,
//! or a hole of that size opened in it, by moving the logical start of
//! every later extent (`ee_block` in `ifork.rst`) down or up. No data block
//! moves; the blocks cut out are freed.
//!
//! FUSE does not pass these modes to a server, so the mount cannot offer
//! them; the library and `ext4kit fallocate` do. Rules as ext4 (checked
//! against Linux 6.18 in `tests/shift_range.rs`): extent-mapped files only
//! (`EOPNOTSUPP`; inline bodies are moved out first), offset and length
//! multiples of the cluster size (`EINVAL`), a collapse ending before
//! `i_size` and an insert starting before it (`EINVAL`), an insert keeping
//! the file within its largest size (`EFBIG`). Like the other fallocate
//! modes the whole call is one transaction: the extent list is edited and
//! the tree rebuilt by [`Txn::replace_extents`], whose journal cost grows
//! with the file's extent-tree blocks (a depth-1 tree of a few hundred
//! extents rewrites a handful of blocks).

use ext4kit_format::extent::Extent;

use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::extent_edit::{end_of, normalize, partition};
use crate::inode::extent_write::charge_blocks;
use crate::inode::write::set_times;
use crate::txn::Txn;

/// Which way [`Filesystem::collapse_range`] and
/// [`Filesystem::insert_range`] move the extents after the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shift {
    /// Collapse: the range's blocks are freed, later extents move down.
    Left,
    /// Insert: later extents move up, leaving a hole.
    Right,
}

/// One past the largest logical block an extent may map (`EXT_MAX_BLOCKS`).
const MAX_BLOCKS: u64 = u32::MAX as u64;

impl Filesystem {
    /// `FALLOC_FL_COLLAPSE_RANGE` on regular file `ino`: removes bytes
    /// `offset..offset + len`, the rest of the file moving down; the size
    /// shrinks by `len`. Updates mtime and ctime.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `offset` or `len` is not a whole
    /// number of clusters, `len` is zero or the range reaches `i_size`;
    /// [`Error::Unsupported`] on a block-mapped file; [`Error::IsDir`];
    /// [`Error::NotPermitted`] on an immutable or append-only file;
    /// [`Error::ReadOnly`]. Nothing changes on error.
    pub fn collapse_range(&self, ino: u32, offset: u64, len: u64) -> Result<()> {
        self.shift_range(ino, offset, len, Shift::Left)
    }

    /// `FALLOC_FL_INSERT_RANGE` on regular file `ino`: opens a hole of
    /// `len` bytes at `offset`, the rest of the file moving up; the size
    /// grows by `len`. Updates mtime and ctime.
    ///
    /// # Errors
    /// As [`Filesystem::collapse_range`], with [`Error::InvalidArgument`]
    /// when `offset` is at or past `i_size`, and [`Error::FileTooBig`]
    /// when the file would outgrow its largest size.
    pub fn insert_range(&self, ino: u32, offset: u64, len: u64) -> Result<()> {
        self.shift_range(ino, offset, len, Shift::Right)
    }

    fn shift_range(&self, ino: u32, offset: u64, len: u64, way: Shift) -> Result<()> {
        if len == 0 {
            return Err(Error::InvalidArgument("collapse or insert of zero bytes".into()));
        }
        let end = offset.checked_add(len).ok_or(Error::FileTooBig)?;
        if self.is_encrypted(&self.inode(ino)?) {
            // Blocks are encrypted under their logical number: moving them
            // would change what they decrypt to (the kernel's EOPNOTSUPP).
            return Err(Error::Unsupported(format!(
                "collapse or insert range on encrypted inode {ino}"
            )));
        }
        let _file = self.inode_locks.write(ino);
        self.flush_locked(ino)?;
        let mut txn = Txn::begin(self)?;
        txn.under_inode_lock();
        txn.use_reserve();
        let mut inode = txn.inode(ino)?;
        inode.require_regular()?;
        self.check_file_end(&inode, end)?;
        super::flags::require_changeable(&inode)?;
        if inode.has_inline_data() {
            txn.uninline(&mut inode)?;
        }
        if !inode.uses_extents() {
            return Err(Error::Unsupported(format!(
                "{way:?} shift of a range of inode {ino}: needs an extent-mapped file"
            )));
        }
        let size = inode.size();
        check_range(&txn, offset, len, size, way)?;
        let new_size = match way {
            Shift::Left => size - len,
            Shift::Right => size.checked_add(len).ok_or(Error::FileTooBig)?,
        };
        self.check_file_end(&inode, new_size)?;
        self.prealloc.release(ino);
        let bs = u64::from(self.geo.block_size);
        txn.shift_extents(&mut inode, offset / bs, len / bs, way)?;
        inode.raw.set_size(new_size);
        set_times(&mut inode.raw, clock::now(), false);
        txn.write_inode(&mut inode)?;
        txn.commit()
    }
}

/// `EINVAL` unless `offset` and `len` are whole clusters and the range
/// lies where ext4 accepts it: a collapse must end before `size`, an
/// insert start before it.
fn check_range(txn: &Txn<'_>, offset: u64, len: u64, size: u64, way: Shift) -> Result<()> {
    let geo = &txn.fs.geo;
    let cluster = u64::from(geo.block_size) << geo.cluster_bits;
    if !(offset | len).is_multiple_of(cluster) {
        return Err(Error::InvalidArgument(format!(
            "{way:?} shift: offset {offset} and length {len} must be multiples of the cluster size {cluster}"
        )));
    }
    let past = match way {
        Shift::Left => offset + len >= size,
        Shift::Right => offset >= size,
    };
    if past {
        return Err(Error::InvalidArgument(format!(
            "{way:?} shift of {offset}+{len}: reaches the end of the file ({size} bytes)"
        )));
    }
    Ok(())
}

impl Txn<'_> {
    /// Moves every extent at or after logical block `lblk` by `count`
    /// blocks (`ext4_ext_shift_extents`): down after freeing
    /// `lblk..lblk + count` for [`Shift::Left`], up after splitting the
    /// extent that straddles `lblk` for [`Shift::Right`].
    fn shift_extents(&mut self, inode: &mut Inode, lblk: u64, count: u64, way: Shift) -> Result<()> {
        let exts = self.extents(inode)?;
        let (mut kept, moved) = match way {
            Shift::Left => {
                let (kept, gone) = partition(&exts, lblk, lblk + count);
                let freed = self.release_runs(&gone, &kept)?;
                charge_blocks(&mut inode.raw, -freed, self.fs.geo.block_size);
                split_at(&kept, lblk)
            }
            Shift::Right => split_at(&exts, lblk),
        };
        if way == Shift::Right && moved.last().is_some_and(|e| end_of(e) + count > MAX_BLOCKS) {
            return Err(Error::FileTooBig);
        }
        kept.extend(moved.into_iter().map(|e| Extent {
            logical: match way {
                Shift::Left => (u64::from(e.logical) - count) as u32,
                Shift::Right => (u64::from(e.logical) + count) as u32,
            },
            ..e
        }));
        self.replace_extents(inode, normalize(kept))
    }
}

/// The sorted `exts` as the parts before and from logical block `lblk`,
/// an extent straddling it cut in two.
fn split_at(exts: &[Extent], lblk: u64) -> (Vec<Extent>, Vec<Extent>) {
    let (before, after) = partition(exts, lblk, MAX_BLOCKS);
    (before, after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(logical: u32, len: u16, physical: u64) -> Extent {
        Extent {
            logical,
            len,
            physical,
            unwritten: false,
        }
    }

    #[test]
    fn split_at_cuts_the_straddling_extent() {
        let v = [ext(0, 10, 100), ext(20, 5, 200)];
        let (a, b) = split_at(&v, 4);
        assert_eq!(a, vec![ext(0, 4, 100)]);
        assert_eq!(b, vec![ext(4, 6, 104), ext(20, 5, 200)]);
        let (a, b) = split_at(&v, 10);
        assert_eq!(a, vec![ext(0, 10, 100)]);
        assert_eq!(b, vec![ext(20, 5, 200)]);
    }
}
