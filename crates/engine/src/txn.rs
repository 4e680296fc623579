//! Transactions: the one write path (DESIGN.md, "one write path"). Every
//! metadata change is made to a copy of the block inside a [`Txn`]; group
//! descriptors and superblock counters are changed in the transaction's
//! overlay. [`Txn::commit`] writes file data first, then the metadata with
//! fresh checksums (bitmaps, descriptors, superblock), then flushes — the
//! `data=ordered` order: data goes to the device at commit, metadata to
//! the write-back cache (`writeback`), which writes it later; the flush
//! comes with [`Filesystem::sync`] or, with `sync_writes`, after every
//! commit). Dropping an uncommitted transaction changes nothing,
//! so an operation that fails half-way (no space, a name that exists) leaves
//! the image as it was. Without a journal the commit writes in place; the
//! journal issue puts the jbd2 log between the overlay and the device.
//! [`Txn::commit_deferring_data`] leaves the file data to be written after
//! the writer lock is released (see [`crate::ordered`]).

use std::cell::Cell;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ext4kit_format::group_desc::{RawGroupDesc, bitmap_checksum};
use ext4kit_format::superblock::RawSuperblock;
use parking_lot::MutexGuard;

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;

/// One open transaction. Writers are serialized: a `Txn` holds the
/// file system's writer lock until it is committed or dropped.
pub(crate) struct Txn<'a> {
    pub(crate) fs: &'a Filesystem,
    _writer: MutexGuard<'a, ()>,
    /// This transaction's copies of the metadata blocks it changes, shared
    /// with the cache once published: a block is copied once, when the
    /// transaction first writes to it, and never again on its way out.
    blocks: BTreeMap<u64, Arc<[u8]>>,
    groups: BTreeMap<u32, RawGroupDesc>,
    data: Vec<(u64, Vec<u8>)>,
    /// Bytes in `data`, to bound what a batch queues.
    data_bytes: usize,
    /// Counts calls that may change what this transaction will write: a
    /// batch compares it before and after an operation to tell a failure
    /// that changed nothing (the transaction stays usable) from one that
    /// left half an operation behind.
    changes: u64,
    free_blocks_delta: i64,
    free_inodes_delta: i64,
    /// The superblock as this transaction changes it (orphan list head,
    /// state, features), when it does.
    sb: Option<RawSuperblock>,
    /// This is the unmount transaction: it restores the clean state
    /// rather than marking the file system in use.
    closing: bool,
    /// Block ranges freed here: they leave the write-back set at commit.
    freed: Vec<(u64, u64)>,
    /// Inodes whose records this transaction wrote: an fsync of one of
    /// them needs the journal transaction this one joins.
    inodes: Vec<u32>,
    /// No other thread's file data can be in flight to blocks this
    /// transaction reads, frees or writes (see [`Txn::quiesce_data`]).
    data_quiet: Cell<bool>,
    /// The open counts, held from the first [`Txn::is_open`] until the
    /// commit is published, so that an open either counts before the
    /// check or sees the committed unlink.
    opens: Option<MutexGuard<'a, HashMap<u32, u32>>>,
    /// Groups whose buddies this transaction built or changed: they may
    /// hold its allocations, so they are dropped if it never commits.
    buddies_touched: Vec<u32>,
    /// Free block ranges this transaction must not hand out (see
    /// [`Txn::hold_off`]); the allocator's views show them taken.
    held: Vec<(u64, u64)>,
    /// Blocks reserved for delayed allocation that this transaction may
    /// take: the reservation of the file it writes back ([`Txn::claim_reserved`]).
    claim: u64,
    /// May take blocks from ext4's own reserve ([`Filesystem::resv_blocks`]),
    /// as the kernel's `EXT4_MB_USE_RESERVED` allocations may: set by
    /// [`Txn::use_reserve`].
    reserve_ok: bool,
    /// Quota work besides the inodes written ([`crate::quota`]).
    pub(crate) quota: crate::quota::Pending,
    /// Name changes and ineligible changes for fast commits
    /// (`journal::fast_commit::track`).
    pub(crate) fc: crate::journal::fast_commit::FcNotes,
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        self.release_held();
        if !self.buddies_touched.is_empty() {
            let mut mb = self.fs.mb.lock();
            for g in self.buddies_touched.drain(..) {
                mb.cache.invalidate(g);
            }
        }
    }
}

