//! Punching a range out of an ext2/ext3 block map (`ext4_ind_remove_space`):
//! the data blocks of logical blocks `lo..hi` are freed and their pointers
//! cleared; an indirect block whose last pointer goes is freed too and
//! cleared in its parent. Only the subtrees that overlap the range are read.
//! Layout: `i_block[0..12]` direct, `[12]` single, `[13]` double, `[14]`
//! triple indirect (`Documentation/filesystems/ext4/blockmap.rst`).

use crate::error::{Location, Result};
use crate::inode::Inode;
use crate::inode::extent_write::charge_blocks;
use crate::txn::Txn;

const DIRECT: u64 = 12;

fn ptr_at(buf: &[u8], i: usize) -> u32 {
    buf.get(i * 4..i * 4 + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

impl Txn<'_> {
    /// Frees logical blocks `lo..hi` of block-mapped `inode`, and the
    /// indirect blocks left empty. The caller writes the inode.
    pub(crate) fn punch_block_map(&mut self, inode: &mut Inode, lo: u64, hi: u64) -> Result<()> {
        let bs = self.fs.geo.block_size;
        for i in lo.min(DIRECT)..hi.min(DIRECT) {
            let i = i as usize;
            let p = ptr_at(&inode.raw.i_block, i);
            if p != 0 {
                self.free_blocks(u64::from(p), 1)?;
                charge_blocks(&mut inode.raw, -1, bs);
                inode.raw.i_block[i * 4..i * 4 + 4].fill(0);
            }
        }
        let per = u64::from(bs / 4);
        let mut base = DIRECT;
        for level in 1..=3u32 {
            let span = per.pow(level);
            let slot = 11 + level as usize;
            let p = ptr_at(&inode.raw.i_block, slot);
            let overlaps = base < hi && lo < base + span;
            if p != 0 && overlaps && self.punch_subtree(inode, p, level, base, lo, hi)? {
                inode.raw.i_block[slot * 4..slot * 4 + 4].fill(0);
            }
            base += span;
        }
        Ok(())
    }

    /// Clears `lo..hi` below indirect block `ptr` (mapping from logical
    /// `base`, `level` levels above the data); true when `ptr` became empty
    /// and was freed.
    fn punch_subtree(&mut self, inode: &mut Inode, ptr: u32, level: u32, base: u64, lo: u64, hi: u64) -> Result<bool> {
        let blk = u64::from(ptr);
        let at = Location::Block {
            block: blk,
            inode: inode.ino,
        };
        self.fs.check_block(blk, at)?;
        let bs = self.fs.geo.block_size;
        let per = u64::from(bs / 4);
        let span = per.pow(level - 1);
        let buf = self.block(blk, inode.ino)?.to_vec();
        let (mut left, mut cleared) = (0usize, Vec::new());
        for i in 0..per as usize {
            let p = ptr_at(&buf, i);
            if p == 0 {
                continue;
            }
            let child = base + i as u64 * span;
            let gone = if child + span <= lo || child >= hi {
                false
            } else if level == 1 {
                self.free_blocks(u64::from(p), 1)?;
                charge_blocks(&mut inode.raw, -1, bs);
                true
            } else {
                self.punch_subtree(inode, p, level - 1, child, lo, hi)?
            };
            if gone {
                cleared.push(i);
            } else {
                left += 1;
            }
        }
        if left == 0 {
            self.free_blocks(blk, 1)?;
            self.forget_block(blk);
            charge_blocks(&mut inode.raw, -1, bs);
            return Ok(true);
        }
        if !cleared.is_empty() {
            let w = self.block_mut(blk, inode.ino)?;
            for i in cleared {
                w[i * 4..i * 4 + 4].fill(0);
            }
        }
        Ok(false)
    }
}
