//! Writing file data at any offset: mapped blocks are overwritten in place,
//! unmapped ones (holes, or past the end) are allocated near their
//! neighbours and mapped with new extents; partial blocks are read,
//! modified and written whole; blocks of unwritten (preallocated) extents
//! are split out of them and become initialized, the unwritten parts of
//! partial blocks reading as zeros. Data reaches the device before the metadata
//! that points at it, though after the writer lock is released (see
//! [`crate::ordered`]).

use ext4kit_format::extent::{EXT_INIT_MAX_LEN, Extent};

use crate::alloc::DataRequest;
use crate::alloc::prealloc::{MAX_HOLE, Window};
use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::extent_write::charge_blocks;
use crate::inode::write::set_times;
use crate::txn::Txn;

impl Filesystem {
    /// Writes `data` at byte `offset` of regular file `ino`, growing it as
    /// needed; returns the bytes written (all of them).
    ///
    /// # Errors
    /// [`Error::IsDir`], [`Error::FileTooBig`] past 2^32 blocks,
    /// [`Error::NotPermitted`] for an immutable file or below the end of an
    /// append-only one,
    /// [`Error::NoSpace`], [`Error::ReadOnly`]. Writing into an unwritten
    /// (preallocated) extent turns the written blocks into initialized ones.
    /// Nothing changes on error, except that when the device fails to
    /// write the data after the metadata was committed, the range holds
    /// what the device left there.
    ///
    /// Concurrency: the data is written after the writer lock is released,
    /// under the file's own lock, so writers of different files overlap.
    pub fn write(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_announcing(ino, offset, data, |_| {})
    }

    /// [`Self::write`], calling `published` with the byte count as soon as
    /// the change is published and before the file data goes to the
    /// device: a server can answer its client while the data is copied.
    /// Nothing can observe the gap: readers of the file wait for the data
    /// under its inode lock, and commits wait for data in flight.
    ///
    /// # Errors
    /// As [`Self::write`]. An error returned after `published` ran is a
    /// failed write of data already acknowledged (the kernel's write-back
    /// error), to be reported on the next `fsync`.
    pub fn write_announcing(&self, ino: u32, offset: u64, data: &[u8], published: impl FnOnce(usize)) -> Result<usize> {
        let file = self.inode_locks.write(ino);
        if let Some(key) = self.contents_key(&self.inode(ino)?)? {
            let n = self.write_encrypted(ino, &key, offset, data)?;
            published(n);
            return Ok(n);
        }
        if self.quota_binds_caller() {
            // Limits are checked where blocks are taken: at once.
            self.flush_locked(ino)?;
        } else if let Some(n) = self.write_delayed(ino, offset, data)? {
            published(n);
            drop(file);
            // Too much held: the writer pays for write-back, as
            // `balance_dirty_pages` makes it.
            if self.delalloc.over(self.opts.alloc.delalloc_bytes) {
                self.flush_all()?;
            }
            return Ok(n);
        }
        let mut txn = Txn::begin(self)?;
        txn.under_inode_lock();
        let n = txn.write(ino, offset, data)?;
        let pending = txn.commit_deferring_data()?;
        published(n);
        pending.write()?;
        Ok(n)
    }

    /// The direct write (allocating at once) of part of a delayed one, the
    /// inode lock held.
    pub(crate) fn write_direct_locked(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let mut txn = Txn::begin(self)?;
        txn.under_inode_lock();
        let n = txn.write(ino, offset, data)?;
        txn.commit_deferring_data()?.write()?;
        Ok(n)
    }
}

