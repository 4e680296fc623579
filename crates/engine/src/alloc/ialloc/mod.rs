//! Inode allocation (`fs/ext4/ialloc.c`, `allocators.rst`): a policy
//! ([`InodeAllocator`], `-o inode_alloc=`) picks the group to start from,
//! then the first free inode from there on is claimed, moving to the next
//! groups as the kernel's `ext4_new_inode` does when a group turns out
//! full. Claiming and freeing keep `bg_free_inodes_count`,
//! `bg_used_dirs_count`, `bg_itable_unused` and `INODE_UNINIT` right.
//!
//! The policies are pure functions of the groups' counts
//! ([`stats::Groups`]), so they are unit-tested on tables; the kernel
//! comparison is in `tests/ialloc.rs`.

mod flexbg;
mod orlov;
mod parent;
mod stats;

use std::collections::HashMap;

use ext4kit_format::hash::{HashVersion, dx_hash};
use ext4kit_format::inode::flags::TOPDIR;
use parking_lot::Mutex;

use super::InodeAllocator;
use super::bitmap::{find_zero, set_bit, test_bit};
use crate::error::{Error, Location, Result};
use crate::inode::{Inode, ROOT_INO};
use crate::txn::Txn;
use stats::{TxnGroups, View};

/// What the policies know about the inode being placed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Placement {
    /// The parent directory's inode number.
    pub parent_ino: u32,
    /// The group holding the parent's inode (`i_block_group`).
    pub parent_group: u32,
    /// Where this parent's latest new inode went (`i_last_alloc_group`).
    pub last_group: Option<u32>,
    pub is_dir: bool,
    /// The parent is the root or carries `EXT4_TOPDIR_FL`.
    pub topdir: bool,
    /// Half-MD4 of the new name with `s_hash_seed`, where Orlov starts
    /// looking for a top-level directory's group.
    pub name_hash: u32,
}

/// Most directories whose last group is remembered; past it the memory is
/// dropped, as the kernel drops `i_last_alloc_group` with an evicted inode.
const LAST_GROUPS_MAX: usize = 1 << 16;

/// The group each directory's latest new inode went to (the kernel's
/// in-memory `i_last_alloc_group`): a hint, never written to disk, so
/// forgetting it only changes where the next inode starts looking.
#[derive(Debug, Default)]
pub(crate) struct LastGroups {
    by_dir: Mutex<HashMap<u32, u32>>,
}

impl LastGroups {
    fn get(&self, dir: u32) -> Option<u32> {
        self.by_dir.lock().get(&dir).copied()
    }

    fn set(&self, dir: u32, group: u32) {
        let mut m = self.by_dir.lock();
        if m.len() >= LAST_GROUPS_MAX && !m.contains_key(&dir) {
            m.clear();
        }
        m.insert(dir, group);
    }

    fn forget(&self, dir: u32) {
        self.by_dir.lock().remove(&dir);
    }
}

