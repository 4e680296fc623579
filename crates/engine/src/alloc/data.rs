//! Where a regular file's new data blocks go (`ext4_mb_new_blocks` for
//! data, `ext4_inode_to_goal_block`): the policy chosen by
//! [`super::BlockAllocator`]. Under mballoc, small files (fewer than
//! `mb_stream_req` blocks) are cut from the locality-group window and
//! growing ones look for room of their size class (request
//! normalization); under ext3 each file allocates from its reservation
//! window. Per-inode preallocation windows are the caller's (`ops::write`),
//! which asks here only when a write falls outside its window.

use std::cell::Cell;

use super::BlockAllocator;
use super::mballoc::criteria::Request;
use super::mballoc::normalize::normalize;
use crate::error::Result;
use crate::inode::Inode;
use crate::txn::Txn;

thread_local! {
    static CALLER_PID: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Tells the engine which process the calling thread acts for (a FUSE
/// request's pid), for the goal colouring of new files that the kernel
/// derives from `current->pid`. Unset, there is no colour: a program
/// that embeds the engine gets the same layout on every run.
pub fn set_caller_pid(pid: Option<u32>) {
    CALLER_PID.with(|c| c.set(pid));
}

fn caller_pid() -> u32 {
    CALLER_PID.with(Cell::get).unwrap_or(0)
}

/// A file's allocation request: logical blocks `lblk..lblk + want`;
/// `left`/`right` are the logical blocks mapped just before and after.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DataRequest {
    pub lblk: u64,
    pub want: u32,
    pub goal: u64,
    pub left: Option<u64>,
    pub right: Option<u64>,
}

impl Txn<'_> {
    /// Allocates up to `req.want` blocks for `inode`'s data.
    ///
    /// # Errors
    /// [`crate::Error::NoSpace`] when the file system is full.
    pub(crate) fn alloc_for_file(&mut self, inode: &Inode, req: DataRequest) -> Result<(u64, u32)> {
        // Shortened to what may be taken, as `ext4_mb_new_blocks` shrinks
        // a request the free count cannot cover rather than failing it.
        let room = self.takeable_blocks();
        if room == 0 {
            return Err(crate::Error::NoSpace);
        }
        let req = DataRequest {
            want: u64::from(req.want).min(room) as u32,
            ..req
        };
        if self.fs.opts.alloc.blocks == BlockAllocator::Ext3 {
            return self.ext3_alloc_retrying(inode.ino, req.goal, req.want);
        }
        let bits = self.fs.geo.block_size_log2;
        let blocks = inode.size().div_ceil(1 << bits).max(req.lblk + u64::from(req.want));
        self.mb_sync();
        let got = if blocks < u64::from(self.fs.opts.alloc.stream_req) {
            self.lg_alloc(req.goal, req.want)?
        } else {
            let (start, len) = normalize(req.lblk, req.want, inode.size(), bits, req.left, req.right);
            let ahead = (start + u64::from(len)).saturating_sub(req.lblk) as u32;
            let search = Request {
                goal: req.goal,
                want: ahead.max(req.want),
                need: req.want,
            };
            self.mb_alloc_taking(search, req.want)?
        };
        match got {
            Some(run) => Ok(run),
            None => self.alloc_blocks(req.goal, req.want),
        }
    }

    fn ext3_alloc_retrying(&mut self, ino: u32, goal: u64, want: u32) -> Result<(u64, u32)> {
        match self.ext3_alloc(ino, goal, want) {
            Err(crate::Error::NoSpace) => self.alloc_blocks(goal, want),
            r => r,
        }
    }

    /// The first goal of a file with no blocks yet
    /// (`ext4_inode_to_goal_block`): its group's first block — with a
    /// flex group of 4 or more, the flex group's first group for
    /// directories and the second for files — plus a colour of
    /// 1/16 group per writer's pid (`pid % 16`), so files of different
    /// writers start apart. Under `mb_flex_aware` the base is found from
    /// where the flex group's metadata really is ([`Self::flex_first_goal`]).
    pub(crate) fn first_goal(&self, inode: &Inode) -> u64 {
        let geo = &self.fs.geo;
        let own = (inode.ino - 1) / geo.inodes_per_group;
        let start = match self.flex_first_goal(own, inode.is_dir()) {
            Some(b) => b,
            None => geo.group_first_block(kernel_goal_group(own, inode.is_dir(), geo)),
        };
        let last = geo.blocks_count - 1;
        let span = if start + u64::from(geo.blocks_per_group) <= last {
            u64::from(geo.blocks_per_group)
        } else {
            last - start
        };
        start + u64::from(caller_pid() % 16) * (span / 16)
    }

    /// Under `mb_flex_aware`, the base of a new file's goal in group
    /// `own`'s flex group: a directory's right after the flex group's
    /// inode tables (the kernel's "first group" intent: directory blocks
    /// beside the inodes), a file's at the start of the group after them
    /// (its "second group"). With mkfs's default layout these are the
    /// kernel's groups; with `-E flex_meta=middle` they follow the
    /// metadata to the middle. `None` when the option is off or the flex
    /// group's tables lie outside it.
    pub(crate) fn flex_first_goal(&self, own: u32, dir: bool) -> Option<u64> {
        let per = self.mb_flex_unit()?;
        let f = own / per;
        if dir {
            return self.flex_meta_end(f).ok().flatten();
        }
        self.flex_meta_end(f).ok().flatten()?;
        let g = self.flex_data_group(f).ok()?;
        Some(self.fs.geo.group_first_block(g))
    }
}

/// `ext4_inode_to_goal_block`'s group: the inode's own, or with flex
/// groups of 4 or more the flex group's first (directories) or second
/// (files).
fn kernel_goal_group(own: u32, dir: bool, geo: &ext4kit_format::superblock::Geometry) -> u32 {
    let mut g = own;
    if geo.groups_per_flex >= 4 {
        g &= !(geo.groups_per_flex - 1);
        if !dir {
            g = (g + 1).min(geo.group_count - 1);
        }
    }
    g
}
