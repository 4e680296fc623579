//! Growing extent trees inside a transaction (`ext4_ext_insert_extent`,
//! `ext4_ext_split`, `ext4_ext_grow_indepth`): a newly allocated run is
//! merged with a contiguous neighbour or inserted in order; a full node
//! splits in half and hands its new sibling to its parent; a full root (the
//! 4 slots in `i_block`) moves its entries into a new block one level down.
//! Trees grow to the kernel's limit of depth 5.

use ext4kit_format::extent::{
    EXT_INIT_MAX_LEN, EXT4_EXT_MAGIC, Extent, ExtentIdx, ExtentNode, MAX_DEPTH, NodeEntries, RawExtentHeader,
    encode_node, node_capacity, parse_node, set_block_checksum,
};
use ext4kit_format::inode::RawInode;

use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

/// Makes `i_block` an empty depth-0 extent root.
pub(crate) fn init_root(raw: &mut RawInode) {
    let node = ExtentNode {
        header: header(4, 0),
        depth: 0,
        entries: NodeEntries::Leaf(Vec::new()),
    };
    raw.i_block = [0; 60];
    encode_node(&node, &mut raw.i_block);
}

fn header(max: u16, depth: u16) -> RawExtentHeader {
    RawExtentHeader {
        eh_magic: EXT4_EXT_MAGIC.into(),
        eh_entries: 0.into(),
        eh_max: max.into(),
        eh_depth: depth.into(),
        eh_generation: 0.into(),
    }
}

/// Inserts `e` into the sorted `v`, merging with a contiguous neighbour.
fn insert_sorted(v: &mut Vec<Extent>, e: Extent) {
    let pos = v.partition_point(|x| x.logical < e.logical);
    let joins = |a: &Extent, b: &Extent| {
        !a.unwritten
            && !b.unwritten
            && u64::from(a.logical) + u64::from(a.len) == u64::from(b.logical)
            && a.physical + u64::from(a.len) == b.physical
            && u32::from(a.len) + u32::from(b.len) <= u32::from(EXT_INIT_MAX_LEN)
    };
    if pos > 0 && joins(&v[pos - 1], &e) {
        v[pos - 1].len += e.len;
        // A piece that fills the gap between two extents joins both
        // (`ext4_ext_try_to_merge`): pieces written out of order into a
        // preallocation window leave such gaps.
        if pos < v.len() && joins(&v[pos - 1], &v[pos]) {
            let right = v.remove(pos);
            v[pos - 1].len += right.len;
        }
        return;
    }
    if pos < v.len() && joins(&e, &v[pos]) {
        v[pos].logical = e.logical;
        v[pos].physical = e.physical;
        v[pos].len += e.len;
        return;
    }
    v.insert(pos, e);
}

/// Merges neighbours of the sorted leaf `v` that are contiguous in both
/// logical and physical space, share the flag and fit one extent's length
/// (32768 blocks initialized, 32767 unwritten).
fn merge_neighbours(v: &mut Vec<Extent>) {
    let mut out: Vec<Extent> = Vec::with_capacity(v.len());
    for e in v.drain(..) {
        if let Some(p) = out.last_mut() {
            let max = if p.unwritten {
                EXT_INIT_MAX_LEN - 1
            } else {
                EXT_INIT_MAX_LEN
            };
            let joins = p.unwritten == e.unwritten
                && u64::from(p.logical) + u64::from(p.len) == u64::from(e.logical)
                && p.physical + u64::from(p.len) == e.physical
                && u32::from(p.len) + u32::from(e.len) <= u32::from(max);
            if joins {
                p.len += e.len;
                continue;
            }
        }
        out.push(e);
    }
    *v = out;
}

/// An edit of one leaf's extents.
type LeafEdit<'a> = dyn FnMut(&mut Vec<Extent>) -> Result<()> + 'a;

