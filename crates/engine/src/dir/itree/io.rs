//! Reading and writing itree nodes and the link in the htree root, inside a
//! transaction or (for `readdir`) from the committed image.

use std::sync::Arc;

use ext4kit_format::itree::{self, Link, Node, NodeContext};

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::txn::Txn;

/// Blocks read at once when a walk reaches a leaf.
const LEAF_READ_AHEAD: u64 = 8;

/// One node on a path from the root: its block, contents and, in an index
/// node, the child taken.
pub(super) struct Step {
    pub(super) block: u64,
    pub(super) node: Node,
    pub(super) at: usize,
}

pub(super) fn context(fs: &Filesystem, dir: &Inode, block: u64) -> NodeContext {
    NodeContext {
        block_size: fs.geo.block_size,
        dir_ino: dir.ino,
        inode_seed: fs.inode_csum_seed(dir),
        block,
    }
}

/// Decodes node `block` of `dir`'s tree, checking that it sits at `level`
/// (every step down lowers the level by one, so a corrupt tree cannot
/// send a walk round in a loop).
pub(super) fn parse(fs: &Filesystem, dir: &Inode, block: u64, buf: &[u8], level: u8) -> Result<Node> {
    let at = Location::Block { block, inode: dir.ino };
    let node = Node::parse(buf, &context(fs, dir, block)).map_err(|e| Error::format(at, e))?;
    if node.level() != level {
        let what = format!("itree node at level {} where level {level} belongs", node.level());
        return Err(Error::inconsistent(at, what));
    }
    for e in leaf_entries(&node) {
        if e.ino > fs.geo.inodes_count {
            let what = format!("itree entry names inode {} beyond the inode count", e.ino);
            return Err(Error::inconsistent(at, what));
        }
        crate::dir::check_name(&e.name, at, 0)?;
    }
    Ok(node)
}

fn leaf_entries(node: &Node) -> &[itree::LeafEntry] {
    match node {
        Node::Leaf(v) => v,
        Node::Index { .. } => &[],
    }
}

/// Index of the child covering `key`: the last entry whose key is at most
/// `key`, or the first.
pub(super) fn child_for(entries: &[itree::IndexEntry], key: u64) -> usize {
    entries.partition_point(|e| e.key <= key).saturating_sub(1)
}

impl Filesystem {
    /// Where block 0 of the indexed `dir` (its htree root) is, as committed.
    pub(crate) fn dir_root_block(&self, dir: &Inode) -> Result<u64> {
        let at = Location::Inode(dir.ino);
        self.map_range(dir, 0, 1)?
            .first()
            .map(|r| r.physical)
            .ok_or_else(|| Error::inconsistent(at, "indexed directory without block 0"))
    }

    /// The link in `dir`'s htree root, as committed.
    pub(super) fn itree_link_committed(&self, dir: &Inode) -> Result<Link> {
        let root = self.dir_root_block(dir)?;
        let buf = self.meta_block(root, dir.ino)?;
        decode_link(self, dir, root, &buf)
    }

    /// Node `block` as committed. Leaves are read with the blocks after
    /// them: a tree grown mostly by appends keeps its leaves in a row, so
    /// a walk pays one seek per [`LEAF_READ_AHEAD`] leaves.
    pub(super) fn itree_node_committed(&self, dir: &Inode, block: u64, level: u8) -> Result<Node> {
        let ahead = if level == 0 { LEAF_READ_AHEAD } else { 1 };
        let buf = self.meta_block_ahead(block, ahead, dir.ino)?;
        parse(self, dir, block, &buf, level)
    }
}

fn decode_link(fs: &Filesystem, dir: &Inode, root: u64, buf: &[u8]) -> Result<Link> {
    let at = Location::Block {
        block: root,
        inode: dir.ino,
    };
    let csum = fs.geo.features.metadata_csum();
    itree::read_link(buf, fs.geo.block_size, csum)
        .map_err(|e| Error::format(at, e))?
        .ok_or_else(|| {
            Error::inconsistent(
                at,
                "directory flagged with an itree has no itree link in its htree root",
            )
        })
}

impl Txn<'_> {
    pub(super) fn itree_link(&self, dir: &Inode) -> Result<Link> {
        let root = self.phys_of(dir, 0)?;
        let buf = self.block(root, dir.ino)?;
        decode_link(self.fs, dir, root, &buf)
    }

    /// Writes (or with `None` clears) the link; the slots lie outside what
    /// the root's `dx_tail` checksum covers.
    pub(super) fn set_itree_link(&mut self, dir: &Inode, link: Option<Link>) -> Result<()> {
        let (bs, csum) = (self.fs.geo.block_size, self.fs.geo.features.metadata_csum());
        let root = self.phys_of(dir, 0)?;
        let buf = self.block_mut(root, dir.ino)?;
        itree::write_link(buf, bs, csum, link).map_err(|e| {
            Error::format(
                Location::Block {
                    block: root,
                    inode: dir.ino,
                },
                e,
            )
        })
    }

    pub(super) fn read_node(&self, dir: &Inode, block: u64, level: u8) -> Result<Node> {
        let buf = self.block(block, dir.ino)?;
        parse(self.fs, dir, block, &buf, level)
    }

    pub(super) fn write_node(&mut self, dir: &Inode, block: u64, node: &Node) -> Result<()> {
        let at = Location::Block { block, inode: dir.ino };
        let bytes = node
            .encode(&context(self.fs, dir, block))
            .map_err(|e| Error::format(at, e))?;
        self.put_block(block, Arc::from(bytes));
        Ok(())
    }

    /// Where a directory's itree starts: half the file system away from
    /// its htree root. Nodes then go next to their siblings. Were they to
    /// follow the root, they would take the blocks the directory grows
    /// into, and every directory block would become an extent of its own
    /// (498 extents for 100,000 names); a group away, a directory that
    /// spilled into the next group met them there (1,105 extents for
    /// 300,000 names with 10,312-block groups). `readdir` reads the leaves
    /// ahead in runs, so the distance costs one seek per run.
    pub(super) fn itree_region(&self, dir: &Inode) -> Result<u64> {
        let root = self.phys_of(dir, 0)?;
        let geo = &self.fs.geo;
        let first = u64::from(geo.first_data_block);
        let span = geo.blocks_count - first;
        Ok(first + (root - first + span / 2) % span)
    }

    /// A block for a new node: the first free one at or after `near` (a
    /// bitmap scan, not mballoc, whose group preallocation would hand out
    /// the next block the directory itself was about to grow into).
    pub(super) fn alloc_node(&mut self, near: u64) -> Result<u64> {
        Ok(self.scan_alloc(near, 1)?.0)
    }

    /// The path from the root to the leaf that holds (or would hold) `key`.
    pub(super) fn itree_descend(&self, dir: &Inode, link: Link, key: u64) -> Result<Vec<Step>> {
        let mut path = Vec::with_capacity(usize::from(link.levels) + 1);
        let mut block = link.root;
        for level in (0..=link.levels).rev() {
            let node = self.read_node(dir, block, level)?;
            let at = match &node {
                Node::Index { entries, .. } if entries.is_empty() => {
                    let what = "itree index node without entries";
                    return Err(Error::inconsistent(Location::Block { block, inode: dir.ino }, what));
                }
                Node::Index { entries, .. } => child_for(entries, key),
                Node::Leaf(_) => 0,
            };
            let next = match &node {
                Node::Index { entries, .. } => entries[at].block,
                Node::Leaf(_) => 0,
            };
            path.push(Step { block, node, at });
            block = next;
        }
        Ok(path)
    }
}
