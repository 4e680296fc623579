//! Writing fast commits at fsync (the kernel's `ext4_fc_commit`): when
//! everything the running transaction changed since the previous fast
//! commit is something a fast commit carries, the fsync writes the name
//! changes and the changed inodes' records and mappings to the
//! fast-commit area instead of logging the transaction's blocks. The
//! transaction keeps running; its full commit later supersedes the area.
//!
//! What this writer carries: the name changes `track` noted (`CREAT` of a
//! regular file, `LINK`, `UNLINK` of a name that is not the last), regular
//! files mapped by at most four extents in the inode (no tree blocks),
//! changed in data, size, times, mode or links, and the `INODE` records of
//! the directories whose names changed. A file goes as a `DEL_RANGE` per
//! hole (everything unmapped, up to `EXT_MAX_BLOCKS`), an `ADD_RANGE` per
//! extent and its `INODE` record, so the replay needs nothing of the
//! file's past mapping. (Ranges that delete a whole lone extent are
//! avoided: e2fsck 1.47's replay leaves a zero-length extent behind
//! then.) Anything else — an ineligible change (`track`), an extent tree
//! or xattr block, a superblock change beyond the counts, a journal whose
//! log is empty (jbd2 would not look at the area) — makes the fsync a full
//! commit, as the kernel's ineligible operations do.

use std::collections::HashSet;

use ext4kit_format::checksum::crc32c_raw;
use ext4kit_format::extent::{EXT4_EXT_MAGIC, Extent};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::FileType;
use ext4kit_format::journal::fast_commit::{TAG_PAD, TL_SIZE, Tag, encode};
use ext4kit_format::superblock::RawSuperblock;

use crate::error::Result;
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::journal::writer::Log;

use super::track::NameChange;

/// The fast-commit area's blocks (`j_fc_first..s_maxlen`) and how many
/// this transaction's fast commits have used (`j_fc_off`).
#[derive(Debug, Clone)]
pub(crate) struct FcArea {
    first: u32,
    end: u32,
    off: u32,
}

impl FcArea {
    /// The area `first..end`, if it has a block.
    pub(crate) fn new(first: u32, end: u32) -> Option<Self> {
        (first < end).then_some(Self { first, end, off: 0 })
    }

    /// Blocks a fast commit may still take. The area's last block is
    /// never written: jbd2's scan of the area (`fc_do_one_pass`, the
    /// kernel's and e2fsck's) reads one block past the last valid commit
    /// and runs up to `j_fc_last` = `s_maxlen` inclusive, so a valid
    /// commit in block `s_maxlen − 1` makes it read past the journal and
    /// fail the whole recovery ("corrupted journal superblock").
    fn room(&self) -> u32 {
        (self.end - self.first).saturating_sub(self.off + 1)
    }

    /// A full commit made the area's fast commits obsolete.
    pub(crate) fn reset(&mut self) {
        self.off = 0;
    }

    /// Blocks this transaction's fast commits have written.
    pub(crate) fn used(&self) -> u32 {
        self.off
    }

    /// The area's first journal block (`j_fc_first`).
    pub(crate) fn first(&self) -> u32 {
        self.first
    }
}

/// Size of a tail record (`ext4_fc_tl` and `struct ext4_fc_tail`).
const TAIL_LEN: usize = TL_SIZE + 8;
/// Half of the logical block space in one `DEL_RANGE`: the kernel's
/// replay counts the length in an `int`.
const HALF: u32 = 0x7FFF_FFFF;

/// Records laid into blocks as the kernel lays them: a record never
/// crosses a block, the rest of a block it does not fit goes to a `PAD`,
/// and the tail ends its block; the crc runs over every byte written.
struct Layout {
    bs: usize,
    blocks: Vec<Vec<u8>>,
    crc: u32,
}

impl Layout {
    fn cur(&mut self) -> &mut Vec<u8> {
        if self.blocks.last().is_none_or(|b| b.len() == self.bs) {
            self.blocks.push(Vec::with_capacity(self.bs));
        }
        self.blocks.last_mut().expect("a block was just pushed")
    }

