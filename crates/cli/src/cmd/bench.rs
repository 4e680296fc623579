//! `ext4kit bench mount`: the mount benchmark of `ext4kit-bench` —
//! kernel ext4, fuse2fs and this program's FUSE mount, each on a fresh
//! image, then `e2fsck -fn`. Prints markdown tables; `--json` also saves
//! the full report. Fails when a target that ran failed a workload or left
//! an image e2fsck does not find clean.
//!
//! `ext4kit bench journal`: the engine through its library API with and
//! without a journal (`ext4kit_bench::journal`); fails on an image e2fsck
//! does not find clean.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_bench::config::parse_list;
use ext4kit_bench::journal::{self, Sizes};
use ext4kit_bench::{Config, Target, Workload};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Compare mounts: kernel ext4, fuse2fs and `ext4kit mount`.
    Mount(MountArgs),
    /// What the journal costs: create+write 4 KiB (one sync at the end),
    /// and create+write+fsync from 1 and 4 threads, with and without a
    /// journal, through the engine's library API.
    Journal(JournalArgs),
}

#[derive(clap::Args, Debug)]
struct JournalArgs {
    /// Small sizes: a smoke test in seconds.
    #[arg(long)]
    quick: bool,
    /// Files of the `create` workload [default: 20000].
    #[arg(long, value_name = "N")]
    files: Option<usize>,
    /// Files of the `fsync` and `fsync4` workloads [default: 2000].
    #[arg(long, value_name = "M")]
    fsync_files: Option<usize>,
    /// Measurements of each workload in each mode; medians are reported
    /// [default: 3].
    #[arg(long, value_name = "R")]
    repeats: Option<usize>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Where the images go (default /var/tmp).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct MountArgs {
    /// Targets, comma-separated: kernel, fuse2fs, ext4kit.
    #[arg(long, default_value = "kernel,fuse2fs,ext4kit")]
    targets: String,
    /// Workloads, comma-separated: create, postmark, seqwrite, seqread,
    /// untar, cached, threads (default: all).
    #[arg(long)]
    workloads: Option<String>,
    /// Small sizes: a smoke test of every target in seconds.
    #[arg(long)]
    quick: bool,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Where images and mount points go (default /var/tmp).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// More `-o` options for the ext4kit mount (e.g. `poll=0`), after
    /// `allow_other`.
    #[arg(long, value_name = "OPTS")]
    ext4kit_options: Option<String>,
    /// Run every target N times, alternating, and report medians.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    rounds: u16,
}

pub fn run(a: Args) -> Result<()> {
    match a.what {
        What::Mount(a) => run_mount(a),
        What::Journal(a) => run_journal(a),
    }
}

fn run_mount(a: MountArgs) -> Result<()> {
    let cfg = Config {
        targets: parse_list(&a.targets, &Target::ALL).map_err(anyhow::Error::msg)?,
        workloads: match &a.workloads {
            Some(w) => parse_list(w, &Workload::ALL).map_err(anyhow::Error::msg)?,
            None => Workload::ALL.to_vec(),
        },
        quick: a.quick,
        dir: a.dir,
        ext4kit_exe: std::env::current_exe().context("cannot find the ext4kit executable")?,
        ext4kit_options: a.ext4kit_options,
        rounds: usize::from(a.rounds),
    };
    let report = ext4kit_bench::run(&cfg)?;
    outln!("{}", report.to_markdown());
    if let Some(path) = &a.json {
        std::fs::write(path, report.to_json()).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if report.failed() {
        bail!("the benchmark failed (see the tables above)");
    }
    Ok(())
}

fn run_journal(a: JournalArgs) -> Result<()> {
    let mut sizes = if a.quick { Sizes::QUICK } else { Sizes::FULL };
    sizes.create_files = a.files.unwrap_or(sizes.create_files);
    sizes.fsync_files = a.fsync_files.unwrap_or(sizes.fsync_files);
    sizes.repeats = a.repeats.unwrap_or(sizes.repeats);
    if sizes.repeats == 0 || sizes.create_files == 0 || sizes.fsync_files == 0 {
        bail!("--files, --fsync-files and --repeats must be at least 1");
    }
    let cfg = journal::Config {
        sizes,
        quick: a.quick,
        dir: a.dir,
    };
    let report = journal::run(&cfg)?;
    outln!("{}", report.to_markdown());
    if let Some(path) = &a.json {
        std::fs::write(path, report.to_json()).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if report.failed() {
        bail!("an image was not e2fsck-clean (see the table above)");
    }
    Ok(())
}
