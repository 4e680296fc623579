//! `ext4kit-fsck`: checks and repairs an ext2/3/4 image as e2fsck does.
//! [`check`] runs the passes once on a device; [`repair::repair`] runs them
//! with repairs on an in-memory overlay of the image until a run finds
//! nothing more to repair, then writes the result in a crash-safe order.
//!
//! The checker reads raw metadata through a [`BlockDevice`] and the format
//! crate's parsers, never through `Filesystem::open`, so it works on images
//! the engine refuses. Passes follow e2fsck's: 0 superblock and group
//! descriptors ([`superblock`], [`groups`], [`journal`]), 1 inode scan
//! ([`pass1`]), 1B duplicate blocks ([`pass1b`]), 2 directories ([`pass2`],
//! [`htree`]), 3 connectivity ([`pass3`]), 3A directory rebuilds
//! ([`rehash`]), 4 reference counts ([`pass4`]),
//! 5 bitmaps and counters ([`pass5`]). Findings carry e2fsck's problem
//! numbers ([`problem`]).
//!
//! Memory: three bitmaps over blocks (used, duplicate, metadata) and small
//! per-inode arrays; nothing else per block. Every count read from the
//! image is capped by the geometry.

pub mod alloc;
pub mod bad_blocks;
pub mod bitmap;
pub mod blockmap;
pub mod clone;
pub mod cluster;
pub mod dir_block;
pub mod dir_expand;
pub mod dir_hole;
pub mod dir_link;
pub mod dirent;
pub mod dx_build;
pub mod ea_refs;
pub mod ea_walk;
pub mod encryption;
pub mod extent_feature;
pub mod extents;
pub mod fs;
pub mod groups;
pub mod htree;
pub mod inline_dir;
pub mod inline_flags;
pub mod inode_edit;
pub mod inode_fields;
pub mod itable_scan;
pub mod itree;
pub mod journal;
pub mod journal_create;
pub mod lost_found;
pub mod map_fix;
pub mod orphans;
pub mod pass1;
pub mod pass1_parallel;
pub mod pass1b;
pub mod pass2;
pub mod pass3;
pub mod pass4;
pub mod pass5;
pub mod problem;
pub mod quota;
pub mod quota_write;
pub mod readahead;
pub mod really_dir;
pub mod rehash;
pub mod relocate;
pub mod repair;
pub mod report;
pub mod reserved;
pub mod resize;
pub mod resize_inode;
pub mod sb_fields;
pub mod state;
pub mod superblock;
pub mod symlink;
pub mod truncate;
pub mod walk;
pub mod write;
pub mod xattr;

use std::sync::atomic::AtomicBool;

use ext4kit_engine::BlockDevice;
use ext4kit_format::features::RoCompatFeatures;

pub use problem::{Code, Finding, Severity};
pub use report::Report;
pub use state::Mode;

/// e2fsck's exit status: no errors.
pub const EXIT_OK: i32 = 0;
/// Errors were corrected (the image changed).
pub const EXIT_FIXED: i32 = 1;
/// Errors were found and left uncorrected.
pub const EXIT_UNCORRECTED: i32 = 4;
/// Operational error (unreadable image, unusable superblock, unknown features).
pub const EXIT_OPERATIONAL: i32 = 8;
/// Usage error.
pub const EXIT_USAGE: i32 = 16;
/// Cancelled by the user.
pub const EXIT_CANCELLED: i32 = 32;