impl Filesystem {
    /// Runs `body` in a transaction of its own and commits it: one public
    /// operation. On error the transaction is dropped (the image is as it
    /// was, the writer lock released) before the error is returned.
    pub(crate) fn in_txn<T>(&self, body: impl FnOnce(&mut Txn<'_>) -> Result<T>) -> Result<T> {
        let mut txn = Txn::begin(self)?;
        let v = body(&mut txn)?;
        txn.commit()?;
        Ok(v)
    }
}

impl<'a> Txn<'a> {
    /// Opens a transaction, refusing when the image can only be read.
    pub(crate) fn begin(fs: &'a Filesystem) -> Result<Self> {
        if fs.read_only_reason.is_some() {
            return Err(Error::ReadOnly);
        }
        Ok(Self {
            fs,
            _writer: fs.writer.lock(),
            blocks: BTreeMap::new(),
            groups: BTreeMap::new(),
            data: Vec::new(),
            data_bytes: 0,
            changes: 0,
            free_blocks_delta: 0,
            free_inodes_delta: 0,
            sb: None,
            closing: false,
            inodes: Vec::new(),
            freed: Vec::new(),
            data_quiet: Cell::new(false),
            opens: None,
            buddies_touched: Vec::new(),
            held: Vec::new(),
            claim: 0,
            reserve_ok: false,
            quota: Default::default(),
            fc: Default::default(),
        })
    }

    /// Block `block` as this transaction sees it.
    pub(crate) fn block(&self, block: u64, owner: u32) -> Result<Arc<[u8]>> {
        match self.blocks.get(&block) {
            Some(b) => Ok(b.clone()),
            None => self.fs.meta_block(block, owner),
        }
    }

    /// Calls `f` on block `block` as this transaction sees it, without
    /// copying a block this transaction holds.
    pub(crate) fn with_block<R>(&self, block: u64, owner: u32, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        match self.blocks.get(&block) {
            Some(b) => Ok(f(b)),
            None => Ok(f(&self.fs.meta_block(block, owner)?)),
        }
    }

    /// True when this transaction holds its own copy of `block`: it was
    /// read (and checked) or written earlier in the transaction.
    pub(crate) fn holds(&self, block: u64) -> bool {
        self.blocks.contains_key(&block)
    }

    /// Write access to block `block` (`ext4_journal_get_write_access`): the
    /// first call copies it into the transaction.
    pub(crate) fn block_mut(&mut self, block: u64, owner: u32) -> Result<&mut [u8]> {
        self.changes += 1;
        if !self.blocks.contains_key(&block) {
            let cur = self.fs.meta_block(block, owner)?;
            self.blocks.insert(block, Arc::from(&cur[..]));
        }
        let lost = || Error::inconsistent(Location::Block { block, inode: owner }, "lost a transaction block");
        let b = self.blocks.get_mut(&block).ok_or_else(lost)?;
        // A copy handed out by `block` is still alive: it keeps what it saw.
        if Arc::get_mut(b).is_none() {
            *b = Arc::from(&b[..]);
        }
        Arc::get_mut(b).ok_or_else(lost)
    }

    /// A block this transaction fills from scratch (a newly allocated
    /// directory, extent or bitmap block): no read needed.
    pub(crate) fn new_block(&mut self, block: u64) -> &mut [u8] {
        let bs = self.fs.block_size();
        self.put_block(block, std::iter::repeat_n(0, bs).collect())
    }

    /// Block `block` as this transaction writes it, with `bytes` (a whole
    /// block) for contents.
    pub(crate) fn put_block(&mut self, block: u64, bytes: Arc<[u8]>) -> &mut [u8] {
        self.changes += 1;
        let b = match self.blocks.entry(block) {
            Entry::Occupied(mut held) => {
                held.insert(bytes);
                held.into_mut()
            }
            Entry::Vacant(free) => free.insert(bytes),
        };
        // Fresh: no other holder yet.
        match Arc::get_mut(b) {
            Some(b) => b,
            None => unreachable!("a block just inserted has one owner"),
        }
    }