/// Adds `n` file-system blocks to `i_blocks` (kept in 512-byte units).
pub(crate) fn charge_blocks(raw: &mut RawInode, n: i64, block_size: u32) {
    let cur = u64::from(raw.i_blocks_lo.get()) | (u64::from(raw.i_blocks_high.get()) << 32);
    let new = cur.saturating_add_signed(n * i64::from(block_size / 512));
    raw.i_blocks_lo.set(new as u32);
    raw.i_blocks_high.set((new >> 32) as u16);
}

fn count(entries: &NodeEntries) -> usize {
    match entries {
        NodeEntries::Leaf(v) => v.len(),
        NodeEntries::Index(v) => v.len(),
    }
}

fn first_logical(entries: &NodeEntries) -> u32 {
    match entries {
        NodeEntries::Leaf(v) => v.first().map_or(0, |e| e.logical),
        NodeEntries::Index(v) => v.first().map_or(0, |e| e.logical),
    }
}

/// Splits `entries` in half; returns the upper half.
fn split_half(entries: &mut NodeEntries) -> NodeEntries {
    match entries {
        NodeEntries::Leaf(v) => NodeEntries::Leaf(v.split_off(v.len() / 2)),
        NodeEntries::Index(v) => NodeEntries::Index(v.split_off(v.len() / 2)),
    }
}

/// What an insertion did to the node it went into.
enum Grown {
    /// It fit.
    No,
    /// The block split; the parent gains this entry.
    Sibling(ExtentIdx),
    /// The root is over its 4 slots; these are its entries.
    RootFull(NodeEntries),
}

