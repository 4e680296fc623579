//! `ext4kit bench create-scale`: seed 000's experiment (§3.4, figures 2
//! and 3). N empty files are created in one new directory, then, after
//! every cache is dropped, opened in a random order; the time per create
//! and per open is reported per batch against the entries so far. The
//! seed found creates on kernel ext2 growing from 133 to 4,426 µs over
//! 100,000 entries in a linear (`^dir_index`) directory, each create
//! scanning the whole directory for the name; issue 14 wants the engine's
//! creates flat (last 5 % within 1.3× of the first 5 %). `--no-lookup`
//! is the seed's S_CR736 mode (§5.4, figure 13): the names are known to be
//! new, so the create skips the existence lookup.
//!
//! The workload is written once against [`BenchFs`] and runs on any
//! [`TargetSpec`]: an image through the engine on the disk model (modeled
//! time, the same on every machine; a new image gets the suite's fixed
//! UUID, hash seed and time stamp, since the hash seed decides which
//! htree leaf each name goes to), a directory, or a kernel ext2/3/4 loop
//! mount made for the run (wall time). Each batch of creates ends with a
//! sync charged to the batch: the engine keeps committed metadata in
//! memory, so without it the disk would see nothing until the end. Every
//! image ends `e2fsck -fn` clean or the run fails.
//!
//! Parameters: `n` files in batches of `batch` (N/20 unless set), the
//! open order from `seed`, `no_dir_index` for a new image or kernel file
//! system without hashed directories, `no_lookup` (images only).

pub mod plot;
pub mod report;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ext4kit_engine::device::{DiskProfile, FileDevice};
use ext4kit_format::features::CompatFeatures;

pub use report::{Batch, PhaseStats, Report};

use crate::rng::Rng;
use crate::suite::fs::{BenchFs, Cold, Span, timed};
use crate::suite::{Progress, Target, TargetOptions, TargetSpec, harness_cost};

/// The open order's seed unless told otherwise.
pub const DEFAULT_SEED: u64 = 0x000c_5ca1e;

/// The workload's name, and that of its directory in the target.
const NAME: &str = "create-scale";

/// A run.
#[derive(Debug, Clone)]
pub struct Config {
    /// An image file (made if missing), a directory or a kernel loop mount.
    pub target: TargetSpec,
    /// Files to create.
    pub n: usize,
    /// Files per batch (0: N/20).
    pub batch: usize,
    /// Disk model under an image.
    pub disk: DiskProfile,
    /// Page cache bytes in front of the disk model (images).
    pub cache_bytes: u64,
    /// Make a new image (or kernel file system) without `dir_index`.
    pub no_dir_index: bool,
    /// Create with [`BenchFs::create_new_name`] (no existence lookup; seed
    /// 000's S_CR736 mode): the names are known to be new. Images only.
    pub no_lookup: bool,
    /// Seed of the open order.
    pub seed: u64,
    /// Where a kernel target's image goes.
    pub scratch: PathBuf,
}

impl Config {
    /// The batch size in effect: N/20 unless set, at least 1.
    pub fn batch_size(&self) -> usize {
        if self.batch > 0 { self.batch } else { self.n / 20 }.max(1)
    }
}

/// Room for `n` empty files: inodes for all of them and a quarter more,
/// 4 KiB of image per file (directory blocks and slack), at least 64 MiB.
pub fn image_size(n: usize) -> (u64, u64) {
    let inodes = n as u64 + n as u64 / 4 + 1024;
    let bytes = (n as u64 * 4096).max(64 << 20);
    (bytes, inodes)
}

/// Refuses flags the target cannot honour, before anything is made.
fn check(cfg: &Config) -> Result<()> {
    if cfg.n == 0 {
        bail!("-n must be at least 1");
    }
    let at = cfg.target.describe();
    if cfg.no_dir_index && matches!(cfg.target, TargetSpec::Dir(_)) {
        bail!("--no-dir-index makes a new image; {at} is a directory (make its file system with ^dir_index instead)");
    }
    if cfg.no_lookup && !matches!(cfg.target, TargetSpec::Image(_)) {
        bail!(
            "--no-lookup chooses the engine's create; {at} is not an image, so it is created through the host's calls"
        );
    }
    Ok(())
}

fn target_options(cfg: &Config) -> TargetOptions {
    let (image_bytes, inodes) = image_size(cfg.n);
    TargetOptions {
        disk: cfg.disk.clone(),
        cache_bytes: cfg.cache_bytes,
        image_bytes,
        inodes,
        fs_type: None,
        features: if cfg.no_dir_index {
            vec!["^dir_index".to_string()]
        } else {
            Vec::new()
        },
        block_size: None,
        scratch: cfg.scratch.clone(),
        ..TargetOptions::default()
    }
}