    fn put(&mut self, bytes: &[u8]) {
        self.crc = crc32c_raw(self.crc, bytes);
        self.cur().extend_from_slice(bytes);
    }

    /// Adds `rec`, padding to the next block unless it fits before room
    /// for a tail.
    fn push(&mut self, rec: &[u8]) {
        let bs = self.bs;
        let off = self.cur().len();
        if off + rec.len() + TAIL_LEN > bs {
            let mut pad = vec![0u8; bs - off];
            pad[..2].copy_from_slice(&TAG_PAD.to_le_bytes());
            pad[2..4].copy_from_slice(&((bs - off - TL_SIZE) as u16).to_le_bytes());
            self.put(&pad);
        }
        self.put(rec);
    }

    /// Ends the commit: a tail for `tid` whose length runs to the end of
    /// the block (`ext4_fc_write_tail`).
    fn finish(mut self, tid: u32) -> Vec<Vec<u8>> {
        let off = self.cur().len();
        let mut tail = encode(&Tag::Tail { tid, crc: 0 });
        tail[2..4].copy_from_slice(&((self.bs - off - TL_SIZE) as u16).to_le_bytes());
        let crc = crc32c_raw(self.crc, &tail[..8]);
        tail[8..12].copy_from_slice(&crc.to_le_bytes());
        let bs = self.bs;
        let b = self.cur();
        b.extend_from_slice(&tail);
        b.resize(bs, 0);
        self.blocks
    }
}

/// The unmapped logical ranges around the sorted `exts`, below
/// `EXT_MAX_BLOCKS`, in pieces of at most [`HALF`] blocks.
fn holes(exts: &[Extent]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut at = 0u64;
    let ends = exts
        .iter()
        .map(|e| (u64::from(e.logical), u64::from(e.logical) + u64::from(e.len)));
    for (s, t) in ends.chain([(u64::from(u32::MAX), u64::from(u32::MAX))]) {
        while at < s {
            let n = (s - at).min(u64::from(HALF));
            out.push((at as u32, n as u32));
            at += n;
        }
        at = at.max(t);
    }
    out
}

/// The extents held in `inode`'s `i_block` when its tree is a lone root
/// of at most four; `None` otherwise.
fn root_extents(inode: &Inode) -> Option<Vec<Extent>> {
    let ib = &inode.raw.i_block;
    let magic = u16::from_le_bytes([ib[0], ib[1]]);
    let (entries, depth) = (u16::from_le_bytes([ib[2], ib[3]]), u16::from_le_bytes([ib[6], ib[7]]));
    if magic != EXT4_EXT_MAGIC || depth != 0 || entries > 4 {
        return None;
    }
    let mut out = Vec::new();
    for i in 0..usize::from(entries) {
        let e = &ib[12 + 12 * i..24 + 12 * i];
        let le32 = |o: usize| u32::from_le_bytes([e[o], e[o + 1], e[o + 2], e[o + 3]]);
        let len = u16::from_le_bytes([e[4], e[5]]);
        let (len, unwritten) = if len > 32768 { (len - 32768, true) } else { (len, false) };
        let physical = (u64::from(u16::from_le_bytes([e[6], e[7]])) << 32) | u64::from(le32(8));
        out.push(Extent {
            logical: le32(0),
            len,
            physical,
            unwritten,
        });
    }
    Some(out)
}

