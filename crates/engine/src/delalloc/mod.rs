//! Delayed allocation (seed 001 §3, `ext4_da_write_begin`,
//! `ext4_da_reserve_space`, `ext4_writepages`): a buffered write into a
//! hole or past the end of an extent-mapped file keeps its blocks in
//! memory and takes a reservation — one block per page plus the
//! extent-tree blocks mapping them may need ([`reserve`]: an extent per
//! run of pages and per 256 pages, split nodes half full) — instead of
//! blocks. Blocks are chosen at write-back
//! ([`flush`]): at `fsync`, `sync`, the mount's commit interval, close, or
//! once more than [`crate::AllocOptions::delalloc_bytes`] are held, and a
//! run of logically contiguous dirty pages goes to the allocator as one
//! request, so a file written in 4 KiB pieces gets the extent its final
//! size deserves and a file created, written and deleted in between never
//! touches a bitmap.
//!
//! **What the image says meanwhile.** The inode on disk keeps the size
//! its mapped data covers (the kernel's `i_disksize`); the size, times
//! and block count a caller sees ([`crate::Filesystem::inode`]) include the
//! held pages, and reads overlay them. A crash loses what was held (as it
//! loses the kernel's dirty pages) but never leaves a size covering data
//! that was not written: data the image never stored does not read back as
//! zeros.
//!
//! **ENOSPC.** The reservation is taken at `write` under the writer lock,
//! against the free count less every other reservation, and every other
//! allocation ([`crate::txn::Txn`]'s counting of taken blocks) leaves the
//! reserved blocks alone, so write-back never finds the space gone: the
//! error reaches `write`, not a later `fsync`.
//!
//! **Invariant.** A held page is always of a block the file does not map
//! (a hole, or past its mapped end): writes into mapped or unwritten
//! blocks take the direct path (an append that starts in the mapped
//! last block writes only that block so), and every operation that changes a file's
//! mapping other than write-back (truncate, fallocate, punch, defrag) or
//! reads it (`SEEK_DATA`, extent maps) writes the file back first.
//! Freeing an inode drops its pages ([`Delalloc::discard`]), so a reused
//! inode number never inherits them.
//!
//! Locks: the state's mutex is a leaf, taken under an inode lock and
//! under the writer lock, never held across either.

mod auto;
mod flush;
mod reserve;
mod truncate;
mod write;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use ext4kit_format::inode::Timestamp;
use parking_lot::Mutex;

use crate::inode::Inode;
use crate::inode::extent_write::charge_blocks;
use crate::inode::write::set_times;

/// Pages held for one file, and what its inode looks like with them.
#[derive(Debug)]
pub(crate) struct DirtyFile {
    /// Whole blocks by logical number, each `block_size` bytes.
    pages: BTreeMap<u64, Box<[u8]>>,
    /// `i_size` with the held pages (never below the size on disk).
    size: u64,
    /// Time of the last delayed write (`mtime` and `ctime`); `None` after
    /// a setattr set them since.
    time: Option<Timestamp>,
    /// Runs of logically contiguous pages.
    runs: u64,
    /// Blocks promised to this file: its pages plus the tree blocks they
    /// may need ([`reserve`]).
    reserved: u64,
    /// The extent tree's shape when the reservation was last computed.
    shape: reserve::TreeShape,
    /// Bigalloc only: the logical clusters holding pages whose physical
    /// cluster is not allocated yet, one reserved cluster each (the
    /// kernel's pending reservations). A cluster leaves the set when a
    /// write-back maps a block of it or its last page goes.
    clusters: BTreeSet<u64>,
    /// `log2` of blocks per cluster (0 without bigalloc).
    cluster_bits: u32,
    /// Which holding this is: an inode freed (its entry dropped) and its
    /// number given to a new file meanwhile gets another.
    id: u64,
}

#[derive(Debug, Default)]
struct State {
    files: HashMap<u32, DirtyFile>,
    /// Sum of the files' `reserved`.
    reserved: u64,
    /// Bytes of held pages.
    bytes: usize,
}

/// Every file's held pages and reservations.
#[derive(Debug, Default)]
pub(crate) struct Delalloc {
    state: Mutex<State>,
    /// Files with held pages: lets [`Self::overlay`] skip the lock when 0.
    files: AtomicUsize,
    /// The last [`DirtyFile::id`] given.
    ids: std::sync::atomic::AtomicU64,
    truncated: auto::Truncated,
}

impl Delalloc {
    /// Blocks reserved for held pages, not yet allocated.
    pub(crate) fn reserved(&self) -> u64 {
        if self.files.load(Ordering::Acquire) == 0 {
            return 0;
        }
        self.state.lock().reserved
    }