    /// Drops this transaction's copy of `block`, which the caller has just
    /// freed: its pending contents must not reach the device, where the
    /// block may be reused for file data later in the same transaction.
    pub(crate) fn forget_block(&mut self, block: u64) {
        self.changes += 1;
        self.blocks.remove(&block);
    }

    /// Records that `len` blocks from `start` were freed: any copy this
    /// transaction holds is dropped (the block may come back as file data,
    /// which a stale metadata copy must never overwrite), and at commit
    /// they leave the write-back set.
    pub(crate) fn note_freed(&mut self, start: u64, len: u64) {
        self.quiesce_data();
        let held: Vec<u64> = self.blocks.range(start..start + len).map(|(b, _)| *b).collect();
        for b in held {
            self.blocks.remove(&b);
        }
        self.freed.push((start, len));
    }

    /// Notes that group `g`'s buddy now reflects this transaction.
    pub(crate) fn note_buddy_touched(&mut self, g: u32) {
        if !self.buddies_touched.contains(&g) {
            self.buddies_touched.push(g);
        }
    }

    /// Keeps the free ranges `ranges` out of every allocation of this
    /// transaction: a defrag's destinations for its later chunks, which
    /// the extent-tree blocks of this chunk must not land in. The buddies
    /// of their groups are dropped now (to be rebuilt with the ranges
    /// taken) and again when the transaction ends (to show them free).
    pub(crate) fn hold_off(&mut self, ranges: &[(u64, u64)]) {
        for &(s, l) in ranges {
            self.fs.mb_forget(s, l);
        }
        self.held.extend_from_slice(ranges);
    }

    /// Ranges held off by [`Txn::hold_off`].
    pub(crate) fn held_ranges(&self) -> &[(u64, u64)] {
        &self.held
    }

    /// Block ranges freed so far in this transaction.
    pub(crate) fn freed_ranges(&self) -> &[(u64, u64)] {
        &self.freed
    }

    /// Descriptor of `group` as this transaction sees it.
    pub(crate) fn group(&self, group: u32) -> Result<RawGroupDesc> {
        match self.groups.get(&group) {
            Some(d) => Ok(*d),
            None => self.fs.group_desc(group),
        }
    }

    /// Replaces the descriptor of `group` (its checksum is set at commit).
    pub(crate) fn set_group(&mut self, group: u32, desc: RawGroupDesc) {
        self.changes += 1;
        self.groups.insert(group, desc);
    }

    /// Records a change of the free-block and free-inode totals.
    pub(crate) fn count(&mut self, blocks: i64, inodes: i64) {
        self.changes += 1;
        self.free_blocks_delta += blocks;
        self.free_inodes_delta += inodes;
    }

    /// Lets this transaction take up to `blocks` of the blocks reserved
    /// for delayed allocation: it writes back the file they are kept for.
    /// Write-back may also dip into ext4's own reserve (the kernel maps
    /// delayed pages with `EXT4_GET_BLOCKS_METADATA_NOFAIL`), so the
    /// extent-tree blocks a reservation underestimated are still found.
    pub(crate) fn claim_reserved(&mut self, blocks: u64) {
        self.claim = blocks;
        self.reserve_ok = true;
    }

    /// Lets this transaction take blocks from ext4's own reserve
    /// ([`Filesystem::resv_blocks`]): it splits extents where running
    /// out of space would leave a file half changed (punching a hole,
    /// shifting a range; the kernel's `ext4_force_split_extent_at` with
    /// `nofail`) or replays what a journal already promised.
    pub(crate) fn use_reserve(&mut self) {
        self.reserve_ok = true;
    }

    /// Refuses to take `n` more blocks when that would leave fewer free
    /// than must stay (`ext4_has_free_clusters`): the blocks delayed
    /// allocation has reserved, which only write-back takes
    /// (`ext4_claim_free_clusters`), so write-back never finds them gone;
    /// and, unless [`Txn::use_reserve`] allows it, ext4's own reserve,
    /// kept for extent splits when data has filled the rest. The root
    /// reserve (`s_r_blocks_count`) is not kept here: the library acts
    /// for a caller with `CAP_SYS_RESOURCE`, as a root process on a
    /// kernel mount does.
    pub(crate) fn check_unreserved(&self, n: u64) -> Result<()> {
        let held = self.fs.delalloc.reserved().saturating_sub(self.claim);
        let keep = if self.reserve_ok {
            held
        } else {
            held.saturating_add(self.fs.resv_blocks())
        };
        if keep == 0 {
            return Ok(());
        }
        if self.free_now() < keep.saturating_add(n) {
            return Err(Error::NoSpace);
        }
        Ok(())
    }

