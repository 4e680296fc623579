//! `ext4kit bench mount`: the mount benchmark of `ext4kit-bench` —
//! kernel ext4, fuse2fs and this program's FUSE mount, each on a fresh
//! image, then `e2fsck -fn`. Prints markdown tables; `--json` also saves
//! the full report. Fails when a target that ran failed a workload or left
//! an image e2fsck does not find clean.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_bench::config::parse_list;
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
}

pub fn run(a: Args) -> Result<()> {
    let What::Mount(a) = a.what;
    let cfg = Config {
        targets: parse_list(&a.targets, &Target::ALL).map_err(anyhow::Error::msg)?,
        workloads: match &a.workloads {
            Some(w) => parse_list(w, &Workload::ALL).map_err(anyhow::Error::msg)?,
            None => Workload::ALL.to_vec(),
        },
        quick: a.quick,
        dir: a.dir,
        ext4kit_exe: std::env::current_exe().context("cannot find the ext4kit executable")?,
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
