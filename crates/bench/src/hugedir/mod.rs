//! `ext4kit bench hugedir` (issue 16): one directory of millions of empty
//! files, on the engine's library API, on `ext4kit mount` and on kernel
//! ext4 over a loop device, each on its own fresh sparse image of the same
//! kind (`mkfs.ext4 -O large_dir -N …`), one after the other in one run.
//!
//! Phases: create N names (`f00000000`…) in one new directory; sync;
//! look up random names (each an `lstat`: the name, then its inode);
//! list the directory (optionally `lstat`ing every entry); unmount and
//! remount (the directory's size and htree depth are read from the image
//! in between); delete every name in creation order; list the emptied
//! directory. The image must then pass `e2fsck -fn`.
//!
//! Create cost is judged flat by comparing the time the first 5 % of the
//! creates took with the time the last 5 % took (equal counts, so the
//! ratio of the totals is the ratio of the mean time per create). Memory
//! is the serving process's peak RSS: this process for the library (the
//! harness keeps nothing per entry), the FUSE server for the mount, none
//! for the kernel.

mod ops;
pub mod report;
mod target;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, ensure};

pub use report::{HugedirReport, TargetRun};
pub use target::Kind;

use crate::rng::Rng;
use crate::suite::Progress;
use target::Opened;

/// What a run does.
#[derive(Debug, Clone)]
pub struct Config {
    /// The targets, in order.
    pub targets: Vec<Kind>,
    /// Entries on the library and kernel targets.
    pub entries: u64,
    /// Entries on the mount target.
    pub mount_entries: u64,
    /// Random lookups (0: as many as entries).
    pub lookups: u64,
    /// `lstat` every entry while listing.
    pub stat: bool,
    /// Block size of the images.
    pub block_size: u32,
    /// Seed of the lookup order.
    pub seed: u64,
    /// Where images and mount points go.
    pub scratch: PathBuf,
    /// The `ext4kit` executable that serves the mount target.
    pub ext4kit_exe: PathBuf,
    /// Metadata cache of the library target in bytes (`None`: the engine's
    /// default): how much of a create's cost is the directory outgrowing
    /// the cache.
    pub cache_bytes: Option<usize>,
}

/// Runs every target of `cfg` in turn; an image is removed once checked
/// clean, kept (and named in the report) otherwise.
pub fn run(cfg: &Config, progress: &mut Progress) -> Result<HugedirReport> {
    ensure!(cfg.entries > 0 && cfg.mount_entries > 0, "--entries must be at least 1");
    let work = tempfile::Builder::new()
        .prefix("ext4kit-hugedir.")
        .tempdir_in(&cfg.scratch)
        .with_context(|| format!("cannot make a directory in {}", cfg.scratch.display()))?;
    let total: u64 = cfg.targets.iter().map(|&k| 3 * entries_of(cfg, k)).sum();
    progress.set_total(total);
    let mut runs = Vec::new();
    for &kind in &cfg.targets {
        let image = work.path().join(format!("{}.ext4", kind.name()));
        let mnt = work.path().join(format!("{}.mnt", kind.name()));
        std::fs::create_dir_all(&mnt)?;
        crate::log(&format!("{}: mkfs.ext4 {}", kind.name(), image.display()));
        let mut run = match run_target(cfg, kind, &image, &mnt, progress) {
            Ok(run) => run,
            Err(e) => {
                crate::log(&format!("{}: FAILED: {e:#}", kind.name()));
                let mut run = TargetRun::new(kind, entries_of(cfg, kind), cfg.block_size);
                run.error = Some(format!("{e:#}"));
                run
            }
        };
        if image.exists() {
            crate::log(&format!("{}: e2fsck -fn", kind.name()));
            let fsck = crate::system::e2fsck(&image)?;
            if fsck.clean {
                std::fs::remove_file(&image)?;
            } else {
                let kept = cfg.scratch.join(format!("ext4kit-hugedir-{}.dirty.ext4", kind.name()));
                std::fs::rename(&image, &kept)?;
                run.kept_image = Some(kept.display().to_string());
            }
            run.fsck_clean = fsck.clean;
        }
        crate::log(&format!(
            "{}: {}",
            kind.name(),
            serde_json::to_string(&run).unwrap_or_default()
        ));
        runs.push(run);
    }
    Ok(HugedirReport::new(cfg, runs))
}