/// How to check.
#[derive(Debug, Default)]
pub struct Options<'a> {
    /// Check even if the superblock says the file system is clean (`-f`).
    pub force: bool,
    /// Only look at the journal (`-E journal_only`).
    pub journal_only: bool,
    /// Check names in casefolded directories as encoded text even without
    /// strict mode (`-E check_encoding`): valid UTF-8, unique once folded.
    pub check_encoding: bool,
    /// Set from another thread (SIGINT) to stop between steps.
    pub cancel: Option<&'a AtomicBool>,
    /// Current time, seconds since the epoch (for the check interval).
    pub now: u64,
    /// Check only, preen or repair everything. [`check`] makes the repairs
    /// on the device it is given; [`repair::repair`] gives it an overlay.
    pub mode: Mode,
    /// Where a repair saves what it overwrites, for `e2undo` (`-z FILE`).
    pub undo: Option<&'a std::path::Path>,
    /// Rebuild every directory after pass 3 (`-D`), not only those whose
    /// index a repair dropped ([`rehash`]).
    pub rehash_all: bool,
    /// Threads pass 1 reads and checksums inode tables on in a check-only
    /// run ([`itable_scan`]); 0 means every core, 1 the serial scan.
    pub threads: usize,
    /// e2fsck's `-b BLOCK -B SIZE`: check from the backup superblock at
    /// `BLOCK` (in blocks of `SIZE`; without a size each from 1 KiB to
    /// 64 KiB is tried) and its descriptors; a repair rewrites the primary
    /// superblock and descriptors from them.
    pub superblock: Option<(u64, Option<u32>)>,
    /// The external journal device (`-j PATH`) of an image whose journal
    /// lives on another device: checked, and replayed by a repair.
    pub journal: Option<ext4kit_engine::journal::JournalDevice>,
}

/// Where the check is, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Pass number (1..=5).
    pub pass: u8,
    /// Units done.
    pub done: u64,
    /// Units in the pass.
    pub total: u64,
}

/// Why a check could not run to the end.
#[derive(Debug, Clone)]
pub enum Fatal {
    /// The device could not be read.
    Io(String),
    /// No usable superblock or descriptor table.
    BadSuperblock(String),
    /// Features this checker does not understand.
    Unsupported(String),
    /// Stopped on request; the findings so far.
    Cancelled(Box<Report>),
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(s) | Self::BadSuperblock(s) | Self::Unsupported(s) => f.write_str(s),
            Self::Cancelled(_) => f.write_str("cancelled"),
        }
    }
}

/// The exit status e2fsck would give a check-only outcome.
pub fn exit_code(r: &Result<Report, Fatal>) -> i32 {
    match r {
        Ok(rep) if rep.errors() > 0 => EXIT_UNCORRECTED,
        Ok(_) => EXIT_OK,
        Err(Fatal::Cancelled(_)) => EXIT_CANCELLED,
        Err(_) => EXIT_OPERATIONAL,
    }
}

/// One pass over the checker's state.
type Pass = fn(&mut state::Ctx, &mut dyn FnMut(Progress));

