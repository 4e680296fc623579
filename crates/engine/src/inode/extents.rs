//! Walking an extent tree (`ifork.rst`) for a range of logical blocks. Each
//! node is validated (magic, counts, order, depth one less than its parent,
//! checksum) before use, so a corrupt tree yields an error at its block and
//! never a loop: depth strictly decreases on every step down.

use ext4kit_format::extent::{self, ExtentNode, NodeEntries};
use ext4kit_format::inode::I_BLOCK_SIZE;

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::map::Run;

impl Filesystem {
    /// The extent runs of `inode` overlapping `start..end` (not yet clipped).
    pub(crate) fn extent_runs(&self, inode: &Inode, start: u64, end: u64) -> Result<Vec<Run>> {
        let root = extent::parse_node(&inode.raw.i_block[..I_BLOCK_SIZE], true)
            .map_err(|e| Error::format(Location::Inode(inode.ino), e))?;
        let mut out = Vec::new();
        self.walk_extents(inode, &root, start, end, &mut out)?;
        Ok(out)
    }

    /// The parsed tree nodes of `inode`, root first, depth-first (for `stat`).
    pub fn extent_tree(&self, inode: &Inode) -> Result<Vec<(Option<u64>, ExtentNode)>> {
        self.reading("extent_tree", || self.extent_tree_unrecorded(inode))
    }

    fn extent_tree_unrecorded(&self, inode: &Inode) -> Result<Vec<(Option<u64>, ExtentNode)>> {
        let root = extent::parse_node(&inode.raw.i_block[..I_BLOCK_SIZE], true)
            .map_err(|e| Error::format(Location::Inode(inode.ino), e))?;
        let mut out = vec![(None, root)];
        let mut i = 0;
        while i < out.len() {
            if let NodeEntries::Index(idx) = &out[i].1.entries {
                let (depth, kids) = (out[i].1.depth, idx.clone());
                for k in kids {
                    out.push((Some(k.child), self.extent_child(inode, k.child, depth)?));
                }
            }
            i += 1;
        }
        Ok(out)
    }

    fn walk_extents(&self, inode: &Inode, node: &ExtentNode, start: u64, end: u64, out: &mut Vec<Run>) -> Result<()> {
        match &node.entries {
            NodeEntries::Leaf(v) => {
                for e in v
                    .iter()
                    .filter(|e| u64::from(e.logical) < end && u64::from(e.logical) + u64::from(e.len) > start)
                {
                    let at = Location::Inode(inode.ino);
                    self.check_block(e.physical, at)?;
                    self.check_block(e.physical + u64::from(e.len) - 1, at)?;
                    out.push(Run {
                        logical: e.logical.into(),
                        physical: e.physical,
                        len: e.len.into(),
                        unwritten: e.unwritten,
                    });
                }
            }
            NodeEntries::Index(v) => {
                for (i, idx) in v.iter().enumerate() {
                    let child_end = v.get(i + 1).map_or(u64::MAX, |n| u64::from(n.logical));
                    if child_end <= start || u64::from(idx.logical) >= end {
                        continue;
                    }
                    let child = self.extent_child(inode, idx.child, node.depth)?;
                    self.walk_extents(inode, &child, start, end, out)?;
                }
            }
        }
        Ok(())
    }

    fn extent_child(&self, inode: &Inode, block: u64, parent_depth: u16) -> Result<ExtentNode> {
        let at = Location::Block {
            block,
            inode: inode.ino,
        };
        let buf = self.meta_block(block, inode.ino)?;
        let node = extent::parse_node(&buf, false).map_err(|e| Error::format(at, e))?;
        if node.depth + 1 != parent_depth {
            return Err(Error::inconsistent(
                at,
                format!("extent node depth {} under a node of depth {parent_depth}", node.depth),
            ));
        }
        if self.geo.features.metadata_csum() {
            let r = extent::verify_block_checksum(&buf, self.inode_csum_seed(inode));
            self.check(at, r)?;
        }
        Ok(node)
    }
}