impl Txn<'_> {
    pub(crate) fn root(&self, inode: &Inode) -> Result<ExtentNode> {
        parse_node(&inode.raw.i_block, true).map_err(|e| Error::format(Location::Inode(inode.ino), e))
    }

    /// Tree block `block` one level below a node of depth `parent_depth`.
    pub(crate) fn child(&self, inode: &Inode, block: u64, parent_depth: u16) -> Result<ExtentNode> {
        let at = Location::Block {
            block,
            inode: inode.ino,
        };
        let node = parse_node(&self.block(block, inode.ino)?, false).map_err(|e| Error::format(at, e))?;
        if node.depth + 1 != parent_depth {
            return Err(Error::inconsistent(at, "extent node at the wrong depth"));
        }
        Ok(node)
    }

    /// Every leaf extent of `inode`, in order, as this transaction sees them.
    pub(crate) fn extents(&self, inode: &Inode) -> Result<Vec<Extent>> {
        let mut out = Vec::new();
        self.collect(inode, self.root(inode)?, &mut out, &mut Vec::new())?;
        Ok(out)
    }

    /// The leaf extent of `inode` that maps logical block `logical`, as
    /// this transaction sees it: one path down the tree, where
    /// [`Txn::extents`] reads every leaf. A huge or fragmented directory
    /// asks this on every name it adds.
    pub(crate) fn extent_at(&self, inode: &Inode, logical: u64) -> Result<Option<Extent>> {
        let mut node = self.root(inode)?;
        for _ in 0..=MAX_DEPTH {
            match node.entries {
                NodeEntries::Leaf(v) => {
                    let covers = |e: &&Extent| {
                        let start = u64::from(e.logical);
                        start <= logical && logical < start + u64::from(e.len)
                    };
                    return Ok(v.iter().find(covers).copied());
                }
                NodeEntries::Index(idx) => {
                    let at = idx.partition_point(|i| u64::from(i.logical) <= logical);
                    let Some(i) = at.checked_sub(1).and_then(|a| idx.get(a)) else {
                        return Ok(None);
                    };
                    node = self.child(inode, i.child, node.depth)?;
                }
            }
        }
        Err(Error::inconsistent(
            Location::Inode(inode.ino),
            "extent tree deeper than any ext4 tree",
        ))
    }

    /// Leaf extents into `out`, tree blocks into `blocks`.
    fn collect(&self, inode: &Inode, node: ExtentNode, out: &mut Vec<Extent>, blocks: &mut Vec<u64>) -> Result<()> {
        match node.entries {
            NodeEntries::Leaf(v) => out.extend(v),
            NodeEntries::Index(idx) => {
                for i in idx {
                    blocks.push(i.child);
                    self.collect(inode, self.child(inode, i.child, node.depth)?, out, blocks)?;
                }
            }
        }
        Ok(())
    }

    /// Stores a node: into `i_block` for the root, else into its block with
    /// the tail checksum.
    fn store_node(
        &mut self,
        inode: &mut Inode,
        block: Option<u64>,
        depth: u16,
        entries: NodeEntries,
        fresh: bool,
    ) -> Result<()> {
        let Some(block) = block else {
            let node = ExtentNode {
                header: header(4, depth),
                depth,
                entries,
            };
            encode_node(&node, &mut inode.raw.i_block);
            return Ok(());
        };
        let cap = node_capacity(self.fs.block_size(), false);
        let node = ExtentNode {
            header: header(cap, depth),
            depth,
            entries,
        };
        let seed = self.fs.inode_csum_seed(inode);
        let csum = self.fs.geo.features.metadata_csum();
        let buf = if fresh {
            self.new_block(block)
        } else {
            self.block_mut(block, inode.ino)?
        };
        buf.fill(0);
        encode_node(&node, buf);
        if csum {
            set_block_checksum(buf, seed).map_err(|e| {
                Error::format(
                    Location::Block {
                        block,
                        inode: inode.ino,
                    },
                    e,
                )
            })?;
        }
        Ok(())
    }

    fn new_tree_block(&mut self, inode: &mut Inode, goal: u64) -> Result<u64> {
        let (b, _) = self.alloc_blocks(goal, 1)?;
        charge_blocks(&mut inode.raw, self.meta_charge(1), self.fs.geo.block_size);
        Ok(b)
    }

    /// Maps `e` (a freshly allocated run over unmapped logical blocks) into
    /// `inode`'s tree. The caller writes the inode afterwards.
    pub(crate) fn insert_extent(&mut self, inode: &mut Inode, e: Extent) -> Result<()> {
        self.edit_leaf(inode, e.logical, e.physical, &mut |v| {
            insert_sorted(v, e);
            Ok(())
        })
    }

    /// Replaces leaf extent `old` by `pieces` (covering the same logical
    /// blocks, in order) and merges what became contiguous within the leaf
    /// (`ext4_ext_try_to_merge`): the in-place edit of
    /// `ext4_ext_convert_to_initialized`. Only the leaf and, when it
    /// splits, its parents are written.
    pub(crate) fn replace_extent(&mut self, inode: &mut Inode, old: Extent, pieces: &[Extent]) -> Result<()> {
        let ino = inode.ino;
        self.edit_leaf(inode, old.logical, old.physical, &mut |v| {
            let Some(i) = v.iter().position(|x| *x == old) else {
                return Err(Error::inconsistent(
                    Location::Inode(ino),
                    format!("extent at logical block {} is not in its leaf", old.logical),
                ));
            };
            v.splice(i..=i, pieces.iter().copied());
            merge_neighbours(v);
            Ok(())
        })
    }

    /// Applies `edit` to the leaf holding logical block `key`, splitting
    /// full nodes on the way back up and growing the tree when the root
    /// overflows (new blocks near `goal`).
    fn edit_leaf(&mut self, inode: &mut Inode, key: u32, goal: u64, edit: &mut LeafEdit<'_>) -> Result<()> {
        let root = self.root(inode)?;
        let depth = root.depth;
        let Grown::RootFull(entries) = self.edit_at(inode, None, root, key, edit)? else {
            return Ok(());
        };
        // The root overflowed: its entries move one level down.
        if depth >= MAX_DEPTH {
            return Err(Error::FileTooBig);
        }
        let first = first_logical(&entries);
        let block = self.new_tree_block(inode, goal)?;
        self.store_node(inode, Some(block), depth, entries, true)?;
        let idx = NodeEntries::Index(vec![ExtentIdx {
            logical: first,
            child: block,
        }]);
        self.store_node(inode, None, depth + 1, idx, false)
    }

    /// Applies `edit` to the leaf for `key` below `node`, stored at `block`
    /// (`None`: the root in `i_block`). A full block splits in half and
    /// returns its new upper sibling for the parent; a full root returns
    /// its entries.
    fn edit_at(
        &mut self,
        inode: &mut Inode,
        block: Option<u64>,
        node: ExtentNode,
        key: u32,
        edit: &mut LeafEdit<'_>,
    ) -> Result<Grown> {
        let depth = node.depth;
        let mut entries = node.entries;
        match &mut entries {
            NodeEntries::Leaf(v) => edit(v)?,
            NodeEntries::Index(idx) => {
                if idx.is_empty() {
                    return Err(Error::inconsistent(
                        Location::Inode(inode.ino),
                        "empty extent index node",
                    ));
                }
                let i = idx.partition_point(|x| x.logical <= key).saturating_sub(1);
                let lowered = key < idx[i].logical;
                idx[i].logical = idx[i].logical.min(key);
                let child_block = idx[i].child;
                let child = self.child(inode, child_block, depth)?;
                match self.edit_at(inode, Some(child_block), child, key, edit)? {
                    Grown::Sibling(s) => idx.insert(i + 1, s),
                    // An index whose keys did not change is not rewritten
                    // (`ext4_ext_correct_indexes` only when needed).
                    _ if !lowered => return Ok(Grown::No),
                    _ => {}
                }
            }
        }
        let cap = if block.is_none() {
            4
        } else {
            usize::from(node_capacity(self.fs.block_size(), false))
        };
        if count(&entries) <= cap {
            self.store_node(inode, block, depth, entries, false)?;
            return Ok(Grown::No);
        }
        let Some(block) = block else {
            return Ok(Grown::RootFull(entries));
        };
        let upper = split_half(&mut entries);
        let sibling = self.new_tree_block(inode, block)?;
        let key = first_logical(&upper);
        self.store_node(inode, Some(block), depth, entries, false)?;
        self.store_node(inode, Some(sibling), depth, upper, true)?;
        Ok(Grown::Sibling(ExtentIdx {
            logical: key,
            child: sibling,
        }))
    }

    /// Frees every block of `inode`'s tree, data and tree blocks alike.
    pub(crate) fn free_extent_tree(&mut self, inode: &mut Inode) -> Result<()> {
        let (extents, blocks) = self.tree_contents(inode)?;
        for b in blocks {
            self.free_blocks(b, 1)?;
        }
        self.release_runs(&extents, &[])?;
        init_root(&mut inode.raw);
        inode.raw.i_blocks_lo.set(0);
        inode.raw.i_blocks_high.set(0);
        Ok(())
    }

    /// The leaf extents and the tree blocks of `inode`.
    pub(crate) fn tree_contents(&self, inode: &Inode) -> Result<(Vec<Extent>, Vec<u64>)> {
        let (mut out, mut blocks) = (Vec::new(), Vec::new());
        self.collect(inode, self.root(inode)?, &mut out, &mut blocks)?;
        Ok((out, blocks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(logical: u32, len: u16, physical: u64) -> Extent {
        Extent {
            logical,
            len,
            physical,
            unwritten: false,
        }
    }

    #[test]
    fn a_piece_filling_a_gap_joins_both_neighbours() {
        let mut v = vec![ext(0, 8, 100), ext(16, 8, 116)];
        insert_sorted(&mut v, ext(8, 8, 108));
        assert_eq!(v, [ext(0, 24, 100)]);
        // Not contiguous on the right: joins the left only.
        let mut v = vec![ext(0, 8, 100), ext(16, 8, 200)];
        insert_sorted(&mut v, ext(8, 8, 108));
        assert_eq!(v, [ext(0, 16, 100), ext(16, 8, 200)]);
    }
}
