//! Where the next new name of a linear directory goes: per directory, the
//! logical block that last had room, kept in memory for
//! [`crate::Filesystem::create_new`]. Seed 000 §5.4 (S_CR736) keeps "the
//! previous page number a new inode linked to" and starts `ext2_add_link`
//! there, so a create reads at most two directory blocks instead of every
//! block before the first with room (its Figure 13: flat time per create
//! where the linear scan grows with the directory).
//!
//! A hint is only ever a starting point, never trusted for correctness: it
//! is clamped to the directory's last block, it is dropped when the inode
//! number now belongs to another directory (a different `i_generation`), and
//! a removal lowers it to the block that gained room, so holes are reused.
//! A stale hint (a transaction that appended a block was rolled back, the
//! map forgot the directory) costs a longer scan or an appended block, never
//! a wrong insert. The map holds at most [`MAX_DIRS`] directories; when full
//! it starts over, which only sends the next creates to the last block.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Directories remembered at once (a hint is 16 bytes: about 64 KiB).
const MAX_DIRS: usize = 4096;

/// The hints of one file system, keyed by directory inode number.
#[derive(Debug, Default)]
pub(crate) struct DirHints {
    map: Mutex<HashMap<u32, Hint>>,
}

#[derive(Debug, Clone, Copy)]
struct Hint {
    generation: u32,
    logical: u64,
}

impl DirHints {
    /// The block to start at in directory `ino` (generation `generation`)
    /// whose last block is `last`: the hint, or `last` when there is none.
    pub(crate) fn start(&self, ino: u32, generation: u32, last: u64) -> u64 {
        match self.map.lock().get(&ino) {
            Some(h) if h.generation == generation => h.logical.min(last),
            _ => last,
        }
    }

    /// Block `logical` of directory `ino` just took a new name.
    pub(crate) fn set(&self, ino: u32, generation: u32, logical: u64) {
        let mut map = self.map.lock();
        if map.len() >= MAX_DIRS && !map.contains_key(&ino) {
            map.clear();
        }
        map.insert(ino, Hint { generation, logical });
    }

    /// An entry was removed from block `logical` of directory `ino`: the
    /// next new name may go there.
    pub(crate) fn freed(&self, ino: u32, generation: u32, logical: u64) {
        let mut map = self.map.lock();
        match map.get_mut(&ino) {
            Some(h) if h.generation == generation => h.logical = h.logical.min(logical),
            _ => {
                if map.len() >= MAX_DIRS {
                    map.clear();
                }
                map.insert(ino, Hint { generation, logical });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_is_the_hint_clamped_to_the_last_block() {
        let h = DirHints::default();
        assert_eq!(h.start(12, 1, 9), 9, "no hint: the last block");
        h.set(12, 1, 4);
        assert_eq!(h.start(12, 1, 9), 4);
        assert_eq!(h.start(12, 1, 2), 2, "a shrunk directory clamps the hint");
        assert_eq!(h.start(12, 2, 9), 9, "another directory on the same inode");
    }

    #[test]
    fn a_removal_lowers_the_hint_and_never_raises_it() {
        let h = DirHints::default();
        h.set(12, 1, 7);
        h.freed(12, 1, 3);
        assert_eq!(h.start(12, 1, 9), 3);
        h.freed(12, 1, 5);
        assert_eq!(h.start(12, 1, 9), 3);
        h.freed(13, 1, 2);
        assert_eq!(h.start(13, 1, 9), 2, "a removal in an unknown directory leaves a hint");
        h.freed(12, 2, 6);
        assert_eq!(h.start(12, 2, 9), 6, "a new generation replaces the old hint");
    }

    #[test]
    fn the_map_stays_bounded() {
        let h = DirHints::default();
        for ino in 0..(MAX_DIRS as u32 * 3) {
            h.set(ino, 0, 1);
        }
        assert!(h.map.lock().len() <= MAX_DIRS);
        assert_eq!(h.start(MAX_DIRS as u32 * 3 - 1, 0, 5), 1, "the newest hint is kept");
    }
}
