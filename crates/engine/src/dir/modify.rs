//! Adding and removing directory entries inside a transaction: entries go
//! into the first block with room (the slack after an entry's name, or an
//! unused record), else into a new block appended to the directory; indexed
//! directories take the entry in the leaf their htree names. Removing merges
//! the record into its predecessor, as the kernel's `ext4_generic_delete_entry`.

use ext4kit_format::dir_entry::{self, DirEntryIter, encode_entry, rec_len_hashed};
use ext4kit_format::extent::Extent;
use ext4kit_format::inode::flags;

use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

/// One directory block: its logical and physical number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirBlock {
    pub(super) logical: u64,
    pub(super) physical: u64,
}

impl Txn<'_> {
    pub(super) fn dir_blocks(&self, dir: &Inode) -> Result<Vec<DirBlock>> {
        let mut out = Vec::new();
        for e in self.body_runs(dir)? {
            for i in 0..u64::from(e.len) {
                out.push(DirBlock {
                    logical: u64::from(e.logical) + i,
                    physical: e.physical + i,
                });
            }
        }
        Ok(out)
    }

    pub(super) fn used_len(&self, buf: &[u8]) -> usize {
        if dir_entry::has_tail(buf) {
            buf.len() - dir_entry::TAIL_SIZE
        } else {
            buf.len()
        }
    }

    /// Sets the checksum of a changed directory block: the leaf tail, or
    /// the dx tail of an index root (whose ".." entry a rename may change).
    fn seal_dir_block(&mut self, dir: &Inode, block: u64) -> Result<()> {
        if !self.fs.geo.features.metadata_csum() {
            return Ok(());
        }
        let seed = self.fs.inode_csum_seed(dir);
        let bs = self.fs.geo.block_size;
        let indexed = dir.raw.has_flag(flags::INDEX);
        let buf = self.block_mut(block, dir.ino)?;
        if indexed && !dir_entry::has_tail(buf) {
            return ext4kit_format::htree::set_dx_checksum(buf, bs, seed)
                .map_err(|e| Error::format(Location::Block { block, inode: dir.ino }, e));
        }
        dir_entry::set_block_checksum(buf, seed);
        Ok(())
    }

    /// Points the entry `name` of `dir` at `ino` (type `ft`): rename's
    /// replace and exchange, and a moved directory's "..". An indexed
    /// directory is searched through its index, as for a removal.
    pub(crate) fn set_entry(&mut self, dir: &Inode, name: &[u8], ino: u32, ft: u8) -> Result<()> {
        let ft = self.entry_ft(ft);
        let key = self.fs.name_key(dir, name);
        let blocks = match self.leaf_of(dir, name)? {
            Some((leaf, _)) => vec![leaf],
            None => self.dir_blocks(dir)?,
        };
        for b in blocks {
            let buf = self.block(b.physical, dir.ino)?;
            let at = Location::Block {
                block: b.physical,
                inode: dir.ino,
            };
            // An index root holds "." and ".." (whose record spans the
            // rest of the block); other index blocks hold no names.
            let dx = self.fs.is_dx_block(dir, &buf, b.logical);
            if dx && b.logical != 0 {
                continue;
            }
            let used = if dx { buf.len() } else { self.used_len(&buf) };
            let hit = DirEntryIter::new(&buf[..used], buf.len(), true)
                .map(|e| e.map_err(|err| Error::format(at, err)))
                .find(|e| e.as_ref().map_or(true, |e| e.inode != 0 && key.matches(e.name)));
            if let Some(e) = hit {
                let e = e?;
                let (off, old) = (e.offset, e.inode);
                self.itree_replace(dir, name, old, ino, ft)?;
                let w = self.block_mut(b.physical, dir.ino)?;
                w[off..off + 4].copy_from_slice(&ino.to_le_bytes());
                w[off + 7] = ft;
                return self.seal_dir_block(dir, b.physical);
            }
        }
        Err(Error::NotFound(String::from_utf8_lossy(name).into_owned()))
    }

    /// Where the index puts `name` in `dir`: the leaf holding it and the
    /// name's hash, a handful of blocks read (the kernel's
    /// `ext4_find_entry`). `None` when `dir` has no index this code can
    /// walk, and for "." and ".." (in block 0): the caller then scans every
    /// block, as the lookup path does. [`Error::NotFound`] when the index
    /// says the name is absent. A directory with an itree must have a
    /// walkable index, since the itree must change with it.
    fn leaf_of(&self, dir: &Inode, name: &[u8]) -> Result<Option<(DirBlock, u32)>> {
        let indexed = self.fs.indexed(dir);
        let itree = super::itree::has_itree(dir);
        if !(indexed || itree) || name == b"." || name == b".." {
            return Ok(None);
        }
        let spot = match self.descend(dir, name) {
            Ok(spot) => spot,
            Err(e) if itree => return Err(e),
            Err(_) => return Ok(None),
        };
        let (_, leaf) = self
            .htree_leaf_with(dir, name, &spot)?
            .ok_or_else(|| Error::NotFound(String::from_utf8_lossy(name).into_owned()))?;
        let at = DirBlock {
            logical: leaf.logical,
            physical: leaf.phys,
        };
        Ok(Some((at, spot.hash)))
    }

    /// Tries to place the entry in `block`; true when it fit.
    pub(crate) fn insert_in_block(&mut self, dir: &Inode, block: u64, name: &[u8], ino: u32, ft: u8) -> Result<bool> {
        let at = Location::Block { block, inode: dir.ino };
        let buf = self.block(block, dir.ino)?;
        let bs = buf.len();
        let used = self.used_len(&buf);
        let hash = self.fs.dirent_hash(dir, name)?;
        let hashed = self.fs.hash_in_dirent(dir);
        let need = rec_len_hashed(name.len(), hashed);
        let Some((off, rec_len, actual)) = find_slot(&buf[..used], bs, need, hashed, at)? else {
            return Ok(false);
        };
        let buf = self.block_mut(block, dir.ino)?;
        if actual > 0 {
            buf[off + 4..off + 6].copy_from_slice(&dir_entry::rec_len_to_disk(actual, bs).to_le_bytes());
        }
        encode_entry(buf, off + actual, ino, rec_len - actual, ft, name, bs);
        if let Some(h) = hash {
            dir_entry::encode_hash(buf, off + actual, name.len(), h);
        }
        self.seal_dir_block(dir, block)?;
        Ok(true)
    }

    /// Adds `name` → `ino` to `dir` (the caller has checked it is absent),
    /// given where [`Txn::find_entry`] found the name belongs in an htree
    /// (`spot`), so the index is not descended twice. The caller writes
    /// `dir`'s inode afterwards (its size may grow).
    pub(crate) fn add_entry_at(
        &mut self,
        dir: &mut Inode,
        name: &[u8],
        ino: u32,
        ft: u8,
        spot: Option<super::htree_insert::HtreeSpot>,
    ) -> Result<()> {
        self.fs.check_new_casefold_name(dir, name)?;
        let ft = self.entry_ft(ft);
        if dir.raw.has_flag(flags::INDEX) {
            return self.htree_add(dir, name, ino, ft, spot);
        }
        let blocks = self.dir_blocks(dir)?;
        for b in &blocks {
            if self.insert_in_block(dir, b.physical, name, ino, ft)? {
                self.fs
                    .dir_drain
                    .refilled(dir.ino, dir.raw.i_generation.get(), b.logical);
                return Ok(());
            }
        }
        let dir_index = self
            .fs
            .geo
            .features
            .compat
            .contains(ext4kit_format::features::CompatFeatures::DIR_INDEX);
        if dir_index && self.make_indexed(dir, name, ino, ft)? {
            return Ok(());
        }
        self.append_dir_block(dir, &blocks, name, ino, ft)
    }

    pub(super) fn append_dir_block(
        &mut self,
        dir: &mut Inode,
        blocks: &[DirBlock],
        name: &[u8],
        ino: u32,
        ft: u8,
    ) -> Result<()> {
        let bs = self.fs.block_size();
        let logical = blocks.last().map_or(0, |b| b.logical + 1);
        self.check_dir_growth(dir, logical)?;
        let goal = blocks.last().map_or(0, |b| b.physical + 1);
        let (block, charge) = self.alloc_file_block(dir, logical, goal)?;
        let used = if self.fs.geo.features.metadata_csum() {
            bs - dir_entry::TAIL_SIZE
        } else {
            bs
        };
        let hash = self.fs.dirent_hash(dir, name)?;
        let buf = self.new_block(block);
        encode_entry(buf, 0, ino, used, ft, name, bs);
        if let Some(h) = hash {
            dir_entry::encode_hash(buf, 0, name.len(), h);
        }
        self.seal_dir_block(dir, block)?;
        let e = Extent {
            logical: logical as u32,
            len: 1,
            physical: block,
            unwritten: false,
        };
        self.map_run(dir, e)?;
        crate::inode::extent_write::charge_blocks(&mut dir.raw, charge, self.fs.geo.block_size);
        dir.raw.set_size((logical + 1) * bs as u64);
        Ok(())
    }

    /// Writes the first block of a new directory: ".", "..", and the tail.
    pub(crate) fn init_dir_block(&mut self, dir: &Inode, block: u64, parent: u32) -> Result<()> {
        let bs = self.fs.block_size();
        let used = if self.fs.geo.features.metadata_csum() {
            bs - dir_entry::TAIL_SIZE
        } else {
            bs
        };
        let ft = self.entry_ft(2);
        let buf = self.new_block(block);
        encode_entry(buf, 0, dir.ino, 12, ft, b".", bs);
        encode_entry(buf, 12, parent, used - 12, ft, b"..", bs);
        self.seal_dir_block(dir, block)
    }

    /// The file-type byte a new entry carries: `ft` with the `filetype`
    /// feature, else 0. Without the feature that byte is the high half of
    /// a 16-bit `name_len` (`ext2_dir_entry`, before `ext2_dir_entry_2`):
    /// any other value makes the name 256 bytes longer to every reader,
    /// and e2fsck reports the entry ("has filetype set").
    pub(crate) fn entry_ft(&self, ft: u8) -> u8 {
        let filetype = self
            .fs
            .geo
            .features
            .incompat
            .contains(ext4kit_format::features::IncompatFeatures::FILETYPE);
        if filetype { ft } else { 0 }
    }

    /// Removes `name` from `dir`; returns the inode it named.
    pub(crate) fn remove_entry(&mut self, dir: &Inode, name: &[u8]) -> Result<u32> {
        Ok(self.remove_entry_at(dir, name)?.0)
    }

    /// Removes `name` from `dir`; returns the inode it named and the block
    /// that held it.
    ///
    /// An indexed directory is searched through its index (the kernel's
    /// `ext4_find_entry` before `ext4_delete_entry`), so an unlink in a
    /// directory of millions of names reads a handful of blocks, not all
    /// of them; an index this code cannot walk is scanned instead, as the
    /// lookup path does.
    pub(crate) fn remove_entry_at(&mut self, dir: &Inode, name: &[u8]) -> Result<(u32, DirBlock)> {
        let missing = || Error::NotFound(String::from_utf8_lossy(name).into_owned());
        if let Some((leaf, hash)) = self.leaf_of(dir, name)? {
            let ino = self
                .remove_in_block(dir, leaf.physical, leaf.logical, name)?
                .ok_or_else(missing)?;
            self.itree_remove(dir, ino, hash, name)?;
            return Ok((ino, leaf));
        }
        for b in self.dir_blocks(dir)? {
            if let Some(ino) = self.remove_in_block(dir, b.physical, b.logical, name)? {
                return Ok((ino, b));
            }
        }
        Err(missing())
    }

    /// Removes `name` from directory block `block` (logical `logical`) if
    /// it is there: the record merges into the one before it, or, first
    /// in its block, is marked unused (inode 0), as `ext4_generic_delete_entry`
    /// does. Index blocks hold no names and are skipped.
    fn remove_in_block(&mut self, dir: &Inode, block: u64, logical: u64, name: &[u8]) -> Result<Option<u32>> {
        let buf = self.block(block, dir.ino)?;
        if self.fs.is_dx_block(dir, &buf, logical) {
            return Ok(None);
        }
        let at = Location::Block { block, inode: dir.ino };
        let used = self.used_len(&buf);
        let key = self.fs.name_key(dir, name);
        let mut prev: Option<(usize, usize)> = None;
        for e in DirEntryIter::new(&buf[..used], buf.len(), true) {
            let e = e.map_err(|err| Error::format(at, err))?;
            if e.inode == 0 || !key.matches(e.name) {
                prev = Some((e.offset, e.rec_len));
                continue;
            }
            let (ino, off, rec, bs) = (e.inode, e.offset, e.rec_len, buf.len());
            let w = self.block_mut(block, dir.ino)?;
            match prev {
                Some((poff, prec)) => {
                    let merged = dir_entry::rec_len_to_disk(prec + rec, bs);
                    w[poff + 4..poff + 6].copy_from_slice(&merged.to_le_bytes());
                }
                None => w[off..off + 4].fill(0),
            }
            self.seal_dir_block(dir, block)?;
            if !dir.raw.has_flag(flags::INDEX) {
                self.fs.dir_hints.freed(dir.ino, dir.raw.i_generation.get(), logical);
            }
            return Ok(Some(ino));
        }
        Ok(None)
    }

    /// Every live entry of `dir` as this transaction sees it (what
    /// [`crate::Filesystem::read_dir`] lists from the committed image).
    pub(crate) fn list_dir(&self, dir: &Inode) -> Result<Vec<super::DirEntry>> {
        if dir.has_inline_data() {
            return self.fs.read_dir(dir);
        }
        let mut out = Vec::new();
        for b in self.dir_blocks(dir)? {
            let buf = self.block(b.physical, dir.ino)?;
            let at = Location::Block {
                block: b.physical,
                inode: dir.ino,
            };
            out.extend(self.fs.dir_block_entries(dir, &buf, b.logical, at)?);
        }
        Ok(out)
    }

    /// True when `dir` holds nothing but "." and "..".
    pub(crate) fn dir_is_empty(&self, dir: &Inode) -> Result<bool> {
        if dir.has_inline_data() {
            return Ok(self.fs.read_dir(dir)?.len() <= 2);
        }
        for b in self.dir_blocks(dir)? {
            let buf = self.block(b.physical, dir.ino)?;
            let at = Location::Block {
                block: b.physical,
                inode: dir.ino,
            };
            for e in self.fs.dir_block_entries(dir, &buf, b.logical, at)? {
                if e.name != b"." && e.name != b".." {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

/// The first record of the used part `buf` (of a `bs`-byte block) whose
/// slack, or whose whole length if unused, holds a record of `need` bytes:
/// its offset, length and the length its own entry keeps. In a directory
/// whose entries carry hashes (`hashed`) every live entry keeps room for
/// one, `.` and `..` too (`ext4_find_dest_de` sizes them all alike).
pub(super) fn find_slot(
    buf: &[u8],
    bs: usize,
    need: usize,
    hashed: bool,
    at: Location,
) -> Result<Option<(usize, usize, usize)>> {
    for e in DirEntryIter::new(buf, bs, true) {
        let e = e.map_err(|err| Error::format(at, err))?;
        let actual = if e.inode == 0 {
            0
        } else {
            rec_len_hashed(e.name.len(), hashed).min(e.rec_len)
        };
        if e.rec_len - actual >= need {
            return Ok(Some((e.offset, e.rec_len, actual)));
        }
    }
    Ok(None)
}
