//! Placing a name its caller promises is new ([`crate::Filesystem::create_new`],
//! seed 000 §5.4's S_CR736 mode): no lookup of the name. A linear directory
//! is scanned from the block its [`super::hint`] names to the end, and a new
//! block is appended when none of those has room — never from block 0, so a
//! create reads O(1) blocks amortized instead of O(directory). An htree
//! still descends the index to the leaf the name's hash picks (placement
//! needs it), without walking a hash-collision chain of leaves.
//!
//! A broken promise is checked where it costs nothing: every block this
//! placement reads anyway (the blocks from the hint on, the htree leaf) is
//! searched for the name in the same pass that verifies it, and a hit is
//! [`Error::Exists`] before anything changes. A copy of the name in a block
//! before the hint (or in another leaf of a collision chain) is not seen:
//! the directory then holds the name twice, as ext2's S_CR736 left it. That
//! is metadata e2fsck accepts structurally (each entry names its own inode,
//! link counts agree) but a lookup finds only the first; keeping names
//! unique is the caller's responsibility, and [`crate::Filesystem::create`]
//! is the call for a caller who cannot promise it.

use ext4kit_format::dir_entry::rec_len_hashed;
use ext4kit_format::features::CompatFeatures;
use ext4kit_format::inode::flags;

use super::htree_insert::HtreeSpot;
use super::modify::{DirBlock, find_slot};
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

/// Where a create puts its name, decided before anything changes.
pub(crate) enum Placement {
    /// What [`Txn::find_entry`] found: the htree spot, if indexed.
    Looked(Option<HtreeSpot>),
    /// A new name in a linear directory: the block with room found from
    /// the hint, or `None` to append a block.
    Linear(Option<DirBlock>),
}

impl Txn<'_> {
    /// Where the new `name` goes in `dir` (a directory with blocks), read
    /// without looking the name up; [`Error::Exists`] when a block it reads
    /// anyway holds the name.
    pub(crate) fn place_new(&self, dir: &Inode, name: &[u8]) -> Result<Placement> {
        if dir.raw.has_flag(flags::INDEX) {
            let spot = self.descend(dir, name)?;
            let leaf = spot.path.last().map_or(0, |f| f.entries[f.at].block);
            let phys = self.phys_of(dir, leaf.into())?;
            self.room_for_new(dir, phys, leaf.into(), name)?;
            return Ok(Placement::Looked(Some(spot)));
        }
        let blocks = self.dir_blocks(dir)?;
        let Some(last) = blocks.last() else {
            return Ok(Placement::Linear(None));
        };
        let start = self
            .fs
            .dir_hints
            .start(dir.ino, dir.raw.i_generation.get(), last.logical);
        for b in blocks.iter().filter(|b| b.logical >= start) {
            if self.room_for_new(dir, b.physical, b.logical, name)? {
                return Ok(Placement::Linear(Some(*b)));
            }
        }
        Ok(Placement::Linear(None))
    }

    /// Verifies directory block `phys` (logical `logical`) as a lookup
    /// would, fails with [`Error::Exists`] if it holds `name`, and says
    /// whether a record for `name` fits in it.
    fn room_for_new(&self, dir: &Inode, phys: u64, logical: u64, name: &[u8]) -> Result<bool> {
        let at = Location::Block {
            block: phys,
            inode: dir.ino,
        };
        let key = self.fs.name_key(dir, name);
        self.with_block(phys, dir.ino, |buf| {
            // A block this transaction holds was checked when it was read or
            // written here; the scan below still compares the names.
            let seen = if self.holds(phys) {
                let used = self.used_len(buf);
                ext4kit_format::dir_entry::DirEntryIter::new(&buf[..used], buf.len(), true)
                    .filter_map(|e| e.ok())
                    .any(|e| e.inode != 0 && key.matches(e.name))
            } else {
                self.fs
                    .scan_dir_block(dir, buf, logical, at, |e| key.matches(e.name))?
                    .is_some()
            };
            if seen {
                return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
            }
            if self.fs.is_dx_block(dir, buf, logical) {
                return Ok(false);
            }
            let used = self.used_len(buf);
            let hashed = self.fs.hash_in_dirent(dir);
            let need = rec_len_hashed(name.len(), hashed);
            Ok(find_slot(&buf[..used], buf.len(), need, hashed, at)?.is_some())
        })?
    }

    /// Adds `name` → `ino` where `place` says; the caller writes `dir`'s
    /// inode afterwards. A linear insert leaves the hint at the block that
    /// took the name.
    pub(crate) fn add_entry_placed(
        &mut self,
        dir: &mut Inode,
        name: &[u8],
        ino: u32,
        ft: u8,
        place: Placement,
    ) -> Result<()> {
        let ft = self.entry_ft(ft);
        let block = match place {
            Placement::Looked(spot) => return self.add_entry_at(dir, name, ino, ft, spot),
            Placement::Linear(block) => block,
        };
        let generation = dir.raw.i_generation.get();
        if let Some(b) = block
            && self.insert_in_block(dir, b.physical, name, ino, ft)?
        {
            self.fs.dir_hints.set(dir.ino, generation, b.logical);
            self.fs.dir_drain.refilled(dir.ino, generation, b.logical);
            return Ok(());
        }
        let dir_index = self.fs.geo.features.compat.contains(CompatFeatures::DIR_INDEX);
        if dir_index && self.make_indexed(dir, name, ino, ft)? {
            return Ok(());
        }
        let blocks = self.dir_blocks(dir)?;
        self.append_dir_block(dir, &blocks, name, ino, ft)?;
        let logical = blocks.last().map_or(0, |b| b.logical + 1);
        self.fs.dir_hints.set(dir.ino, generation, logical);
        Ok(())
    }
}
