//! The journal as the writer sees it (`journal_t`): where each journal
//! block lives on the device, the journal superblock as last written, the
//! next block and transaction ID. Which file-system blocks the live log
//! holds, so that freeing one needs a revoke record, is the write-back
//! cache's `log_holds`.
//!
//! The log never wraps: a transaction that does not fit before `s_maxlen`
//! first checkpoints everything and starts the log again at `s_first` with
//! `s_start = 0` in between (`jbd2_mark_journal_empty`). Recovery still
//! handles wrapped logs, which the kernel writes.

use std::sync::Arc;

use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::journal::superblock::{CHECKSUM_TYPE_CRC32C, RawJournalSuperblock};
use ext4kit_format::journal::{
    COMPAT_CHECKSUM, INCOMPAT_64BIT, INCOMPAT_ASYNC_COMMIT, INCOMPAT_CSUM_V2, INCOMPAT_CSUM_V3, INCOMPAT_REVOKE,
    JournalParams,
};
use ext4kit_format::superblock::RawSuperblock;

use crate::device::BlockDevice;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::map::Run;

/// How the journal is written, chosen at open (`-o data=`,
/// `journal_checksum`, `journal_async_commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalOptions {
    /// What goes through the journal besides metadata.
    pub data: DataMode,
    /// Write v3 checksums (`journal_csum_v3`); `None` follows the file
    /// system: on with `metadata_csum`, as the kernel's default.
    pub checksum: Option<bool>,
    /// Write the commit block without waiting for the transaction's blocks
    /// (`journal_async_commit`); recovery relies on the checksums instead.
    /// Implies checksums.
    pub async_commit: bool,
    /// On a file system with `fast_commit`, an fsync whose changes fast
    /// commits can carry writes one to the fast-commit area instead of
    /// committing the whole running transaction, as the kernel does
    /// whenever the feature is on (`-o nofast_commit` turns it off). The
    /// kernel's mount and e2fsck replay what this writer writes
    /// (`journal::fast_commit`).
    pub fast_commit: bool,
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self {
            data: DataMode::Ordered,
            checksum: None,
            async_commit: false,
            fast_commit: true,
        }
    }
}

/// `data=` of ext4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataMode {
    /// File data reaches its place before the commit that points at it.
    #[default]
    Ordered,
    /// File data order is not enforced. The engine writes data when the
    /// operation commits anyway, so this behaves as `Ordered`.
    Writeback,
    /// File data is logged with the metadata and checkpointed later.
    Journal,
}

/// What the journal writer has done this session: deterministic counts
/// for benchmarks and tests (seed 004's "commits batch fsyncs").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Calls to write back ([`crate::Filesystem::sync`], fsync, the
    /// periodic commit, the write-back limit).
    pub write_backs: u64,
    /// Transactions committed to the log.
    pub commits: u64,
    /// Blocks logged (descriptor, revoke and commit blocks not counted).
    pub blocks_logged: u64,
    /// Revoke records written.
    pub revoke_records: u64,
    /// Times the log was checkpointed and emptied.
    pub checkpoints: u64,
    /// Journal blocks full commits wrote (descriptor, logged, revoke and
    /// commit blocks).
    pub log_blocks: u64,
    /// Fsyncs carried by a fast commit.
    pub fast_commits: u64,
    /// Fast-commit area blocks written.
    pub fast_commit_blocks: u64,
    /// Logged blocks e2fsck reads before its log replay (superblock, the
    /// journal inode's table block) written home before
    /// a fast commit, so that its replay of the fast commit finds them as
    /// logged (`journal::fast_commit`).
    pub superblock_homes: u64,
    /// Fast-commit area heads zeroed after the full commit that carried
    /// their fast commits.
    pub fast_commit_resets: u64,
}

/// The writer's state of an internal journal.
#[derive(Debug)]
pub(crate) struct Log {
    /// The journal inode's body, logical journal block to device block.
    runs: Vec<Run>,
    /// The external journal device; `None` when the journal is inode
    /// `s_journal_inum` on the file system's own device.
    pub(crate) ext: Option<super::JournalDevice>,
    pub(crate) jsb: RawJournalSuperblock,
    pub(crate) params: JournalParams,
    /// First and one-past-last usable journal blocks (`s_first`, `s_maxlen`).
    first: u32,
    end: u32,
    /// Next journal block to write.
    pub(crate) head: u32,
    /// The fast-commit area, when this session writes fast commits.
    pub(crate) fc: Option<crate::journal::fast_commit::FcArea>,
    /// ID of the next transaction.
    pub(crate) sequence: u32,
    /// `needs_recovery` is on the device's superblock this session.
    pub(crate) recover_on_disk: bool,
    /// Flush before the commit block (off with `journal_async_commit`).
    pub(crate) barrier_before_commit: bool,
    /// The block holding the ext4 superblock, as read at load: the
    /// superblock is logged as that whole block.
    sb_block: (u64, Vec<u8>),
    pub(crate) stats: JournalStats,
}

