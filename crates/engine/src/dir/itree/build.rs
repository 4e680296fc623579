//! Building an itree for a directory that has none (when it becomes
//! indexed, or from `tune -O itree`) and freeing one (when the directory
//! goes, or from `tune -O ^itree`).

use ext4kit_format::itree::{ITREE_FL, IndexEntry, LeafEntry, Link, MAX_LEVELS, Node, capacity, fullness_class};

use super::has_itree;
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

/// Leaves of a bulk load are filled to this share of a node (percent), so
/// names that arrive later in the middle do not split every leaf at once.
const BULK_FILL: usize = 90;

impl Txn<'_> {
    /// Builds `dir`'s itree from `entries` (every name but "." and "..",
    /// hashes as the htree computes them), links it from the htree root
    /// and sets [`ITREE_FL`]; the caller writes `dir`'s inode. The htree
    /// root must have the link's two slots free.
    pub(crate) fn itree_build(&mut self, dir: &mut Inode, mut entries: Vec<LeafEntry>) -> Result<()> {
        for e in &mut entries {
            e.hash &= !1;
        }
        entries.sort_by_key(LeafEntry::key);
        let near = self.itree_region(dir)?;
        let cap = capacity(self.fs.geo.block_size);
        let mut level = self.write_leaves(dir, entries, near, cap * BULK_FILL / 100)?;
        let mut height = 0u8;
        while level.len() > 1 {
            height += 1;
            if height > MAX_LEVELS {
                return Err(Error::DirIndexFull(format!(
                    "directory inode {} is too large for an itree",
                    dir.ino
                )));
            }
            level = self.write_index_level(dir, level, height, near, cap)?;
        }
        let root = level.first().map(|e| e.block).ok_or_else(|| empty_build(dir))?;
        self.set_itree_link(dir, Some(Link { root, levels: height }))?;
        dir.raw.i_flags.set(dir.raw.flags() | ITREE_FL);
        Ok(())
    }

    /// Writes sorted `entries` into leaves of up to `fill` bytes (never
    /// cutting a run of equal keys); at least one leaf, maybe empty.
    fn write_leaves(
        &mut self,
        dir: &Inode,
        entries: Vec<LeafEntry>,
        near: u64,
        fill: usize,
    ) -> Result<Vec<IndexEntry>> {
        let cap = capacity(self.fs.geo.block_size);
        let mut out = Vec::new();
        let mut leaf: Vec<LeafEntry> = Vec::new();
        let mut used = 0;
        let mut near = near;
        for e in entries {
            let same_key = leaf.last().is_some_and(|l| l.key() == e.key());
            if used + e.size() > fill && !same_key && !leaf.is_empty() {
                near = self.flush_leaf(dir, std::mem::take(&mut leaf), near, &mut out)?;
                used = 0;
            }
            used += e.size();
            if used > cap {
                return Err(Error::Unsupported(format!(
                    "directory inode {} has more copies of one itree key than a node holds",
                    dir.ino
                )));
            }
            leaf.push(e);
        }
        self.flush_leaf(dir, leaf, near, &mut out)?;
        Ok(out)
    }

    fn flush_leaf(&mut self, dir: &Inode, leaf: Vec<LeafEntry>, near: u64, out: &mut Vec<IndexEntry>) -> Result<u64> {
        let cap = capacity(self.fs.geo.block_size);
        let node = Node::Leaf(leaf);
        let block = self.alloc_node(near)?;
        self.write_node(dir, block, &node)?;
        out.push(IndexEntry {
            key: node.first_key().unwrap_or(0),
            block,
            fullness: fullness_class(node.used(), cap),
        });
        Ok(block)
    }

    /// One level of index nodes over `children`.
    fn write_index_level(
        &mut self,
        dir: &Inode,
        children: Vec<IndexEntry>,
        level: u8,
        near: u64,
        cap: usize,
    ) -> Result<Vec<IndexEntry>> {
        let per_node = (cap * BULK_FILL / 100 / ext4kit_format::itree::INDEX_ENTRY_SIZE).max(2);
        let mut out = Vec::new();
        let mut near = near;
        for chunk in children.chunks(per_node) {
            let node = Node::Index {
                level,
                entries: chunk.to_vec(),
            };
            let block = self.alloc_node(near)?;
            self.write_node(dir, block, &node)?;
            out.push(IndexEntry {
                key: chunk[0].key,
                block,
                fullness: fullness_class(node.used(), cap),
            });
            near = block;
        }
        Ok(out)
    }

    /// Frees every node of `dir`'s itree, clears the link and
    /// [`ITREE_FL`]; the caller writes `dir`'s inode. Nothing when `dir`
    /// has no itree.
    pub(crate) fn itree_free(&mut self, dir: &mut Inode) -> Result<()> {
        if !has_itree(dir) {
            return Ok(());
        }
        let link = self.itree_link(dir)?;
        let mut todo = vec![(link.root, link.levels)];
        let mut freed = 0u64;
        while let Some((block, level)) = todo.pop() {
            if let Node::Index { entries, .. } = self.read_node(dir, block, level)? {
                todo.extend(entries.iter().map(|e| (e.block, level - 1)));
            }
            self.free_blocks(block, 1)?;
            freed += 1;
            if freed > self.fs.geo.blocks_count {
                return Err(Error::inconsistent(
                    Location::Inode(dir.ino),
                    "itree nodes are shared between parents",
                ));
            }
        }
        self.set_itree_link(dir, None)?;
        dir.raw.i_flags.set(dir.raw.flags() & !ITREE_FL);
        Ok(())
    }
}

fn empty_build(dir: &Inode) -> Error {
    Error::inconsistent(Location::Inode(dir.ino), "itree build wrote no root")
}