    /// Blocks an ordinary allocation may still take now: free, less what
    /// [`Txn::check_unreserved`] keeps for others.
    pub(crate) fn takeable_blocks(&self) -> u64 {
        let held = self.fs.delalloc.reserved().saturating_sub(self.claim);
        let pool = if self.reserve_ok { 0 } else { self.fs.resv_blocks() };
        self.free_now().saturating_sub(held.saturating_add(pool))
    }

    /// The free-block count with this transaction's changes.
    fn free_now(&self) -> u64 {
        self.fs
            .free_blocks_on_disk()
            .saturating_add_signed(self.free_blocks_delta)
    }

    /// The superblock as this transaction sees it.
    pub(crate) fn superblock(&self) -> RawSuperblock {
        self.sb.unwrap_or_else(|| *self.fs.sb.read())
    }

    /// Write access to the superblock's fields (free counts excepted: use
    /// [`Txn::count`]); stored with a fresh checksum at commit.
    pub(crate) fn sb_mut(&mut self) -> &mut RawSuperblock {
        self.changes += 1;
        let fs = self.fs;
        self.sb.get_or_insert_with(|| *fs.sb.read())
    }

    /// Marks this as the transaction that ends the session (see
    /// [`crate::session`]): it does not count as the session's first write.
    pub(crate) fn set_closing(&mut self) {
        self.closing = true;
    }

    /// File data to write at byte `offset` before any metadata; whole
    /// blocks, as every caller writes. With `data=journal` they are logged
    /// like metadata instead (and checkpointed later).
    pub(crate) fn write_data(&mut self, offset: u64, bytes: Vec<u8>) {
        self.changes += 1;
        let bs = self.fs.block_size();
        if self.fs.journals_data() && offset.is_multiple_of(bs as u64) && bytes.len().is_multiple_of(bs) {
            let first = offset / bs as u64;
            for (i, chunk) in bytes.chunks_exact(bs).enumerate() {
                self.blocks.insert(first + i as u64, Arc::from(chunk));
            }
            return;
        }
        self.data_bytes += bytes.len();
        self.data.push((offset, bytes));
    }

    /// How many calls so far may have changed what this transaction writes
    /// (see the field); equal counts mean nothing changed in between.
    pub(crate) fn changes(&self) -> u64 {
        self.changes
    }

    /// Bytes this transaction would write now: queued file data plus its
    /// copies of metadata blocks.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.data_bytes + self.blocks.len() * self.fs.block_size()
    }

    /// Reads `buf.len()` bytes of file data at device byte `offset` as this
    /// transaction will leave them: the device, overlaid with data queued by
    /// earlier writes in the transaction.
    pub(crate) fn read_data(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.quiesce_data();
        self.fs.read_bytes(offset, buf)?;
        let end = offset + buf.len() as u64;
        let bs = self.fs.block_size() as u64;
        let logged = self
            .blocks
            .range(offset / bs..end.div_ceil(bs))
            .filter(|_| self.fs.journals_data())
            .map(|(b, v)| (b * bs, &v[..]));
        for (off, bytes) in self.data.iter().map(|(o, v)| (*o, &v[..])).chain(logged) {
            let (lo, hi) = (offset.max(off), end.min(off + bytes.len() as u64));
            if lo < hi {
                buf[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&bytes[(lo - off) as usize..(hi - off) as usize]);
            }
        }
        Ok(())
    }

    /// Writes everything: data, then metadata with checksums, then the
    /// superblock; flushes the device when asked to; publishes the new state.
    pub(crate) fn commit(mut self) -> Result<()> {
        self.write_out()
    }

    /// Commits what this transaction holds and keeps it open, empty, with
    /// the writer lock still held: a batch's intermediate commit. On error
    /// the image may hold part of the writes (as with [`Txn::commit`]) and
    /// the transaction must be dropped.
    pub(crate) fn commit_and_continue(&mut self) -> Result<()> {
        self.write_out()
    }

