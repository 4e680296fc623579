//! Offline defragmentation of one file, as e4defrag does it online with
//! `EXT4_IOC_MOVE_EXT` (seed 001's future work, seed 004's "online
//! defrag"): the allocator is asked for the longest free extents a donor
//! of the file's size would get ([`plan`]); if the file would end in fewer
//! extents, its mapped blocks move there chunk by chunk, each chunk one
//! transaction that copies, remaps and frees ([`chunk`]). A crash leaves
//! every chunk in its old place or its new one. Holes stay holes and
//! unwritten extents stay unwritten; the timestamps do not change, since
//! the contents do not.
//!
//! `docs/defrag.md` describes the chunking, what is skipped and why, and
//! the figures the tests measure.

mod chunk;
mod plan;

use ext4kit_format::extent::Extent;

use crate::error::Result;
use crate::frag::FileFrag;
use crate::fs::Filesystem;
use crate::inode::extent_edit::normalize;
use crate::txn::Txn;
use plan::{Chunk, assign, chunks, fewest, ineligible, mapped, measure, slice};

/// Mapped blocks moved per transaction by default: 4096 (16 MiB of 4 KiB
/// blocks) keeps a chunk's copy buffer and its journal transaction small
/// while the per-transaction cost stays negligible.
pub const DEFAULT_CHUNK_BLOCKS: u32 = 4096;

/// How [`Filesystem::defrag_file`] works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefragOptions {
    /// Plan only: report what would move, change nothing.
    pub dry_run: bool,
    /// Mapped blocks moved per transaction (at least 1).
    pub chunk_blocks: u32,
}

impl Default for DefragOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            chunk_blocks: DEFAULT_CHUNK_BLOCKS,
        }
    }
}

/// Why a file was left as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefragSkip {
    /// Not a regular file.
    NotRegular,
    /// A reserved inode, or one the superblock names (journal, quota,
    /// orphan file), or an xattr inode: other structures point at it.
    Special,
    /// No links left (removed, still open).
    Removed,
    /// `EXT4_IMMUTABLE_FL`: e4defrag refuses it.
    Immutable,
    /// `EXT4_APPEND_FL`: e4defrag refuses it.
    AppendOnly,
    /// The body is inside the inode (`inline_data`): no blocks.
    InlineData,
    /// An ext2/3 block map: `EXT4_IOC_MOVE_EXT` needs extents
    /// (`chattr +e` converts a file first).
    BlockMapped,
    /// Already in the fewest extents its holes allow.
    AlreadyBest,
    /// The free space would not give it fewer extents.
    NoImprovement,
    /// Not enough free space for a copy of the file.
    NoSpace,
}

impl DefragSkip {
    /// A short reason for reports.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NotRegular => "not a regular file",
            Self::Special => "a file system's own inode",
            Self::Removed => "removed",
            Self::Immutable => "immutable",
            Self::AppendOnly => "append-only",
            Self::InlineData => "inline data",
            Self::BlockMapped => "block-mapped (ext2/3): needs extents",
            Self::AlreadyBest => "already in the fewest extents",
            Self::NoImprovement => "the free space would not reduce its extents",
            Self::NoSpace => "not enough free space for a copy",
        }
    }
}

/// What [`Filesystem::defrag_file`] did (or, dry, would do) to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefragOutcome {
    /// The file.
    pub ino: u32,
    /// Its extents before, measured as `ext4kit frag` does but over every
    /// extent, those preallocated past the end included.
    pub before: FileFrag,
    /// After (planned, for a dry run; `before` when skipped).
    pub after: FileFrag,
    /// The fewest extents its holes allow.
    pub fewest: u64,
    /// Mapped blocks moved (or to move).
    pub blocks_moved: u64,
    /// Transactions committed (or to commit): one per chunk.
    pub transactions: u64,
    /// Why nothing moved, if nothing did.
    pub skipped: Option<DefragSkip>,
}

/// A file's plan: its extents and where its mapped blocks go.
struct Planned {
    exts: Vec<Extent>,
    dest: Vec<(u64, u64)>,
    after: FileFrag,
}

impl Filesystem {
    /// Rewrites extent-mapped regular file `ino` into fewer extents when
    /// the free space allows it; see [`Self::defrag_file_reporting`].
    ///
    /// # Errors
    /// As [`Self::defrag_file_reporting`].
    pub fn defrag_file(&self, ino: u32, opts: &DefragOptions) -> Result<DefragOutcome> {
        self.defrag_file_reporting(ino, opts, |_| {})
    }