impl Txn<'_> {
    /// The body of [`Filesystem::write`] inside this transaction.
    pub(crate) fn write(&mut self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let mut inode = self.inode(ino)?;
        inode.require_regular()?;
        super::flags::check_write(&inode, offset)?;
        let end = offset.checked_add(data.len() as u64).ok_or(Error::FileTooBig)?;
        self.fs.check_file_end(&inode, end)?;
        let inline = if inode.has_inline_data() {
            self.write_inline(&mut inode, offset, data)?
        } else {
            self.first_write_inline(&mut inode, offset, data)?
        };
        if !inline {
            self.write_range(&mut inode, offset, data)?;
        }
        if end > inode.size() {
            inode.raw.set_size(end);
        }
        set_times(&mut inode.raw, clock::now(), false);
        self.write_inode(&mut inode)?;
        Ok(data.len())
    }

    /// Writes `data` at `offset` of an extent-mapped `inode` (size untouched).
    pub(crate) fn write_range(&mut self, inode: &mut Inode, offset: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if inode.has_inline_data() {
            self.uninline(inode)?;
        }
        let bs = u64::from(self.fs.geo.block_size);
        let last = (offset + data.len() as u64 - 1) / bs;
        let mut lblk = offset / bs;
        while lblk <= last {
            // Only the runs this write overlaps: the whole map would make
            // every write cost the file's extent count.
            let exts = self.runs_in(inode, lblk, last + 1)?;
            let hit = exts.iter().find(|e| u64::from(e.logical) <= lblk && lblk < end_of(e));
            let (phys, n, fresh) = match hit {
                Some(e) if e.unwritten => self.convert_for_write(inode, *e, lblk, last)?,
                Some(e) => (
                    e.physical + (lblk - u64::from(e.logical)),
                    end_of(e).min(last + 1) - lblk,
                    false,
                ),
                None => self.map_new(inode, &exts, lblk, last)?,
            };
            self.put_blocks(lblk, phys, n, fresh, offset, data)?;
            lblk += n;
        }
        Ok(())
    }

    /// Allocates and maps blocks for the hole at `lblk` (up to `last` or the
    /// next of `exts`, the runs overlapping the write); returns (physical,
    /// count, fresh = true). The choice of blocks is timed into the
    /// allocator's counts ([`crate::MbStats::alloc_ns`]); the mapping is not.
    fn map_new(&mut self, inode: &mut Inode, exts: &[Extent], lblk: u64, last: u64) -> Result<(u64, u64, bool)> {
        let next = exts
            .iter()
            .map(|e| u64::from(e.logical))
            .filter(|&l| l > lblk)
            .min()
            .unwrap_or(u64::MAX);
        let want = (next.min(last + 1) - lblk).min(u64::from(EXT_INIT_MAX_LEN)) as u32;
        if self.bigalloc() {
            return self.map_new_clustered(inode, lblk, want, next);
        }
        let (phys, got) = self.timed_data_alloc(|t| t.choose_new(inode, lblk, want, next))?;
        self.map_fresh(inode, lblk, phys, got)
    }

    /// [`Self::map_new`] under bigalloc: the block at its offset in the
    /// logical cluster's physical cluster when it has one, else whole new
    /// clusters near the file's previous block or from its window (see
    /// [`crate::alloc`]'s `cluster` and `cluster_pa` modules; `next`: the
    /// file's next mapped logical block); only new clusters are charged.
    fn map_new_clustered(&mut self, inode: &mut Inode, lblk: u64, want: u32, next: u64) -> Result<(u64, u64, bool)> {
        let bits = self.fs.geo.cluster_bits;
        let (lo, hi) = (
            (lblk >> bits) << bits,
            (lblk + u64::from(want)).next_multiple_of(1 << bits),
        );
        let near = self.runs_in(inode, lo, hi)?;
        let before = self.mapped_before(inode, lblk)?;
        let req = crate::alloc::ClusterRequest {
            lblk,
            want,
            goal: before.map_or_else(|| self.first_goal(inode), |(l, p)| p + (lblk - l)),
            left: before.map(|b| b.0),
            next: (next != u64::MAX).then_some(next),
        };
        let (phys, got, charge) = self.alloc_clustered_for(inode, &near, req)?;
        let e = Extent {
            logical: lblk as u32,
            len: got as u16,
            physical: phys,
            unwritten: false,
        };
        self.map_run(inode, e)?;
        charge_blocks(&mut inode.raw, charge, self.fs.geo.block_size);
        Ok((phys, u64::from(got), true))
    }

    /// Up to `want` blocks for logical `lblk` (`next`: the file's next
    /// mapped logical block, or `u64::MAX`), allocated: from the file's
    /// preallocation window when the write continues it, else from the
    /// goal, opening a window behind a file that streams.
    fn choose_new(&mut self, inode: &Inode, lblk: u64, want: u32, next: u64) -> Result<(u64, u32)> {
        if let Some(run) = self.take_prealloc(inode, lblk, want)? {
            return Ok(run);
        }
        let before = self.mapped_before(inode, lblk)?;
        // A piece that arrives before the window (out of order)
        // goes just before it, and the window stays for the rest.
        let ahead = self.fs.prealloc.get(inode.ino).filter(|w| w.logical > lblk);
        let goal = match (ahead, before) {
            (Some(w), _) => w.physical.saturating_sub(w.logical - lblk),
            (None, Some((l, p))) => p + (lblk - l),
            (None, None) => self.first_goal(inode),
        };
        let req = DataRequest {
            lblk,
            want,
            goal,
            left: before.map(|b| b.0),
            right: (next != u64::MAX).then_some(next),
        };
        let (phys, got) = self.alloc_for_file(inode, req)?;
        if ahead.is_some() {
            return Ok((phys, got));
        }
        // Landed at its goal after a hole: the window starts at the
        // hole, so pieces written out of order (FUSE write-back)
        // still fall in place.
        let (wl, wp) = match before {
            Some((l, p)) if phys == goal && lblk - l <= MAX_HOLE && self.free_run_at(p, lblk - l)? == lblk - l => {
                (l, p)
            }
            _ => (lblk, phys),
        };
        self.open_prealloc(inode, wl, wp, lblk + u64::from(got));
        Ok((phys, got))
    }

    /// Maps `got` new blocks at `phys` for logical `lblk`.
    fn map_fresh(&mut self, inode: &mut Inode, lblk: u64, phys: u64, got: u32) -> Result<(u64, u64, bool)> {
        let e = Extent {
            logical: lblk as u32,
            len: got as u16,
            physical: phys,
            unwritten: false,
        };
        self.map_run(inode, e)?;
        charge_blocks(&mut inode.raw, i64::from(got), self.fs.geo.block_size);
        Ok((phys, u64::from(got), true))
    }

    /// Blocks for logical `lblk` from `inode`'s window, allocated.
    fn take_prealloc(&mut self, inode: &Inode, lblk: u64, want: u32) -> Result<Option<(u64, u32)>> {
        let Some((phys, n, to_end)) = self.fs.prealloc.take(inode.ino, lblk, u64::from(want)) else {
            return Ok(None);
        };
        if !self.alloc_exact(phys, n)? {
            self.fs.prealloc.release(inode.ino);
            return Ok(None);
        }
        // Used to its end: keep what follows at once, before another
        // file's allocation can take it.
        if to_end {
            self.open_prealloc(inode, lblk + n, phys + n, lblk + n);
        }
        Ok(Some((phys, n as u32)))
    }

    /// Keeps logical `lblk` on at physical `phys` on for an extent-mapped
    /// file that has reached `mb_stream_req` blocks and is open
    /// ([`Filesystem::open_file`]): up to logical `end` (blocks just
    /// allocated, or a hole before them) and the free run after it. Its
    /// last close lets the window go. A file written without being opened
    /// (an import, `mkfs -d`) has no close to wait for and gets none.
    fn open_prealloc(&mut self, inode: &Inode, lblk: u64, phys: u64, end: u64) {
        let a = &self.fs.opts.alloc;
        let mballoc = a.blocks == crate::alloc::BlockAllocator::Mballoc;
        if !mballoc || !a.inode_prealloc || !inode.uses_extents() || end < u64::from(a.stream_req) {
            return;
        }
        if !self.is_open_now(inode.ino) {
            return;
        }
        let after = phys + (end - lblk);
        if let Ok(len) = self.free_run_at(after, u64::from(EXT_INIT_MAX_LEN)) {
            let w = Window {
                logical: lblk,
                physical: phys,
                len: end - lblk + len,
            };
            self.fs.prealloc.set(inode.ino, w);
        }
    }

    /// Makes the blocks of unwritten extent `e` from `lblk` up to `last`
    /// (or the extent's end) initialized, splitting `e` into up to three
    /// pieces (`ext4_ext_convert_to_initialized`); returns (physical, count,
    /// fresh = true): the blocks read as zeros until now, so the parts of
    /// partial blocks the write does not cover are zero-filled, not read.
    fn convert_for_write(&mut self, inode: &mut Inode, e: Extent, lblk: u64, last: u64) -> Result<(u64, u64, bool)> {
        let n = end_of(&e).min(last + 1) - lblk;
        let phys = e.physical + (lblk - u64::from(e.logical));
        let piece = |from: u64, to: u64, unwritten: bool| Extent {
            logical: from as u32,
            len: (to - from) as u16,
            physical: e.physical + (from - u64::from(e.logical)),
            unwritten,
        };
        let pieces: Vec<Extent> = [
            piece(u64::from(e.logical), lblk, true),
            piece(lblk, lblk + n, false),
            piece(lblk + n, end_of(&e), true),
        ]
        .into_iter()
        .filter(|p| p.len > 0)
        .collect();
        self.replace_extent(inode, e, &pieces)?;
        Ok((phys, n, true))
    }

    /// Queues the data for `n` blocks from logical `lblk` at `phys`.
    fn put_blocks(&mut self, lblk: u64, phys: u64, n: u64, fresh: bool, offset: u64, data: &[u8]) -> Result<()> {
        let bs = u64::from(self.fs.geo.block_size);
        let (start, stop) = (lblk * bs, (lblk + n) * bs);
        let lo = offset.max(start);
        let hi = (offset + data.len() as u64).min(stop);
        if lo == start && hi == stop {
            // Whole blocks: one copy, no zero-fill first.
            self.write_data(phys * bs, data[(lo - offset) as usize..(hi - offset) as usize].to_vec());
            return Ok(());
        }
        let piece = &data[(lo - offset) as usize..(hi - offset) as usize];
        if fresh && lo == start {
            // New blocks from their start: the data, then zeros to the
            // block's end (no zero-fill of what the data covers).
            let mut buf = Vec::with_capacity((n * bs) as usize);
            buf.extend_from_slice(piece);
            buf.resize((n * bs) as usize, 0);
            self.write_data(phys * bs, buf);
            return Ok(());
        }
        let mut buf = vec![0u8; (n * bs) as usize];
        let partial_head = lo > start;
        let partial_tail = hi < stop;
        if !fresh && partial_head {
            self.read_data(phys * bs, &mut buf[..bs as usize])?;
        }
        if !fresh && partial_tail {
            let at = ((n - 1) * bs) as usize;
            self.read_data((phys + n - 1) * bs, &mut buf[at..])?;
        }
        buf[(lo - start) as usize..(hi - start) as usize].copy_from_slice(piece);
        self.write_data(phys * bs, buf);
        Ok(())
    }
}

fn end_of(e: &Extent) -> u64 {
    u64::from(e.logical) + u64::from(e.len)
}
