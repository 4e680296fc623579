//! `ext4kit bench fsck` (issue 17's speed check): `ext4kit fsck -fn`
//! against `e2fsck -fn` on one sparse image holding many files, with the
//! guest's page cache dropped before every run and the two checkers
//! alternating run by run, so both see the same machine. The same image is
//! then checked again with every group's `EXT4_BG_INODE_UNINIT` flag and
//! `bg_itable_unused` count cleared (seed 004 §J: what `uninit_bg` saves a
//! checker, which must then read every inode table). Wall time, peak RSS
//! (GNU `time`, when installed) and exit status per run; medians in the
//! report. An image either checker does not find clean fails the run.

mod image;
mod report;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, ensure};

pub use report::{FsckBenchReport, Measured};

use crate::system::{self, find_tool, tool};

/// Which checker a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Checker {
    /// `ext4kit fsck -fn`: pass 1 scans inode tables on every core.
    Ext4kit,
    /// `ext4kit fsck --threads 1 -fn`: the serial scan, for comparison
    /// in the same binary and run.
    Ext4kitSerial,
    /// e2fsprogs' `e2fsck -fn`.
    E2fsck,
}

impl Checker {
    /// Every checker, in the order each round runs them.
    pub const ALL: [Checker; 3] = [Checker::Ext4kit, Checker::Ext4kitSerial, Checker::E2fsck];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Checker::Ext4kit => "ext4kit",
            Checker::Ext4kitSerial => "ext4kit-serial",
            Checker::E2fsck => "e2fsck",
        }
    }
}

impl std::str::FromStr for Checker {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Checker::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown checker {s}: expected ext4kit, ext4kit-serial or e2fsck"))
    }
}

/// What `ext4kit bench fsck` runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Files in the image (in directories of [`image::PER_DIR`]).
    pub files: u64,
    /// Size of the sparse image in bytes.
    pub image_bytes: u64,
    /// Runs of each checker on each layout; the report gives medians.
    pub runs: usize,
    /// The checkers, alternating within each round.
    pub checkers: Vec<Checker>,
    /// Also check the image with the group flags cleared.
    pub without_flags: bool,
    /// Where the images go.
    pub scratch: PathBuf,
    /// Leave the images behind (both, when the flags are cleared).
    pub keep_images: bool,
    /// The `ext4kit` executable.
    pub ext4kit_exe: PathBuf,
}

/// One measured run of a checker.
struct Run {
    seconds: f64,
    peak_rss_kib: Option<u64>,
    exit_code: Option<i32>,
}

/// Builds the image, runs every checker `cfg.runs` times on each layout.
pub fn run(cfg: &Config) -> Result<FsckBenchReport> {
    ensure!(cfg.runs > 0, "--runs must be at least 1");
    ensure!(
        system::is_root(),
        "bench fsck drops the page cache before every run: run it as root"
    );
    let work = tempfile::Builder::new()
        .prefix("ext4kit-fsck-bench.")
        .tempdir_in(&cfg.scratch)
        .with_context(|| format!("cannot make a directory in {}", cfg.scratch.display()))?;
    let flagged = work.path().join("flags.ext4");
    crate::log(&format!(
        "building {} files in a {} GiB image",
        cfg.files,
        cfg.image_bytes >> 30
    ));
    let built = image::build(&flagged, cfg.files, cfg.image_bytes)?;
    let mut report = FsckBenchReport::new(cfg, built);
    report.layouts.push(measure(cfg, &flagged, "uninit_bg flags")?);
    if cfg.without_flags {
        let bare = work.path().join("no-flags.ext4");
        crate::log("clearing INODE_UNINIT and bg_itable_unused in every group (a copy)");
        report.groups_cleared = Some(image::clear_group_flags(&flagged, &bare)?);
        if !cfg.keep_images {
            std::fs::remove_file(&flagged).ok();
        }
        report.layouts.push(measure(cfg, &bare, "flags cleared")?);
    }
    if cfg.keep_images {
        let kept = work.keep();
        crate::log(&format!("images kept in {}", kept.display()));
    }
    Ok(report)
}

/// Every checker `cfg.runs` times on `image`, alternating.
fn measure(cfg: &Config, image: &Path, layout: &str) -> Result<report::Layout> {
    let fsck = system::e2fsck(image)?;
    ensure!(
        fsck.clean,
        "{layout}: e2fsck -fn does not find the image clean:\n{}",
        fsck.output
    );
    let gnu_time = find_tool("time").filter(|t| is_gnu_time(t));
    let mut runs: Vec<(Checker, Run)> = Vec::new();
    for round in 1..=cfg.runs {
        for &c in &cfg.checkers {
            crate::log(&format!("{layout}: {} -fn, run {round} of {}", c.name(), cfg.runs));
            runs.push((c, timed(cfg, c, image, gnu_time.as_deref())?));
        }
    }
    let checkers = cfg
        .checkers
        .iter()
        .map(|&c| {
            let mine: Vec<&Run> = runs.iter().filter(|(k, _)| *k == c).map(|(_, r)| r).collect();
            Measured::from_runs(
                c,
                &mine
                    .iter()
                    .map(|r| (r.seconds, r.peak_rss_kib, r.exit_code))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    Ok(report::Layout {
        name: layout.to_string(),
        checkers,
    })
}

/// One cold run of `checker` on `image`: caches dropped, wall time around
/// the process, peak RSS from GNU `time` (`gnu_time`) when it is installed.
fn timed(cfg: &Config, checker: Checker, image: &Path, gnu_time: Option<&Path>) -> Result<Run> {
    let program = match checker {
        Checker::Ext4kit | Checker::Ext4kitSerial => cfg.ext4kit_exe.clone(),
        Checker::E2fsck => tool("e2fsck")?,
    };
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    if checker != Checker::E2fsck {
        args.push("fsck".into());
    }
    if checker == Checker::Ext4kitSerial {
        args.extend(["--threads".into(), "1".into()]);
    }
    args.push("-fn".into());
    args.push(image.into());
    let rss_file = tempfile::NamedTempFile::new()?;
    let mut cmd = match gnu_time {
        Some(t) => {
            let mut c = Command::new(t);
            c.arg("-f").arg("%M").arg("-o").arg(rss_file.path()).arg(&program);
            c
        }
        None => Command::new(&program),
    };
    cmd.args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    system::drop_caches()?;
    let started = Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {}", program.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    let peak_rss_kib = gnu_time
        .and_then(|_| std::fs::read_to_string(rss_file.path()).ok())
        .and_then(|s| s.lines().rev().find_map(|l| l.trim().parse::<u64>().ok()));
    Ok(Run {
        seconds,
        peak_rss_kib,
        exit_code: status.code(),
    })
}

/// True for GNU time (the `time` package), which `-f %M` needs.
fn is_gnu_time(path: &Path) -> bool {
    Command::new(path).arg("--version").output().is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout).contains("GNU") || String::from_utf8_lossy(&o.stderr).contains("GNU")
    })
}
