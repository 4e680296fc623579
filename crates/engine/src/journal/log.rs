//! The internal journal as an array of journal blocks: the journal
//! superblock in block 0, the circular log in `s_first..s_maxlen`, each
//! journal block mapped to a device block through the journal inode's
//! extents or block map (the kernel's `jbd2_journal_bmap`).
//!
//! Everything here is read from an image that may be damaged: the
//! superblock's geometry is checked against the inode before the log is
//! walked, and every journal block number is bounded by `s_maxlen`.

use ext4kit_format::journal::superblock::RawJournalSuperblock;
use ext4kit_format::journal::{self as jbd, JournalParams};

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::map::Run;
use std::sync::Arc;

/// `s_feature_incompat` bits this replay understands.
const KNOWN_INCOMPAT: u32 = jbd::INCOMPAT_REVOKE
    | jbd::INCOMPAT_64BIT
    | jbd::INCOMPAT_ASYNC_COMMIT
    | jbd::INCOMPAT_CSUM_V2
    | jbd::INCOMPAT_CSUM_V3
    | jbd::INCOMPAT_FAST_COMMIT;

/// The journal inode's blocks and the validated superblock.
pub(crate) struct Log<'a> {
    fs: &'a Filesystem,
    runs: Vec<Run>,
    /// The external journal device; `None` for the journal inode.
    pub(crate) ext: Option<Arc<dyn crate::device::BlockDevice>>,
    /// The journal superblock as found.
    pub(crate) sb: RawJournalSuperblock,
    /// Block size, features and checksum seed.
    pub(crate) params: JournalParams,
    /// `s_first`: first block of the log.
    pub(crate) first: u32,
    /// One past the last block of the log: `s_maxlen`, less the
    /// fast-commit area when there is one (`j_last`).
    pub(crate) maxlen: u32,
    /// The fast-commit area's blocks (`j_fc_first..s_maxlen`; empty
    /// without `INCOMPAT_FAST_COMMIT`).
    pub(crate) fc: std::ops::Range<u32>,
}

fn at(block: u32) -> Location {
    Location::Journal { block: block.into() }
}

impl<'a> Log<'a> {
    /// Maps the journal inode `ino` and reads and checks its superblock.
    ///
    /// # Errors
    /// A journal superblock that does not decode or whose checksum fails;
    /// a block size other than the file system's, `s_first`/`s_maxlen`/
    /// `s_start` outside the inode; an unmapped journal block;
    /// [`Error::Unsupported`] for v1 (`COMPAT_CHECKSUM`) checksums or
    /// unknown incompat features.
    pub(crate) fn open(fs: &'a Filesystem, ino: u32) -> Result<Self> {
        if ino == 0 {
            return Self::open_external(fs);
        }
        let inode = fs.inode(ino)?;
        let bs = fs.geo.block_size;
        let inode_blocks = inode.size() / u64::from(bs);
        let head = fs.map_range(&inode, 0, 1)?;
        let first_block = head.first().filter(|r| r.logical == 0 && !r.unwritten);
        let first_block =
            first_block.ok_or_else(|| Error::inconsistent(at(0), "the journal superblock is not mapped"))?;
        let mut buf = vec![0u8; bs as usize];
        fs.read_bytes(first_block.physical << fs.geo.block_size_log2, &mut buf)?;
        let sb = RawJournalSuperblock::parse(&buf).map_err(|e| Error::format(at(0), e))?;
        sb.verify_checksum().map_err(|e| Error::format(at(0), e))?;
        let params = sb.params().map_err(|e| Error::format(at(0), e))?;
        check_features(&sb)?;
        let (first, maxlen, start) = (sb.s_first.get(), sb.s_maxlen.get(), sb.s_start.get());
        if params.block_size != bs as usize {
            let why = format!(
                "journal block size {} differs from the file system's {bs}",
                params.block_size
            );
            return Err(Error::inconsistent(at(0), why));
        }
        if first == 0
            || first >= maxlen
            || u64::from(maxlen) > inode_blocks
            || (start != 0 && !(first..maxlen).contains(&start))
        {
            let why = format!(
                "s_first {first}, s_maxlen {maxlen}, s_start {start} do not fit a journal inode of {inode_blocks} blocks"
            );
            return Err(Error::inconsistent(at(0), why));
        }
        let runs = fs.map_range(&inode, 0, maxlen.into())?;
        let (log_end, fc) = split_fast_commit(&sb, first, maxlen)?;
        let log = Self {
            fs,
            runs,
            ext: None,
            sb,
            params,
            first,
            maxlen,
            fc,
        };
        log.check_mapped()?;
        let log = Self { maxlen: log_end, ..log };
        Ok(log)
    }

