//! How far each directory is known to be empty of names: the first logical
//! block that, when last looked at, still held a name. An unlink that
//! empties a block walks on from there ([`super::shrink`]) instead of from
//! block 0, so emptying a directory of `B` blocks reads O(`B`) blocks in
//! all, not O(`B`) per emptied block.
//!
//! Like [`super::hint`], a cursor is only a starting point: it lives in
//! memory, holds at most [`MAX_DIRS`] directories (the map starts over
//! when full), and is dropped when the inode number now belongs to
//! another directory (another `i_generation`). Correctness never rests on
//! it: before a directory is shrunk, the blocks below the cursor are read
//! again. A name added below the cursor lowers it; one that is not
//! reported (a rolled-back transaction, a lost cursor) only costs that
//! second walk.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Directories tracked at once (16 bytes each: about 64 KiB).
const MAX_DIRS: usize = 4096;

/// The cursors of one file system, keyed by directory inode number.
#[derive(Debug, Default)]
pub(crate) struct DrainCursors {
    map: Mutex<HashMap<u32, Cursor>>,
}

#[derive(Debug, Clone, Copy)]
struct Cursor {
    generation: u32,
    logical: u64,
}

impl DrainCursors {
    /// The first block of directory `ino` not known to be empty (0 when
    /// nothing is known).
    pub(crate) fn start(&self, ino: u32, generation: u32) -> u64 {
        match self.map.lock().get(&ino) {
            Some(c) if c.generation == generation => c.logical,
            _ => 0,
        }
    }

    /// Blocks before `logical` of directory `ino` were just seen empty.
    pub(crate) fn set(&self, ino: u32, generation: u32, logical: u64) {
        let mut map = self.map.lock();
        if map.len() >= MAX_DIRS && !map.contains_key(&ino) {
            map.clear();
        }
        map.insert(ino, Cursor { generation, logical });
    }

    /// Block `logical` of directory `ino` took a name.
    pub(crate) fn refilled(&self, ino: u32, generation: u32, logical: u64) {
        if let Some(c) = self.map.lock().get_mut(&ino)
            && c.generation == generation
        {
            c.logical = c.logical.min(logical);
        }
    }

    /// Directory `ino` went back to one block or was freed.
    pub(crate) fn forget(&self, ino: u32) {
        self.map.lock().remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_starts_at_zero_and_only_a_refill_lowers_it() {
        let c = DrainCursors::default();
        assert_eq!(c.start(12, 1), 0);
        c.set(12, 1, 40);
        assert_eq!(c.start(12, 1), 40);
        c.refilled(12, 1, 50);
        assert_eq!(c.start(12, 1), 40, "a name past the cursor changes nothing");
        c.refilled(12, 1, 7);
        assert_eq!(c.start(12, 1), 7);
        assert_eq!(c.start(12, 2), 0, "another directory on the same inode");
        c.forget(12);
        assert_eq!(c.start(12, 1), 0);
    }

    #[test]
    fn the_map_stays_bounded() {
        let c = DrainCursors::default();
        for ino in 0..(MAX_DIRS as u32 * 3) {
            c.set(ino, 0, 1);
        }
        assert!(c.map.lock().len() <= MAX_DIRS);
    }
}
