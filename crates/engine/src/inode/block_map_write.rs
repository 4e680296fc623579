//! Changing ext2/ext3 block maps inside a transaction, and the body-level
//! operations that pick extents or block maps for the inode at hand: list
//! the mapped runs, map a new run, free everything, or free past a size.
//! Indirect blocks are allocated zeroed when a pointer first needs them and
//! freed when the last pointer in them goes.

use ext4kit_format::extent::Extent;

use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::inode::extent_write::charge_blocks;
use crate::txn::Txn;

pub(crate) const DIRECT: u64 = 12;

pub(crate) fn ptr_at(buf: &[u8], i: usize) -> u32 {
    buf.get(i * 4..i * 4 + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

impl Txn<'_> {
    fn per_block(&self) -> u64 {
        u64::from(self.fs.geo.block_size / 4)
    }

    /// The mapped runs of `inode`'s body (extents, or block-map runs).
    pub(crate) fn body_runs(&self, inode: &Inode) -> Result<Vec<Extent>> {
        if inode.has_inline_data() {
            return Err(Error::Unsupported("changing inline-data bodies".into()));
        }
        if inode.uses_extents() {
            return self.extents(inode);
        }
        let mut out: Vec<Extent> = Vec::new();
        let mut push = |logical: u64, phys: u64| match out.last_mut() {
            Some(r)
                if u64::from(r.logical) + u64::from(r.len) == logical
                    && r.physical + u64::from(r.len) == phys
                    && r.len < u16::MAX =>
            {
                r.len += 1
            }
            _ => out.push(Extent {
                logical: logical as u32,
                len: 1,
                physical: phys,
                unwritten: false,
            }),
        };
        for i in 0..DIRECT as usize {
            let p = ptr_at(&inode.raw.i_block, i);
            if p != 0 {
                push(i as u64, u64::from(p));
            }
        }
        let mut base = DIRECT;
        for level in 1..=3u32 {
            let root = ptr_at(&inode.raw.i_block, 11 + level as usize);
            self.walk_map(inode, root, level, base, &mut push)?;
            base += self.per_block().pow(level);
        }
        Ok(out)
    }

    fn walk_map(&self, inode: &Inode, ptr: u32, level: u32, base: u64, push: &mut impl FnMut(u64, u64)) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        let buf = self.block(u64::from(ptr), inode.ino)?;
        let span = self.per_block().pow(level - 1);
        for i in 0..self.per_block() as usize {
            let p = ptr_at(&buf, i);
            if p == 0 {
                continue;
            }
            let child_base = base + i as u64 * span;
            if level == 1 {
                push(child_base, u64::from(p));
            } else {
                self.walk_map(inode, p, level - 1, child_base, push)?;
            }
        }
        Ok(())
    }

    /// Maps the new run `e` into `inode` (extents or block map).
    pub(crate) fn map_run(&mut self, inode: &mut Inode, e: Extent) -> Result<()> {
        if inode.uses_extents() {
            return self.insert_extent(inode, e);
        }
        if self.bigalloc() {
            return Err(crate::Error::Unsupported(format!(
                "mapping blocks of block-mapped inode {} on a bigalloc image (clusters need extents)",
                inode.ino
            )));
        }
        for i in 0..u64::from(e.len) {
            self.set_map(inode, u64::from(e.logical) + i, e.physical + i)?;
        }
        Ok(())
    }

    /// Points logical block `lblk` of a block-mapped `inode` at `phys`.
    fn set_map(&mut self, inode: &mut Inode, lblk: u64, phys: u64) -> Result<()> {
        let per = self.per_block();
        if lblk < DIRECT {
            let i = lblk as usize * 4;
            inode.raw.i_block[i..i + 4].copy_from_slice(&(phys as u32).to_le_bytes());
            return Ok(());
        }
        let (mut level, mut rel) = (1u32, lblk - DIRECT);
        while rel >= per.pow(level) {
            rel -= per.pow(level);
            level += 1;
            if level > 3 {
                return Err(Error::FileTooBig);
            }
        }
        let slot = 11 + level as usize;
        let mut table = self.indirect(inode, None, slot, phys)?;
        for depth in (1..level).rev() {
            let idx = (rel / per.pow(depth)) % per;
            table = self.indirect(inode, Some(table), idx as usize, phys)?;
        }
        let idx = (rel % per) as usize;
        let buf = self.block_mut(table, inode.ino)?;
        buf[idx * 4..idx * 4 + 4].copy_from_slice(&(phys as u32).to_le_bytes());
        Ok(())
    }

    /// The indirect block at `slot` of `parent` (or of `i_block`), allocated
    /// zeroed near `goal` when missing.
    fn indirect(&mut self, inode: &mut Inode, parent: Option<u64>, slot: usize, goal: u64) -> Result<u64> {
        let cur = match parent {
            None => ptr_at(&inode.raw.i_block, slot),
            Some(p) => ptr_at(&self.block(p, inode.ino)?, slot),
        };
        if cur != 0 {
            return Ok(u64::from(cur));
        }
        let (blk, _) = self.alloc_blocks(goal, 1)?;
        self.new_block(blk);
        charge_blocks(&mut inode.raw, 1, self.fs.geo.block_size);
        let bytes = (blk as u32).to_le_bytes();
        match parent {
            None => inode.raw.i_block[slot * 4..slot * 4 + 4].copy_from_slice(&bytes),
            Some(p) => self.block_mut(p, inode.ino)?[slot * 4..slot * 4 + 4].copy_from_slice(&bytes),
        }
        Ok(blk)
    }

    /// Frees every block of `inode`'s body (data and mapping blocks).
    pub(crate) fn free_body(&mut self, inode: &mut Inode) -> Result<()> {
        if inode.uses_extents() {
            return self.free_extent_tree(inode);
        }
        self.shrink_block_map(inode, 0)
    }

    /// Frees the blocks of a block-mapped `inode` from logical `keep` on,
    /// and the indirect blocks left empty.
    pub(crate) fn shrink_block_map(&mut self, inode: &mut Inode, keep: u64) -> Result<()> {
        for i in keep.min(DIRECT) as usize..DIRECT as usize {
            let p = ptr_at(&inode.raw.i_block, i);
            if p != 0 {
                self.free_blocks(u64::from(p), 1)?;
                charge_blocks(&mut inode.raw, -1, self.fs.geo.block_size);
                inode.raw.i_block[i * 4..i * 4 + 4].fill(0);
            }
        }
        let mut base = DIRECT;
        for level in 1..=3u32 {
            let slot = 11 + level as usize;
            let p = ptr_at(&inode.raw.i_block, slot);
            if p != 0 && self.trim(inode, p, level, base, keep)? {
                inode.raw.i_block[slot * 4..slot * 4 + 4].fill(0);
            }
            base += self.per_block().pow(level);
        }
        Ok(())
    }

    /// Frees what `ptr`'s subtree maps past `keep`; true when the indirect
    /// block itself became empty and was freed.
    fn trim(&mut self, inode: &mut Inode, ptr: u32, level: u32, base: u64, keep: u64) -> Result<bool> {
        let blk = u64::from(ptr);
        let span = self.per_block().pow(level - 1);
        let buf = self.block(blk, inode.ino)?.to_vec();
        let mut left = 0;
        let mut changed = Vec::new();
        for i in 0..self.per_block() as usize {
            let p = ptr_at(&buf, i);
            let child_base = base + i as u64 * span;
            if p == 0 {
                continue;
            }
            let gone = if child_base + span <= keep {
                false
            } else if level == 1 {
                self.free_blocks(u64::from(p), 1)?;
                charge_blocks(&mut inode.raw, -1, self.fs.geo.block_size);
                true
            } else {
                self.trim(inode, p, level - 1, child_base, keep)?
            };
            if gone {
                changed.push(i);
            } else {
                left += 1;
            }
        }
        if left == 0 {
            self.free_blocks(blk, 1)?;
            charge_blocks(&mut inode.raw, -1, self.fs.geo.block_size);
            return Ok(true);
        }
        if !changed.is_empty() {
            let w = self.block_mut(blk, inode.ino)?;
            for i in changed {
                w[i * 4..i * 4 + 4].fill(0);
            }
        }
        if self.fs.geo.blocks_count <= blk {
            return Err(Error::inconsistent(
                Location::Block {
                    block: blk,
                    inode: inode.ino,
                },
                "indirect block out of range",
            ));
        }
        Ok(false)
    }
}
