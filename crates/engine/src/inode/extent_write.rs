//! Growing extent trees inside a transaction: inserting a newly allocated
//! run (merged with its neighbours where contiguous), growing the 60-byte
//! root into an index over a leaf block when it overflows, and splitting
//! leaves. Trees up to depth 1 (4 leaves of ~340 extents at 4 KiB) are
//! grown here; deeper growth is the remaining part of the writable-engine
//! issue and is refused with [`Error::Unsupported`].

use ext4kit_format::extent::{
    EXT_INIT_MAX_LEN, EXT4_EXT_MAGIC, Extent, ExtentIdx, ExtentNode, NodeEntries, RawExtentHeader, encode_node,
    node_capacity, parse_node, set_block_checksum,
};
use ext4kit_format::inode::RawInode;

use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

/// Makes `i_block` a depth-1 root over `idx`.
pub(crate) fn set_index_root(raw: &mut RawInode, idx: Vec<ExtentIdx>) {
    let node = ExtentNode {
        header: header(4, 1),
        depth: 1,
        entries: NodeEntries::Index(idx),
    };
    encode_node(&node, &mut raw.i_block);
}

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

/// Adds `n` file-system blocks to `i_blocks` (kept in 512-byte units).
pub(crate) fn charge_blocks(raw: &mut RawInode, n: i64, block_size: u32) {
    let cur = u64::from(raw.i_blocks_lo.get()) | (u64::from(raw.i_blocks_high.get()) << 32);
    let new = cur.saturating_add_signed(n * i64::from(block_size / 512));
    raw.i_blocks_lo.set(new as u32);
    raw.i_blocks_high.set((new >> 32) as u16);
}

