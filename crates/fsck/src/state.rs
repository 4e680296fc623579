//! What the passes learn and hand on: block ownership bitmaps and the
//! per-inode facts e2fsck also keeps (type, link count, references found).

use std::collections::BTreeMap;

use crate::bitmap::Bitmap;
use crate::fs::RawFs;
use crate::problem::Finding;
use crate::report::Report;

/// How a run answers e2fsck's questions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// `-n`: repair nothing; the image is opened read-only.
    #[default]
    Check,
    /// `-p`: repair what is safe without asking, stop repairing at anything else.
    Preen,
    /// `-y`: repair everything.
    Yes,
}

/// `kind` value of an inode not in use.
pub const KIND_FREE: u8 = 0;
/// `kind` value of an inode in use whose mode has no valid type.
pub const KIND_BAD: u8 = 0xFF;
/// `kind` value of a reserved inode below `s_first_ino` (other than root).
pub const KIND_RESERVED: u8 = 0xFE;

/// Facts about one directory.
#[derive(Debug, Clone, Default)]
pub struct DirInfo {
    /// The directory that holds an entry for it (0 until pass 2 finds one).
    pub parent: u32,
    /// What its `..` says (0 until pass 2 reads it).
    pub dotdot: u32,
    /// `i_size`.
    pub size: u64,
    /// Hash-indexed (INDEX_FL on a dir_index file system).
    pub htree: bool,
    /// Stored inline in the inode.
    pub inline: bool,
    /// Has an itree (ITREE_FL on an itree file system).
    pub itree: bool,
    /// Per-inode checksum seed (crc32c of fs seed, inode number, generation).
    pub csum_seed: u32,
}

/// One directory block (a hole has `pblk` 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirBlock {
    /// The directory.
    pub ino: u32,
    /// Logical block.
    pub lblk: u32,
    /// Physical block.
    pub pblk: u64,
}

/// The checker's state across passes.
pub struct Ctx<'a> {
    /// The image.
    pub fs: RawFs<'a>,
    /// Findings so far.
    pub report: Report,
    /// Blocks claimed by metadata or inodes (pass 1), indexed by block
    /// number, one bit per cluster (bigalloc).
    pub used: Bitmap,
    /// Blocks claimed more than once, one bit per cluster.
    pub dup: Bitmap,
    /// Blocks holding file-system metadata (superblocks, descriptors, bitmaps, inode tables).
    pub meta: Bitmap,
    /// Per inode (index = inode number): [`KIND_FREE`], a dirent file-type code, [`KIND_BAD`] or [`KIND_RESERVED`].
    pub kind: Vec<u8>,
    /// Per inode: `i_links_count`.
    pub links: Vec<u16>,
    /// Per inode: references found in directories (pass 2), saturating.
    pub refs: Vec<u16>,
    /// Per inode: holds no data at all (size 0, no blocks); pass 4's "zero-length".
    pub empty: Bitmap,
    /// Per inode: an `ea_inode` (referenced from xattrs, not directories).
    pub ea_inode: Bitmap,
    /// References to `ea_inode`s and the value inodes each inode holds.
    pub ea: crate::ea_refs::EaState,
    /// Quota usage pass 1 counted, per type and id.
    pub quota: crate::quota::Usage,
    /// Directories.
    pub dirs: BTreeMap<u32, DirInfo>,
    /// Directory blocks, sorted by (inode, logical block) after pass 1.
    pub dblocks: Vec<DirBlock>,
    /// Per group: how many inodes pass 1 scanned (the rest are uninit or unused).
    pub scanned: Vec<u32>,
    /// `/lost+found`'s inode, when pass 2 met it.
    pub lost_found: Option<u32>,
    /// `/lost+found` could not be found or made this run: reconnecting
    /// stops asking (e2fsck's `bad_lost_and_found`).
    pub lost_found_bad: bool,
    /// Data blocks pass 1 may still mark (a multiple of the block count:
    /// a consistent file system needs at most one).
    pub claim_budget: u64,
    /// Stop requested (SIGINT).
    pub cancel: Option<&'a std::sync::atomic::AtomicBool>,
    /// Check only, preen or repair everything.
    pub mode: Mode,
    /// No further repairs this run: preen met a problem it may not repair
    /// (e2fsck's "UNEXPECTED INCONSISTENCY; RUN fsck MANUALLY"), or the
    /// layout itself is in doubt.
    pub halted: bool,
    /// Pass 1 has claimed every block in use: [`Ctx::alloc_block`] may run.
    pub blocks_known: bool,
    /// Inode-table blocks the bad-blocks inode lists (pass 2 clears
    /// entries naming inodes in them).
    pub bad_itable: std::collections::BTreeSet<u64>,
    /// Regular files of 2 GiB or more that pass 1 kept (e2fsck's `large_files`).
    pub large_files: u32,
    /// Tables pass 1 found overlapping other metadata, to be moved with
    /// their content once the free blocks are known ([`crate::relocate`]).
    pub conflicts: Vec<(u32, crate::relocate::Table)>,
    /// [`crate::Options::now`], low 32 bits: the time of inodes a repair
    /// makes or deletes (e2fsck's `ctx->now`), fixed so runs reproduce.
    pub now: u32,
    /// Directories pass 3A rebuilds.
    pub rehash: crate::rehash::Plan,
    /// Threads reading inode tables in pass 1 ([`crate::itable_scan`]).
    pub threads: usize,
    /// [`crate::Options::check_encoding`].
    pub check_encoding: bool,
}

