//! Adding and removing the internal journal of an unmounted image, as
//! `tune2fs -j` / `-J size=` / `-O has_journal` and `-O ^has_journal` do.
//!
//! **Adding** (`ext2fs_add_journal_inode3`): the size is
//! `figure_journal_size`'s ([`figure_journal_blocks`]: the default for the
//! file system's size, or `-J size=`), the goal the start of the group
//! `get_midpoint_journal_block` picks (group 0 for a block map), the blocks laid out by the same
//! [`map_file`] mkfs uses (extents with the extents feature, else a block
//! map with its indirect blocks), zeroed, with an empty jbd2 superblock in
//! the first; inode 8 is written as `write_journal_inode` leaves it, and
//! the superblock gets has_journal, `s_journal_inum`, the `s_jnl_blocks`
//! backup and `s_overhead_clusters` grown by the journal, as tune2fs.
//!
//! **Removing** (`remove_journal_inode`): a journal that needs recovery
//! is replayed first, as tune2fs 1.47 does (an external one is refused
//! then, naming fsck); the blocks of inode 8 are freed, its first 128 bytes zeroed (the rest of a
//! large record kept, checksum updated), `s_journal_inum` and
//! `s_jnl_blocks` cleared. An external journal is only forgotten
//! (`s_journal_uuid`, `s_journal_dev`); the journal device's user list is
//! left as it is (tune2fs edits it when it finds the device).
//!
//! Neither change can go through a journal (there is none before an add;
//! after a removal the log would be gone before its checkpoint), so the
//! blocks are written in place in an order a crash cannot make worse than
//! leaked blocks: for an add the log and inode, then bitmaps and
//! descriptors, the superblock last; for a removal the superblock first.
//! A crash in between leaves blocks that e2fsck returns to the free pool
//! ("journal inode is not in use, but contains data").
//!
//! See `Documentation/filesystems/ext4/journal.rst` and `special_inodes.rst`.

use std::collections::BTreeMap;

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, RawGroupDesc, bitmap_checksum};
use ext4kit_format::inode::{RawInode, flags, mode, set_inode_checksum};
use ext4kit_format::superblock::{RawSuperblock, SUPERBLOCK_OFFSET};

use super::TuneReport;
use super::rewrite::Rewrite;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::fs::{Filesystem, OpenOptions};
use crate::mkfs::filemap::{BlockPool, FileMap, FileShape, map_file};
use crate::mkfs::journal::{GroupLayout, JournalSize, empty_superblock_block, figure_journal_blocks, midpoint_group};

/// The journal's inode (`EXT4_JOURNAL_INO`).
const JOURNAL_INO: u32 = 8;

