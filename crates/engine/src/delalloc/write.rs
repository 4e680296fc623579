//! The delayed write: pages held, blocks reserved, nothing allocated.

use std::collections::btree_map::Entry;
use std::sync::atomic::Ordering;

use ext4kit_format::features::IncompatFeatures;

use super::reserve::{TreeShape, cluster_reservation, reservation};
use super::{Delalloc, DirtyFile};
use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// What a write into held-or-unmapped blocks needs.
struct Plan {
    first: u64,
    end_block: u64,
    end: u64,
}

impl Filesystem {
    /// True when this open delays allocation for `inode`: the option is
    /// on, the image is writable (the direct path reports why not), data
    /// is not journaled or written synchronously, and the file is
    /// extent-mapped with its body outside the inode. Block-mapped (ext2/3)
    /// files and inline bodies take the direct path.
    fn delays(&self, inode: &Inode) -> bool {
        let f = &self.geo.features;
        self.opts.alloc.delalloc
            && !self.read_only_reason.is_some()
            && !self.opts.sync_writes
            && !self.journals_data()
            && f.incompat.contains(IncompatFeatures::EXTENTS)
            && inode.uses_extents()
            && !inode.has_inline_data()
            && !self.may_inline.contains(inode.ino)
    }

    /// Writes `data` at `offset` of `ino` as held pages when every block
    /// it touches is unmapped (or already held), or all but those at its
    /// start that end in the file's last mapped block, which are written
    /// in place ([`tail_split`]); `Ok(None)` leaves the
    /// write to the direct path, with none of the file's pages held any
    /// more. The caller holds the file's inode lock exclusive.
    ///
    /// # Errors
    /// As [`Filesystem::write`]; [`Error::NoSpace`] when the reservation
    /// does not fit, nothing changed.
    pub(crate) fn write_delayed(&self, ino: u32, offset: u64, data: &[u8]) -> Result<Option<usize>> {
        let mut inode = self.inode_on_disk(ino)?;
        // A write of half the hold limit or more already tells the
        // allocator its size, and holding it would overrun the limit.
        let large = data.len() >= self.opts.alloc.delalloc_bytes / 2;
        if data.is_empty() || large || !self.delays(&inode) {
            self.flush_locked(ino)?;
            return Ok(None);
        }
        let seen = {
            let mut v = inode.clone();
            self.delalloc.overlay(&mut v, self.geo.block_size);
            v
        };
        seen.require_regular()?;
        crate::ops::flags::check_write(&seen, offset)?;
        let end = offset.checked_add(data.len() as u64).ok_or(Error::FileTooBig)?;
        let bs = u64::from(self.geo.block_size);
        let plan = Plan {
            first: offset / bs,
            end_block: end.div_ceil(bs),
            end,
        };
        self.check_file_end(&seen, end)?;
        let mapped = self.map_range(&inode, plan.first, plan.end_block - plan.first)?;
        if mapped.is_empty() {
            let r = self.reserve_retrying(&mut inode, &plan)?;
            self.fill(ino, &plan, offset, data, r)?;
            return Ok(Some(data.len()));
        }
        let Some(k) = tail_split(&mapped, &plan, inode.size().div_ceil(bs)) else {
            // Mapped blocks (data, or unwritten extents) go direct, and
            // the direct path sees the whole file on disk.
            self.flush_locked(ino)?;
            return Ok(None);
        };
        // The write starts in the file's mapped last block (an append
        // after a write-back): that block is written in place, the rest
        // held. Space for the rest is reserved first, so that the only
        // step that can fail after the direct write is none.
        let (split, rest) = data.split_at((k * bs - offset) as usize);
        let suffix = Plan { first: k, ..plan };
        let r = self.reserve_retrying(&mut inode, &suffix)?;
        if let Err(e) = self.write_direct_locked(ino, offset, split) {
            self.unreserve(ino, &r);
            return Err(e);
        }
        self.fill(ino, &suffix, k * bs, rest, r)?;
        Ok(Some(data.len()))
    }