impl Filesystem {
    /// The records of `inode` for a fast commit: with `ranges`, its whole
    /// mapping first (a `DEL_RANGE` per hole, an `ADD_RANGE` per extent),
    /// then its `INODE` record. `None` when it is not something this
    /// writer carries: a regular file or directory mapped by in-inode
    /// extents, linked.
    fn fc_inode_records(&self, inode: &Inode, ranges: bool, out: &mut Layout) -> Option<()> {
        let ino = inode.ino;
        let kind = inode.file_type().ok()?;
        // The kernel tracks no reserved inode's data (`__track_range`).
        let first = self.sb.read().s_first_ino.get().max(11);
        let ours = ino >= first || ino == crate::inode::ROOT_INO && !ranges;
        let plain = ours
            && matches!(kind, FileType::Regular | FileType::Directory)
            && inode.uses_extents()
            && !inode.has_inline_data()
            && inode.raw.links() > 0;
        let exts = plain.then(|| root_extents(inode)).flatten()?;
        if ranges {
            for (lblk, len) in holes(&exts) {
                out.push(&encode(&Tag::DelRange { ino, lblk, len }));
            }
            for extent in exts {
                out.push(&encode(&Tag::AddRange { ino, extent }));
            }
        }
        let isz = usize::from(self.geo.inode_size);
        let len = if isz > 128 {
            128 + usize::from(inode.raw.i_extra_isize.get())
        } else {
            128
        };
        let raw = inode.record.get(..len.min(isz)).unwrap_or(&inode.record).to_vec();
        out.push(&encode(&Tag::Inode { ino, raw }));
        Some(())
    }

    /// The records of one fast commit (`ext4_fc_perform_commit`): the
    /// name changes in order, a created inode's records before its
    /// `CREAT` (replays read its mode from the inode), then every inode
    /// written since the last fast commit. A directory goes as its
    /// `INODE` record alone, for its times (the kernel logs none): its
    /// mapping is as on disk, since a change to it made the transaction
    /// ineligible. `None` when something cannot go in a fast commit.
    fn fc_records(&self, fc: &Snapshot, out: &mut Layout) -> Result<Option<()>> {
        for change in &fc.names {
            if let NameChange::Create(d) = change
                && self.fc_inode_records(&self.inode(d.ino)?, true, out).is_none()
            {
                return Ok(None);
            }
            out.push(&encode(&change.tag()));
        }
        for &ino in &fc.inodes {
            let inode = self.inode(ino)?;
            let dir = inode.is_dir();
            if dir && !fc.dirs.contains(&ino) {
                return Ok(None);
            }
            if self.fc_inode_records(&inode, !dir, out).is_none() {
                return Ok(None);
            }
        }
        Ok(Some(()))
    }

    /// The blocks of directories `dirs`: dirty ones are those the noted
    /// name changes wrote, which a replay rebuilds.
    fn fc_dir_blocks(&self, dirs: &HashSet<u32>) -> Result<HashSet<u64>> {
        let mut out = HashSet::new();
        for &ino in dirs {
            for (s, n) in self.inode_blocks(&self.inode(ino)?)? {
                out.extend(s..s + n);
            }
        }
        Ok(out)
    }

    /// The block holding the primary superblock (byte 1024).
    fn sb_home_block(&self) -> u64 {
        1024 >> self.geo.block_size_log2
    }

    /// Writes home, as the log holds them, the blocks e2fsck reads before
    /// its log replay and uses after it, in its fast-commit replay: before
    /// the first fast commit that follows a full commit (made durable by
    /// the flush before that commit's tail). Writing a logged block home
    /// early is a checkpoint of that block: a replay writes the same.
    ///
    /// - The superblock: e2fsck writes back only the bytes it changed
    ///   since it read it (`ext2fs_flush`, `write_primary_superblock`);
    ///   an older home copy would mix two superblocks under one checksum.
    ///   The kernel seldom logs the superblock; the engine logs it in every
    ///   commit.
    /// - The inode-table block holding the journal inode, which it read
    ///   to find the journal: libext2fs keeps that block
    ///   (`icache->buffer_blk`) and reads and writes inodes of it through
    ///   the stale copy (the root directory's among them), so a record it
    ///   replays would put back the other inodes as they were before the log.
    fn early_reads_home_as_logged(&self, log: &mut Log) -> Result<()> {
        let mut wanted = vec![self.sb_home_block()];
        let jino = self.sb.read().s_journal_inum.get();
        if jino != 0 {
            wanted.push(self.inode_slot(jino)?.block);
        }
        wanted.dedup();
        let found: Vec<(u64, std::sync::Arc<[u8]>)> = {
            let d = self.dirty.lock();
            wanted
                .iter()
                .filter_map(|b| d.logged.get(b).map(|v| (*b, v.clone())))
                .collect()
        };
        for (b, bytes) in found {
            let at = b << self.geo.block_size_log2;
            self.dev
                .write_at(at, &bytes)
                .map_err(|source| self.write_failed(at, source))?;
            log.stats.superblock_homes += 1;
        }
        Ok(())
    }