impl Log {
    /// Reads the journal inode and superblock and turns on the features the
    /// writer will use (`ext4_set_journal_csum_feature_set`): 64-bit tags on
    /// a 64-bit file system, v3 checksums when asked (or with
    /// `metadata_csum`), async commit when asked. The journal must be empty:
    /// recovery ran at open.
    pub(crate) fn load(fs: &Filesystem, opts: &JournalOptions) -> Result<Self> {
        let at = Location::Journal { block: 0 };
        let (runs, ext, mut jsb, blocks) = locate(fs)?;
        let bs = u64::from(fs.geo.block_size);
        if u64::from(jsb.s_blocksize.get()) != bs {
            return Err(Error::inconsistent(
                at,
                "journal block size differs from the file system's",
            ));
        }
        let first = jsb.s_first.get();
        let fc_on = opts.fast_commit && fs.geo.features.compat.contains(CompatFeatures::FAST_COMMIT);
        if fc_on && jsb.is_v2() {
            // As the kernel's mount (`jbd2_fc_init`): the flag goes to
            // disk with the first commit's superblock.
            let f = jsb.s_feature_incompat.get() | ext4kit_format::journal::INCOMPAT_FAST_COMMIT;
            jsb.s_feature_incompat.set(f);
        }
        // The fast-commit area is not the log's (`j_last`); the block
        // before it is unused, as jbd2 leaves it.
        let fc = if jsb.incompat() & ext4kit_format::journal::INCOMPAT_FAST_COMMIT != 0 {
            ext4kit_format::journal::fast_commit::area_blocks(jsb.s_num_fc_blks.get())
        } else {
            0
        };
        let end = jsb.s_maxlen.get().saturating_sub(fc);
        if u64::from(end) > blocks || first == 0 || first >= end || end - first < 64 {
            return Err(Error::inconsistent(
                at,
                "journal s_first/s_maxlen do not fit the journal inode",
            ));
        }
        if jsb.s_start.get() != 0 {
            return Err(Error::NeedsRecovery);
        }
        set_features(&mut jsb, fs, opts)?;
        let params = jsb.params().map_err(|e| Error::format(at, e))?;
        let home = u64::from(bs == 1024);
        let mut sb_block = vec![0u8; bs as usize];
        fs.read_bytes(home * bs, &mut sb_block)?;
        let log = Self {
            runs,
            ext,
            sequence: jsb.s_sequence.get(),
            jsb,
            params,
            first,
            end,
            head: first,
            fc: fc_on
                .then(|| crate::journal::fast_commit::FcArea::new(end + 1, jsb.s_maxlen.get()))
                .flatten(),
            recover_on_disk: false,
            barrier_before_commit: !opts.async_commit,
            sb_block: (home, sb_block),
            stats: JournalStats::default(),
        };
        log.device_block(end - 1)?;
        if fc > 0 && end + 1 < jsb.s_maxlen.get() {
            log.clear_fc_head(fs, end + 1)?;
        }
        Ok(log)
    }

    /// The device the journal blocks are on.
    pub(crate) fn device<'a>(&'a self, fs: &'a Filesystem) -> &'a dyn BlockDevice {
        match &self.ext {
            Some(dev) => dev.0.as_ref(),
            None => fs.dev.as_ref(),
        }
    }

    /// The device block holding journal block `lblk`.
    pub(crate) fn device_block(&self, lblk: u32) -> Result<u64> {
        let l = u64::from(lblk);
        let i = self.runs.partition_point(|r| r.end() <= l);
        match self.runs.get(i) {
            Some(r) if r.logical <= l && !r.unwritten => Ok(r.physical + (l - r.logical)),
            _ => Err(Error::inconsistent(
                Location::Journal { block: lblk.into() },
                "journal block is not mapped",
            )),
        }
    }

    /// Journal blocks a transaction of `blocks` logged blocks and `revokes`
    /// revoke records takes: descriptors, the blocks, revoke blocks, the
    /// commit block.
    pub(crate) fn blocks_needed(&self, blocks: usize, revokes: usize) -> u64 {
        let descriptors = blocks.div_ceil(self.tags_per_descriptor());
        (descriptors + blocks + revokes.div_ceil(self.revokes_per_block()) + 1) as u64
    }

    /// Tags that fit one descriptor block (the first carries the UUID).
    pub(crate) fn tags_per_descriptor(&self) -> usize {
        let room = self.params.block_size - 12 - self.params.tail_bytes() - 16;
        (room / self.params.tag_bytes()).max(1)
    }

    /// Records that fit one revoke block after its 16-byte header.
    pub(crate) fn revokes_per_block(&self) -> usize {
        let record = if self.params.is_64bit() { 8 } else { 4 };
        ((self.params.block_size - 16 - self.params.tail_bytes()) / record).max(1)
    }

