//! Walking an inode's block mapping: the extent tree or the ext2/3 block
//! map, reporting every block it maps and every block the mapping itself
//! occupies. Shared by pass 1 (ownership, sizes), pass 1B (owners of
//! duplicates), pass 2 (directory blocks) and the journal check.
//!
//! Bounded on hostile input: a per-walk visited set stops loops and shared
//! subtrees, the extent tree's depth is at most 5 and strictly decreases,
//! and block-map pointers are only followed into blocks inside the file
//! system.

use std::collections::HashSet;

use ext4kit_format::inode::RawInode;

use crate::fs::RawFs;
use crate::problem::Finding;

/// Something the walk met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `len` data blocks from logical `lblk` at physical `pblk`.
    Data {
        /// First logical block.
        lblk: u64,
        /// First physical block.
        pblk: u64,
        /// Number of blocks.
        len: u32,
        /// Preallocated, reads as zeros.
        unwritten: bool,
    },
    /// A block of the mapping itself (extent node, indirect block).
    Meta {
        /// The block.
        pblk: u64,
        /// For block maps: 1 indirect, 2 double, 3 triple; 0 for extent nodes.
        level: u8,
    },
}

/// Limit on problems reported for one inode's mapping (e2fsck asks "too
/// many illegal blocks" after about a dozen).
pub const MAX_PROBLEMS: usize = 12;

/// Walk state shared by the two mapping formats.
pub struct Walker<'f, 'a, 'v> {
    /// The image.
    pub fs: &'f RawFs<'a>,
    /// The inode walked.
    pub ino: u32,
    /// Per-inode checksum seed.
    pub csum_seed: u32,
    /// Problems found (at most [`MAX_PROBLEMS`]; the rest are counted).
    pub problems: Vec<Finding>,
    /// Problems beyond the limit.
    pub extra_problems: usize,
    /// Pass 1's repairs during the walk (`None`: the walk only reads).
    pub fixer: Option<crate::map_fix::Fixer>,
    /// For a directory, the logical block count it may not pass (see
    /// [`dir_block_limit`]); `None` for other files.
    pub dir_limit: Option<u64>,
    /// The inode is a directory (its extents may not be uninitialized).
    pub is_dir: bool,
    visited: HashSet<u64>,
    visit: &'v mut dyn FnMut(Event),
}

impl<'f, 'a, 'v> Walker<'f, 'a, 'v> {
    /// A walker for inode `ino` that calls `visit` for each event.
    pub fn new(fs: &'f RawFs<'a>, ino: u32, inode: &RawInode, visit: &'v mut dyn FnMut(Event)) -> Self {
        Self {
            fs,
            ino,
            csum_seed: inode.csum_seed(fs.seed, ino),
            problems: Vec::new(),
            extra_problems: 0,
            fixer: None,
            dir_limit: None,
            is_dir: false,
            visited: HashSet::new(),
            visit,
        }
    }

    /// Records a problem.
    pub fn problem(&mut self, f: Finding) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(f.ino(self.ino));
        } else {
            self.extra_problems += 1;
        }
    }

    /// Whether to repair a problem of `code` now (never without a fixer).
    pub fn fixing(&mut self, code: crate::problem::Code) -> bool {
        self.fixer.as_mut().is_some_and(|f| f.decide(code))
    }

    /// The fixer asked to clear the inode: the walk stops.
    pub fn stopped(&self) -> bool {
        self.fixer.as_ref().is_some_and(|f| f.clear)
    }

    /// Emits an event.
    pub fn emit(&mut self, e: Event) {
        (self.visit)(e);
    }

    /// Marks a mapping block visited; false if it was already (a loop or a
    /// shared subtree).
    pub fn first_visit(&mut self, blk: u64) -> bool {
        self.visited.insert(blk)
    }

    /// Walks `inode`'s mapping: extents when `extents`, else the block map.
    pub fn walk(&mut self, inode: &RawInode, extents: bool) {
        if extents {
            crate::extents::walk(self, &inode.i_block);
        } else {
            crate::blockmap::walk(self, &inode.i_block);
        }
    }
}

/// The most logical blocks a directory may have (e2fsck's
/// `PR_1_TOOBIG_DIR`): 2^31 bytes' worth without `large_dir`, unless
/// `i_size_high` is set; `None` when there is no limit or `is_dir` is false.
pub fn dir_block_limit(fs: &RawFs, inode: &RawInode, is_dir: bool) -> Option<u64> {
    let large = fs
        .geo
        .features
        .incompat
        .contains(ext4kit_format::features::IncompatFeatures::LARGEDIR);
    let log = fs.geo.block_size.trailing_zeros().saturating_sub(10);
    (is_dir && !large && inode.i_size_high.get() == 0).then(|| 1u64 << 21u32.saturating_sub(log))
}
