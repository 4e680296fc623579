//! The common itree edits done in place on the raw blocks
//! ([`ext4kit_format::itree::raw`]): a name added to a leaf with room, a
//! name removed where no node empties or merges. Anything structural
//! (split, merge, a node freed) falls back to the decoded path.

use ext4kit_format::itree::{LeafEntry, Link, raw};

use super::io::context;
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

/// An index node on the way down: its block, the child taken and the
/// class recorded for that child.
pub(super) struct Hop {
    block: u64,
    at: usize,
    class: u8,
}

/// What a removal in place left.
pub(super) enum Removed {
    /// Done: nothing structural needed.
    Done,
    /// The leaf emptied or fell to a merge-worthy class: the decoded path
    /// must finish.
    Restructure,
    /// No such entry in the leaf.
    Missing(u64),
}

impl Txn<'_> {
    /// The index nodes from the root down to the leaf for `key`, and the
    /// leaf's block.
    fn itree_hops(&self, dir: &Inode, link: Link, key: u64) -> Result<(Vec<Hop>, u64)> {
        let mut hops = Vec::with_capacity(usize::from(link.levels));
        let mut block = link.root;
        for level in (1..=link.levels).rev() {
            let ctx = context(self.fs, dir, block);
            let (at, child, class) = self
                .with_block(block, dir.ino, |buf| raw::index_child(buf, &ctx, level, key))?
                .map_err(|e| Error::format(Location::Block { block, inode: dir.ino }, e))?;
            hops.push(Hop { block, at, class });
            block = child;
        }
        Ok((hops, block))
    }

    /// Adds `e` to its leaf in place; false (nothing changed but the
    /// transaction's copy of the leaf) when the leaf has no room.
    pub(super) fn itree_add_in_place(&mut self, dir: &Inode, link: Link, e: &LeafEntry) -> Result<bool> {
        let (hops, leaf) = self.itree_hops(dir, link, e.key())?;
        let ctx = context(self.fs, dir, leaf);
        let buf = self.block_mut(leaf, dir.ino)?;
        let Some(class) = raw::leaf_insert(buf, &ctx, e).map_err(located(leaf, dir))? else {
            return Ok(false);
        };
        self.record_class(dir, hops.last(), class)?;
        Ok(true)
    }

    /// Removes `key`/`name` from its leaf in place.
    pub(super) fn itree_remove_in_place(&mut self, dir: &Inode, link: Link, key: u64, name: &[u8]) -> Result<Removed> {
        let (hops, leaf) = self.itree_hops(dir, link, key)?;
        let ctx = context(self.fs, dir, leaf);
        let buf = self.block_mut(leaf, dir.ino)?;
        let Some((class, left)) = raw::leaf_remove(buf, &ctx, key, name).map_err(located(leaf, dir))? else {
            return Ok(Removed::Missing(leaf));
        };
        let Some(parent) = hops.last() else {
            return Ok(Removed::Done);
        };
        if left == 0 || (class < parent.class && class <= 1) {
            return Ok(Removed::Restructure);
        }
        self.record_class(dir, Some(parent), class)?;
        Ok(Removed::Done)
    }

    fn record_class(&mut self, dir: &Inode, parent: Option<&Hop>, class: u8) -> Result<()> {
        let Some(p) = parent.filter(|p| p.class != class) else {
            return Ok(());
        };
        let ctx = context(self.fs, dir, p.block);
        let buf = self.block_mut(p.block, dir.ino)?;
        raw::set_child_class(buf, &ctx, p.at, class).map_err(located(p.block, dir))
    }
}

/// Places a format error at node `block` of `dir`'s tree.
fn located(block: u64, dir: &Inode) -> impl Fn(ext4kit_format::FormatError) -> Error + '_ {
    move |e| Error::format(Location::Block { block, inode: dir.ino }, e)
}