    /// The log on the journal device given at open (`super::external`).
    fn open_external(fs: &'a Filesystem) -> Result<Self> {
        let dev = fs.opts.journal_device.as_ref();
        let dev = dev.ok_or_else(|| Error::Unsupported(super::external::NOT_GIVEN.into()))?;
        let ext = super::external::External::open(dev, &fs.sb.read(), fs.geo.block_size)?;
        let sb = ext.jsb;
        let params = sb.params().map_err(|e| Error::format(at(0), e))?;
        check_features(&sb)?;
        let (first, maxlen, start) = (sb.s_first.get(), sb.s_maxlen.get(), sb.s_start.get());
        if start != 0 && !(first..maxlen).contains(&start) {
            let why = format!("s_start {start} is outside the log {first}..{maxlen}");
            return Err(Error::inconsistent(at(0), why));
        }
        let (log_end, fc) = split_fast_commit(&sb, first, maxlen)?;
        Ok(Self {
            fs,
            runs: ext.runs(),
            ext: Some(ext.dev),
            sb,
            params,
            first,
            maxlen: log_end,
            fc,
        })
    }

    /// Every journal block up to `s_maxlen` must be mapped and written.
    fn check_mapped(&self) -> Result<()> {
        let mut next = 0u64;
        for r in &self.runs {
            if r.logical != next || r.unwritten {
                break;
            }
            next = r.end();
        }
        if next < u64::from(self.maxlen) {
            return Err(Error::inconsistent(at(next as u32), "journal block is not mapped"));
        }
        Ok(())
    }

    /// The file system the journal belongs to.
    pub(crate) fn fs(&self) -> &'a Filesystem {
        self.fs
    }

    /// Blocks in the circular log.
    pub(crate) fn log_len(&self) -> u32 {
        self.maxlen - self.first
    }

    /// The block after `block`, wrapping from `s_maxlen` to `s_first`.
    pub(crate) fn next(&self, block: u32) -> u32 {
        let n = block.saturating_add(1);
        if n >= self.maxlen { self.first } else { n }
    }

    /// Device block holding journal block `block`.
    pub(crate) fn physical(&self, block: u32) -> Result<u64> {
        let b = u64::from(block);
        let i = self.runs.partition_point(|r| r.end() <= b);
        match self.runs.get(i) {
            Some(r) if r.logical <= b => Ok(r.physical + (b - r.logical)),
            _ => Err(Error::inconsistent(at(block), "journal block is not mapped")),
        }
    }

    /// Reads journal block `block`.
    pub(crate) fn read(&self, block: u32) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; self.params.block_size];
        let offset = self.physical(block)? << self.fs.geo.block_size_log2;
        match &self.ext {
            Some(dev) => dev
                .read_at(offset, &mut buf)
                .map_err(|source| Error::Io { offset, source })?,
            None => self.fs.read_bytes(offset, &mut buf)?,
        }
        Ok(buf)
    }
}

/// Where the log ends and the fast-commit area lies: jbd2 takes
/// `s_num_fc_blks` (256 when 0) off the end of the journal; the block at
/// `j_last` belongs to neither, the area being `j_last + 1..s_maxlen`.
fn split_fast_commit(sb: &RawJournalSuperblock, first: u32, maxlen: u32) -> Result<(u32, std::ops::Range<u32>)> {
    if sb.incompat() & jbd::INCOMPAT_FAST_COMMIT == 0 {
        return Ok((maxlen, maxlen..maxlen));
    }
    let n = jbd::fast_commit::area_blocks(sb.s_num_fc_blks.get());
    match maxlen.checked_sub(n).filter(|&last| last > first) {
        Some(last) => Ok((last, last + 1..maxlen)),
        None => {
            let why = format!("{n} fast-commit blocks do not fit a journal of {maxlen} blocks");
            Err(Error::inconsistent(at(0), why))
        }
    }
}

fn check_features(sb: &RawJournalSuperblock) -> Result<()> {
    if !sb.is_v2() {
        return Ok(());
    }
    if sb.s_feature_compat.get() & jbd::COMPAT_CHECKSUM != 0 {
        return Err(Error::Unsupported(
            "replaying a journal with v1 (COMPAT_CHECKSUM) checksums; replay it with e2fsck".into(),
        ));
    }
    let incompat = sb.s_feature_incompat.get();
    if incompat & !KNOWN_INCOMPAT != 0 {
        return Err(Error::Unsupported(format!(
            "journal incompat features {:#x}",
            incompat & !KNOWN_INCOMPAT
        )));
    }
    Ok(())
}
