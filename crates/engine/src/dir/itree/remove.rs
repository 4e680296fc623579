//! Removing a name from an itree. An emptied node leaves its parent at
//! once; otherwise a node is merged with a sibling only when its fullness
//! class drops to a half or below, and only if the two fit in three quarters
//! of a node (room to take inserts without splitting straight back). A root
//! left with one child gives way to it.

use ext4kit_format::itree::{Link, Node, capacity, fullness_class};

use super::fast::Removed;
use super::has_itree;
use super::insert::lost_path;
use super::io::Step;
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

impl Txn<'_> {
    /// Removes the entry `name` → `ino` (htree hash `hash`) from `dir`'s
    /// itree; nothing when `dir` has none.
    ///
    /// # Errors
    /// The tree lacks the entry (it disagrees with the htree): corruption,
    /// located at the leaf.
    pub(crate) fn itree_remove(&mut self, dir: &Inode, ino: u32, hash: u32, name: &[u8]) -> Result<()> {
        if !has_itree(dir) {
            return Ok(());
        }
        let key = ext4kit_format::itree::key(ino, hash & !1);
        let link = self.itree_link(dir)?;
        match self.itree_remove_in_place(dir, link, key, name)? {
            Removed::Done => Ok(()),
            Removed::Missing(block) => {
                let what = format!(
                    "itree has no entry for {:?} (inode {ino})",
                    String::from_utf8_lossy(name)
                );
                Err(Error::inconsistent(Location::Block { block, inode: dir.ino }, what))
            }
            Removed::Restructure => {
                let mut path = self.itree_descend(dir, link, key)?;
                let Some(Step { block, node, .. }) = path.pop() else {
                    return Err(lost_path(dir));
                };
                self.itree_after_removal(dir, link, path, block, node)
            }
        }
    }

    /// `node` (at `block`, below `path`) just lost an entry: write it, drop
    /// it if empty, or merge it with a sibling when its class fell to a half.
    fn itree_after_removal(
        &mut self,
        dir: &Inode,
        link: Link,
        mut path: Vec<Step>,
        block: u64,
        node: Node,
    ) -> Result<()> {
        let cap = capacity(self.fs.geo.block_size);
        let class = fullness_class(node.used(), cap);
        let Some(parent) = path.last() else {
            self.write_node(dir, block, &node)?;
            return self.collapse_root(dir, link, &node);
        };
        if node.is_empty() {
            self.free_blocks(block, 1)?;
            return self.drop_child(dir, link, path);
        }
        let Node::Index { entries, .. } = &parent.node else {
            return Err(lost_path(dir));
        };
        let dropped = class < entries[parent.at].fullness;
        self.write_node(dir, block, &node)?;
        self.note_class(dir, &mut path, class)?;
        if dropped && class <= 1 {
            return self.try_merge(dir, link, path, node);
        }
        Ok(())
    }

    /// The child at the bottom step's `at` was freed: remove its entry.
    fn drop_child(&mut self, dir: &Inode, link: Link, mut path: Vec<Step>) -> Result<()> {
        let Some(mut parent) = path.pop() else {
            return Err(lost_path(dir));
        };
        let Node::Index { entries, .. } = &mut parent.node else {
            return Err(lost_path(dir));
        };
        entries.remove(parent.at);
        self.itree_after_removal(dir, link, path, parent.block, parent.node)
    }

    /// Merges `node` (the child at the bottom step's `at`) with a neighbour
    /// under the same parent when both fit in three quarters of a node.
    fn try_merge(&mut self, dir: &Inode, link: Link, mut path: Vec<Step>, node: Node) -> Result<()> {
        let cap = capacity(self.fs.geo.block_size);
        let Some(parent) = path.last() else {
            return Ok(());
        };
        let Node::Index { entries, .. } = &parent.node else {
            return Err(lost_path(dir));
        };
        let at = parent.at;
        let (left_at, right_at) = if at + 1 < entries.len() {
            (at, at + 1)
        } else if at > 0 {
            (at - 1, at)
        } else {
            return Ok(());
        };
        let (left_block, right_block) = (entries[left_at].block, entries[right_at].block);
        let other_block = if left_at == at { right_block } else { left_block };
        let other = self.read_node(dir, other_block, node.level())?;
        if node.used() + other.used() > cap * 3 / 4 {
            return Ok(());
        }
        let (left, right) = if left_at == at { (node, other) } else { (other, node) };
        let merged = concat(left, right).ok_or_else(|| lost_path(dir))?;
        self.write_node(dir, left_block, &merged)?;
        self.free_blocks(right_block, 1)?;
        let Some(mut parent) = path.pop() else {
            return Err(lost_path(dir));
        };
        let Node::Index { entries, .. } = &mut parent.node else {
            return Err(lost_path(dir));
        };
        entries[left_at].fullness = fullness_class(merged.used(), cap);
        entries.remove(right_at);
        self.itree_after_removal(dir, link, path, parent.block, parent.node)
    }

    /// A root index node with a single child hands the root to that child.
    fn collapse_root(&mut self, dir: &Inode, link: Link, root: &Node) -> Result<()> {
        let Node::Index { entries, .. } = root else {
            return Ok(());
        };
        if entries.len() != 1 || link.levels == 0 {
            return Ok(());
        }
        let child = Link {
            root: entries[0].block,
            levels: link.levels - 1,
        };
        self.free_blocks(link.root, 1)?;
        self.set_itree_link(dir, Some(child))
    }
}

/// `left`'s entries followed by `right`'s (both of one level).
fn concat(left: Node, right: Node) -> Option<Node> {
    match (left, right) {
        (Node::Leaf(mut a), Node::Leaf(b)) => {
            a.extend(b);
            Some(Node::Leaf(a))
        }
        (Node::Index { level, entries: mut a }, Node::Index { entries: b, .. }) => {
            a.extend(b);
            Some(Node::Index { level, entries: a })
        }
        _ => None,
    }
}