/// Adds an internal journal of `size` (or the default) to the file system
/// on `dev`, which the caller has claimed for writing.
///
/// # Errors
/// [`Error::InvalidArgument`] when the file system already has a journal,
/// is too small for one, or the size is out of e2fsprogs' range;
/// [`Error::Unsupported`] for bigalloc; [`Error::NoSpace`]; I/O errors.
pub fn add_journal(dev: Box<dyn BlockDevice>, size: &JournalSize) -> Result<TuneReport> {
    let fs = open(dev)?;
    let old = fs.superblock();
    let f = fs.geo.features;
    if f.compat.contains(CompatFeatures::HAS_JOURNAL) {
        return Err(invalid("the file system already has a journal"));
    }
    if f.ro_compat.contains(RoCompatFeatures::BIGALLOC) {
        return Err(Error::Unsupported("adding a journal to a bigalloc file system".into()));
    }
    let ino8 = fs.inode_on_disk(JOURNAL_INO)?;
    if ino8.raw.i_blocks_lo.get() != 0 || ino8.raw.i_blocks_high.get() != 0 {
        return Err(invalid("inode 8 still holds blocks: run fsck first"));
    }
    let fast_commit = f.compat.contains(CompatFeatures::FAST_COMMIT);
    let (log, fc) = figure_journal_blocks(
        size,
        fs.geo.blocks_count,
        fs.geo.block_size,
        fast_commit,
        free_blocks(&old),
    )?;
    if log == 0 {
        return Err(invalid(
            "the file system is too small for a journal (under 2048 blocks)",
        ));
    }
    let mut rw = Rewrite::new(&fs);
    let mut pool = Pool::new(&mut rw);
    let shape = FileShape {
        block_size: fs.geo.block_size,
        extents: f.incompat.contains(IncompatFeatures::EXTENTS),
        csum_seed: f.metadata_csum().then(|| ino8.raw.csum_seed(fs.csum_seed, JOURNAL_INO)),
    };
    // A block-mapped journal takes no goal: `ext2fs_bmap2` starts from
    // inode 8's group, group 0 (as mkfs lays out ext3).
    let goal = if shape.extents {
        goal(&fs, &pool.descs)
    } else {
        u64::from(fs.geo.first_data_block)
    };
    let map = map_file(&mut pool, &shape, goal, u64::from(log + fc))?;
    if let Some(e) = pool.failed {
        return Err(e);
    }
    let taken = pool.taken;
    let descs = pool.descs;
    write_log(&fs, &map, log, fc)?;
    let size_bytes = map.data_blocks() * u64::from(fs.geo.block_size);
    let record = journal_inode(&fs, &map, size_bytes)?;
    stage_inode(&mut rw, &record)?;
    stage_descs(&mut rw, &descs, &old)?;
    let mut new = old;
    set_free_blocks(&mut new, free_blocks(&old) - taken);
    new.s_feature_compat
        .set(old.s_feature_compat.get() | CompatFeatures::HAS_JOURNAL.0);
    if size_bytes >= 1 << 31 {
        new.s_feature_ro_compat
            .set(old.s_feature_ro_compat.get() | RoCompatFeatures::LARGE_FILE.0);
    }
    new.s_journal_inum.set(JOURNAL_INO);
    new.set_journal_backup(&map.i_block, size_bytes);
    let overhead = old.s_overhead_clusters.get().wrapping_add(log + fc);
    new.s_overhead_clusters.set(overhead);
    let changed = rw.changed();
    let n = changed.len();
    write_in_place(&fs, &changed)?;
    finish(&fs, new)?;
    Ok(TuneReport {
        blocks_changed: n + map.blocks() as usize,
        journaled: false,
        notes: vec![format!(
            "journal created: {} blocks ({log} log, {fc} fast commit)",
            log + fc
        )],
    })
}

/// Attaches the journal device on `jdev` to the file system on `fs_dev`,
/// which has no journal (`tune2fs -J device=`); `rdev` is recorded as
/// `s_journal_dev` (0 for an image file).
///
/// # Errors
/// [`Error::InvalidArgument`] when the file system has a journal; what
/// [`crate::mkfs::journal_dev::attach_journal_device`] refuses.
pub fn attach_external(fs_dev: &dyn BlockDevice, jdev: &dyn BlockDevice, rdev: u32) -> Result<()> {
    let sb = raw_superblock(fs_dev)?;
    if sb.features().compat.contains(CompatFeatures::HAS_JOURNAL) {
        return Err(invalid("the file system already has a journal"));
    }
    if sb.features().incompat.contains(IncompatFeatures::RECOVER) {
        return Err(invalid("needs_recovery is set: run fsck first"));
    }
    crate::mkfs::journal_dev::attach_journal_device(fs_dev, jdev, rdev)
}

/// Removes the journal of the file system on `dev`. An internal journal
/// that needs recovery is replayed first (the open does, as tune2fs 1.47
/// runs `ext2fs_run_ext3_journal`); an external one, which this call
/// cannot read, is refused then, naming fsck.
///
/// # Errors
/// [`Error::InvalidArgument`] without a journal, for an external journal
/// that needs recovery, or when orphan_file still needs the journal; I/O
/// errors and corruption.
pub fn remove_journal(dev: Box<dyn BlockDevice>) -> Result<TuneReport> {
    let raw = raw_superblock(dev.as_ref())?;
    let f = raw.features();
    if f.compat.contains(CompatFeatures::HAS_JOURNAL) && raw.s_journal_inum.get() == 0 {
        return detach_external(dev.as_ref(), &raw);
    }
    let fs = open(dev)?;
    let old = fs.superblock();
    let f = fs.geo.features;
    if !f.compat.contains(CompatFeatures::HAS_JOURNAL) {
        return Err(invalid("the file system has no journal"));
    }
    if f.compat.contains(CompatFeatures::ORPHAN_FILE) {
        return Err(invalid("orphan_file needs the journal: turn orphan_file off first"));
    }
    let mut new = old;
    new.s_feature_compat
        .set(old.s_feature_compat.get() & !CompatFeatures::HAS_JOURNAL.0);
    let mut rw = Rewrite::new(&fs);
    let mut notes = Vec::new();
    if old.s_journal_inum.get() != 0 {
        let freed = free_journal_inode(&mut rw, &old, &mut new)?;
        notes.push(format!("journal inode removed: {freed} blocks freed"));
    }
    new.s_journal_inum.set(0);
    for w in &mut new.s_jnl_blocks {
        w.set(0);
    }
    let changed = rw.changed();
    let n = changed.len();
    finish(&fs, new)?;
    write_in_place(&fs, &changed)?;
    Ok(TuneReport {
        blocks_changed: n,
        journaled: false,
        notes,
    })
}

