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

/// An ext3 reservation window (`ext3_reserve_window_node`): physical
/// blocks `start..start + len` that other files do not allocate from,
/// whether or not they are free; `goal_size` is the size the next window
/// of the file gets, `hits` what was allocated from this one, both in
/// blocks (clusters under bigalloc, where `start` and `len` are whole
/// clusters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub start: u64,
    pub len: u64,
    pub goal_size: u64,
    pub hits: u64,
}

/// The windows of every file, by inode, and the locality group's.
#[derive(Debug, Default)]
pub(crate) struct Preallocs {
    by_ino: Mutex<HashMap<u32, Window>>,
    /// Free blocks `start..start + len` kept for small files, taken from
    /// the front (mballoc's locality-group preallocation, seed 001 §2.3).
    locality: Mutex<Option<(u64, u64)>>,
    /// The ext3 allocator's reservation windows, by inode
    /// ([`crate::alloc::ext3`]).
    reservations: Mutex<HashMap<u32, Reservation>>,
    /// Physical ranges whose windows came or went since the allocator
    /// last looked: the buddies of their groups no longer match.
    changed: Mutex<Vec<(u64, u64)>>,
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
            self.note(w.physical, w.len);
            if let Some(old) = self.by_ino.lock().insert(ino, w) {
                self.note(old.physical, old.len);
            }
        }
    }

    /// Lets `ino`'s window go (its ext3 reservation too).
    pub(crate) fn release(&self, ino: u32) {
        if let Some(old) = self.by_ino.lock().remove(&ino) {
            self.note(old.physical, old.len);
        }
        if let Some(r) = self.reservations.lock().remove(&ino) {
            self.note(r.start, r.len);
        }
    }

    /// `ino`'s ext3 reservation window.
    pub(crate) fn reservation(&self, ino: u32) -> Option<Reservation> {
        self.reservations.lock().get(&ino).copied()
    }

    /// Sets `ino`'s ext3 reservation window (an empty one keeps only
    /// its sizes).
    pub(crate) fn set_reservation(&self, ino: u32, r: Reservation) {
        self.note(r.start, r.len);
        if let Some(old) = self.reservations.lock().insert(ino, r) {
            self.note(old.start, old.len);
        }
    }

    /// Counts `n` units (blocks, or clusters under bigalloc) allocated
    /// from `ino`'s reservation.
    pub(crate) fn hit_reservation(&self, ino: u32, n: u64) {
        if let Some(r) = self.reservations.lock().get_mut(&ino) {
            r.hits += n;
        }
    }

    /// The first block of `start..end` inside a reservation other than
    /// `ino`'s.
    pub(crate) fn first_reserved(&self, ino: u32, start: u64, end: u64) -> Option<u64> {
        let map = self.reservations.lock();
        let overlapping = map
            .iter()
            .filter(|(i, r)| **i != ino && r.start < end && r.start + r.len > start);
        overlapping.map(|(_, r)| r.start.max(start)).min()
    }

    /// Lets every window go, the locality group's too; true if there
    /// was one.
    pub(crate) fn release_all(&self) -> bool {
        let mut map = self.by_ino.lock();
        let mut had = !map.is_empty();
        for w in map.values() {
            self.note(w.physical, w.len);
        }
        map.clear();
        for r in self.reservations.lock().drain().map(|(_, r)| r) {
            self.note(r.start, r.len);
            had = true;
        }
        if let Some((s, l)) = self.locality.lock().take() {
            self.note(s, l);
            had = true;
        }
        had
    }

    /// The locality group's window: (first free block, blocks left).
    pub(crate) fn locality(&self) -> Option<(u64, u64)> {
        *self.locality.lock()
    }

    /// Replaces the locality group's window (`None` lets it go).
    pub(crate) fn set_locality(&self, w: Option<(u64, u64)>) {
        let mut cur = self.locality.lock();
        if let Some((s, l)) = *cur {
            self.note(s, l);
        }
        if let Some((s, l)) = w {
            self.note(s, l);
        }
        *cur = w.filter(|&(_, l)| l > 0);
    }

    /// `n` blocks taken from the front of the locality window.
    pub(crate) fn advance_locality(&self, n: u64) {
        let mut cur = self.locality.lock();
        if let Some((s, l)) = *cur {
            *cur = (l > n).then_some((s + n, l - n));
        }
    }

    fn note(&self, start: u64, len: u64) {
        self.changed.lock().push((start, len));
    }

    /// The ranges noted since the last call.
    pub(crate) fn take_changed(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.changed.lock())
    }

    /// Every window's physical range (the per-inode ones, the locality
    /// group's, the ext3 reservations): for views kept in clusters.
    pub(crate) fn ranges(&self) -> Vec<(u64, u64)> {
        let mut all: Vec<(u64, u64)> = self.by_ino.lock().values().map(|w| (w.physical, w.len)).collect();
        all.extend(*self.locality.lock());
        all.extend(self.reservations.lock().values().map(|r| (r.start, r.len)));
        all
    }

    /// Marks the windows' blocks inside `first..first + bits` as taken in
    /// the group bitmap copy `view`.
    pub(crate) fn lay_over(&self, first: u64, bits: u64, view: &mut [u8]) {
        let locality = *self.locality.lock();
        let windows = self.by_ino.lock();
        let reservations = self.reservations.lock();
        let ext3 = reservations.values().map(|r| (r.start, r.len));
        let all = windows
            .values()
            .map(|w| (w.physical, w.len))
            .chain(locality)
            .chain(ext3);
        for (physical, len) in all {
            let (a, b) = (physical.max(first), (physical + len).min(first + bits));
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
