//! Write-back of held pages (`ext4_writepages`): each run of logically
//! contiguous pages, up to [`MAX_RUN`] blocks, is mapped in one
//! transaction through the ordinary write path, so the allocator sees the
//! whole run as one request, and its data goes to the device before the
//! metadata that points at it (`data=ordered`, [`crate::ordered`]). The
//! size on disk then advances over what is written, never past a page
//! still held.

use std::sync::atomic::Ordering;

use super::reserve::TreeShape;
use crate::error::Result;
use crate::fs::Filesystem;
use crate::inode::write::set_times;
use crate::txn::Txn;

/// Most blocks mapped by one write-back transaction: 8 MiB of 4 KiB
/// blocks, mballoc's largest normalized request, so the allocator still
/// sees a stream's full size class and the next run goes on from the
/// window it left. Larger runs bought nothing but the copy: a 32 MiB run
/// buffer is fresh memory each time (2× the CPU per block of a 256 MiB
/// write-back, `alloc_cpu` example).
const MAX_RUN: u64 = 2048;

/// One run taken off a file for write-back.
struct Run {
    lblk: u64,
    data: Vec<u8>,
    /// The file's size with its held pages.
    size: u64,
    time: Option<ext4kit_format::inode::Timestamp>,
    /// No page of the file lies beyond this run.
    last: bool,
    reserved: u64,
    /// The holding it was taken from ([`super::DirtyFile::id`]).
    id: u64,
}

impl Filesystem {
    /// Writes back `ino`'s held pages, taking its inode lock.
    ///
    /// # Errors
    /// As [`Filesystem::write`]; the pages not yet written stay held.
    pub(crate) fn flush_file(&self, ino: u32) -> Result<()> {
        if !self.delalloc.holds(ino) {
            return Ok(());
        }
        let _file = self.inode_locks.write(ino);
        self.flush_locked(ino)
    }

