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

/// Most blocks mapped by one write-back transaction: 32 MiB of 4 KiB
/// blocks, a size the allocator treats as one stream (it normalizes
/// requests to at most 8 MiB windows and takes longer runs piece by piece)
/// and that bounds the copy a transaction queues.
const MAX_RUN: u64 = 8192;

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
        })
    }

    /// Maps and writes one run, then lets its pages and the reservation
    /// it no longer needs go.
    fn write_run(&self, ino: u32, run: Run) -> Result<()> {
        let bs = u64::from(self.geo.block_size);
        let blocks = run.data.len() as u64 / bs;
        let mut txn = Txn::begin(self)?;
        txn.under_inode_lock();
        txn.claim_reserved(run.reserved);
        let mut inode = txn.inode(ino)?;
        txn.write_range(&mut inode, run.lblk * bs, &run.data)?;
        let covered = if run.last {
            run.size
        } else {
            run.size.min((run.lblk + blocks) * bs)
        };
        if covered > inode.size() {
            inode.raw.set_size(covered);
        }
        if let Some(t) = run.time {
            set_times(&mut inode.raw, t, false);
        }
        txn.write_inode(&mut inode)?;
        let shape = TreeShape::of(&inode);
        let pending = txn.commit_deferring_data()?;
        self.release_run(ino, run.lblk, blocks, shape);
        pending.write()
    }

    /// Drops the written pages and shrinks the file's reservation to what
    /// its remaining pages need under the tree's new shape.
    fn release_run(&self, ino: u32, lblk: u64, blocks: u64, shape: TreeShape) {
        let d = &self.delalloc;
        let mut st = d.state.lock();
        let Some(file) = st.files.get_mut(&ino) else {
            return;
        };
        let mut freed = 0;
        for b in lblk..lblk + blocks {
            freed += file.pages.remove(&b).map_or(0, |p| p.len());
        }
        let want = file.settle(shape, self.geo.block_size);
        let give_back = file.reserved.saturating_sub(want);
        file.reserved -= give_back;
        let empty = file.pages.is_empty();
        st.reserved -= give_back;
        st.bytes -= freed;
        if empty {
            let f = st.files.remove(&ino).expect("present");
            st.release(&f);
        }
        d.files.store(st.files.len(), Ordering::Release);
    }
}