    /// The block holding `sb`, to be logged: where it goes and its bytes.
    pub(crate) fn superblock_block(&self, sb: &RawSuperblock) -> (u64, Arc<[u8]>) {
        let (home, ref tmpl) = self.sb_block;
        let mut b = tmpl.clone();
        let at = 1024 - (home as usize) * 1024;
        b[at..at + 1024].copy_from_slice(&sb.encode());
        (home, b.into())
    }

    /// Journal blocks left before the end of the log.
    pub(crate) fn free(&self) -> u64 {
        u64::from(self.end - self.head)
    }

    /// Journal blocks an empty log offers.
    pub(crate) fn capacity(&self) -> u64 {
        u64::from(self.end - self.first)
    }

    /// True when nothing has been logged since the log was last emptied.
    pub(crate) fn is_empty(&self) -> bool {
        self.head == self.first
    }

    /// `s_start` once a checkpoint has emptied the log: 0, unless the
    /// area holds fast commits of the next transaction. jbd2 reads the
    /// area only when `s_start` is set (`jbd2_journal_recover`), so the log
    /// is then left empty but to be recovered from `s_first`, where no block
    /// of that transaction is yet; the kernel's tail update leaves the same.
    pub(crate) fn emptied_start(&self) -> u32 {
        match &self.fc {
            Some(fc) if fc.used() > 0 => self.first,
            _ => 0,
        }
    }

    /// Forgets the logged transactions after a checkpoint: the next one
    /// starts the log again at `s_first`.
    pub(crate) fn restart(&mut self) {
        self.head = self.first;
    }

    /// Turns on `revoke` before the first revoke record is written.
    pub(crate) fn enable_revoke(&mut self) {
        let f = self.jsb.s_feature_incompat.get();
        self.jsb.s_feature_incompat.set(f | INCOMPAT_REVOKE);
        self.params.incompat |= INCOMPAT_REVOKE;
    }
}

/// Where the journal blocks are (runs, external device), its superblock,
/// and how many journal blocks the runs may map.
type Located = (Vec<Run>, Option<super::JournalDevice>, RawJournalSuperblock, u64);

fn locate(fs: &Filesystem) -> Result<Located> {
    let at = Location::Journal { block: 0 };
    let ino = fs.sb.read().s_journal_inum.get();
    if ino == 0 {
        let dev = fs.opts.journal_device.as_ref();
        let dev = dev.ok_or_else(|| Error::Unsupported(super::external::NOT_GIVEN.into()))?;
        let ext = super::external::External::open(dev, &fs.sb.read(), fs.geo.block_size)?;
        let maxlen = ext.jsb.s_maxlen.get().into();
        return Ok((ext.runs(), Some(super::JournalDevice(ext.dev.clone())), ext.jsb, maxlen));
    }
    let inode = fs.inode(ino)?;
    let blocks = inode.size() / u64::from(fs.geo.block_size);
    let runs = fs.map_range(&inode, 0, blocks)?;
    let mut buf = vec![0u8; 1024];
    fs.read_at(&inode, 0, &mut buf)?;
    let jsb = RawJournalSuperblock::parse(&buf).map_err(|e| Error::format(at, e))?;
    fs.check(at, jsb.verify_checksum())?;
    Ok((runs, None, jsb, blocks))
}

fn set_features(jsb: &mut RawJournalSuperblock, fs: &Filesystem, opts: &JournalOptions) -> Result<()> {
    let f = fs.geo.features;
    let csum = opts.async_commit || opts.checksum.unwrap_or_else(|| f.metadata_csum());
    let mut incompat = jsb.incompat();
    if f.incompat.contains(IncompatFeatures::BIT64) {
        incompat |= INCOMPAT_64BIT;
    } else if fs.geo.blocks_count > u64::from(u32::MAX) {
        return Err(Error::Unsupported(
            "a journal without 64-bit tags on a 64-bit file system".into(),
        ));
    }
    if csum {
        incompat = (incompat & !INCOMPAT_CSUM_V2) | INCOMPAT_CSUM_V3;
        jsb.s_checksum_type = CHECKSUM_TYPE_CRC32C;
    } else {
        incompat &= !(INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3);
    }
    if opts.async_commit {
        incompat |= INCOMPAT_ASYNC_COMMIT;
    } else {
        incompat &= !INCOMPAT_ASYNC_COMMIT;
    }
    if incompat != jsb.incompat() {
        if !jsb.is_v2() {
            return Err(Error::Unsupported(
                "journal features on a version 1 journal superblock".into(),
            ));
        }
        jsb.s_feature_incompat.set(incompat);
        let compat = jsb.s_feature_compat.get() & !COMPAT_CHECKSUM;
        jsb.s_feature_compat.set(compat);
    }
    Ok(())
}