    /// Writes back every file's held pages, one file at a time.
    ///
    /// # Errors
    /// The first failure; the other files are still written back.
    pub(crate) fn flush_all(&self) -> Result<()> {
        let mut first = None;
        for ino in self.delalloc.inodes() {
            if let Err(e) = self.flush_file(ino) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// [`Self::flush_file`] with the inode lock held by the caller.
    pub(crate) fn flush_locked(&self, ino: u32) -> Result<()> {
        while let Some(run) = self.take_run(ino) {
            self.write_run(ino, run)?;
        }
        Ok(())
    }

    /// The lowest run of `ino`'s held pages, copied out (they stay held
    /// until their transaction commits).
    fn take_run(&self, ino: u32) -> Option<Run> {
        let st = self.delalloc.state.lock();
        let file = st.files.get(&ino)?;
        let (&lblk, _) = file.pages.first_key_value()?;
        let bs = self.geo.block_size as usize;
        let held = file.pages.range(lblk..lblk + MAX_RUN).count();
        let mut data = Vec::with_capacity(held * bs);
        let mut next = lblk;
        for (&b, page) in file.pages.range(lblk..lblk + MAX_RUN) {
            if b != next {
                break;
            }
            data.extend_from_slice(page);
            next += 1;
        }
        Some(Run {
            lblk,
            data,
            size: file.size,
            time: file.time,
            last: file.pages.range(next..).next().is_none(),
            reserved: file.reserved,
            id: file.id,
        })
    }

    /// Maps and writes one run, then lets its pages and the reservation
    /// it no longer needs go.
    fn write_run(&self, ino: u32, run: Run) -> Result<()> {
        let bs = u64::from(self.geo.block_size);
        let blocks = run.data.len() as u64 / bs;
        let mut txn = Txn::begin(self)?;
        if !self.delalloc.still_holds(ino, run.id, run.lblk) {
            // Freed since the run was taken (its pages went with it), and
            // perhaps given to a new file: nothing of this run may land.
            return Ok(());
        }
        txn.under_inode_lock();
        txn.claim_reserved(run.reserved);
        txn.quota.exempt = true;
        let mut inode = txn.inode(ino)?;
        // The allocator sizes its request and window from `i_size`, as
        // the kernel's does (`ext4_mb_normalize_request`): the size with
        // every held page, not the smaller one on disk.
        let on_disk = inode.size();
        inode.raw.set_size(run.size.max(on_disk));
        txn.write_range(&mut inode, run.lblk * bs, &run.data)?;
        let covered = if run.last {
            run.size
        } else {
            run.size.min((run.lblk + blocks) * bs)
        };
        inode.raw.set_size(covered.max(on_disk));
        if let Some(t) = run.time {
            set_times(&mut inode.raw, t, false);
        }
        txn.write_inode(&mut inode)?;
        // The reservation shrinks while the writer lock is still held, so
        // no reservation ever sees the run's blocks both taken and
        // reserved (which would refuse a write the space allows).
        let taken = self.take_pages(ino, run.lblk, blocks, TreeShape::of(&inode));
        match txn.commit_deferring_data() {
            Ok(pending) => {
                self.forget_if_empty(ino);
                pending.write()
            }
            Err(e) => {
                self.put_back(ino, taken);
                Err(e)
            }
        }
    }

    /// Takes the written pages off the file and shrinks its reservation to
    /// what the remaining pages need under the tree's new `shape`.
    fn take_pages(&self, ino: u32, lblk: u64, blocks: u64, shape: TreeShape) -> Taken {
        let d = &self.delalloc;
        let mut st = d.state.lock();
        let Some(file) = st.files.get_mut(&ino) else {
            return Taken::default();
        };
        let mut rest = file.pages.split_off(&lblk);
        let mut after = rest.split_off(&(lblk + blocks));
        file.pages.append(&mut after);
        let (old_shape, old_runs) = (file.shape, file.runs);
        // The run's clusters now have their physical clusters: pages left
        // in them (past a gap) take their blocks for nothing.
        let bits = file.cluster_bits;
        let mapped: Vec<u64> = (lblk >> bits..=(lblk + blocks.max(1) - 1) >> bits)
            .filter(|c| file.clusters.remove(c))
            .collect();
        let want = file.settle(shape, self.geo.block_size);
        let give_back = file.reserved.saturating_sub(want);
        file.reserved -= give_back;
        let bytes: usize = rest.values().map(|p| p.len()).sum();
        st.reserved -= give_back;
        st.bytes -= bytes;
        Taken {
            pages: rest,
            give_back,
            bytes,
            shape: old_shape,
            runs: old_runs,
            clusters: mapped,
        }
    }

    /// Restores what [`Self::take_pages`] took when the commit failed, unless
    /// the inode was freed meanwhile.
    fn put_back(&self, ino: u32, mut taken: Taken) {
        let d = &self.delalloc;
        let mut st = d.state.lock();
        let Some(file) = st.files.get_mut(&ino) else {
            return;
        };
        file.pages.append(&mut taken.pages);
        file.reserved += taken.give_back;
        (file.shape, file.runs) = (taken.shape, taken.runs);
        file.clusters.extend(taken.clusters);
        st.reserved += taken.give_back;
        st.bytes += taken.bytes;
    }

    /// Drops the file's entry once it holds nothing.
    fn forget_if_empty(&self, ino: u32) {
        let d = &self.delalloc;
        let mut st = d.state.lock();
        if st.files.get(&ino).is_some_and(|f| f.pages.is_empty()) {
            let f = st.files.remove(&ino).expect("present");
            st.release(&f);
        }
        d.files.store(st.files.len(), Ordering::Release);
    }
}

/// Pages and reservation taken off a file for a write-back transaction.
#[derive(Default)]
struct Taken {
    pages: std::collections::BTreeMap<u64, Box<[u8]>>,
    give_back: u64,
    bytes: usize,
    shape: TreeShape,
    runs: u64,
    /// Pending clusters the run mapped.
    clusters: Vec<u64>,
}
