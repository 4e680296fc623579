//! Walking an itree in key order from the committed image: `readdir` in
//! inode order from a position, and a full check of the tree's shape.

use ext4kit_format::itree::{IndexEntry, LeafEntry, Node, capacity};

use super::has_itree;
use super::io::child_for;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// The shape of one itree, as [`Filesystem::itree_stats`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ItreeStats {
    /// Levels above the leaves (0: the root is the only leaf).
    pub levels: u8,
    /// Leaf nodes.
    pub leaves: u64,
    /// Index nodes, the root included when it is one.
    pub index_nodes: u64,
    /// Names held.
    pub entries: u64,
    /// Bytes of entries over bytes the leaves could hold, in percent.
    pub leaf_fill_percent: u8,
}

/// Index nodes still to visit on the way back up: their entries and the
/// next child to take.
struct Pending {
    entries: Vec<IndexEntry>,
    next: usize,
    level: u8,
}

impl Filesystem {
    /// Calls `f` on each name of `dir`'s itree whose key
    /// ([`ext4kit_format::itree::key`]) is at least `from`, in key order,
    /// until `f` returns `Ok(false)`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when `dir` has no itree; corruption of a node,
    /// or keys out of order across leaves, located at the node.
    pub fn itree_walk(&self, dir: &Inode, from: u64, mut f: impl FnMut(&LeafEntry) -> Result<bool>) -> Result<()> {
        if !has_itree(dir) {
            return Err(Error::Unsupported(format!("directory inode {} has no itree", dir.ino)));
        }
        let link = self.itree_link_committed(dir)?;
        let mut stack: Vec<Pending> = Vec::new();
        let (mut block, mut level, mut seek) = (link.root, link.levels, Some(from));
        let mut last = 0u64;
        let mut visited = 0u64;
        loop {
            visited += 1;
            if visited > self.geo.blocks_count {
                return Err(shared_nodes(dir));
            }
            let node = self.itree_node_committed(dir, block, level)?;
            match node {
                Node::Index { entries, .. } => {
                    let at = seek.map_or(0, |k| child_for(&entries, k));
                    block = entries
                        .get(at)
                        .map(|e| e.block)
                        .ok_or_else(|| empty_index(dir, block))?;
                    stack.push(Pending {
                        entries,
                        next: at + 1,
                        level,
                    });
                    level -= 1;
                    continue;
                }
                Node::Leaf(entries) => {
                    for e in entries.iter().filter(|e| seek.is_none_or(|k| e.key() >= k)) {
                        if e.key() < last {
                            let what = "itree keys out of order across leaves";
                            return Err(Error::inconsistent(Location::Block { block, inode: dir.ino }, what));
                        }
                        last = e.key();
                        if !f(e)? {
                            return Ok(());
                        }
                    }
                }
            }
            seek = None;
            let Some((next, child_level)) = next_child(&mut stack) else {
                return Ok(());
            };
            (block, level) = (next, child_level);
        }
    }

    /// Walks every node of `dir`'s itree and reports its shape.
    ///
    /// # Errors
    /// As for [`Filesystem::itree_walk`].
    pub fn itree_stats(&self, dir: &Inode) -> Result<ItreeStats> {
        let link = self.itree_link_committed(dir)?;
        let mut stats = ItreeStats {
            levels: link.levels,
            ..ItreeStats::default()
        };
        let mut used = 0u64;
        let mut todo = vec![(link.root, link.levels)];
        let mut visited = 0u64;
        while let Some((block, level)) = todo.pop() {
            visited += 1;
            if visited > self.geo.blocks_count {
                return Err(shared_nodes(dir));
            }
            match self.itree_node_committed(dir, block, level)? {
                Node::Index { entries, .. } => {
                    stats.index_nodes += 1;
                    todo.extend(entries.iter().map(|e| (e.block, level - 1)));
                }
                leaf @ Node::Leaf(_) => {
                    stats.leaves += 1;
                    stats.entries += leaf.len() as u64;
                    used += leaf.used() as u64;
                }
            }
        }
        let room = stats.leaves * capacity(self.geo.block_size) as u64;
        stats.leaf_fill_percent = u8::try_from(used * 100 / room.max(1)).unwrap_or(100);
        Ok(stats)
    }
}

/// The next child to visit after a leaf: up the stack to the first index
/// node with children left.
fn next_child(stack: &mut Vec<Pending>) -> Option<(u64, u8)> {
    while let Some(top) = stack.last_mut() {
        if let Some(e) = top.entries.get(top.next) {
            top.next += 1;
            return Some((e.block, top.level - 1));
        }
        stack.pop();
    }
    None
}

fn empty_index(dir: &Inode, block: u64) -> Error {
    Error::inconsistent(
        Location::Block { block, inode: dir.ino },
        "itree index node without entries",
    )
}

/// More nodes visited than the file system has blocks: children shared
/// between index nodes, which a walk would otherwise follow for ever.
fn shared_nodes(dir: &Inode) -> Error {
    Error::inconsistent(Location::Inode(dir.ino), "itree nodes are shared between parents")
}