fn entries_of(cfg: &Config, kind: Kind) -> u64 {
    if kind == Kind::Mount {
        cfg.mount_entries
    } else {
        cfg.entries
    }
}

/// Writes entry `i`'s name into `buf`.
fn name(buf: &mut String, i: u64) -> &str {
    buf.clear();
    let _ = write!(buf, "f{i:08}");
    buf
}

fn run_target(cfg: &Config, kind: Kind, image: &Path, mnt: &Path, progress: &mut Progress) -> Result<TargetRun> {
    let n = entries_of(cfg, kind);
    target::make_image(image, n, cfg.block_size)?;
    target::reset_peak_rss();
    let mut run = TargetRun::new(kind, n, cfg.block_size);
    let mut t = Opened::open(kind, image, mnt, cfg, true)?;
    crate::log(&format!("{}: {n} creates", kind.name()));
    create_phase(&mut t, n, &mut run, progress)?;
    run.rss_after_create_kib = t.status_kib("VmRSS:");
    let lookups = if cfg.lookups == 0 { n } else { cfg.lookups };
    crate::log(&format!("{}: {lookups} lookups", kind.name()));
    let mut rng = Rng::new(cfg.seed);
    let mut buf = String::new();
    run.phase("lookup", lookups, || {
        for _ in 0..lookups {
            let i = rng.next_u64() % n;
            t.ops.lookup(name(&mut buf, i))?;
        }
        Ok(())
    })?;
    crate::log(&format!("{}: readdir", kind.name()));
    let listed = run.phase("readdir", n, || t.ops.list(cfg.stat))?;
    ensure!(
        listed == n,
        "{}: the directory lists {listed} names after {n} creates",
        kind.name()
    );
    progress.step(n)?;
    let mut peak = t.status_kib("VmHWM:");
    t.close()?;
    (run.dir_bytes, run.index_levels) = ops::inspect(image, target::DIR)?;
    let mut t = Opened::open(kind, image, mnt, cfg, false)?;
    crate::log(&format!("{}: {n} unlinks", kind.name()));
    run.phase("delete", n, || {
        for i in 0..n {
            t.ops.unlink(name(&mut buf, i))?;
            if i % 4096 == 4095 {
                progress.step(4096)?;
            }
        }
        t.ops.sync()
    })?;
    let left = run.phase("readdir_empty", 1, || t.ops.list(false))?;
    ensure!(left == 0, "{}: {left} names left after deleting all", kind.name());
    peak = peak.max(t.status_kib("VmHWM:"));
    t.close()?;
    run.peak_rss_kib = peak;
    run.dir_bytes_after_delete = ops::inspect(image, target::DIR)?.0;
    Ok(run)
}

/// Creates entries `0..n`, timing the whole phase and its first and last
/// 5 % apart.
fn create_phase(t: &mut Opened, n: u64, run: &mut TargetRun, progress: &mut Progress) -> Result<()> {
    let k = (n / 20).max(1);
    let mut buf = String::new();
    let started = Instant::now();
    let (mut first, mut last_from) = (None, None);
    let mut mark = started;
    for i in 0..n {
        if i == n.saturating_sub(k) {
            last_from = Some(Instant::now());
        }
        t.ops.create(name(&mut buf, i))?;
        if i + 1 == k {
            first = Some(started.elapsed());
            run.rss_first_5pct_kib = t.status_kib("VmRSS:");
        }
        if (i + 1) % k == 0 && run.create_us_by_twentieth.len() < 19 {
            run.create_us_by_twentieth
                .push(mark.elapsed().as_secs_f64() * 1e6 / k as f64);
            mark = Instant::now();
        }
        if i % 4096 == 4095 {
            progress.step(4096)?;
        }
    }
    let last = last_from.map(|t| t.elapsed());
    let rest = n - run.create_us_by_twentieth.len() as u64 * k;
    run.create_us_by_twentieth
        .push(mark.elapsed().as_secs_f64() * 1e6 / rest.max(1) as f64);
    t.ops.sync()?;
    let total = started.elapsed();
    let last = last.unwrap_or(total);
    run.record("create", n, total.as_secs_f64());
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / k as f64;
    run.create_first_5pct_us = first.map_or(0.0, per);
    run.create_last_5pct_us = per(last);
    Ok(())
}
