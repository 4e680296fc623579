//! Name lookup inside a transaction: what [`crate::Filesystem::lookup`]
//! answers, but over the transaction's own copies of directory blocks, so
//! that a batch of operations sees the names its earlier operations added.
//! For an htree the descent is kept ([`HtreeSpot`]) for the insert that
//! usually follows, so a create walks the index once.

use ext4kit_format::dir_entry::{self, DirEntryIter};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::htree::DxNode;

use super::htree_insert::{Frame, HtreeSpot};
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

/// A directory leaf block: its physical and logical block numbers.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeafAt {
    pub(super) phys: u64,
    pub(super) logical: u64,
}

impl Txn<'_> {
    /// Finds `name` in directory `dir` as this
    /// transaction sees it: its inode number if present, and, for an
    /// indexed directory, where the name belongs.
    pub(crate) fn find_entry(&self, dir: &Inode, name: &[u8]) -> Result<(Option<u32>, Option<HtreeSpot>)> {
        if dir.has_inline_data() {
            let key = self.fs.name_key(dir, name);
            let mut hit = None;
            self.fs.for_each_inline_dir_entry(dir, |e| {
                if key.matches(&e.name) {
                    hit = Some(e.ino);
                }
                Ok(hit.is_none())
            })?;
            return Ok((hit, None));
        }
        if name == b"." {
            return Ok((Some(dir.ino), None));
        }
        if name == b".." {
            // First in block 0, whether that is a leaf or an index root.
            let block = self.phys_of(dir, 0)?;
            return Ok((Some(self.dotdot(dir, block)?), None));
        }
        let indexed = self.fs.indexed(dir);
        // An index this code cannot walk (unknown hash, bad root) is
        // scanned instead, as the read path does.
        if indexed && let Ok(spot) = self.descend(dir, name) {
            let found = self.search_htree(dir, name, &spot)?;
            return Ok((found, Some(spot)));
        }
        for b in self.dir_blocks(dir)? {
            if let Some(ino) = self.scan_block(dir, b.physical, b.logical, name)? {
                return Ok((Some(ino), None));
            }
        }
        Ok((None, None))
    }

    /// Searches the leaf `spot` ends at, then the following leaves while
    /// they continue the same hash (the collision bit).
    fn search_htree(&self, dir: &Inode, name: &[u8], spot: &HtreeSpot) -> Result<Option<u32>> {
        Ok(self.htree_leaf_with(dir, name, spot)?.map(|(ino, _)| ino))
    }

    /// Where the index puts `name`: its inode and the leaf holding it
    /// (physical, logical), or `None` when the leaves its hash maps to —
    /// the one `spot` ends at and those continuing the same hash with the
    /// collision bit (`ext4_htree_next_block`) — do not hold it. Like the
    /// kernel's `ext4_dx_find_entry`, an absent name is not looked for
    /// elsewhere: the index is authoritative.
    pub(super) fn htree_leaf_with(&self, dir: &Inode, name: &[u8], spot: &HtreeSpot) -> Result<Option<(u32, LeafAt)>> {
        let mut path = spot.path.clone();
        let max_leaves = dir.size() >> self.fs.geo.block_size_log2;
        for _ in 0..=max_leaves {
            let leaf = path.last().map_or(0, |f| f.entries[f.at].block);
            let phys = self.phys_of(dir, leaf.into())?;
            if let Some(ino) = self.scan_block(dir, phys, leaf.into(), name)? {
                let logical = u64::from(leaf);
                return Ok(Some((ino, LeafAt { phys, logical })));
            }
            match self.next_leaf(dir, &mut path)? {
                Some(h) if h & 1 == 1 && h & !1 == spot.hash => continue,
                _ => return Ok(None),
            }
        }
        Err(Error::inconsistent(
            Location::Inode(dir.ino),
            "htree collision chain longer than the directory",
        ))
    }

    /// Moves `path` to the next leaf; returns the hash it starts with, or
    /// `None` past the last leaf.
    fn next_leaf(&self, dir: &Inode, path: &mut [Frame]) -> Result<Option<u32>> {
        let mut depth = path.len();
        while depth > 0 && path[depth - 1].at + 1 >= path[depth - 1].entries.len() {
            depth -= 1;
        }
        if depth == 0 {
            return Ok(None);
        }
        path[depth - 1].at += 1;
        let hash = path[depth - 1].entries[path[depth - 1].at].hash;
        let params = self.dx_params();
        for d in depth..path.len() {
            let logical = u64::from(path[d - 1].entries[path[d - 1].at].block);
            let phys = self.phys_of(dir, logical)?;
            let at = Location::Block {
                block: phys,
                inode: dir.ino,
            };
            let node = self.with_block(phys, dir.ino, |b| DxNode::parse(b, &params))?;
            path[d] = Frame {
                logical,
                root: false,
                entries: node.map_err(|e| Error::format(at, e))?.entries,
                at: 0,
            };
        }
        Ok(Some(hash))
    }

    /// Looks for `name` in directory block `phys` (logical `logical`). A
    /// block read from the device is verified as the read path does; one
    /// this transaction holds was checked when it was read or written here.
    fn scan_block(&self, dir: &Inode, phys: u64, logical: u64, name: &[u8]) -> Result<Option<u32>> {
        let at = Location::Block {
            block: phys,
            inode: dir.ino,
        };
        let key = self.fs.name_key(dir, name);
        if !self.holds(phys) {
            let buf = self.block(phys, dir.ino)?;
            return self.fs.scan_dir_block(dir, &buf, logical, at, |e| key.matches(e.name));
        }
        self.with_block(phys, dir.ino, |buf| {
            if self.fs.is_dx_block(dir, buf, logical) {
                return Ok(None);
            }
            let used = if dir_entry::has_tail(buf) {
                buf.len() - dir_entry::TAIL_SIZE
            } else {
                buf.len()
            };
            let filetype = self.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE);
            for e in DirEntryIter::new(&buf[..used], buf.len(), filetype) {
                let e = e.map_err(|err| Error::format(at, err))?;
                if e.inode != 0 && key.matches(e.name) {
                    return Ok(Some(e.inode));
                }
            }
            Ok(None)
        })?
    }
}