/// Runs the workload on `cfg.target`. Fails on a target of the wrong kind,
/// on any error of the file system under test and on an interrupt; a
/// dirty image is recorded in the report (see [`Report::failed`]).
pub fn run(cfg: &Config, progress: &mut Progress) -> Result<Report> {
    check(cfg)?;
    let started = std::time::Instant::now();
    let mut target = Target::open(&cfg.target, NAME, &target_options(cfg))?;
    let harness = harness_cost(target.fs());
    let measured = measure(target.fs(), cfg, progress);
    // Close whatever happened, so no mount or half-open image is left.
    let closed = target.close(&mut |_| Ok(()));
    let m = measured?;
    let closed = closed?;
    let is_image = matches!(cfg.target, TargetSpec::Image(_));
    let dir_index = match &cfg.target {
        TargetSpec::Image(path) => Some(has_dir_index(path)?),
        TargetSpec::Kernel(_) => Some(!cfg.no_dir_index),
        TargetSpec::Dir(_) => None,
    };
    let mut notes = Vec::new();
    if m.cold == Cold::No {
        notes.push("not root: the kernel's caches could not be dropped, so the opens ran warm");
    }
    if is_image && !closed.image_made && cfg.no_dir_index {
        notes.push("--no-dir-index applies only to a new image; this one was used as it is");
    }
    let mut report = Report {
        workload: NAME,
        target: cfg.target.describe(),
        target_kind: cfg.target.kind(),
        n: cfg.n,
        batch_size: cfg.batch_size(),
        dir_index,
        no_lookup: cfg.no_lookup,
        image_created: closed.image_made,
        disk: is_image.then(|| cfg.disk.name().to_string()),
        page_cache_bytes: is_image.then_some(cfg.cache_bytes),
        seed: cfg.seed,
        opens_cold: m.cold == Cold::Yes,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
        batches: m.batches,
        create_phase: m.create.modeled,
        open_phase: m.open.modeled,
        harness_ns_per_sample: harness,
        fsck: closed.fsck,
        ..Report::default()
    };
    report.compute_ratios();
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// What the two phases measured.
struct Measured {
    batches: Vec<Batch>,
    create: Span,
    open: Span,
    cold: Cold,
}

/// The workload proper: the batches of creates, each ending with a sync,
/// the caches dropped, then the batches of opens (lookup, open, release)
/// in the seeded order.
fn measure(fs: &mut dyn BenchFs, cfg: &Config, progress: &mut Progress) -> Result<Measured> {
    let size = cfg.batch_size();
    progress.set_total(2 * cfg.n as u64);
    let (mut create, mut open) = (Span::default(), Span::default());
    let mut rows: Vec<Batch> = Vec::new();
    for (k, range) in batches(cfg.n, size).enumerate() {
        let fs: &dyn BenchFs = &*fs;
        let ((), span) = timed(fs, || {
            for i in range.clone() {
                let name = file_name(i);
                let f = if cfg.no_lookup {
                    fs.create_new_name(&name)?
                } else {
                    fs.create(&name)?
                };
                fs.close(f)?;
            }
            fs.sync()
        })?;
        let files = range.len() as f64;
        rows.push(Batch {
            batch: k + 1,
            entries: range.end,
            files: range.len(),
            create_us: span.modeled.as_ref().map(|m| m.modeled_ns as f64 / 1e3 / files),
            create_wall_us: span.wall_ns as f64 / 1e3 / files,
            create_requests: span.modeled.as_ref().map(requests),
            ..Batch::default()
        });
        create.add(&span);
        progress.step(range.len() as u64)?;
    }
    let cold = fs.drop_caches()?;
    let order = open_order(cfg.n, cfg.seed);
    for (row, range) in rows.iter_mut().zip(batches(cfg.n, size)) {
        let fs: &dyn BenchFs = &*fs;
        let ((), span) = timed(fs, || {
            for &i in &order[range.clone()] {
                let f = fs.open(&file_name(i), false)?;
                fs.close(f)?;
            }
            Ok(())
        })?;
        let files = row.files as f64;
        row.open_us = span.modeled.as_ref().map(|m| m.modeled_ns as f64 / 1e3 / files);
        row.open_wall_us = span.wall_ns as f64 / 1e3 / files;
        row.open_requests = span.modeled.as_ref().map(requests);
        open.add(&span);
        progress.step(range.len() as u64)?;
    }
    Ok(Measured {
        batches: rows,
        create,
        open,
        cold,
    })
}

/// Requests the disk model served: reads, writes and flushes.
fn requests(m: &PhaseStats) -> u64 {
    m.reads + m.writes + m.flushes
}

/// Whether the image at `path` has `dir_index` (hashed directories), read
/// from its superblock once the run has closed it.
fn has_dir_index(path: &Path) -> Result<bool> {
    let dev = FileDevice::open(path, false).with_context(|| format!("opening {}", path.display()))?;
    let fs = ext4kit_engine::Filesystem::open(Box::new(dev), ext4kit_engine::OpenOptions::default())
        .with_context(|| format!("opening {} with the engine", path.display()))?;
    Ok(fs.features().compat.contains(CompatFeatures::DIR_INDEX))
}

/// The name of file `i`: seven digits, so every name has the same length
/// and a directory block holds the same number of entries throughout.
fn file_name(i: usize) -> String {
    format!("f{i:07}")
}

/// `0..n` shuffled (Fisher–Yates) by a generator started from `seed`.
fn open_order(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for k in (1..n).rev() {
        order.swap(k, rng.below(k + 1));
    }
    order
}

/// The ranges of file indices making up each batch.
fn batches(n: usize, size: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..n).step_by(size).map(move |s| s..(s + size).min(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_order_is_a_fixed_permutation() {
        let a = open_order(1000, 7);
        assert_eq!(a, open_order(1000, 7));
        assert_ne!(a, open_order(1000, 8));
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_ne!(a, sorted);
    }

    #[test]
    fn batches_cover_every_file_once() {
        let b: Vec<_> = batches(10, 4).collect();
        assert_eq!(b, vec![0..4, 4..8, 8..10]);
    }
}