impl<'a> Ctx<'a> {
    /// Fresh state for `fs`.
    pub fn new(fs: RawFs<'a>, report: Report) -> Self {
        let nb = fs.geo.blocks_count;
        let ni = u64::from(fs.geo.inodes_count) + 1;
        let n = ni as usize;
        Self {
            used: Bitmap::clustered(nb, fs.geo.cluster_bits),
            dup: Bitmap::clustered(nb, fs.geo.cluster_bits),
            meta: Bitmap::new(nb),
            kind: vec![KIND_FREE; n],
            links: vec![0; n],
            refs: vec![0; n],
            empty: Bitmap::new(ni),
            ea_inode: Bitmap::new(ni),
            ea: crate::ea_refs::EaState::default(),
            quota: crate::quota::Usage::default(),
            dirs: BTreeMap::new(),
            dblocks: Vec::new(),
            scanned: vec![0; fs.geo.group_count as usize],
            lost_found: None,
            lost_found_bad: false,
            cancel: None,
            mode: Mode::Check,
            halted: false,
            blocks_known: false,
            bad_itable: std::collections::BTreeSet::new(),
            large_files: 0,
            conflicts: Vec::new(),
            now: 0,
            rehash: crate::rehash::Plan::default(),
            threads: 1,
            check_encoding: false,
            claim_budget: nb.saturating_mul(4).max(1 << 20),
            fs,
            report,
        }
    }

    /// Records a finding that is not repaired (none exists for it yet, or
    /// it needs no repair).
    /// In preen, an error preen may not repair stops later repairs, as
    /// e2fsck's preen stops at the first question it may not answer.
    pub fn add(&mut self, f: Finding) {
        if self.mode == Mode::Preen && f.severity == crate::Severity::Error && !f.code.preen_ok() {
            self.halted = true;
        }
        self.report.add(f);
    }

    /// Records `f` and says whether to repair it now, as e2fsck's
    /// `fix_problem` answers: never in a check-only run; with `-y` always;
    /// in preen only problems preen may repair ([`crate::Code::preen_ok`]).
    /// Any other problem stops preen's repairs for the rest of the run.
    /// The caller makes the repair when this returns true, and calls
    /// [`Ctx::not_fixed`] if it then cannot.
    pub fn fix(&mut self, mut f: Finding) -> bool {
        let yes = match self.mode {
            Mode::Check => false,
            _ if self.halted => false,
            Mode::Yes => true,
            Mode::Preen if f.code.preen_ok() => true,
            Mode::Preen => {
                self.halted = true;
                false
            }
        };
        f.fixed = yes;
        self.report.add(f);
        yes
    }

    /// The repair [`Ctx::fix`] allowed could not be made: the last finding
    /// is left unrepaired, with why.
    pub fn not_fixed(&mut self, why: impl std::fmt::Display) {
        if let Some(f) = self.report.findings.last_mut() {
            f.fixed = false;
            f.message = format!("{} (not repaired: {why})", f.message);
        }
    }

    /// True when repairs may be made (a repair run not halted by preen).
    pub fn repairing(&self) -> bool {
        self.mode != Mode::Check && !self.halted
    }

    /// Claims `blk` for an owner; a second claim marks it duplicate.
    /// Returns false if it was already claimed.
    pub fn claim(&mut self, blk: u64) -> bool {
        if self.used.set(blk) {
            self.dup.set(blk);
            false
        } else {
            true
        }
    }

    /// True when a stop was requested.
    pub fn cancelled(&self) -> bool {
        self.cancel
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// True when `ino` is in use (pass 1's verdict).
    pub fn in_use(&self, ino: u32) -> bool {
        self.kind.get(ino as usize).is_some_and(|&k| k != KIND_FREE)
    }

    /// True when `ino` is a directory in use.
    pub fn is_dir(&self, ino: u32) -> bool {
        self.kind.get(ino as usize) == Some(&2)
    }
}
