//! Moving one chunk of a file in one transaction, as
//! `ext4_move_extents` swaps a donor's blocks into a file: the destination
//! blocks are allocated, the chunk's data copied to them, the chunk's
//! extents pointed at them and the old blocks freed, all in the same
//! transaction. A crash leaves the old mapping (the copies sit in blocks
//! still free) or the new one (the old blocks free), never both: the
//! journal commits the bitmap and the extent tree together. Unwritten
//! blocks move without a copy (they read as zeros wherever they are);
//! holes are outside every extent and stay holes.

use ext4kit_format::extent::Extent;

use super::plan::{Chunk, assign, mapped};
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::extent_edit::{normalize, partition};
use crate::txn::Txn;

impl Filesystem {
    /// Moves the mapped blocks of `chunk` of file `ino` to `dest` (runs
    /// totalling `chunk.blocks`) in one transaction, keeping `later` (the
    /// destinations of the chunks still to come) out of its allocations.
    /// The caller holds the file's inode lock. Data=ordered: the copies
    /// are written before the metadata that points at them can reach the
    /// device ([`crate::ordered`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the file no longer maps the blocks
    /// planned for the chunk (it changed behind the inode lock: removed);
    /// [`Error::NoSpace`], [`Error::Io`]. Nothing changes on error before
    /// the commit.
    pub(super) fn move_chunk(&self, ino: u32, chunk: Chunk, dest: &[(u64, u64)], later: &[(u64, u64)]) -> Result<()> {
        let mut txn = Txn::begin(self)?;
        txn.under_inode_lock();
        txn.hold_off(later);
        let mut inode = txn.inode(ino)?;
        crate::ops::require_live(&inode)?;
        let (outside, inside) = partition(&txn.extents(&inode)?, chunk.lo, chunk.hi);
        if mapped(&inside) != chunk.blocks {
            return Err(Error::InvalidArgument(format!(
                "inode {ino} changed during defrag: {} blocks in logical {}..{}, {} planned",
                mapped(&inside),
                chunk.lo,
                chunk.hi,
                chunk.blocks
            )));
        }
        let got = txn.take_destination(dest)?;
        let pairs = assign(&inside, &got).ok_or(Error::NoSpace)?;
        txn.swap_in(&mut inode, outside, &pairs)?;
        let pending = txn.commit_deferring_data()?;
        pending.write()
    }
}

impl Txn<'_> {
    /// Allocates the planned runs `dest`; a run no longer free (taken
    /// since the plan, by another file) is replaced by what the allocator
    /// finds near it.
    fn take_destination(&mut self, dest: &[(u64, u64)]) -> Result<Vec<(u64, u64)>> {
        let mut got = Vec::with_capacity(dest.len());
        for &(start, n) in dest {
            if self.take_exact(start, n)? {
                got.push((start, n));
                continue;
            }
            let (mut goal, mut left) = (start, n);
            while left > 0 {
                let (s, k) = self.alloc_blocks(goal, left.min(u64::from(u32::MAX)) as u32)?;
                got.push((s, u64::from(k)));
                (goal, left) = (s + u64::from(k), left - u64::from(k));
            }
        }
        Ok(got)
    }

    /// Copies each initialized old piece to its new place, frees the old
    /// blocks and stores `outside` plus the moved pieces as `inode`'s
    /// extent tree (`i_blocks` changes only by the tree blocks).
    fn swap_in(&mut self, inode: &mut Inode, outside: Vec<Extent>, pairs: &[(Extent, Extent)]) -> Result<()> {
        let bs = u64::from(self.fs.geo.block_size);
        for (old, new) in pairs.iter().filter(|(old, _)| !old.unwritten) {
            let mut buf = vec![0u8; usize::from(old.len) * bs as usize];
            self.read_data(old.physical * bs, &mut buf)?;
            self.write_data(new.physical * bs, buf);
        }
        for (old, _) in pairs {
            self.free_blocks(old.physical, u64::from(old.len))?;
        }
        let mut exts = outside;
        exts.extend(pairs.iter().map(|p| p.1));
        self.replace_extents(inode, normalize(exts))?;
        self.write_inode(inode)
    }
}