    /// Whether the running superblock differs from the last full
    /// commit's only in what the replays set again (free counts, write
    /// and mount times, kbytes written, checksum): no fast commit carries
    /// the superblock, so any other change — an orphan list head, a
    /// feature, a resize, an error record — needs a full commit.
    fn superblock_carried(&self) -> Result<bool> {
        let home = self.sb_home_block();
        let (running, logged) = {
            let d = self.dirty.lock();
            (d.superblock, d.logged.get(&home).cloned())
        };
        let Some(now) = running else {
            return Ok(true);
        };
        let off = 1024 - (home << self.geo.block_size_log2) as usize;
        let then = match logged {
            Some(b) => b[off..off + 1024].to_vec(),
            None => {
                let mut b = vec![0u8; 1024];
                self.dev
                    .read_at(1024, &mut b)
                    .map_err(|source| crate::Error::Io { offset: 1024, source })?;
                b
            }
        };
        let Ok(then) = RawSuperblock::parse(&then) else {
            return Ok(false);
        };
        Ok(replay_neutral(now) == replay_neutral(then))
    }

    /// Writes `blocks` to the fast-commit area from journal block `lblk`.
    fn write_fc_blocks(&self, log: &Log, lblk: u32, blocks: &[Vec<u8>]) -> Result<()> {
        let log2 = self.geo.block_size_log2;
        for (i, b) in blocks.iter().enumerate() {
            let at = log.device_block(lblk + i as u32)? << log2;
            log.device(self)
                .write_at(at, b)
                .map_err(|source| self.write_failed(at, source))?;
        }
        Ok(())
    }

    /// Makes what was written durable: the file system's device, and the
    /// external journal's when there is one.
    fn flush_journal(&self, log: &Log) -> Result<()> {
        crate::journal::commit::flush(self)?;
        log.flush_external(self)
    }

    /// Blocks a fast commit may leave dirty in the running transaction:
    /// the superblock's, the group descriptors', bitmaps and inode tables
    /// (and, the caller checks, blocks of directories with noted names).
    fn fc_block_ok(&self, b: u64, bitmaps: &HashSet<u64>, tables: &[(u64, u64)]) -> bool {
        let geo = &self.geo;
        let fdb = u64::from(geo.first_data_block);
        let sb_home = self.sb_home_block();
        let gdt = (u64::from(geo.group_count) * u64::from(geo.desc_size)).div_ceil(u64::from(geo.block_size));
        let meta_bg = geo.features.incompat.contains(IncompatFeatures::META_BG);
        b == sb_home
            || (!meta_bg && (fdb + 1..fdb + 1 + gdt).contains(&b))
            || bitmaps.contains(&b)
            || tables.iter().any(|&(s, n)| (s..s + n).contains(&b))
    }

    /// Writes a fast commit for the running transaction if every change in
    /// it can go in one and the area has room; false when the caller must
    /// commit in full. The caller holds the writer lock (no operation
    /// publishes meanwhile) and the log, and has written the files' data.
    pub(crate) fn try_fast_commit(&self, log: &mut Log) -> Result<bool> {
        if log.fc.is_none() || log.is_empty() {
            return Ok(false);
        }
        let Some((snap, blocks)) = self.fc_snapshot() else {
            return Ok(false);
        };
        if !self.superblock_carried()? {
            return Ok(false);
        }
        if snap.names.is_empty() && snap.inodes.is_empty() {
            // Fast commits already carry all of it: only the data was left.
            self.flush_journal(log)?;
            return Ok(true);
        }
        if !self.dirty_blocks_carried(&snap, &blocks)? {
            return Ok(false);
        }
        let fc = log.fc.clone().expect("checked above");
        let mut lay = Layout {
            bs: self.block_size(),
            blocks: Vec::new(),
            crc: 0,
        };
        if fc.off == 0 {
            lay.push(&encode(&Tag::Head {
                features: 0,
                tid: log.sequence,
            }));
        }
        if self.fc_records(&snap, &mut lay)?.is_none() {
            return Ok(false);
        }
        let out = lay.finish(log.sequence);
        let n = out.len() as u32;
        if n > fc.room() {
            return Ok(false);
        }
        self.write_fast_commit(log, &fc, &out)?;
        self.dirty.lock().running_changes.fc.carried();
        Ok(true)
    }