    fn write_out(&mut self) -> Result<()> {
        self.quota_settle()?;
        let fs = self.fs;
        // In the order queued (a later write to the same bytes wins), runs
        // of adjacent pieces in one request each.
        let data = self.take_data();
        write_runs(fs, data.iter().map(|(off, b)| (*off, b.as_slice())))?;
        self.write_meta()?;
        fs.write_back_if_full()?;
        if fs.opts.sync_writes {
            fs.sync_committed()?;
        }
        Ok(())
    }

    /// Commits the metadata and leaves the file data to the caller, to be
    /// written once the writer lock is released (see [`crate::ordered`]).
    /// With `sync_writes`, or when other threads' data may be in flight to
    /// these blocks, this is [`Txn::commit`] and nothing is left.
    pub(crate) fn commit_deferring_data(mut self) -> Result<crate::ordered::PendingData<'a>> {
        if self.fs.opts.sync_writes || !self.data_quiet.get() {
            self.write_out()?;
            return Ok(crate::ordered::PendingData::none(self.fs));
        }
        self.quota_settle()?;
        let data = self.take_data();
        let pending = crate::ordered::PendingData::new(self.fs, data);
        self.write_meta()?;
        Ok(pending)
    }

    /// The queued file data, after any other thread's in flight.
    fn take_data(&mut self) -> Vec<(u64, Vec<u8>)> {
        self.data_bytes = 0;
        if !self.data.is_empty() {
            self.quiesce_data();
        }
        std::mem::take(&mut self.data)
    }

    /// Marks this transaction as run under the exclusive inode lock of the
    /// one file whose data it touches: no other thread's data can be in
    /// flight there, and its own may be deferred.
    pub(crate) fn under_inode_lock(&mut self) {
        self.data_quiet.set(true);
    }

    /// Waits until no file data of another thread is in flight (once: none
    /// can start while this transaction holds the writer lock). Needed
    /// before reading or freeing data blocks of a file whose inode lock
    /// this transaction does not hold, and before writing data there.
    fn quiesce_data(&self) {
        if !self.data_quiet.get() {
            drop(self.fs.data_in_flight.write());
            self.data_quiet.set(true);
        }
    }

    /// Notes that the record of `ino` changed here.
    pub(crate) fn inode_written(&mut self, ino: u32) {
        self.inodes.push(ino);
    }

    /// The inodes whose records this transaction wrote (repeats kept).
    pub(crate) fn written_inodes(&self) -> &[u32] {
        &self.inodes
    }

    /// True while `ino` is open; from here to the end of the transaction
    /// no open or release can change that.
    pub(crate) fn is_open(&mut self, ino: u32) -> bool {
        let fs = self.fs;
        self.opens
            .get_or_insert_with(|| fs.open_files.lock())
            .contains_key(&ino)
    }

    /// Whether `ino` is open now, without holding the open counts to the
    /// end of the transaction as [`Txn::is_open`] does: for choices that
    /// need no guarantee (whether to keep a preallocation window).
    pub(crate) fn is_open_now(&self, ino: u32) -> bool {
        match &self.opens {
            Some(held) => held.contains_key(&ino),
            None => self.fs.open_files.lock().contains_key(&ino),
        }
    }

    /// Publishes the metadata: descriptors, superblock, blocks.
    fn write_meta(&mut self) -> Result<()> {
        let fs = self.fs;
        let groups = std::mem::take(&mut self.groups);
        let mut finished = Vec::with_capacity(groups.len());
        for (g, desc) in groups {
            finished.push((g, self.finish_group(g, desc)?));
        }
        let sb = self.finish_superblock();
        {
            let mut live = fs.groups.write();
            for (g, d) in finished {
                live[g as usize] = d;
            }
            *fs.sb.write() = sb;
        }
        let freed = std::mem::take(&mut self.freed);
        let inodes = std::mem::take(&mut self.inodes);
        let fc = std::mem::take(&mut self.fc);
        fs.publish(std::mem::take(&mut self.blocks), &freed, &inodes, sb, fc)?;
        self.sb = None;
        self.free_blocks_delta = 0;
        self.free_inodes_delta = 0;
        fs.session.committed(self.closing);
        self.buddies_touched.clear();
        self.release_held();
        self.opens = None;
        Ok(())
    }

    /// Ends the holds of [`Txn::hold_off`]: buddies built while they were
    /// in force show those blocks taken, so they are dropped.
    fn release_held(&mut self) {
        for (s, l) in std::mem::take(&mut self.held) {
            self.fs.mb_forget(s, l);
        }
    }

    /// Sets the bitmap and descriptor checksums of `group` and stores the
    /// descriptor into its table block.
    fn finish_group(&mut self, g: u32, mut d: RawGroupDesc) -> Result<RawGroupDesc> {
        let fs = self.fs;
        let geo = &fs.geo;
        if geo.features.metadata_csum() {
            let bb = self.block(d.block_bitmap(), 0)?;
            let c = bitmap_checksum(fs.csum_seed, &bb, geo.blocks_per_group as usize / 8, geo.desc_size);
            d.set_block_bitmap_csum(c);
            let ib = self.block(d.inode_bitmap(), 0)?;
            let c = bitmap_checksum(fs.csum_seed, &ib, geo.inodes_per_group as usize / 8, geo.desc_size);
            d.set_inode_bitmap_csum(c);
        }
        let ds = usize::from(geo.desc_size);
        let uuid = fs.sb.read().s_uuid;
        let c = d.compute_checksum(&geo.features, fs.csum_seed, &uuid, g, ds);
        d.bg_checksum.set(c);
        let block = fs.group_desc_block(g);
        let off = (g % geo.descs_per_block()) as usize * ds;
        let buf = self.block_mut(block, 0)?;
        d.encode_into(&mut buf[off..off + ds]);
        Ok(d)
    }

    fn finish_superblock(&self) -> RawSuperblock {
        let mut sb = self.superblock();
        if !self.closing && !self.fs.session.in_use() {
            crate::session::mark_in_use(&mut sb, self.fs.opts.count_mount, self.fs.journaling);
        }
        let free = u64::from(sb.s_free_blocks_count_lo.get()) | (u64::from(sb.s_free_blocks_count_hi.get()) << 32);
        let free = free.saturating_add_signed(self.free_blocks_delta);
        sb.s_free_blocks_count_lo.set(free as u32);
        sb.s_free_blocks_count_hi.set((free >> 32) as u32);
        let inodes = i64::from(sb.s_free_inodes_count.get()) + self.free_inodes_delta;
        sb.s_free_inodes_count.set(inodes.clamp(0, i64::from(u32::MAX)) as u32);
        sb.s_wtime.set(crate::clock::now().secs as u32);
        self.fs.errors.fold_into(&mut sb);
        sb.set_checksum();
        sb
    }
}

