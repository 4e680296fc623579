//! Blocks and inodes for repairs that need new ones (a `lost+found`, a
//! directory block for a hole, a copy of a block two files claim). The
//! free space is what pass 1 left unclaimed, not the on-disk bitmaps, which
//! may be the damaged thing: pass 5 then writes bitmaps and counts that
//! include what was allocated here, as e2fsck's `new_table_block` and
//! `e2fsck_get_lost_and_found` work from its own block and inode maps.

use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};

use ext4kit_engine::mkfs::filemap::BlockPool;

use crate::state::{Ctx, KIND_FREE};

impl Ctx<'_> {
    /// A free block, searching forward from `goal` and wrapping; marks it
    /// in use. `None` before pass 1 has claimed every block in use, or when
    /// the file system is full. Groups whose block bitmap is still
    /// uninitialized are skipped, so pass 5 never has to build one.
    pub fn alloc_block(&mut self, goal: u64) -> Option<u64> {
        if !self.blocks_known {
            return None;
        }
        let found = self.free_block_from(goal)?;
        self.used.set(found);
        Some(found)
    }

    /// The block [`Ctx::alloc_block`] would take, left free.
    pub fn free_block_from(&self, goal: u64) -> Option<u64> {
        let first = u64::from(self.fs.geo.first_data_block);
        let end = self.fs.geo.blocks_count;
        let goal = goal.clamp(first, end.saturating_sub(1));
        self.free_block_in(goal, end)
            .or_else(|| self.free_block_in(first, goal))
    }

    /// How many blocks from the free block `s` on are free, at most
    /// `limit`; the run stops at a group whose bitmap is uninitialized.
    pub fn free_run_len(&self, s: u64, limit: u64) -> u64 {
        let geo = &self.fs.geo;
        let end = s.saturating_add(limit).min(geo.blocks_count);
        let mut b = s;
        while b < end && !self.used.get(b) {
            let g = (b.saturating_sub(u64::from(geo.first_data_block)) / u64::from(geo.blocks_per_group)) as u32;
            if self.block_uninit(g) {
                break;
            }
            b += 1;
        }
        b - s
    }

    fn free_block_in(&self, mut from: u64, end: u64) -> Option<u64> {
        let geo = &self.fs.geo;
        while from < end {
            let g = ((from - u64::from(geo.first_data_block)) / u64::from(geo.blocks_per_group)) as u32;
            let group_end = (geo.group_first_block(g) + u64::from(geo.blocks_in_group(g))).min(end);
            if !self.block_uninit(g)
                && let Some(b) = self.used.next_clear(from, group_end)
            {
                return Some(b);
            }
            from = group_end;
        }
        None
    }

    fn block_uninit(&self, g: u32) -> bool {
        self.fs.geo.features.has_group_csum()
            && self
                .fs
                .groups
                .get(g as usize)
                .is_some_and(|d| d.flags() & BG_BLOCK_UNINIT != 0)
    }

    /// Gives back a block a repair allocated or freed.
    pub fn free_block(&mut self, blk: u64) {
        self.used.clear(blk);
    }

    /// A free inode for a file of `kind` (a dirent file-type code), taken
    /// where pass 1 looked (below each group's unused tail); if none is
    /// free there, the first inode of a group's unused tail, whose
    /// descriptor is changed so the inode counts as initialized. Its
    /// record is zeroed; the caller writes the inode.
    pub fn alloc_inode(&mut self, kind: u8) -> Option<u32> {
        let ipg = self.fs.geo.inodes_per_group;
        let first = self.fs.geo.first_ino.max(1);
        for g in 0..self.fs.geo.group_count {
            let base = g * ipg;
            for idx in 0..self.scanned[g as usize] {
                let ino = base + idx + 1;
                if ino >= first && self.kind[ino as usize] == KIND_FREE {
                    return self.take_inode(ino, kind);
                }
            }
        }
        for g in 0..self.fs.geo.group_count {
            let idx = self.scanned[g as usize];
            if idx < ipg && g * ipg + idx + 1 >= first {
                self.scanned[g as usize] += 1;
                let gd = &mut self.fs.groups[g as usize];
                gd.bg_flags.set(gd.flags() & !BG_INODE_UNINIT);
                let unused = gd.itable_unused().saturating_sub(1);
                gd.bg_itable_unused_lo.set(unused as u16);
                gd.bg_itable_unused_hi.set((unused >> 16) as u16);
                self.fs.dirty_groups = true;
                return self.take_inode(g * ipg + idx + 1, kind);
            }
        }
        None
    }

    fn take_inode(&mut self, ino: u32, kind: u8) -> Option<u32> {
        let mut rec = vec![0u8; usize::from(self.fs.geo.inode_size)];
        self.fs.write_inode_record(ino, &mut rec).ok()?;
        self.kind[ino as usize] = kind;
        Some(ino)
    }
}

/// Free blocks for the engine's layout code: pass 1's map, with what is
/// taken remembered so a failed creation can give it back.
pub struct Pool<'c, 'a> {
    /// The checker's state.
    pub ctx: &'c mut Ctx<'a>,
    /// Runs marked used, in order.
    pub taken: Vec<(u64, u64)>,
}

impl<'c, 'a> Pool<'c, 'a> {
    /// A pool over `ctx`'s free blocks.
    pub fn new(ctx: &'c mut Ctx<'a>) -> Self {
        Self { ctx, taken: Vec::new() }
    }
}

impl BlockPool for Pool<'_, '_> {
    fn new_block(&mut self, goal: u64) -> ext4kit_engine::Result<u64> {
        self.ctx.free_block_from(goal).ok_or(ext4kit_engine::Error::NoSpace)
    }

    fn free_run(&mut self, s: u64, limit: u64) -> u64 {
        self.ctx.free_run_len(s, limit)
    }

    fn mark(&mut self, start: u64, len: u64) {
        for b in start..start + len {
            self.ctx.used.set(b);
        }
        self.taken.push((start, len));
    }
}