    /// Whether every dirty block of the running transaction is one a
    /// replay rebuilds: see [`Filesystem::fc_block_ok`], and blocks of
    /// the directories whose names changed.
    fn dirty_blocks_carried(&self, snap: &Snapshot, blocks: &[u64]) -> Result<bool> {
        let (bitmaps, tables) = {
            let groups = self.groups.read();
            let n = u64::from(self.geo.inode_table_blocks);
            let bitmaps: HashSet<u64> = groups
                .iter()
                .flat_map(|g| [g.block_bitmap(), g.inode_bitmap()])
                .collect();
            (bitmaps, groups.iter().map(|g| (g.inode_table(), n)).collect::<Vec<_>>())
        };
        let dir_blocks = self.fc_dir_blocks(&snap.dirs)?;
        Ok(blocks
            .iter()
            .all(|&b| self.fc_block_ok(b, &bitmaps, &tables) || dir_blocks.contains(&b)))
    }

    /// Writes the laid-out commit `out` at the area's next block, its tail
    /// last, and counts it.
    fn write_fast_commit(&self, log: &mut Log, fc: &FcArea, out: &[Vec<u8>]) -> Result<()> {
        let n = out.len() as u32;
        if fc.off == 0 {
            self.early_reads_home_as_logged(log)?;
        }
        let (body, tail) = out.split_at(out.len() - 1);
        self.write_fc_blocks(log, fc.first + fc.off, body)?;
        // As the kernel's tail write (`REQ_PREFLUSH | REQ_FUA`): the data,
        // the superblock and the commit's other blocks are durable before
        // the tail that makes the commit valid.
        self.flush_journal(log)?;
        self.write_fc_blocks(log, fc.first + fc.off + n - 1, tail)?;
        self.flush_journal(log)?;
        if let Some(area) = log.fc.as_mut() {
            area.off += n;
        }
        log.stats.fast_commits += 1;
        log.stats.fast_commit_blocks += u64::from(n);
        Ok(())
    }

    /// What the running transaction's next fast commit must carry and its
    /// dirty blocks; `None` when a full commit is due (one in flight, or
    /// an ineligible change).
    fn fc_snapshot(&self) -> Option<(Snapshot, Vec<u64>)> {
        let d = self.dirty.lock();
        let fc = &d.running_changes.fc;
        if d.committing.is_some() || fc.ineligible.is_some() {
            return None;
        }
        let mut inodes: Vec<u32> = fc.inodes.iter().copied().collect();
        inodes.sort_unstable();
        let snap = Snapshot {
            names: fc.names.clone(),
            inodes,
            dirs: fc.dirs.clone(),
        };
        Some((snap, d.blocks.keys().copied().collect()))
    }
}

/// `sb` without the fields a fast commit's replay sets again.
fn replay_neutral(mut sb: RawSuperblock) -> [u8; 1024] {
    sb.s_free_blocks_count_lo.set(0);
    sb.s_free_blocks_count_hi.set(0);
    sb.s_free_inodes_count.set(0);
    sb.s_wtime.set(0);
    sb.s_wtime_hi = 0;
    sb.s_mtime.set(0);
    sb.s_mtime_hi = 0;
    sb.s_kbytes_written.set(0);
    sb.s_checksum.set(0);
    sb.encode()
}

/// The running transaction's fast-commit notes, copied out of the lock.
struct Snapshot {
    names: Vec<NameChange>,
    inodes: Vec<u32>,
    dirs: HashSet<u32>,
}