    /// [`Self::reserve`], writing the file's held pages back once to give
    /// back their tree-block estimate when the space is short.
    fn reserve_retrying(&self, inode: &mut Inode, plan: &Plan) -> Result<Reserved> {
        let unmapped = self.unmapped_clusters(inode, plan)?;
        match self.reserve(inode, plan, &unmapped) {
            Err(Error::NoSpace) if self.delalloc.holds(inode.ino) => {
                self.flush_locked(inode.ino)?;
                *inode = self.inode_on_disk(inode.ino)?;
                // The write-back mapped clusters the pages shared.
                let unmapped = self.unmapped_clusters(inode, plan)?;
                self.reserve(inode, plan, &unmapped)
            }
            r => r,
        }
    }

    /// Under bigalloc, the logical clusters of `plan`'s blocks in which
    /// `inode` maps no block: a page there needs a cluster of its own
    /// (`ext4_da_map_blocks` asks the extent tree, then the pending
    /// clusters, before it reserves one). Empty without bigalloc.
    fn unmapped_clusters(&self, inode: &Inode, plan: &Plan) -> Result<Vec<u64>> {
        let bits = self.geo.cluster_bits;
        if bits == 0 {
            return Ok(Vec::new());
        }
        let (c0, c1) = (plan.first >> bits, (plan.end_block - 1) >> bits);
        let mapped = self.map_range(inode, c0 << bits, (c1 + 1 - c0) << bits)?;
        Ok((c0..=c1)
            .filter(|&c| {
                let (lo, hi) = (c << bits, (c + 1) << bits);
                !mapped.iter().any(|r| r.logical < hi && r.logical + r.len > lo)
            })
            .collect())
    }

    /// Reserves the blocks `plan`'s pages need; `unmapped`: the clusters
    /// of its blocks the file maps nothing in (bigalloc).
    fn reserve(&self, inode: &Inode, plan: &Plan, unmapped: &[u64]) -> Result<Reserved> {
        // Under the writer lock no transaction is between taking blocks and
        // publishing the free count, so the count read here is exact.
        let _writer = self.writer.lock();
        // An unlink may have freed the inode since it was read (it does not
        // take the inode lock); pages held for a free number would show in
        // the next file to get it.
        let now = self.inode_on_disk(inode.ino)?;
        if now.raw.i_mode.get() == 0 || (now.raw.links() == 0 && !self.open_files.lock().contains_key(&inode.ino)) {
            return Err(Error::NotFound(format!("inode {}", inode.ino)));
        }
        let free = self.free_blocks_on_disk();
        let d = &self.delalloc;
        let mut st = d.state.lock();
        let held = st.reserved;
        let id = d.next_id();
        let file = st.files.entry(inode.ino).or_insert_with(|| DirtyFile {
            pages: Default::default(),
            size: inode.size(),
            time: None,
            runs: 0,
            reserved: 0,
            shape: TreeShape::of(inode),
            clusters: Default::default(),
            cluster_bits: self.geo.cluster_bits,
            id,
        });
        let new = (plan.first..plan.end_block)
            .filter(|b| !file.pages.contains_key(b))
            .count() as u64;
        let added: Vec<u64> = unmapped.iter().copied().filter(|&c| file.clusters.insert(c)).collect();
        // The runs the write touches or adjoins become one.
        let runs = file.runs + 1 - runs_meeting(&file.pages, plan.first, plan.end_block);
        let pages = file.pages.len() as u64 + new;
        let want = if file.cluster_bits == 0 {
            reservation(file.shape, pages, runs, self.geo.block_size)
        } else {
            let clusters = file.clusters.len() as u64;
            cluster_reservation(
                file.shape,
                clusters,
                pages,
                runs,
                self.geo.block_size,
                file.cluster_bits,
            )
        };
        let more = want.saturating_sub(file.reserved);
        // ext4's own reserve stays for write-back's tree blocks
        // (`ext4_da_reserve_space` claims with no `EXT4_MB_USE_RESERVED`).
        if more > free.saturating_sub(held + self.resv_blocks()) {
            for c in &added {
                file.clusters.remove(c);
            }
            if file.pages.is_empty() {
                st.files.remove(&inode.ino);
            }
            return Err(Error::NoSpace);
        }
        file.reserved += more;
        st.reserved += more;
        d.files.store(st.files.len(), Ordering::Release);
        Ok(Reserved { more, runs, new, added })
    }