/// Largest device write [`write_runs`] gathers from pieces; larger pieces
/// are written as they are. A device that cannot gather joins the pieces
/// ([`crate::BlockDevice::write_gather`]), so this also bounds that copy.
const MAX_RUN: usize = 256 << 10;

/// Writes `(offset, bytes)` pieces in the order given, gathering a piece
/// that starts where the one before it ended into the same request (up to
/// [`MAX_RUN`] bytes): a batch's many inode-table blocks and small files go
/// out in a few larger writes instead of one system call each. Order is
/// kept, so of two pieces covering the same bytes the later one still wins.
pub(crate) fn write_runs<'b>(fs: &Filesystem, pieces: impl Iterator<Item = (u64, &'b [u8])>) -> Result<()> {
    write_runs_on(fs, fs.dev.as_ref(), pieces)
}

/// [`write_runs`] to `dev` (an external journal's device).
pub(crate) fn write_runs_on<'b>(
    fs: &Filesystem,
    dev: &dyn crate::device::BlockDevice,
    pieces: impl Iterator<Item = (u64, &'b [u8])>,
) -> Result<()> {
    let mut run: Vec<&[u8]> = Vec::new();
    let (mut start, mut len) = (0u64, 0usize);
    let flush = |start: u64, run: &[&[u8]]| {
        dev.write_gather(start, run)
            .map_err(|source| fs.write_failed(start, source))
    };
    for (off, bytes) in pieces {
        if run.is_empty() || start + len as u64 != off || len + bytes.len() > MAX_RUN {
            flush(start, &run)?;
            run.clear();
            (start, len) = (off, 0);
        }
        run.push(bytes);
        len += bytes.len();
    }
    flush(start, &run)
}
