//! Repair runs (`fsck -p`, `fsck -y`): the journal replayed first, then the
//! passes run with repairs on an [`overlay::Overlay`] of the image, again
//! and again until a run finds nothing more to repair (a repair can expose
//! the next problem: a cleared inode leaves a directory entry pointing at
//! nothing, a cleared entry leaves an inode unattached), then the verdict
//! of the last run, and only then the writes, in [`commit`]'s order.
//!
//! Nothing is written when nothing was repaired, so a clean image is left
//! byte for byte as it was.

pub mod commit;
pub mod overlay;
pub mod undo;

use ext4kit_engine::journal::JournalDevice;
use std::sync::Arc;

use ext4kit_engine::{BlockDevice, Filesystem, OpenOptions};
use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::superblock::{RawSuperblock, STATE_ERROR, STATE_VALID, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

use crate::report::Report;
use crate::{Fatal, Mode, Options, Progress, check};
use commit::Written;
use overlay::Overlay;

/// Runs after which a repair stops even if the last one still repaired
/// something (e2fsck restarts at most a few times; a repair that keeps
/// finding work is a bug, and the verdict then says what is left).
pub const MAX_RUNS: usize = 8;

/// What a repair did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// How the journal was handled before checking.
    pub journal: Option<String>,
    /// Every run that repaired something, in order.
    pub runs: Vec<Report>,
    /// The last run: what is left (nothing, when the repair succeeded).
    pub verdict: Report,
    /// What was written to the image.
    pub written: Written,
    /// What the undo file (`-z`) saved.
    pub undo: Option<undo::Saved>,
}

impl Outcome {
    /// e2fsck's exit status: 1 when the repair changed the image, plus 4
    /// when errors are left; 0 when it was clean and left untouched. A
    /// journal replay alone is not a change: e2fsck re-opens the image
    /// after replaying (`e2fsck_run_ext3_journal`), which forgets it, and
    /// exits 0 unless the check then fixes something or the superblock is
    /// not marked valid (which here writes the superblock).
    pub fn exit_code(&self) -> i32 {
        let changed = self.written.pages > 0;
        let mut code = 0;
        if changed {
            code |= crate::EXIT_FIXED;
        }
        if self.verdict.unfixed_errors() > 0 {
            code |= crate::EXIT_UNCORRECTED;
        }
        code
    }

    /// Findings repaired over all runs.
    pub fn fixed(&self) -> u64 {
        self.runs.iter().map(Report::fixed).sum::<u64>() + self.verdict.fixed()
    }
}

/// Checks and repairs the image on `dev`, as `e2fsck -p` (`opts.mode` =
/// [`Mode::Preen`]) or `e2fsck -y` ([`Mode::Yes`]).
///
/// # Errors
/// [`Fatal`] when the image cannot be checked, or cannot be written.
pub fn repair(
    dev: &Arc<dyn BlockDevice>,
    opts: &Options,
    progress: &mut dyn FnMut(Progress),
) -> Result<Outcome, Fatal> {
    if opts.mode == Mode::Check || dev.read_only() {
        return Err(Fatal::Io("a repair needs a writable image".into()));
    }
    let (journal, replayed) = replay_journal(dev, opts.journal.as_ref())?;
    let mut out = Outcome {
        journal,
        ..Outcome::default()
    };
    let overlay = Overlay::new(dev.as_ref());
    let mut run_opts = Options {
        force: opts.force || out.journal.is_some(),
        journal_only: opts.journal_only,
        check_encoding: opts.check_encoding,
        cancel: opts.cancel,
        now: opts.now,
        mode: opts.mode,
        undo: None,
        rehash_all: opts.rehash_all,
        threads: opts.threads,
        superblock: opts.superblock,
        journal: opts.journal.clone(),
    };
    for _ in 0..MAX_RUNS {
        let rep = check(&overlay, &run_opts, progress)?;
        run_opts.force = true;
        run_opts.rehash_all = false;
        // The first run rewrote the primary from the backup (`-b`).
        run_opts.superblock = None;
        if rep.fixed() == 0 || rep.halted || rep.skipped_clean {
            out.verdict = rep;
            break;
        }
        out.runs.push(rep);
    }
    if out.verdict.passes.is_empty() && !out.verdict.skipped_clean {
        run_opts.mode = Mode::Check;
        out.verdict = check(&overlay, &run_opts, progress)?;
    }
    let clean = out.verdict.unfixed_errors() == 0;
    if opts.force
        && clean
        && let Some(note) = replayed.and_then(|r| settle_counts(&overlay, r, &out.verdict))
    {
        out.verdict.note(note);
    }
    if overlay.dirty_pages() > 0 || (clean && !out.verdict.skipped_clean && !marked_valid(&overlay)) {
        settle_superblock(&overlay, opts.now, clean).map_err(|e| Fatal::Io(format!("writing the superblock: {e}")))?;
    }
    if let Some(path) = opts.undo {
        let saved = undo::write(path, &overlay).map_err(|e| {
            Fatal::Io(format!(
                "writing the undo file {}: {e} (the image was not changed)",
                path.display()
            ))
        })?;
        out.undo = Some(saved);
    }
    out.written = commit::commit(&overlay).map_err(|e| Fatal::Io(format!("writing the repair: {e}")))?;
    let rebuilt = out
        .runs
        .iter()
        .flat_map(|r| &r.findings)
        .any(|f| f.code == crate::problem::P3A_OPTIMIZE_DIR);
    if clean
        && rebuilt
        && let Some(note) = regrow_itrees(dev)
    {
        out.verdict.note(note);
    }
    Ok(out)
}