/// Forgets an external journal (`s_journal_uuid`, `s_journal_dev`): its
/// device's user list is left as it is.
fn detach_external(dev: &dyn BlockDevice, raw: &RawSuperblock) -> Result<TuneReport> {
    if raw.features().incompat.contains(IncompatFeatures::RECOVER) {
        return Err(invalid(
            "the external journal needs recovery (needs_recovery is set): replay it first with \
             ext4kit fsck -j JOURNAL (or e2fsck -j JOURNAL), then remove it",
        ));
    }
    if raw.features().compat.contains(CompatFeatures::ORPHAN_FILE) {
        return Err(invalid("orphan_file needs the journal: turn orphan_file off first"));
    }
    let bs = 1024u32 << raw.s_log_block_size.get().min(6);
    crate::mkfs::journal_dev::patch_superblocks(dev, raw, bs, |sb| {
        let c = sb.s_feature_compat.get() & !CompatFeatures::HAS_JOURNAL.0;
        sb.s_feature_compat.set(c);
        sb.s_journal_uuid = [0; 16];
        sb.s_journal_dev.set(0);
    })?;
    dev.flush().map_err(|source| Error::Io { offset: 0, source })?;
    Ok(TuneReport {
        blocks_changed: 1,
        journaled: false,
        notes: vec!["external journal detached (the journal device still lists this file system)".into()],
    })
}

fn raw_superblock(dev: &dyn BlockDevice) -> Result<RawSuperblock> {
    let mut head = [0u8; 1024];
    dev.read_at(SUPERBLOCK_OFFSET, &mut head).map_err(|source| Error::Io {
        offset: SUPERBLOCK_OFFSET,
        source,
    })?;
    RawSuperblock::parse(&head).map_err(|e| Error::format(crate::error::Location::Superblock, e))
}

