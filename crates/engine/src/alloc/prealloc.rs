//! Per-inode preallocation (mballoc's inode `ext4_prealloc_space`, seed
//! 001 §3.2): once a file has grown past `stream_req` blocks, the free
//! run after its newest blocks — up to the longest extent, 32,768 blocks —
//! is kept for it in memory. Other allocations treat those blocks as
//! taken, so small files written between a streaming file's writes land
//! elsewhere and the stream stays in few extents. Nothing reaches the
//! disk: the bitmap changes only when a block is really allocated, so a
//! crash or an unmount simply forgets the windows. A window goes at the
//! file's last close, a truncate, its freeing, and whenever the file
//! system would otherwise report ENOSPC.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Blocks a file must have before it gets a window (the kernel's
/// `mb_stream_req` default).
pub(crate) const STREAM_REQ: u64 = 16;

/// The longest hole before a new allocation that its window also covers,
/// so that a stream's pieces arriving out of order still land in place.
pub(crate) const MAX_HOLE: u64 = 2048;

/// Logical blocks `logical..logical + len` of one file are to go to
/// physical `physical..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub logical: u64,
    pub physical: u64,
    pub len: u64,
}

/// The windows of every file, by inode.
#[derive(Debug, Default)]
pub(crate) struct Preallocs {
    by_ino: Mutex<HashMap<u32, Window>>,
}

impl Preallocs {
    /// Where up to `want` blocks for logical `lblk` of `ino` go in its
    /// window: (physical, count, whether they reach the window's end).
    /// The window stays as it is: write-back may send a stream's pieces
    /// out of order, and each block's place is fixed by its logical
    /// number (`ext4_mb_use_inode_pa`); the bitmap tells which are used.
    pub(crate) fn take(&self, ino: u32, lblk: u64, want: u64) -> Option<(u64, u64, bool)> {
        let map = self.by_ino.lock();
        let w = map.get(&ino)?;
        if lblk < w.logical || lblk >= w.logical + w.len {
            return None;
        }
        let n = want.min(w.logical + w.len - lblk);
        Some((w.physical + (lblk - w.logical), n, lblk + n == w.logical + w.len))
    }

    /// `ino`'s window, if it has one.
    pub(crate) fn get(&self, ino: u32) -> Option<Window> {
        self.by_ino.lock().get(&ino).copied()
    }

    /// Gives `ino` a window (replacing any it had).
    pub(crate) fn set(&self, ino: u32, w: Window) {
        if w.len > 0 {
            self.by_ino.lock().insert(ino, w);
        }
    }

    /// Lets `ino`'s window go.
    pub(crate) fn release(&self, ino: u32) {
        self.by_ino.lock().remove(&ino);
    }

    /// Lets every window go; true if there was one.
    pub(crate) fn release_all(&self) -> bool {
        let mut map = self.by_ino.lock();
        let had = !map.is_empty();
        map.clear();
        had
    }

    /// Marks the windows' blocks inside `first..first + bits` as taken in
    /// the group bitmap copy `view`.
    pub(crate) fn lay_over(&self, first: u64, bits: u64, view: &mut [u8]) {
        for w in self.by_ino.lock().values() {
            let (a, b) = (w.physical.max(first), (w.physical + w.len).min(first + bits));
            for blk in a..b {
                let i = (blk - first) as usize;
                if let Some(byte) = view.get_mut(i / 8) {
                    *byte |= 1 << (i % 8);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_maps_logical_to_physical_in_any_order() {
        let p = Preallocs::default();
        let w = Window {
            logical: 100,
            physical: 5000,
            len: 50,
        };
        p.set(7, w);
        assert_eq!(p.take(7, 120, 10), Some((5020, 10, false)));
        assert_eq!(
            p.take(7, 100, 10),
            Some((5000, 10, false)),
            "earlier pieces keep their place"
        );
        assert_eq!(p.take(7, 140, 100), Some((5040, 10, true)));
        assert_eq!(p.take(7, 150, 1), None, "past the window");
        assert_eq!(p.take(7, 99, 1), None, "before it");
        assert_eq!(p.take(8, 100, 1), None, "another file's");
        p.release(7);
        assert_eq!(p.take(7, 100, 1), None);
    }

    #[test]
    fn windows_are_laid_over_a_groups_bitmap() {
        let p = Preallocs::default();
        p.set(
            1,
            Window {
                logical: 0,
                physical: 1030,
                len: 4,
            },
        );
        let mut view = vec![0u8; 4];
        p.lay_over(1024, 32, &mut view);
        assert_eq!(view, [0b1100_0000, 0b0000_0011, 0, 0]);
        assert!(p.release_all());
        assert!(!p.release_all());
    }
}
