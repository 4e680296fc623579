//! `ext4kit bench journal`: what the jbd2 journal costs a metadata-heavy
//! workload, measured through the engine's library API (no mount, no
//! FUSE), on images made by `mkfs.ext4` with and without `has_journal`.
//!
//! Seed 004 (Djordjevic & Timcenko, "Ext4 file system in Linux
//! environment: features and performance analysis") found that journaling
//! combined with caching need not cost throughput. The engine keeps
//! committed metadata in memory and writes it back as one jbd2 transaction
//! per write-back (`Filesystem::sync`), so:
//! - without fsync (`create`) the journal should cost little: the target
//!   is at most 10 % more time than without a journal;
//! - with an fsync per file (`fsync`, `fsync4`, `Filesystem::sync_inode`)
//!   one thread's fsyncs are a commit each, and with several writers one
//!   commit should carry several threads' changes (sync calls per commit
//!   > 1 with 4 threads).
//!
//! Every measurement runs on a fresh image; the image is unmounted and
//! checked with `e2fsck -fn` afterwards, and a dirty image fails the run.

pub(crate) mod report;
mod workload;

use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

pub use report::{Counts, JournalReport, Sample, Summary};

/// An image with or without a journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The default `mkfs.ext4` feature set; the engine writes through the
    /// journal with `data=ordered`.
    Journal,
    /// `mkfs.ext4 -O ^has_journal`: write-back writes blocks in place.
    NoJournal,
}

impl Mode {
    /// Both modes, in report column order.
    pub const ALL: [Mode; 2] = [Mode::Journal, Mode::NoJournal];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Journal => "journal",
            Mode::NoJournal => "no journal",
        }
    }
}

/// One workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    /// Files created and 4 KiB written each, one sync at the end.
    Create,
    /// Files created, 4 KiB written and synced one by one, one thread.
    Fsync,
    /// The same split over several threads, each in its own directory.
    Fsync4,
}

impl Step {
    /// Every workload, in the order they run and are reported.
    pub const ALL: [Step; 3] = [Step::Create, Step::Fsync, Step::Fsync4];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Step::Create => "create",
            Step::Fsync => "fsync",
            Step::Fsync4 => "fsync4",
        }
    }
}

/// Sizes of a run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sizes {
    /// Image size in bytes (a sparse file).
    pub image_bytes: u64,
    /// `create`: files.
    pub create_files: usize,
    /// `create`: files per directory.
    pub files_per_dir: usize,
    /// `fsync` and `fsync4`: files, each synced.
    pub fsync_files: usize,
    /// `fsync4`: writer threads.
    pub threads: usize,
    /// Bytes written to each file.
    pub file_bytes: usize,
    /// Measurements of each workload in each mode.
    pub repeats: usize,
}

impl Sizes {
    /// The figures.
    pub const FULL: Sizes = Sizes {
        image_bytes: 1 << 30,
        create_files: 20_000,
        files_per_dir: 1_000,
        fsync_files: 2_000,
        threads: 4,
        file_bytes: 4096,
        repeats: 3,
    };

    /// A smoke test that runs in a few seconds.
    pub const QUICK: Sizes = Sizes {
        image_bytes: 64 << 20,
        create_files: 200,
        files_per_dir: 50,
        fsync_files: 40,
        threads: 4,
        file_bytes: 4096,
        repeats: 1,
    };
}

/// A run of the journal benchmark.
#[derive(Debug, Clone)]
pub struct Config {
    /// The sizes.
    pub sizes: Sizes,
    /// Whether `sizes` are the `--quick` ones (shown in the report).
    pub quick: bool,
    /// Where the images go (a temporary directory is made inside);
    /// `/var/tmp` when `None`, so that a flush is a real `fdatasync` on a
    /// disk rather than on tmpfs.
    pub dir: Option<PathBuf>,
}

impl Config {
    /// A fresh temporary directory for this run, removed when dropped.
    fn work_dir(&self) -> std::io::Result<tempfile::TempDir> {
        let base = self.dir.clone().unwrap_or_else(|| PathBuf::from("/var/tmp"));
        std::fs::create_dir_all(&base)?;
        tempfile::Builder::new().prefix("ext4kit-jbench-").tempdir_in(base)
    }
}

/// Runs every workload `repeats` times in both modes. Within a repeat the
/// two modes of a workload run back to back, journal first on even
/// repeats and last on odd ones, so that drift in the machine's load falls
/// on both. Fails on an engine or tool error; an image e2fsck does not
/// find clean is recorded (see [`JournalReport::failed`]) and kept.
pub fn run(cfg: &Config) -> Result<JournalReport> {
    let work = cfg.work_dir()?;
    let mut report = JournalReport::new(cfg, work.path());
    for repeat in 0..cfg.sizes.repeats {
        for step in Step::ALL {
            let mut modes = Mode::ALL;
            if repeat % 2 == 1 {
                modes.reverse();
            }
            for mode in modes {
                let sample = workload::measure(cfg, work.path(), step, mode, repeat)?;
                crate::log(&sample.summary());
                report.samples.push(sample);
            }
        }
    }
    report.finish();
    Ok(report)
}
