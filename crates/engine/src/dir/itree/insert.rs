//! Adding a name to an itree: sorted insert into the leaf, a split (or an
//! append past the last key) when it overflows, split index nodes upward,
//! and a new root on top when the root splits.

use ext4kit_format::itree::{IndexEntry, LeafEntry, Link, MAX_LEVELS, Node, capacity, fullness_class};

use super::has_itree;
use super::io::Step;
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

impl Txn<'_> {
    /// Adds `name` → `ino` (type `ft`, htree hash `hash`) to `dir`'s itree;
    /// nothing when `dir` has none.
    pub(crate) fn itree_add(&mut self, dir: &Inode, ino: u32, hash: u32, ft: u8, name: &[u8]) -> Result<()> {
        if !has_itree(dir) {
            return Ok(());
        }
        let entry = LeafEntry {
            ino,
            hash: hash & !1,
            file_type: ft,
            name: name.to_vec(),
        };
        let key = entry.key();
        let link = self.itree_link(dir)?;
        if self.itree_add_in_place(dir, link, &entry)? {
            return Ok(());
        }
        let mut path = self.itree_descend(dir, link, key)?;
        let Some(Step { block, node, .. }) = path.pop() else {
            return Err(lost_path(dir));
        };
        let Node::Leaf(mut entries) = node else {
            return Err(lost_path(dir));
        };
        let pos = entries.partition_point(|e| e.key() <= key);
        entries.insert(pos, entry);
        let cap = capacity(self.fs.geo.block_size);
        let leaf = Node::Leaf(entries);
        if leaf.used() <= cap {
            self.write_node(dir, block, &leaf)?;
            return self.note_class(dir, &mut path, fullness_class(leaf.used(), cap));
        }
        let Node::Leaf(mut entries) = leaf else {
            return Err(lost_path(dir));
        };
        let mid = leaf_split_point(&entries, pos, cap).ok_or_else(|| {
            let what = "itree leaf cannot split: one key fills it";
            Error::inconsistent(Location::Block { block, inode: dir.ino }, what)
        })?;
        let right = Node::Leaf(entries.split_off(mid));
        let left = Node::Leaf(entries);
        self.split_into(dir, link, path, block, left, right)
    }

    /// Points the itree entry of `name` at `new` (type `ft`) instead of
    /// `old`: rename's replace and exchange. "." and ".." are not in it.
    pub(crate) fn itree_replace(&mut self, dir: &Inode, name: &[u8], old: u32, new: u32, ft: u8) -> Result<()> {
        if !has_itree(dir) || name == b"." || name == b".." {
            return Ok(());
        }
        let hash = self.descend(dir, name)?.hash;
        self.itree_remove(dir, old, hash, name)?;
        self.itree_add(dir, new, hash, ft, name)
    }

    /// Writes `left` back at `block` and `right` into a new block, then
    /// records the new child in the parent (splitting upward as needed).
    fn split_into(
        &mut self,
        dir: &Inode,
        link: Link,
        mut path: Vec<Step>,
        block: u64,
        left: Node,
        right: Node,
    ) -> Result<()> {
        let cap = capacity(self.fs.geo.block_size);
        let mut block = block;
        let (mut left, mut right) = (left, right);
        loop {
            let new = self.alloc_node(block)?;
            self.write_node(dir, block, &left)?;
            self.write_node(dir, new, &right)?;
            let child = IndexEntry {
                key: right.first_key().unwrap_or(0),
                block: new,
                fullness: fullness_class(right.used(), cap),
            };
            let left_class = fullness_class(left.used(), cap);
            let Some(mut parent) = path.pop() else {
                return self.new_root(dir, link, block, left_class, child);
            };
            let Node::Index { level, entries } = &mut parent.node else {
                return Err(lost_path(dir));
            };
            // The first child of a node also takes keys below its entry's
            // key; its left half may now start below that key, and the
            // right half's key must not sort before it.
            let low = entries[parent.at].key.min(left.first_key().unwrap_or(u64::MAX));
            entries[parent.at].key = low;
            entries[parent.at].fullness = left_class;
            entries.insert(parent.at + 1, child);
            let (level, appended) = (*level, parent.at + 2 == entries.len());
            if parent.node.used() <= cap {
                self.write_node(dir, parent.block, &parent.node)?;
                let class = fullness_class(parent.node.used(), cap);
                return self.note_class(dir, &mut path, class);
            }
            let Node::Index { mut entries, .. } = parent.node else {
                return Err(lost_path(dir));
            };
            let mid = if appended { entries.len() - 1 } else { entries.len() / 2 };
            let upper = entries.split_off(mid);
            block = parent.block;
            left = Node::Index { level, entries };
            right = Node::Index { level, entries: upper };
        }
    }

    /// The root at `old` split: a new index root one level up takes both
    /// halves, and the link in the htree root moves to it.
    fn new_root(&mut self, dir: &Inode, link: Link, old: u64, old_class: u8, child: IndexEntry) -> Result<()> {
        let levels = link.levels + 1;
        if levels > MAX_LEVELS {
            return Err(Error::DirIndexFull(format!(
                "the itree of directory inode {} would need more than {MAX_LEVELS} levels",
                dir.ino
            )));
        }
        let first = IndexEntry {
            key: 0,
            block: old,
            fullness: old_class,
        };
        let root = Node::Index {
            level: levels,
            entries: vec![first, child],
        };
        let block = self.alloc_node(old)?;
        self.write_node(dir, block, &root)?;
        self.set_itree_link(dir, Some(Link { root: block, levels }))
    }

    /// Records `class` as the fullness of the child taken at the bottom of
    /// `path` (the node just written), rewriting the parent only when the
    /// class changed.
    pub(super) fn note_class(&mut self, dir: &Inode, path: &mut [Step], class: u8) -> Result<()> {
        let Some(parent) = path.last_mut() else {
            return Ok(());
        };
        let Node::Index { entries, .. } = &mut parent.node else {
            return Err(lost_path(dir));
        };
        if entries[parent.at].fullness == class {
            return Ok(());
        }
        entries[parent.at].fullness = class;
        self.write_node(dir, parent.block, &parent.node)
    }
}