    /// Bytes of held pages.
    pub(crate) fn bytes(&self) -> usize {
        self.state.lock().bytes
    }

    /// True when `ino` has held pages.
    pub(crate) fn holds(&self, ino: u32) -> bool {
        self.files.load(Ordering::Acquire) != 0 && self.state.lock().files.contains_key(&ino)
    }

    /// Inodes with held pages, ascending.
    pub(crate) fn inodes(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.state.lock().files.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// True when `ino` still holds the pages of holding `id` from `lblk`:
    /// asked under the writer lock, before a write-back maps what it took
    /// (an unlink frees inodes without the inode lock a write-back holds).
    pub(crate) fn still_holds(&self, ino: u32, id: u64, lblk: u64) -> bool {
        let st = self.state.lock();
        st.files
            .get(&ino)
            .is_some_and(|f| f.id == id && f.pages.contains_key(&lblk))
    }

    /// A new [`DirtyFile::id`].
    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Drops `ino`'s pages and reservation: the inode is being freed.
    pub(crate) fn discard(&self, ino: u32) {
        self.closed(ino);
        if self.files.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut st = self.state.lock();
        if let Some(f) = st.files.remove(&ino) {
            st.release(&f);
            self.files.store(st.files.len(), Ordering::Release);
        }
    }

    /// `inode` (as on disk) as callers see it: size, times and block count
    /// with the held pages.
    pub(crate) fn overlay(&self, inode: &mut Inode, block_size: u32) {
        if self.files.load(Ordering::Acquire) == 0 {
            return;
        }
        let st = self.state.lock();
        let Some(f) = st.files.get(&inode.ino) else {
            return;
        };
        inode.raw.set_size(f.size.max(inode.raw.size()));
        if let Some(t) = f.time {
            set_times(&mut inode.raw, t, false);
        }
        charge_blocks(&mut inode.raw, f.held_blocks() as i64, block_size);
    }

    /// Lets the times a setattr just stored stand: held writes no longer
    /// override them (until the next write).
    pub(crate) fn forget_times(&self, ino: u32) {
        if let Some(f) = self.state.lock().files.get_mut(&ino) {
            f.time = None;
        }
    }

    /// Copies the held pages of `ino` over `buf`, which holds the file's
    /// bytes from `offset` as read from the image.
    pub(crate) fn overlay_read(&self, ino: u32, offset: u64, buf: &mut [u8], block_size: u32) {
        if self.files.load(Ordering::Acquire) == 0 || buf.is_empty() {
            return;
        }
        let st = self.state.lock();
        let Some(f) = st.files.get(&ino) else {
            return;
        };
        let bs = u64::from(block_size);
        let end = offset + buf.len() as u64;
        for (&lblk, page) in f.pages.range(offset / bs..end.div_ceil(bs)) {
            let (start, stop) = (lblk * bs, (lblk + 1) * bs);
            let (lo, hi) = (start.max(offset), stop.min(end));
            buf[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&page[(lo - start) as usize..(hi - start) as usize]);
        }
    }
}

impl DirtyFile {
    /// Recounts `runs` after pages went, and returns the reservation the
    /// remaining pages need under the tree's `shape`.
    fn settle(&mut self, shape: reserve::TreeShape, block_size: u32) -> u64 {
        let mut prev = None;
        self.runs = 0;
        for &b in self.pages.keys() {
            if prev.is_none_or(|p: u64| p + 1 != b) {
                self.runs += 1;
            }
            prev = Some(b);
        }
        self.shape = shape;
        let bits = self.cluster_bits;
        let pages = &self.pages;
        self.clusters
            .retain(|&c| pages.range(c << bits..(c + 1) << bits).next().is_some());
        self.want(block_size)
    }

    /// The reservation the held pages need now.
    fn want(&self, block_size: u32) -> u64 {
        let pages = self.pages.len() as u64;
        if self.cluster_bits == 0 {
            return reserve::reservation(self.shape, pages, self.runs, block_size);
        }
        let clusters = self.clusters.len() as u64;
        reserve::cluster_reservation(self.shape, clusters, pages, self.runs, block_size, self.cluster_bits)
    }

    /// Data blocks the held pages will take (`i_reserved_data_blocks` in
    /// `ext4_getattr`): a block a page, or whole clusters under bigalloc.
    fn held_blocks(&self) -> u64 {
        match self.cluster_bits {
            0 => self.pages.len() as u64,
            bits => (self.clusters.len() as u64) << bits,
        }
    }
}

impl State {
    fn release(&mut self, f: &DirtyFile) {
        self.reserved -= f.reserved;
        self.bytes -= f.pages.values().map(|p| p.len()).sum::<usize>();
    }
}
