//! The page cache's index: which pages are held, in which slot, in what
//! order of use, and which are dirty. Pure bookkeeping, no I/O: the cache
//! decides when to write back and evict, this module only answers in O(1).
//!
//! Slots live in one arena (`Vec<Slot>`) linked into a doubly linked list by
//! index, most recently used at the head, so a hit moves its slot to the
//! head and eviction takes the tail without a scan. The arena never grows
//! past `capacity` slots, so memory is `capacity` pages plus the map,
//! whatever the request pattern.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Marks the end of the use list.
const NIL: u32 = u32::MAX;

/// One cached page.
#[derive(Debug)]
struct Slot {
    page: u64,
    prev: u32,
    next: u32,
    dirty: bool,
    data: Box<[u8]>,
}

/// Page numbers are the only keys and need no protection against chosen
/// collisions (a hostile image can slow its own reads, no more), so a
/// multiply-and-fold hash replaces SipHash: about 20 ns less per lookup,
/// and the same on every run.
#[derive(Default)]
pub(super) struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        let h = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }
}

/// The index of a page cache of `capacity` pages of `page` bytes.
#[derive(Debug)]
pub(super) struct Lru {
    page: usize,
    capacity: usize,
    map: HashMap<u64, u32, BuildHasherDefault<PageHasher>>,
    slots: Vec<Slot>,
    /// Slots in the arena not holding a page (after a drop).
    free: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used: the next victim.
    tail: u32,
    /// Pages that turned dirty, in no order; entries go stale when a page is
    /// written back on eviction, and are filtered when taken or compacted.
    dirty: Vec<u64>,
}

impl std::fmt::Debug for PageHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageHasher")
    }
}

impl Lru {
    pub(super) fn new(capacity: usize, page: usize) -> Self {
        Self {
            page,
            capacity,
            map: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            dirty: Vec::new(),
        }
    }

    /// Pages held.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// The slot holding `page`, made most recently used.
    pub(super) fn get(&mut self, page: u64) -> Option<u32> {
        let i = *self.map.get(&page)?;
        self.touch(i);
        Some(i)
    }

    /// The slot holding `page`, its place in the use order unchanged.
    pub(super) fn peek(&self, page: u64) -> Option<u32> {
        self.map.get(&page).copied()
    }

    pub(super) fn data(&self, slot: u32) -> &[u8] {
        &self.slots[slot as usize].data
    }

    pub(super) fn data_mut(&mut self, slot: u32) -> &mut [u8] {
        &mut self.slots[slot as usize].data
    }

    pub(super) fn page_of(&self, slot: u32) -> u64 {
        self.slots[slot as usize].page
    }

    pub(super) fn is_dirty(&self, slot: u32) -> bool {
        self.slots[slot as usize].dirty
    }

    /// Whether `page` is held and dirty.
    pub(super) fn page_dirty(&self, page: u64) -> bool {
        self.peek(page).is_some_and(|i| self.is_dirty(i))
    }

    pub(super) fn set_dirty(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        if !s.dirty {
            s.dirty = true;
            let page = s.page;
            self.dirty.push(page);
            if self.dirty.len() > 2 * self.capacity + 64 {
                self.compact_dirty();
            }
        }
    }

    pub(super) fn set_clean(&mut self, slot: u32) {
        self.slots[slot as usize].dirty = false;
    }

    /// True when a page can be inserted without evicting one.
    pub(super) fn has_room(&self) -> bool {
        !self.free.is_empty() || self.slots.len() < self.capacity
    }