    /// Gives back a reservation whose write failed.
    fn unreserve(&self, ino: u32, r: &Reserved) {
        let d = &self.delalloc;
        let mut st = d.state.lock();
        let Some(file) = st.files.get_mut(&ino) else {
            return;
        };
        file.reserved -= r.more;
        for c in &r.added {
            file.clusters.remove(c);
        }
        let empty = file.pages.is_empty();
        st.reserved -= r.more;
        if empty {
            st.files.remove(&ino);
        }
        d.files.store(st.files.len(), Ordering::Release);
    }

    /// Stores the pages of a write whose space `r` reserved.
    ///
    /// # Errors
    /// [`Error::NotFound`] when an unlink freed the inode since the
    /// reservation (freeing dropped the reservation with the file).
    fn fill(&self, ino: u32, plan: &Plan, offset: u64, data: &[u8], r: Reserved) -> Result<()> {
        let bs = u64::from(self.geo.block_size);
        let mut st = self.delalloc.state.lock();
        let file = st
            .files
            .get_mut(&ino)
            .ok_or_else(|| Error::NotFound(format!("inode {ino}")))?;
        for lblk in plan.first..plan.end_block {
            let (start, stop) = (lblk * bs, (lblk + 1) * bs);
            let (lo, hi) = (start.max(offset), stop.min(plan.end));
            let piece = &data[(lo - offset) as usize..(hi - offset) as usize];
            match file.pages.entry(lblk) {
                // A whole new block: one copy, no zero-fill first.
                Entry::Vacant(v) if piece.len() as u64 == bs => {
                    v.insert(piece.into());
                }
                e => {
                    let page = e.or_insert_with(|| vec![0u8; bs as usize].into_boxed_slice());
                    page[(lo - start) as usize..(hi - start) as usize].copy_from_slice(piece);
                }
            }
        }
        file.size = file.size.max(plan.end);
        file.time = Some(clock::now());
        file.runs = r.runs;
        st.bytes += (r.new * bs) as usize;
        Ok(())
    }
}

/// What [`Filesystem::reserve`] took.
struct Reserved {
    more: u64,
    runs: u64,
    new: u64,
    /// Clusters this write added to the file's pending ones.
    added: Vec<u64>,
}

/// The block at which a write that starts in mapped blocks becomes
/// unmapped for good: `Some(k)` when the mapped runs cover the write's
/// blocks from its first up to `k` without a gap, nothing after `k` is
/// mapped, and `k` does not pass the last block the size on disk covers
/// (so the direct part cannot move the size over held pages).
fn tail_split(mapped: &[crate::Run], plan: &Plan, disk_blocks: u64) -> Option<u64> {
    let mut next = plan.first;
    for r in mapped {
        if r.logical > next {
            return None;
        }
        next = next.max(r.logical + r.len);
    }
    (next < plan.end_block && next <= disk_blocks).then_some(next)
}

/// Runs of held pages that overlap `first..end` or adjoin it.
fn runs_meeting(pages: &std::collections::BTreeMap<u64, Box<[u8]>>, first: u64, end: u64) -> u64 {
    let lo = first.saturating_sub(1);
    let mut n = 0;
    for &b in pages.range(lo..=end).map(|(b, _)| b) {
        if b == lo || !pages.contains_key(&(b - 1)) {
            n += 1;
        }
    }
    n
}

impl Delalloc {
    /// True when held pages exceed `limit` bytes: time to write back.
    pub(crate) fn over(&self, limit: usize) -> bool {
        self.files.load(Ordering::Acquire) != 0 && self.bytes() > limit
    }
}
