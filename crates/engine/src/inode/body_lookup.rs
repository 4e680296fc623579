//! The mapped runs of a file around one write, as a transaction sees them,
//! without listing the whole map: an extent tree is descended only into
//! the children that overlap the range (`ext4_find_extent`), a block map
//! followed pointer by pointer for the range's blocks. A write of a few
//! blocks then costs the tree's depth, not the file's extent count.

use ext4kit_format::extent::{Extent, ExtentNode, NodeEntries};

use crate::error::Result;
use crate::inode::Inode;
use crate::inode::block_map_write::{DIRECT, ptr_at};
use crate::txn::Txn;

impl Txn<'_> {
    /// The mapped runs of `inode` overlapping logical blocks `lo..hi`, in
    /// order (extents whole, not clipped; block-map runs within the range).
    pub(crate) fn runs_in(&self, inode: &Inode, lo: u64, hi: u64) -> Result<Vec<Extent>> {
        let mut out = Vec::new();
        if inode.uses_extents() {
            self.extents_in(inode, self.root(inode)?, lo, hi, &mut out)?;
            return Ok(out);
        }
        for l in lo..hi {
            let Some(p) = self.mapped_block(inode, l)? else {
                continue;
            };
            match out.last_mut() {
                Some(r) if u64::from(r.logical) + u64::from(r.len) == l && r.physical + u64::from(r.len) == p => {
                    r.len += 1
                }
                _ => out.push(Extent {
                    logical: l as u32,
                    len: 1,
                    physical: p,
                    unwritten: false,
                }),
            }
        }
        Ok(out)
    }

    fn extents_in(&self, inode: &Inode, node: ExtentNode, lo: u64, hi: u64, out: &mut Vec<Extent>) -> Result<()> {
        match node.entries {
            NodeEntries::Leaf(v) => out.extend(
                v.into_iter()
                    .filter(|e| u64::from(e.logical) < hi && u64::from(e.logical) + u64::from(e.len) > lo),
            ),
            NodeEntries::Index(idx) => {
                for (i, x) in idx.iter().enumerate() {
                    let child_end = idx.get(i + 1).map_or(u64::MAX, |n| u64::from(n.logical));
                    if child_end <= lo || u64::from(x.logical) >= hi {
                        continue;
                    }
                    self.extents_in(inode, self.child(inode, x.child, node.depth)?, lo, hi, out)?;
                }
            }
        }
        Ok(())
    }

    /// The nearest mapped block before logical `lblk` — in its leaf for
    /// extents, `lblk - 1` for block maps — as (the logical block after it,
    /// the physical block after it); `None` when there is none. A new
    /// block for `lblk` goes at `physical + (lblk - logical)`, leaving room
    /// for the hole between (`ext4_ext_find_goal`, `ext4_find_near`).
    pub(crate) fn mapped_before(&self, inode: &Inode, lblk: u64) -> Result<Option<(u64, u64)>> {
        if lblk == 0 {
            return Ok(None);
        }
        if !inode.uses_extents() {
            return Ok(self.mapped_block(inode, lblk - 1)?.map(|p| (lblk, p + 1)));
        }
        let mut node = self.root(inode)?;
        loop {
            match node.entries {
                NodeEntries::Leaf(v) => {
                    let before = v.iter().rev().find(|e| u64::from(e.logical) < lblk);
                    return Ok(before.map(|e| {
                        let end = (u64::from(e.logical) + u64::from(e.len)).min(lblk);
                        (end, e.physical + (end - u64::from(e.logical)))
                    }));
                }
                NodeEntries::Index(ref idx) => {
                    let i = idx.partition_point(|x| u64::from(x.logical) < lblk).saturating_sub(1);
                    let Some(x) = idx.get(i) else {
                        return Ok(None);
                    };
                    node = self.child(inode, x.child, node.depth)?;
                }
            }
        }
    }

    /// The physical block logical `lblk` of a block-mapped `inode` maps to.
    fn mapped_block(&self, inode: &Inode, lblk: u64) -> Result<Option<u64>> {
        let per = u64::from(self.fs.geo.block_size / 4);
        if lblk < DIRECT {
            return Ok(nonzero(ptr_at(&inode.raw.i_block, lblk as usize)));
        }
        let (mut level, mut rel) = (1u32, lblk - DIRECT);
        while rel >= per.pow(level) {
            rel -= per.pow(level);
            level += 1;
            if level > 3 {
                return Ok(None);
            }
        }
        let mut ptr = ptr_at(&inode.raw.i_block, 11 + level as usize);
        for depth in (0..level).rev() {
            if ptr == 0 {
                return Ok(None);
            }
            let idx = (rel / per.pow(depth)) % per;
            ptr = ptr_at(&self.block(u64::from(ptr), inode.ino)?, idx as usize);
        }
        Ok(nonzero(ptr))
    }
}

fn nonzero(p: u32) -> Option<u64> {
    (p != 0).then_some(u64::from(p))
}
