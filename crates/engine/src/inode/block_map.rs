//! ext2/ext3 block maps: 12 direct pointers, then single, double and triple
//! indirect blocks in `i_block[12..15]`. A zero pointer is a hole covering
//! its whole subtree, so walks skip it without reading anything.

use crate::error::{Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::map::Run;

const DIRECT: u64 = 12;

impl Filesystem {
    /// The runs of a block-mapped `inode` overlapping `start..end`.
    pub(crate) fn block_map_runs(&self, inode: &Inode, start: u64, end: u64) -> Result<Vec<Run>> {
        let ptrs: Vec<u32> = inode
            .raw
            .i_block
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let per = u64::from(self.geo.block_size / 4);
        let mut w = Walk {
            fs: self,
            inode,
            start,
            end,
            out: Vec::new(),
        };
        for (i, &p) in ptrs.iter().take(DIRECT as usize).enumerate() {
            w.leaf(i as u64, p)?;
        }
        let mut base = DIRECT;
        for level in 1..=3u32 {
            let span = per.pow(level);
            w.indirect(ptrs[11 + level as usize], level, base)?;
            base += span;
        }
        Ok(w.out)
    }
}

struct Walk<'a> {
    fs: &'a Filesystem,
    inode: &'a Inode,
    start: u64,
    end: u64,
    out: Vec<Run>,
}

impl Walk<'_> {
    fn leaf(&mut self, logical: u64, ptr: u32) -> Result<()> {
        if ptr == 0 || logical < self.start || logical >= self.end {
            return Ok(());
        }
        let phys = u64::from(ptr);
        self.fs.check_block(phys, Location::Inode(self.inode.ino))?;
        match self.out.last_mut() {
            Some(r) if r.end() == logical && r.physical + r.len == phys => r.len += 1,
            _ => self.out.push(Run {
                logical,
                physical: phys,
                len: 1,
                unwritten: false,
            }),
        }
        Ok(())
    }

    /// Walks the subtree of `level` (1 = single indirect) rooted at `ptr`,
    /// which covers logical blocks from `base`.
    fn indirect(&mut self, ptr: u32, level: u32, base: u64) -> Result<()> {
        let per = u64::from(self.fs.geo.block_size / 4);
        let span = per.pow(level);
        if ptr == 0 || base >= self.end || base + span <= self.start {
            return Ok(());
        }
        let buf = self.fs.meta_block(u64::from(ptr), self.inode.ino)?;
        let child_span = span / per;
        for (i, c) in buf.chunks_exact(4).enumerate() {
            let p = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let child_base = base + i as u64 * child_span;
            if level == 1 {
                self.leaf(child_base, p)?;
            } else {
                self.indirect(p, level - 1, child_base)?;
            }
        }
        Ok(())
    }
}