/// Checks the image on `dev`.
///
/// # Errors
/// [`Fatal`] when the image cannot be checked at all, or the check was cancelled.
pub fn check(dev: &dyn BlockDevice, opts: &Options, progress: &mut dyn FnMut(Progress)) -> Result<Report, Fatal> {
    let mut report = Report::default();
    report.passes.push("0".into());
    let mut fs = superblock::load(dev, &mut report, opts.superblock)?;
    groups::load(&mut fs)?;
    report.inodes_total = u64::from(fs.geo.inodes_count);
    report.blocks_total = fs.geo.blocks_count;
    if !opts.force && !opts.journal_only {
        match superblock::check_reason(&fs, opts.now) {
            None => {
                report.skipped_clean = true;
                report.note("clean");
                return Ok(report);
            }
            Some(why) => report.note(format!("file system {why}, check forced")),
        }
    }
    let mut ctx = state::Ctx::new(fs, report);
    ctx.cancel = opts.cancel;
    ctx.mode = opts.mode;
    ctx.threads = itable_scan::threads(opts.threads);
    ctx.now = opts.now as u32;
    let before_sb_checks = ctx.report.findings.len();
    ctx.rehash.all = opts.rehash_all;
    ctx.check_encoding = opts.check_encoding;
    superblock::check(&mut ctx);
    groups::check(&mut ctx);
    answered_before_the_passes(&mut ctx, before_sb_checks);
    journal::check(&mut ctx, opts.journal.as_ref());
    if opts.journal_only {
        return finish(ctx);
    }
    hold_repairs_on_bad_layout(&mut ctx);
    let steps: [(&str, Pass); 6] = [
        ("1", pass1::run),
        ("1B", pass1b::run),
        ("2", pass2::run),
        ("3", pass3::run),
        ("4", pass4::run),
        ("5", pass5::run),
    ];
    for (name, step) in steps {
        if ctx.cancelled() {
            return Err(Fatal::Cancelled(Box::new(ctx.report)));
        }
        if name == "1B" && !ctx.dup.any() {
            continue;
        }
        if name == "1B" && ctx.fs.geo.features.ro_compat.contains(RoCompatFeatures::SHARED_BLOCKS) {
            ctx.report
                .note("shared_blocks: blocks claimed more than once are allowed");
            continue;
        }
        if name == "5" {
            journal_create::run(&mut ctx);
            quota::run(&mut ctx);
        }
        ctx.report.passes.push(name.into());
        step(&mut ctx, progress);
        ctx.blocks_known |= name == "1";
        if name == "1" {
            groups::relocate(&mut ctx);
        }
        if name == "3" {
            rehash::run(&mut ctx);
        }
    }
    if ctx.cancelled() {
        return Err(Fatal::Cancelled(Box::new(ctx.report)));
    }
    // The final updates run before pass 5 (so its bitmaps count their
    // blocks) but are reported after it, as e2fsck's.
    ctx.report.findings.sort_by_key(|f| f.pass >= 6);
    let ino_used = ctx.kind.iter().skip(1).filter(|&&k| k != state::KIND_FREE).count() as u64;
    ctx.report.inodes_used = ino_used;
    let clusters = ctx.used.count_range(0, ctx.fs.geo.blocks_count);
    ctx.report.blocks_used = (clusters << ctx.fs.geo.cluster_bits).min(ctx.fs.geo.blocks_count);
    finish(ctx)
}

/// A superblock, descriptor or journal problem left unrepaired means the
/// layout the later passes read may be wrong (a bad `s_first_meta_bg`
/// moves every descriptor): repairs made on it could damage sound data.
/// The run goes on checking, but repairs nothing more.
fn hold_repairs_on_bad_layout(ctx: &mut state::Ctx) {
    let left = ctx
        .report
        .findings
        .iter()
        .any(|f| f.pass == 0 && f.severity == Severity::Error && !f.fixed);
    if ctx.repairing() && left {
        ctx.halted = true;
        ctx.report.note(
            "superblock, descriptor or journal problems are left unrepaired: later problems are reported, not repaired",
        );
    }
}

/// e2fsck marks the file system valid after its superblock, descriptor
/// and resize-inode checks (`check_super_block`, `check_resize_inode`),
/// so a problem there that a check-only run leaves alone does not set its
/// exit status: those findings, from `from` on, become warnings. An
/// invalid quota inode stays an error: e2fsck's quota comparison at the
/// end then fails for want of the file, and that does count.
fn answered_before_the_passes(ctx: &mut state::Ctx, from: usize) {
    if ctx.mode != Mode::Check {
        return;
    }
    for f in ctx.report.findings.iter_mut().skip(from) {
        if f.code != problem::P0_INVALID_QUOTA_INO {
            f.severity = Severity::Warning;
        }
    }
}

/// Ends a run: what repairs changed in the superblock and descriptors is
/// written, and the report says whether preen stopped.
fn finish(mut ctx: state::Ctx) -> Result<Report, Fatal> {
    ctx.report.halted = ctx.halted;
    if ctx.mode != Mode::Check {
        ctx.fs
            .flush_meta()
            .map_err(|e| Fatal::Io(format!("writing the superblock and group descriptors: {e}")))?;
    }
    Ok(ctx.report)
}