/// A directory whose damaged index pass 2 dropped loses its itree (seed
/// 003) with it, and pass 3A rebuilds only the htree, as e2fsck would. On
/// an image with the itree feature the engine then gives every indexed
/// directory without one its itree again — journaled, as `tune -O itree`
/// does — once the repair is on disk. `None` without the feature.
fn regrow_itrees(dev: &Arc<dyn BlockDevice>) -> Option<String> {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    dev.read_at(SUPERBLOCK_OFFSET, &mut buf).ok()?;
    let sb = RawSuperblock::parse(&buf).ok()?;
    if !sb.features().ro_compat.contains(RoCompatFeatures::ITREE) {
        return None;
    }
    let opts = OpenOptions {
        count_mount: false,
        ..OpenOptions::default()
    };
    let grown = Filesystem::open(Box::new(dev.clone()), opts).and_then(|fs| {
        let c = fs.itree_add_all()?;
        fs.unmount()?;
        Ok(c)
    });
    Some(match grown {
        Ok(c) => format!("itrees rebuilt for {} directories ({} names)", c.directories, c.names),
        Err(e) => format!("itrees not rebuilt: {e} (ext4kit tune -O itree adds them)"),
    })
}

/// Replays a journal that needs recovery with the engine's recovery (the
/// same code the mount uses), as e2fsck replays before checking. `None`
/// when there was nothing to replay; otherwise what happened, for the
/// report. A journal that cannot be replayed is left to the passes, which
/// report it.
/// How a journal replay went, and the free block and inode counts of the
/// superblock it left.
type Replayed = (Option<String>, Option<(u64, u32)>);

fn replay_journal(dev: &Arc<dyn BlockDevice>, external: Option<&JournalDevice>) -> Result<Replayed, Fatal> {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    let Ok(()) = dev.read_at(SUPERBLOCK_OFFSET, &mut buf) else {
        return Ok((None, None));
    };
    let Ok(sb) = RawSuperblock::parse(&buf) else {
        return Ok((None, None));
    };
    let f = sb.features();
    if !f.compat.contains(CompatFeatures::HAS_JOURNAL) || !f.incompat.contains(IncompatFeatures::RECOVER) {
        return Ok((None, None));
    }
    // Repairing over a log that was never replayed would be undone by it
    // at the next mount, as e2fsck will not repair without the journal.
    if sb.s_journal_inum.get() == 0 && external.is_none() {
        return Err(Fatal::Unsupported(format!(
            "the journal needs recovery and is on an external device that was not given: {}",
            "give it with -j PATH"
        )));
    }
    let opts = OpenOptions {
        count_mount: false,
        journal_device: external.cloned(),
        ..OpenOptions::default()
    };
    let fs = match Filesystem::open(Box::new(dev.clone()), opts) {
        Ok(fs) => fs,
        Err(e) => return Ok((Some(format!("not replayed: {e}")), None)),
    };
    match fs.unmount() {
        Ok(()) => Ok((Some("replayed".into()), free_counts(dev.as_ref()))),
        Err(e) => Ok((Some(format!("not replayed: {e}")), None)),
    }
}