impl Txn<'_> {
    /// Every leaf extent of `inode` (trees of depth 0 or 1), as this
    /// transaction sees them.
    pub(crate) fn extents(&self, inode: &Inode) -> Result<Vec<Extent>> {
        let at = Location::Inode(inode.ino);
        let root = parse_node(&inode.raw.i_block, true).map_err(|e| Error::format(at, e))?;
        match root.entries {
            NodeEntries::Leaf(v) => Ok(v),
            NodeEntries::Index(idx) if root.depth == 1 => {
                let mut out = Vec::new();
                for i in idx {
                    out.extend(self.leaf(inode, i.child)?);
                }
                Ok(out)
            }
            NodeEntries::Index(_) => Err(Error::Unsupported(
                "writing files whose extent tree is deeper than 1".into(),
            )),
        }
    }

    fn leaf(&self, inode: &Inode, block: u64) -> Result<Vec<Extent>> {
        let buf = self.block(block, inode.ino)?;
        let node = parse_node(&buf, false).map_err(|e| {
            Error::format(
                Location::Block {
                    block,
                    inode: inode.ino,
                },
                e,
            )
        })?;
        match node.entries {
            NodeEntries::Leaf(v) if node.depth == 0 => Ok(v),
            _ => Err(Error::inconsistent(
                Location::Block {
                    block,
                    inode: inode.ino,
                },
                "expected an extent leaf",
            )),
        }
    }

    /// Rewrites leaf `block` with `v`.
    pub(crate) fn store_leaf(&mut self, inode: &Inode, block: u64, v: Vec<Extent>) -> Result<()> {
        self.write_leaf(inode, block, v, false)
    }

    fn write_leaf(&mut self, inode: &Inode, block: u64, v: Vec<Extent>, fresh: bool) -> Result<()> {
        let cap = node_capacity(self.fs.block_size(), false);
        let node = ExtentNode {
            header: header(cap, 0),
            depth: 0,
            entries: NodeEntries::Leaf(v),
        };
        let seed = self.fs.inode_csum_seed(inode);
        let csum = self.fs.geo.features.metadata_csum();
        let buf = if fresh {
            self.new_block(block)
        } else {
            self.block_mut(block, inode.ino)?
        };
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

    /// Maps `e` (a freshly allocated run over unmapped logical blocks) into
    /// `inode`'s tree. The caller writes the inode afterwards.
    pub(crate) fn insert_extent(&mut self, inode: &mut Inode, e: Extent) -> Result<()> {
        let at = Location::Inode(inode.ino);
        let root = parse_node(&inode.raw.i_block, true).map_err(|err| Error::format(at, err))?;
        match root.entries {
            NodeEntries::Leaf(mut v) => {
                insert_sorted(&mut v, e);
                if v.len() <= 4 {
                    let node = ExtentNode {
                        header: header(4, 0),
                        depth: 0,
                        entries: NodeEntries::Leaf(v),
                    };
                    encode_node(&node, &mut inode.raw.i_block);
                    return Ok(());
                }
                self.grow_root(inode, v, e.physical)
            }
            NodeEntries::Index(idx) if root.depth == 1 => self.insert_in_leaf(inode, idx, e),
            NodeEntries::Index(_) => Err(Error::Unsupported("growing an extent tree deeper than 1".into())),
        }
    }

    /// Moves the root's extents into a new leaf block under a depth-1 root.
    fn grow_root(&mut self, inode: &mut Inode, v: Vec<Extent>, goal: u64) -> Result<()> {
        let (leaf, _) = self.alloc_blocks(goal, 1)?;
        let first = v.first().map_or(0, |x| x.logical);
        self.write_leaf(inode, leaf, v, true)?;
        charge_blocks(&mut inode.raw, 1, self.fs.geo.block_size);
        let root = ExtentNode {
            header: header(4, 1),
            depth: 1,
            entries: NodeEntries::Index(vec![ExtentIdx {
                logical: first,
                child: leaf,
            }]),
        };
        encode_node(&root, &mut inode.raw.i_block);
        Ok(())
    }

    fn insert_in_leaf(&mut self, inode: &mut Inode, mut idx: Vec<ExtentIdx>, e: Extent) -> Result<()> {
        let i = idx.partition_point(|x| x.logical <= e.logical).saturating_sub(1);
        let mut v = self.leaf(inode, idx[i].child)?;
        insert_sorted(&mut v, e);
        idx[i].logical = idx[i].logical.min(v[0].logical);
        let cap = usize::from(node_capacity(self.fs.block_size(), false));
        if v.len() <= cap {
            self.write_leaf(inode, idx[i].child, v, false)?;
        } else {
            if idx.len() >= 4 {
                return Err(Error::Unsupported("growing an extent tree deeper than 1".into()));
            }
            let right = v.split_off(v.len() / 2);
            let (blk, _) = self.alloc_blocks(e.physical, 1)?;
            charge_blocks(&mut inode.raw, 1, self.fs.geo.block_size);
            idx.insert(
                i + 1,
                ExtentIdx {
                    logical: right[0].logical,
                    child: blk,
                },
            );
            self.write_leaf(inode, idx[i].child, v, false)?;
            self.write_leaf(inode, blk, right, true)?;
        }
        let root = ExtentNode {
            header: header(4, 1),
            depth: 1,
            entries: NodeEntries::Index(idx),
        };
        encode_node(&root, &mut inode.raw.i_block);
        Ok(())
    }

    /// Frees every block of `inode`'s tree, data and tree blocks alike.
    pub(crate) fn free_extent_tree(&mut self, inode: &mut Inode) -> Result<()> {
        let at = Location::Inode(inode.ino);
        let root = parse_node(&inode.raw.i_block, true).map_err(|e| Error::format(at, e))?;
        if let NodeEntries::Index(idx) = &root.entries {
            for i in idx {
                self.free_blocks(i.child, 1)?;
            }
        }
        for e in self.extents(inode)? {
            self.free_blocks(e.physical, u64::from(e.len))?;
        }
        init_root(&mut inode.raw);
        inode.raw.i_blocks_lo.set(0);
        inode.raw.i_blocks_high.set(0);
        Ok(())
    }
}