    /// [`Self::defrag_file`], calling `moved` with the blocks moved so far
    /// after each chunk commits. Takes the file's inode lock exclusive for
    /// the whole run (writers and readers of the file wait); other files
    /// go on between chunks. Files that cannot or need not move come back
    /// with [`DefragOutcome::skipped`] set, not as errors.
    ///
    /// # Errors
    /// [`crate::Error::ReadOnly`], [`crate::Error::Io`],
    /// [`crate::Error::NoSpace`] when space planned for a chunk was taken
    /// meanwhile and none is left, corruption of the file's extent tree.
    /// Chunks committed before the error stay moved.
    pub fn defrag_file_reporting(
        &self,
        ino: u32,
        opts: &DefragOptions,
        mut moved: impl FnMut(u64),
    ) -> Result<DefragOutcome> {
        if self.geo.cluster_bits > 0 {
            // Moving data would have to move whole clusters and keep each
            // block's offset in its cluster; the planner works in blocks.
            return Err(crate::Error::Unsupported(
                "defrag on a bigalloc image (blocks allocated in clusters)".into(),
            ));
        }
        let _file = self.inode_locks.write(ino);
        self.flush_locked(ino)?;
        self.prealloc.release(ino);
        let (mut out, planned) = self.plan_file(ino)?;
        let Some(p) = planned else {
            return Ok(out);
        };
        let per = u64::from(opts.chunk_blocks.max(1));
        let parts = chunks(&p.exts, per);
        out.transactions = parts.len() as u64;
        out.blocks_moved = mapped(&p.exts);
        if opts.dry_run {
            out.after = p.after;
            return Ok(out);
        }
        self.move_chunks(ino, &parts, &p.dest, &mut moved)?;
        let runs = self.map_range(&self.inode(ino)?, 0, crate::inode::map::MAX_LOGICAL)?;
        out.after = FileFrag::measure(runs.iter().map(|r| (r.logical, r.physical, r.len)));
        Ok(out)
    }

    /// Moves `parts` one transaction each, chunk `i` onto its share of
    /// `dest`, the shares of later chunks held off.
    fn move_chunks(&self, ino: u32, parts: &[Chunk], dest: &[(u64, u64)], moved: &mut impl FnMut(u64)) -> Result<()> {
        let total: u64 = parts.iter().map(|c| c.blocks).sum();
        let mut done = 0;
        for &c in parts {
            let mine = slice(dest, done, done + c.blocks);
            let later = slice(dest, done + c.blocks, total);
            self.noting_errors("defrag", self.move_chunk(ino, c, &mine, &later))?;
            done += c.blocks;
            moved(done);
        }
        Ok(())
    }

    /// The plan of [`Txn::plan_destination`] in a fresh transaction, once
    /// the preallocation windows have gone: a file open for writing keeps
    /// the free run after its last block until its last close, which can
    /// hide all the space a copy needs. Every allocation lets the windows
    /// go on ENOSPC (`alloc_blocks`, as the kernel's
    /// `ext4_mb_discard_preallocations`); the planner does the same.
    fn plan_again(&self, goal: u64, blocks: u64) -> Result<Option<Vec<(u64, u64)>>> {
        let mut txn = Txn::begin(self)?;
        txn.under_inode_lock();
        txn.plan_destination(goal, blocks)
    }

    /// Reads `ino`, decides whether it qualifies and, if it does, plans
    /// its destination in a transaction that is dropped unused.
    fn plan_file(&self, ino: u32) -> Result<(DefragOutcome, Option<Planned>)> {
        let mut txn = Txn::begin(self)?;
        txn.under_inode_lock();
        let inode = txn.inode(ino)?;
        let mut out = DefragOutcome {
            ino,
            before: measure(&[]),
            after: measure(&[]),
            fewest: 0,
            blocks_moved: 0,
            transactions: 0,
            skipped: ineligible(&txn, &inode)?,
        };
        if out.skipped.is_some() {
            return Ok((out, None));
        }
        let exts = txn.extents(&inode)?;
        (out.before, out.after, out.fewest) = (measure(&exts), measure(&exts), fewest(&exts));
        if out.before.extents <= out.fewest {
            out.skipped = Some(DefragSkip::AlreadyBest);
            return Ok((out, None));
        }
        let mut dest = txn.plan_destination(exts[0].physical, mapped(&exts))?;
        drop(txn);
        if dest.is_none() && self.prealloc.release_all() {
            dest = self.plan_again(exts[0].physical, mapped(&exts))?;
        }
        let Some(dest) = dest else {
            out.skipped = Some(DefragSkip::NoSpace);
            return Ok((out, None));
        };
        let after = assign(&exts, &dest).map(|pairs| measure(&normalize(pairs.iter().map(|p| p.1).collect())));
        match after {
            Some(after) if after.extents < out.before.extents => Ok((out, Some(Planned { exts, dest, after }))),
            _ => {
                out.skipped = Some(DefragSkip::NoImprovement);
                Ok((out, None))
            }
        }
    }
}
