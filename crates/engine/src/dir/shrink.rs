//! Giving an emptied directory its blocks back. ext4 directories never
//! shrink in the kernel: a directory that once held millions of names
//! keeps every block, and each listing of it reads them all. Here, when
//! an unlink or rmdir takes the last name other than `.` and `..` from a
//! directory of several blocks, the directory returns to one block in the
//! same transaction: blocks past the first are freed (with the extent
//! tree or block map that mapped them), `EXT4_INDEX_FL` is cleared,
//! `i_size` is one block, and block 0 — the `dx_root` of an htree — is
//! written again as a linear block holding `.` and `..` with its checksum
//! tail (`Documentation/filesystems/ext4/directory.rst`: a one-block
//! directory is linear; `make_indexed` builds the index again when it
//! fills). Blocks of a directory that still holds names stay, even empty
//! ones: an htree's leaves must all stay referenced by the index and a
//! directory may have no holes, so only a wholly empty directory shrinks.
//!
//! Knowing that a directory is empty must not cost a read of every block
//! per unlink: only an unlink that empties its own block looks further,
//! from the [`super::drain`] cursor on.

use ext4kit_format::dir_entry::DirEntryIter;
use ext4kit_format::extent::Extent;
use ext4kit_format::inode::flags;

use super::modify::DirBlock;
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

impl Txn<'_> {
    /// Called once a name was removed from block `at` of `dir` (whose
    /// inode the caller writes afterwards): shrinks `dir` to one block
    /// when no block holds a name any more.
    pub(crate) fn after_removal(&mut self, dir: &mut Inode, at: DirBlock) -> Result<()> {
        let bs = u64::from(self.fs.geo.block_size);
        if dir.has_inline_data() || dir.size() <= bs || self.has_names(dir, at.physical, at.logical)? {
            return Ok(());
        }
        if self.drained(dir)? {
            self.shrink_to_one_block(dir)?;
        }
        Ok(())
    }

    /// True when no block of `dir` holds a name: walks on from the drain
    /// cursor to the last block, then reads again the blocks below it.
    fn drained(&mut self, dir: &Inode) -> Result<bool> {
        let generation = dir.raw.i_generation.get();
        let from = self.fs.dir_drain.start(dir.ino, generation);
        let end = dir.size() >> self.fs.geo.block_size_log2;
        let runs = self.body_runs(dir)?;
        let found = match self.first_with_names(dir, &runs, from, end)? {
            Some(l) => Some(l),
            None => self.first_with_names(dir, &runs, 0, from)?,
        };
        match found {
            Some(l) => {
                self.fs.dir_drain.set(dir.ino, generation, l);
                Ok(false)
            }
            None => Ok(true),
        }
    }

    /// The first block in `from..to` of `dir` (mapped by `runs`) that
    /// holds a name.
    fn first_with_names(&self, dir: &Inode, runs: &[Extent], from: u64, to: u64) -> Result<Option<u64>> {
        for e in runs {
            let start = u64::from(e.logical);
            let end = start + u64::from(e.len);
            for logical in from.max(start)..to.min(end) {
                if self.has_names(dir, e.physical + (logical - start), logical)? {
                    return Ok(Some(logical));
                }
            }
        }
        Ok(None)
    }

    /// True when directory block `phys` (logical `logical`) holds a name
    /// other than `.` and `..`; index blocks hold none.
    pub(super) fn has_names(&self, dir: &Inode, phys: u64, logical: u64) -> Result<bool> {
        let at = Location::Block {
            block: phys,
            inode: dir.ino,
        };
        self.with_block(phys, dir.ino, |buf| {
            if self.fs.is_dx_block(dir, buf, logical) {
                return Ok(false);
            }
            let used = self.used_len(buf);
            for e in DirEntryIter::new(&buf[..used], buf.len(), true) {
                let e = e.map_err(|err| Error::format(at, err))?;
                if e.inode != 0 && e.name != b"." && e.name != b".." {
                    return Ok(true);
                }
            }
            Ok(false)
        })?
    }

    /// Frees every block of the empty `dir` past the first and writes the
    /// first as a linear block of `.` and `..`.
    fn shrink_to_one_block(&mut self, dir: &mut Inode) -> Result<()> {
        let bs = u64::from(self.fs.geo.block_size);
        // An itree hangs off the htree root about to become a leaf; its
        // nodes go with it (a refill that indexes the directory again
        // builds a new one).
        self.itree_free(dir)?;
        let first = self.phys_of(dir, 0)?;
        let parent = self.dotdot(dir, first)?;
        // Copies this transaction holds of blocks about to be freed (the
        // leaf the unlink just changed) must not reach the device, where a
        // freed block may already belong to something else.
        let held: Vec<u64> = self
            .body_runs(dir)?
            .iter()
            .flat_map(|e| (0..u64::from(e.len)).map(move |i| (u64::from(e.logical) + i, e.physical + i)))
            .filter(|&(logical, phys)| logical > 0 && self.holds(phys))
            .map(|(_, phys)| phys)
            .collect();
        if dir.uses_extents() {
            self.shrink(dir, bs)?;
        } else {
            self.shrink_block_map(dir, 1)?;
        }
        held.into_iter().for_each(|b| self.forget_block(b));
        dir.raw.i_flags.set(dir.raw.flags() & !flags::INDEX);
        dir.raw.set_size(bs);
        self.init_dir_block(dir, first, parent)?;
        self.fs.dir_drain.forget(dir.ino);
        self.fs.dir_hints.set(dir.ino, dir.raw.i_generation.get(), 0);
        Ok(())
    }
}