impl Txn<'_> {
    /// Allocates an inode for `name` in directory `parent`, where the open
    /// options' policy puts it; returns its number.
    ///
    /// `name` is `None` for a file with no name yet (`O_TMPFILE`). Only a
    /// top-level directory uses the name (Orlov's start group), and a
    /// nameless one hashes the empty name: the kernel draws a random
    /// start there, ext4kit stays reproducible.
    ///
    /// # Errors
    /// [`Error::NoSpace`] when no group has a free inode.
    pub(crate) fn alloc_inode(&mut self, parent: &Inode, name: Option<&[u8]>, is_dir: bool) -> Result<u32> {
        let p = self.placement(parent, name, is_dir);
        let start = self.find_group(&p)?.ok_or(Error::NoSpace)?;
        self.fs.ialloc_last.set(parent.ino, start);
        self.claim_from(start, is_dir)
    }

    fn placement(&self, parent: &Inode, name: Option<&[u8]>, is_dir: bool) -> Placement {
        let geo = &self.fs.geo;
        let topdir = parent.ino == ROOT_INO || parent.raw.has_flag(TOPDIR);
        // Names were checked (length) before; an error leaves start 0.
        let name_hash = if is_dir && topdir {
            let seed = self.superblock().s_hash_seed.map(|w| w.get());
            dx_hash(name.unwrap_or_default(), HashVersion::HalfMd4, &seed).map_or(0, |h| h.major)
        } else {
            0
        };
        Placement {
            parent_ino: parent.ino,
            parent_group: ((parent.ino.max(1) - 1) / geo.inodes_per_group).min(geo.group_count - 1),
            last_group: self.fs.ialloc_last.get(parent.ino).filter(|&g| g < geo.group_count),
            is_dir,
            topdir,
            name_hash,
        }
    }

    /// The policy's start group, `None` when it finds no free inode.
    fn find_group(&self, p: &Placement) -> Result<Option<u32>> {
        let geo = &self.fs.geo;
        let groups = TxnGroups(self);
        let flex_log = geo.groups_per_flex.trailing_zeros();
        let view = |log| View {
            groups: &groups,
            log,
            inodes_per_group: geo.inodes_per_group,
            clusters_per_group: geo.blocks_per_group,
        };
        match self.fs.opts.alloc.inodes {
            InodeAllocator::Orlov if p.is_dir => orlov::find_group_orlov(&view(flex_log), p),
            InodeAllocator::Orlov => orlov::find_group_other(&view(flex_log), p),
            InodeAllocator::FlexBg => match flexbg::find_group_flex(&view(flex_log), p)? {
                Some(g) => Ok(Some(g)),
                None => orlov::find_group_hashed(&groups, p),
            },
            InodeAllocator::Parent => Ok(parent::find_group_parent(p)),
        }
    }

    /// Claims the first free inode at or after group `start`, wrapping
    /// around once (`ext4_new_inode`'s loop over groups).
    fn claim_from(&mut self, start: u32, is_dir: bool) -> Result<u32> {
        let geo = self.fs.geo.clone();
        for step in 0..geo.group_count {
            let g = ((u64::from(start) + u64::from(step)) % u64::from(geo.group_count)) as u32;
            if self.group(g)?.free_inodes() == 0 {
                continue;
            }
            let first_ok = if g == 0 { geo.first_ino } else { 1 };
            let map = self.inode_bitmap_mut(g)?;
            let Some(i) = find_zero(map, first_ok - 1, geo.inodes_per_group) else {
                continue;
            };
            set_bit(map, i, true);
            self.adjust_group_inodes(g, i, -1, is_dir)?;
            let ino = g * geo.inodes_per_group + i + 1;
            self.fs.delalloc.discard(ino);
            return Ok(ino);
        }
        Err(Error::NoSpace)
    }

    /// Releases inode `ino` in its bitmap and counts.
    pub(crate) fn free_inode(&mut self, ino: u32, is_dir: bool) -> Result<()> {
        self.fs.prealloc.release(ino);
        self.fs.delalloc.discard(ino);
        self.fs.verity_cache.forget(ino);
        if is_dir {
            self.fs.ialloc_last.forget(ino);
        }
        let geo = self.fs.geo.clone();
        let (g, i) = geo
            .inode_location(ino)
            .ok_or_else(|| Error::InvalidArgument(format!("inode {ino}")))?;
        let map = self.inode_bitmap_mut(g)?;
        if !test_bit(map, i) {
            return Err(Error::inconsistent(
                Location::Inode(ino),
                "freeing an inode that is already free",
            ));
        }
        set_bit(map, i, false);
        self.adjust_group_inodes(g, i, 1, is_dir)
    }

    /// Marks inode `ino` in use, counting it, unless it already is (a
    /// replayed fast commit names the inode it created).
    pub(crate) fn set_inode_used(&mut self, ino: u32, is_dir: bool) -> Result<()> {
        let (g, i) = self
            .fs
            .geo
            .inode_location(ino)
            .ok_or_else(|| Error::InvalidArgument(format!("inode {ino}")))?;
        let map = self.inode_bitmap_mut(g)?;
        if test_bit(map, i) {
            return Ok(());
        }
        set_bit(map, i, true);
        self.adjust_group_inodes(g, i, -1, is_dir)
    }

    /// True when `ino`'s bit is set in its group's inode bitmap (an
    /// `INODE_UNINIT` group has none in use).
    pub(crate) fn inode_in_use(&self, ino: u32) -> Result<bool> {
        let Some((g, i)) = self.fs.geo.inode_location(ino) else {
            return Ok(false);
        };
        let d = self.group(g)?;
        let uninit = d.flags() & ext4kit_format::group_desc::BG_INODE_UNINIT != 0;
        if uninit && self.fs.geo.features.has_group_csum() {
            return Ok(false);
        }
        Ok(test_bit(&self.block(d.inode_bitmap(), 0)?, i))
    }

    fn adjust_group_inodes(&mut self, g: u32, index: u32, delta: i32, is_dir: bool) -> Result<()> {
        let ipg = self.fs.geo.inodes_per_group;
        let mut d = self.group(g)?;
        let free = (d.free_inodes() as i64 + i64::from(delta)).max(0) as u32;
        d.bg_free_inodes_count_lo.set(free as u16);
        d.bg_free_inodes_count_hi.set((free >> 16) as u16);
        if is_dir {
            let dirs = (d.used_dirs() as i64 - i64::from(delta)).max(0) as u32;
            d.bg_used_dirs_count_lo.set(dirs as u16);
            d.bg_used_dirs_count_hi.set((dirs >> 16) as u16);
        }
        if delta < 0 && self.fs.geo.features.has_group_csum() {
            // Inodes past the high-water mark count as never used.
            let unused = d.itable_unused().min(ipg - index - 1);
            d.bg_itable_unused_lo.set(unused as u16);
            d.bg_itable_unused_hi.set((unused >> 16) as u16);
        }
        self.set_group(g, d);
        self.count(0, i64::from(delta));
        Ok(())
    }
}