/// Where an overflowing leaf (the new name at `pos`) splits: past the last
/// entry when the new name has the highest key (an append: names mostly
/// arrive in inode order), else near the middle by bytes. Never between two
/// entries with one key, so every copy of a key stays in one leaf. `None`
/// when no such split leaves both halves within `cap`.
fn leaf_split_point(entries: &[LeafEntry], pos: usize, cap: usize) -> Option<usize> {
    let n = entries.len();
    let boundary = |m: usize| m > 0 && m < n && entries[m - 1].key() != entries[m].key();
    if pos + 1 == n && boundary(pos) {
        return Some(pos);
    }
    let total: usize = entries.iter().map(LeafEntry::size).sum();
    let mut acc = 0;
    let mut mid = 1;
    for (i, e) in entries.iter().enumerate() {
        if acc + e.size() > total / 2 {
            mid = i.max(1);
            break;
        }
        acc += e.size();
    }
    let fits = |m: usize| {
        let left: usize = entries[..m].iter().map(LeafEntry::size).sum();
        left <= cap && total - left <= cap
    };
    let forward = (mid..n).find(|&m| boundary(m));
    let backward = (1..mid).rev().find(|&m| boundary(m));
    [forward, backward].into_iter().flatten().find(|&m| fits(m))
}

pub(super) fn lost_path(dir: &Inode) -> Error {
    Error::inconsistent(Location::Inode(dir.ino), "itree path does not end in a leaf")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(ino: u32, len: usize) -> LeafEntry {
        LeafEntry {
            ino,
            hash: 0,
            file_type: 1,
            name: vec![b'a'; len],
        }
    }

    #[test]
    fn appends_past_the_last_key_and_never_splits_a_key() {
        let v: Vec<_> = (1..=10).map(|i| e(i, 20)).collect();
        assert_eq!(leaf_split_point(&v, 9, 320), Some(9));
        assert_eq!(leaf_split_point(&v, 3, 320), Some(5));
        let mut same: Vec<_> = (0..6).map(|_| e(7, 20)).collect();
        same.push(e(8, 20));
        assert_eq!(leaf_split_point(&same, 0, 200), Some(6));
        let all: Vec<_> = (0..6).map(|_| e(7, 20)).collect();
        assert_eq!(leaf_split_point(&all, 0, 100), None);
    }
}