/// Opens as `tune` does, refusing a read-only image.
fn open(dev: Box<dyn BlockDevice>) -> Result<Filesystem> {
    let opts = OpenOptions {
        count_mount: false,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(dev, opts)?;
    if let Some(why) = fs.read_only_reason() {
        return Err(invalid(&format!("the image cannot be written: {why}")));
    }
    if fs.session.in_use() {
        fs.close()?;
    }
    Ok(fs)
}

/// Frees inode 8's blocks in the bitmaps and counts, zeroes its first 128
/// bytes (as `ext2fs_write_inode` of a small inode leaves a large record)
/// and returns how many blocks it held.
fn free_journal_inode(rw: &mut Rewrite<'_>, old: &RawSuperblock, new: &mut RawSuperblock) -> Result<u64> {
    let fs = rw.fs;
    let ino = old.s_journal_inum.get();
    let inode = fs.inode_on_disk(ino)?;
    let runs = fs.inode_blocks(&inode)?;
    let mut pool = Pool::new(rw);
    let mut freed = 0;
    for &(s, n) in &runs {
        pool.release(s, n)?;
        freed += n;
    }
    let descs = pool.descs;
    stage_descs(rw, &descs, old)?;
    let slot = fs.inode_slot(ino)?;
    let isz = usize::from(fs.geo.inode_size);
    let block = rw.block(slot.block)?;
    let rec = &mut block[slot.offset..slot.offset + isz];
    rec[..128].fill(0);
    if fs.geo.features.metadata_csum() {
        set_inode_checksum(rec, fs.csum_seed, ino).map_err(|e| Error::format(crate::error::Location::Inode(ino), e))?;
    }
    set_free_blocks(new, free_blocks(old) + freed);
    let size_blocks = inode.raw.size() / u64::from(fs.geo.block_size);
    let overhead = u64::from(old.s_overhead_clusters.get()).saturating_sub(size_blocks);
    new.s_overhead_clusters.set(overhead as u32);
    Ok(freed)
}

/// The first block of [`midpoint_group`], by the descriptors' free counts.
fn goal(fs: &Filesystem, descs: &[RawGroupDesc]) -> u64 {
    let geo = &fs.geo;
    let layout = GroupLayout {
        blocks_count: geo.blocks_count,
        first_data_block: geo.first_data_block,
        blocks_per_group: geo.blocks_per_group,
        group_count: geo.group_count,
        log_groups_per_flex: fs.superblock().s_log_groups_per_flex,
    };
    let free = |g: u32| u64::from(descs[g as usize].free_blocks());
    geo.group_first_block(midpoint_group(&layout, &free))
}

/// Zeroes the log, writes its superblock and the mapping blocks, flushed.
fn write_log(fs: &Filesystem, m: &FileMap, log: u32, fc: u32) -> Result<()> {
    let log2 = fs.geo.block_size_log2;
    let zero = vec![0u8; fs.geo.block_size as usize];
    for &(s, n) in &m.runs {
        crate::txn::write_runs(fs, (s..s + n).map(|b| (b << log2, &zero[..])))?;
    }
    let first = m.runs.first().ok_or_else(|| invalid("the journal got no blocks"))?.0;
    let jsb = empty_superblock_block(fs.geo.block_size, log, fc, &fs.superblock().s_uuid);
    let mut pieces: BTreeMap<u64, &[u8]> = m.meta.iter().map(|(b, d)| (*b, &d[..])).collect();
    pieces.insert(first, &jsb[..zero.len()]);
    crate::txn::write_runs(fs, pieces.into_iter().map(|(b, d)| (b << log2, d)))?;
    crate::journal::commit::flush(fs)
}

/// Inode 8 as `write_journal_inode` leaves it: a regular file, mode 0600,
/// one link, the times now, extents flag with the feature.
fn journal_inode(fs: &Filesystem, m: &FileMap, size: u64) -> Result<Vec<u8>> {
    let isz = usize::from(fs.geo.inode_size);
    let mut rec = vec![0u8; isz];
    let mut raw = RawInode::parse(&rec, isz).map_err(|e| Error::format(crate::error::Location::Inode(8), e))?;
    let t = crate::clock::encode(crate::clock::now()).0;
    raw.i_mode.set(mode::S_IFREG | 0o600);
    raw.i_links_count.set(1);
    raw.set_size(size);
    let sectors = m.blocks() * u64::from(fs.geo.block_size) / 512;
    raw.i_blocks_lo.set(sectors as u32);
    raw.i_blocks_high.set((sectors >> 32) as u16);
    raw.i_atime.set(t);
    raw.i_ctime.set(t);
    raw.i_mtime.set(t);
    raw.i_block = m.i_block;
    if fs.geo.features.incompat.contains(IncompatFeatures::EXTENTS) {
        raw.i_flags.set(flags::EXTENTS);
    }
    if isz > 128 {
        raw.i_extra_isize.set(32);
        raw.i_crtime.set(t);
    }
    raw.encode_into(&mut rec);
    if fs.geo.features.metadata_csum() {
        set_inode_checksum(&mut rec, fs.csum_seed, JOURNAL_INO)
            .map_err(|e| Error::format(crate::error::Location::Inode(JOURNAL_INO), e))?;
    }
    Ok(rec)
}

fn stage_inode(rw: &mut Rewrite<'_>, rec: &[u8]) -> Result<()> {
    let slot = rw.fs.inode_slot(JOURNAL_INO)?;
    rw.block(slot.block)?[slot.offset..slot.offset + rec.len()].copy_from_slice(rec);
    Ok(())
}

/// Writes the descriptors that changed into the primary table and every
/// backup table, with fresh bitmap and descriptor checksums.
fn stage_descs(rw: &mut Rewrite<'_>, descs: &[RawGroupDesc], sb: &RawSuperblock) -> Result<()> {
    let fs = rw.fs;
    let f = fs.geo.features;
    let ds = usize::from(fs.geo.desc_size);
    let block_len = (sb.s_clusters_per_group.get() / 8) as usize;
    let per_block = fs.geo.descs_per_block();
    let old = fs.group_descs();
    let bytes = |d: &RawGroupDesc| {
        let mut b = vec![0u8; ds];
        d.encode_into(&mut b);
        b
    };
    for (g, d) in descs.iter().enumerate() {
        if bytes(d) == bytes(&old[g]) {
            continue;
        }
        let mut d = *d;
        let g = g as u32;
        if f.metadata_csum() {
            let bb = rw.block(d.block_bitmap())?.clone();
            d.set_block_bitmap_csum(bitmap_checksum(fs.csum_seed, &bb, block_len, fs.geo.desc_size));
        }
        d.bg_checksum
            .set(d.compute_checksum(&f, fs.csum_seed, &sb.s_uuid, g, ds));
        let off = (g % per_block) as usize * ds;
        let mut tables = vec![fs.group_desc_block(g)];
        let idx = u64::from(g / per_block);
        tables.extend(
            (1..fs.geo.group_count)
                .filter(|&b| fs.group_has_super(b) && !f.incompat.contains(IncompatFeatures::META_BG))
                .map(|b| fs.geo.superblock_block(b) + 1 + idx),
        );
        for t in tables {
            d.encode_into(&mut rw.block(t)?[off..off + ds]);
        }
    }
    Ok(())
}

/// Writes blocks home (no journal carries them), flushed.
fn write_in_place(fs: &Filesystem, blocks: &BTreeMap<u64, std::sync::Arc<[u8]>>) -> Result<()> {
    let log2 = fs.geo.block_size_log2;
    crate::txn::write_runs(fs, blocks.iter().map(|(b, d)| (b << log2, &d[..])))?;
    crate::journal::commit::flush(fs)
}

/// The backups take the journal fields and the free-block count (as
/// `ext2fs_flush` writes them), then the primary.
fn finish(fs: &Filesystem, mut new: RawSuperblock) -> Result<()> {
    let log2 = fs.geo.block_size_log2;
    // As `ext2fs_superblock_csum_set`: no checksum without metadata_csum.
    let csum = new.features().metadata_csum();
    for g in (1..fs.geo.group_count).filter(|&g| fs.group_has_super(g)) {
        let at = fs.geo.group_first_block(g) << log2;
        let mut buf = [0u8; 1024];
        fs.read_bytes(at, &mut buf)?;
        let Ok(mut b) = RawSuperblock::parse(&buf) else {
            continue;
        };
        b.s_feature_compat = new.s_feature_compat;
        b.s_feature_ro_compat = new.s_feature_ro_compat;
        b.s_journal_inum = new.s_journal_inum;
        b.s_jnl_blocks = new.s_jnl_blocks;
        b.s_jnl_backup_type = new.s_jnl_backup_type;
        b.s_journal_uuid = new.s_journal_uuid;
        b.s_journal_dev = new.s_journal_dev;
        b.s_overhead_clusters = new.s_overhead_clusters;
        b.s_free_blocks_count_lo = new.s_free_blocks_count_lo;
        b.s_free_blocks_count_hi = new.s_free_blocks_count_hi;
        if csum {
            b.set_checksum();
        }
        fs.dev
            .write_at(at, &b.encode())
            .map_err(|source| fs.write_failed(at, source))?;
    }
    let v = new.s_feature_incompat.get() & !IncompatFeatures::RECOVER.0;
    new.s_feature_incompat.set(v);
    if csum {
        new.set_checksum();
    }
    crate::journal::commit::flush(fs)?;
    fs.write_superblock(&new)?;
    crate::journal::commit::flush(fs)
}

fn free_blocks(sb: &RawSuperblock) -> u64 {
    u64::from(sb.s_free_blocks_count_lo.get()) | (u64::from(sb.s_free_blocks_count_hi.get()) << 32)
}

fn set_free_blocks(sb: &mut RawSuperblock, n: u64) {
    sb.s_free_blocks_count_lo.set(n as u32);
    sb.s_free_blocks_count_hi.set((n >> 32) as u32);
}

fn invalid(msg: &str) -> Error {
    Error::InvalidArgument(msg.to_string())
}

/// Free blocks read from the bitmaps as edited in the rewrite; counts in
/// a copy of the descriptors. A `BLOCK_UNINIT` bitmap is built first, as
/// the kernel builds it.
struct Pool<'r, 'a> {
    rw: &'r mut Rewrite<'a>,
    descs: Vec<RawGroupDesc>,
    /// Blocks marked used.
    taken: u64,
    /// The first failure of [`BlockPool::mark`], which cannot return one.
    failed: Option<Error>,
    /// Bitmaps of `BLOCK_UNINIT` groups built for reading.
    built: BTreeMap<u32, Vec<u8>>,
}

impl<'r, 'a> Pool<'r, 'a> {
    fn new(rw: &'r mut Rewrite<'a>) -> Self {
        let descs = rw.fs.group_descs();
        Self {
            rw,
            descs,
            taken: 0,
            failed: None,
            built: BTreeMap::new(),
        }
    }

    fn uninit(&self, g: u32) -> bool {
        self.descs[g as usize].flags() & BG_BLOCK_UNINIT != 0 && self.rw.fs.geo.features.has_group_csum()
    }

    /// The bitmap of group `g` for editing: a `BLOCK_UNINIT` one is built
    /// and the flag cleared (only groups that change lose it).
    fn bitmap(&mut self, g: u32) -> Result<&mut Vec<u8>> {
        let fs = self.rw.fs;
        let at = self.descs[g as usize].block_bitmap();
        if self.uninit(g) {
            let map = super::uninit::block_bitmap(fs, g);
            self.rw.block(at)?.copy_from_slice(&map);
            let d = &mut self.descs[g as usize];
            d.bg_flags.set(d.flags() & !BG_BLOCK_UNINIT);
        }
        self.rw.block(at)
    }

    fn is_free(&mut self, b: u64) -> Result<bool> {
        let geo = &self.rw.fs.geo;
        if b < u64::from(geo.first_data_block) || b >= geo.blocks_count {
            return Ok(false);
        }
        let g = ((b - u64::from(geo.first_data_block)) / u64::from(geo.blocks_per_group)) as u32;
        let bit = b - geo.group_first_block(g);
        let (byte, mask) = ((bit / 8) as usize, 1u8 << (bit % 8));
        if self.uninit(g) {
            let fs = self.rw.fs;
            let map = self
                .built
                .entry(g)
                .or_insert_with(|| super::uninit::block_bitmap(fs, g));
            return Ok(map[byte] & mask == 0);
        }
        let at = self.descs[g as usize].block_bitmap();
        Ok(self.rw.block(at)?[byte] & mask == 0)
    }

    /// Sets (`used`) or clears the bit of each block and moves the counts.
    fn flip(&mut self, start: u64, len: u64, used: bool) -> Result<()> {
        let geo = self.rw.fs.geo.clone();
        for b in start..start + len {
            let g = ((b - u64::from(geo.first_data_block)) / u64::from(geo.blocks_per_group)) as u32;
            let bit = b - geo.group_first_block(g);
            let (byte, mask) = ((bit / 8) as usize, 1u8 << (bit % 8));
            let map = self.bitmap(g)?;
            if (map[byte] & mask != 0) == used {
                return Err(invalid(&format!(
                    "block {b} is already {} in the bitmap",
                    if used { "in use" } else { "free" }
                )));
            }
            map[byte] ^= mask;
            let d = &mut self.descs[g as usize];
            let free = if used { d.free_blocks() - 1 } else { d.free_blocks() + 1 };
            d.set_free_blocks(free);
        }
        Ok(())
    }

    fn release(&mut self, start: u64, len: u64) -> Result<()> {
        self.flip(start, len, false)
    }
}

impl BlockPool for Pool<'_, '_> {
    fn new_block(&mut self, goal: u64) -> Result<u64> {
        let geo = &self.rw.fs.geo;
        let (first, end) = (u64::from(geo.first_data_block), geo.blocks_count);
        let goal = goal.clamp(first, end.saturating_sub(1));
        for b in (goal..end).chain(first..goal) {
            if self.is_free(b)? {
                return Ok(b);
            }
        }
        Err(Error::NoSpace)
    }

    fn free_run(&mut self, s: u64, limit: u64) -> u64 {
        let mut n = 0;
        while n < limit && self.is_free(s + n).unwrap_or(false) {
            n += 1;
        }
        n
    }

    fn mark(&mut self, start: u64, len: u64) {
        match self.flip(start, len, true) {
            Ok(()) => self.taken += len,
            Err(e) => {
                self.failed.get_or_insert(e);
            }
        }
    }
}
