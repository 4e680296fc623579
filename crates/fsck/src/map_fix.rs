//! Repairs made while pass 1 walks a block mapping (`ifork.rst`): a block
//! map pointer to a block outside the file system is zeroed, an extent or
//! index entry e2fsck would delete is removed from its node, an index
//! whose start disagrees with its child is set to the child's start, and
//! an extent block whose only fault is its checksum is rewritten. Too many
//! illegal block-map pointers ask for the inode to be cleared, as e2fsck's
//! "Too many illegal blocks" does.
//!
//! The walk only decides as [`crate::state::Ctx::fix`] will (same mode,
//! same order); pass 1 then records the findings through `Ctx::fix`.

use crate::problem::Code;
use crate::state::Mode;

/// e2fsck asks whether to clear the inode at every twelfth illegal block.
pub const ILLEGAL_PER_ASK: u32 = 12;

/// Repair state of one walk.
#[derive(Debug)]
pub struct Fixer {
    mode: Mode,
    halted: bool,
    /// `i_block` as repaired so far.
    pub root: [u8; 60],
    /// `root` changed: the inode must be written.
    pub root_dirty: bool,
    /// Clear the whole inode; the walk stops.
    pub clear: bool,
    /// Illegal block-map pointers met.
    pub illegal: u32,
}

impl Fixer {
    /// A fixer for a walk of `root` in `mode`; `halted` is preen's state.
    pub fn new(mode: Mode, halted: bool, root: [u8; 60]) -> Self {
        Self {
            mode,
            halted,
            root,
            root_dirty: false,
            clear: false,
            illegal: 0,
        }
    }

    /// Whether `Ctx::fix` will answer yes to `code` now (and preen's
    /// state after it asks).
    pub fn decide(&mut self, code: Code) -> bool {
        match self.mode {
            Mode::Check => false,
            Mode::Yes => true,
            Mode::Preen if code.preen_ok() && !self.halted => true,
            Mode::Preen => {
                self.halted = true;
                false
            }
        }
    }
}