    /// The least recently used slot (None when empty).
    pub(super) fn victim(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    /// Holds `page` (absent) in a free slot, most recently used, clean; its
    /// bytes are whatever the slot held before, for the caller to fill.
    /// Needs [`Lru::has_room`].
    pub(super) fn insert(&mut self, page: u64) -> u32 {
        debug_assert!(self.has_room() && !self.map.contains_key(&page));
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    page,
                    prev: NIL,
                    next: NIL,
                    dirty: false,
                    data: vec![0; self.page].into_boxed_slice(),
                });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[i as usize];
        s.page = page;
        s.dirty = false;
        self.map.insert(page, i);
        self.push_front(i);
        i
    }

    /// Forgets the page in `slot` (dirty or not: the caller wrote it back).
    pub(super) fn remove(&mut self, slot: u32) {
        self.unlink(slot);
        let s = &mut self.slots[slot as usize];
        s.dirty = false;
        self.map.remove(&s.page);
        self.free.push(slot);
    }

    /// The pages dirty now, ascending, each once; the list is emptied (a
    /// caller that fails to write some back gives them to
    /// [`Lru::requeue_dirty`]).
    pub(super) fn take_dirty(&mut self) -> Vec<u64> {
        self.compact_dirty();
        std::mem::take(&mut self.dirty)
    }

    /// Puts back pages [`Lru::take_dirty`] gave out that are still dirty.
    pub(super) fn requeue_dirty(&mut self, pages: &[u64]) {
        let still: Vec<u64> = pages.iter().copied().filter(|&p| self.page_dirty(p)).collect();
        self.dirty.extend(still);
    }

    /// Forgets every clean page; dirty ones stay, in their use order.
    pub(super) fn drop_clean(&mut self) -> usize {
        let mut dropped = 0;
        let mut i = self.head;
        while i != NIL {
            let next = self.slots[i as usize].next;
            if !self.slots[i as usize].dirty {
                self.remove(i);
                dropped += 1;
            }
            i = next;
        }
        dropped
    }

    /// Forgets every page and gives the memory back.
    pub(super) fn clear(&mut self) {
        *self = Self::new(self.capacity, self.page);
    }

    fn compact_dirty(&mut self) {
        let mut d = std::mem::take(&mut self.dirty);
        d.retain(|&p| self.page_dirty(p));
        d.sort_unstable();
        d.dedup();
        self.dirty = d;
    }

    fn touch(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let s = &self.slots[i as usize];
            (s.prev, s.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        let old = self.head;
        {
            let s = &mut self.slots[i as usize];
            s.prev = NIL;
            s.next = old;
        }
        match old {
            NIL => self.tail = i,
            o => self.slots[o as usize].prev = i,
        }
        self.head = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages from most to least recently used.
    fn order(l: &Lru) -> Vec<u64> {
        let mut out = Vec::new();
        let mut i = l.head;
        while i != NIL {
            out.push(l.page_of(i));
            i = l.slots[i as usize].next;
        }
        out
    }

    fn fill(l: &mut Lru, pages: &[u64]) {
        for &p in pages {
            l.insert(p);
        }
    }

    #[test]
    fn use_order_and_victim() {
        let mut l = Lru::new(3, 16);
        fill(&mut l, &[1, 2, 3]);
        assert!(!l.has_room());
        assert_eq!(order(&l), [3, 2, 1]);
        assert_eq!(l.victim().map(|v| l.page_of(v)), Some(1));
        l.get(1);
        assert_eq!(order(&l), [1, 3, 2]);
        l.peek(2);
        assert_eq!(l.victim().map(|v| l.page_of(v)), Some(2));
        let v = l.victim().unwrap();
        l.remove(v);
        assert!(l.has_room());
        assert_eq!(l.get(2), None);
        l.insert(9);
        assert_eq!(order(&l), [9, 1, 3]);
        assert_eq!(l.slots.len(), 3, "the freed slot is reused");
    }

    #[test]
    fn dirty_pages_come_out_sorted_once() {
        let mut l = Lru::new(4, 16);
        fill(&mut l, &[7, 3, 5, 1]);
        for p in [7, 3, 5] {
            let i = l.peek(p).unwrap();
            l.set_dirty(i);
            l.set_dirty(i);
        }
        let i = l.peek(3).unwrap();
        l.set_clean(i);
        assert_eq!(l.take_dirty(), [5, 7]);
        assert!(l.take_dirty().is_empty());
        l.requeue_dirty(&[5, 7, 1]);
        assert_eq!(l.take_dirty(), [5, 7]);
    }

    #[test]
    fn the_dirty_list_stays_bounded() {
        let mut l = Lru::new(2, 16);
        fill(&mut l, &[0, 1]);
        for _ in 0..10_000 {
            for p in [0, 1] {
                let i = l.peek(p).unwrap();
                l.set_dirty(i);
                l.set_clean(i);
            }
        }
        assert!(l.dirty.len() <= 2 * 2 + 64 + 1, "{}", l.dirty.len());
    }

    #[test]
    fn drop_clean_keeps_dirty_pages_in_order() {
        let mut l = Lru::new(4, 16);
        fill(&mut l, &[1, 2, 3, 4]);
        for p in [1, 3] {
            let i = l.peek(p).unwrap();
            l.set_dirty(i);
        }
        assert_eq!(l.drop_clean(), 2);
        assert_eq!(order(&l), [3, 1]);
        assert_eq!(l.len(), 2);
        l.clear();
        assert_eq!((l.len(), l.slots.len(), l.victim()), (0, 0, None));
    }
}