/// After a replay, the superblock's free counts are what the kernel last
/// wrote there: it keeps the true ones in memory (`ext4_statfs` sums the
/// groups). A full check (`-f`) that found nothing else sets them to what
/// it counted, as e2fsck's pass 5 does ("Free blocks count wrong …
/// Fix? yes", exit 1); without `-f` e2fsck sets them silently and exits
/// 0, and they are left to the kernel here.
fn settle_counts(o: &Overlay, replayed: (u64, u32), v: &Report) -> Option<String> {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    o.read_at(SUPERBLOCK_OFFSET, &mut buf).ok()?;
    let mut sb = RawSuperblock::parse(&buf).ok()?;
    // The blocks before `s_first_data_block` (block 0 with 1 KiB blocks)
    // are neither used nor free.
    let before = u64::from(sb.s_first_data_block.get());
    let blocks = v.blocks_total.checked_sub(v.blocks_used)?.checked_sub(before)?;
    let inodes = u32::try_from(v.inodes_total.checked_sub(v.inodes_used)?).ok()?;
    if (blocks, inodes) == replayed {
        return None;
    }
    sb.s_free_blocks_count_lo.set(blocks as u32);
    sb.s_free_blocks_count_hi.set((blocks >> 32) as u32);
    sb.s_free_inodes_count.set(inodes);
    if sb.features().metadata_csum() {
        sb.set_checksum();
    }
    o.write_at(SUPERBLOCK_OFFSET, &sb.encode()).ok()?;
    Some(format!(
        "free blocks count wrong ({}, counted={blocks}), free inodes count wrong ({}, counted={inodes}): set",
        replayed.0, replayed.1
    ))
}

/// The primary superblock's free block and inode counts.
fn free_counts(dev: &dyn BlockDevice) -> Option<(u64, u32)> {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    dev.read_at(SUPERBLOCK_OFFSET, &mut buf).ok()?;
    let sb = RawSuperblock::parse(&buf).ok()?;
    let blocks = u64::from(sb.s_free_blocks_count_lo.get()) | (u64::from(sb.s_free_blocks_count_hi.get()) << 32);
    Some((blocks, sb.s_free_inodes_count.get()))
}

/// True when the primary superblock says valid with no errors. A repair
/// cut short leaves it not valid (see [`commit`]); the run that finds
/// nothing left to repair still has to say the image is sound.
fn marked_valid(o: &Overlay) -> bool {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    o.read_at(SUPERBLOCK_OFFSET, &mut buf).is_ok()
        && RawSuperblock::parse(&buf).is_ok_and(|sb| sb.s_state.get() & (STATE_VALID | STATE_ERROR) == STATE_VALID)
}

/// The superblock of a repaired image says it was checked: valid when
/// nothing is left, with errors otherwise; `s_lastcheck` now, the mount
/// count reset and the recorded error cleared, as e2fsck leaves it.
fn settle_superblock(o: &Overlay, now: u64, clean: bool) -> std::io::Result<()> {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    o.read_at(SUPERBLOCK_OFFSET, &mut buf)?;
    let Ok(mut sb) = RawSuperblock::parse(&buf) else {
        return Ok(());
    };
    let state = sb.s_state.get() & !(STATE_VALID | STATE_ERROR);
    sb.s_state.set(state | if clean { STATE_VALID } else { STATE_ERROR });
    sb.s_lastcheck.set(now as u32);
    sb.s_lastcheck_hi = (now >> 32) as u8;
    sb.s_mnt_count.set(0);
    if clean {
        clear_error_record(&mut sb);
    }
    if sb.features().metadata_csum() {
        sb.set_checksum();
    }
    o.write_at(SUPERBLOCK_OFFSET, &sb.encode())
}

/// Zeroes the superblock's record of the first and last error
/// (`s_error_count` through `s_last_error_func`).
fn clear_error_record(sb: &mut RawSuperblock) {
    sb.s_error_count.set(0);
    sb.s_first_error_time.set(0);
    sb.s_first_error_ino.set(0);
    sb.s_first_error_block.set(0);
    sb.s_first_error_func = [0; 32];
    sb.s_first_error_line.set(0);
    sb.s_last_error_time.set(0);
    sb.s_last_error_ino.set(0);
    sb.s_last_error_line.set(0);
    sb.s_last_error_block.set(0);
    sb.s_last_error_func = [0; 32];
    sb.s_first_error_time_hi = 0;
    sb.s_last_error_time_hi = 0;
    sb.s_first_error_errcode = 0;
    sb.s_last_error_errcode = 0;
}
