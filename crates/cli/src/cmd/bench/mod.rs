//! `ext4kit bench mount`: the mount benchmark of `ext4kit-bench` —
//! kernel ext4, fuse2fs and this program's FUSE mount, each on a fresh
//! image, then `e2fsck -fn`. Prints markdown tables; `--json` also saves
//! the full report. Fails when a target that ran failed a workload or left
//! an image e2fsck does not find clean.
//!
//! `ext4kit bench journal`: the engine through its library API with and
//! without a journal (`ext4kit_bench::journal`); fails on an image e2fsck
//! does not find clean.
//!
//! `ext4kit bench create-scale`: seed 000's creates and opens in one
//! directory (`ext4kit_bench::create_scale`) on an image (modeled, on the
//! disk model), a directory or a kernel loop mount (wall time); fails on
//! an image e2fsck does not find clean.
//!
//! `ext4kit bench hugedir`: one directory of millions of entries created,
//! looked up, listed and emptied on the library, the FUSE mount and kernel
//! ext4 (`ext4kit_bench::hugedir`); fails on an image e2fsck does not find
//! clean.
//!
//! `ext4kit bench WORKLOAD` for the suite's other workloads ([`suite`]).

mod suite;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ext4kit_bench::config::parse_list;
use ext4kit_bench::journal::{self, Sizes};
use ext4kit_bench::suite::{Progress, TargetSpec};
use ext4kit_bench::{Config, Target, Workload};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

// Parsed once per process: the size of the largest arguments is no cost.
#[allow(clippy::large_enum_variant)]
#[derive(clap::Subcommand, Debug)]
enum What {
    /// Compare mounts: kernel ext4, fuse2fs and `ext4kit mount`, each
    /// running the suite's create, postmark (preset `mount`), seqio,
    /// untar, cached and threads workloads on a fresh image.
    Mount(MountArgs),
    /// What the journal costs: create+write 4 KiB (one sync at the end),
    /// and create+write+fsync from 1 and 4 threads, with and without a
    /// journal, through the engine's library API.
    Journal(JournalArgs),
    /// Seed 000: N creates in one new directory, then opens in a random
    /// order after dropping caches; time per batch against entries so
    /// far. On an image: the engine on the disk model, modeled time; on a
    /// directory or a --kernel loop mount, wall time.
    CreateScale(CreateScaleArgs),
    /// Issue 16: N empty files created in one directory, then random
    /// lookups, a listing and deletion of every name; rates, create-cost
    /// flatness (first against last 5 %), peak RSS and htree depth, on the
    /// library, `ext4kit mount` and kernel ext4 (loop), each on a fresh
    /// sparse `large_dir` image.
    Hugedir(HugedirArgs),
    /// Issue 17: `ext4kit fsck -fn` against `e2fsck -fn` on one sparse
    /// image of many files, cold cache, alternating runs; then the same
    /// image with every group's INODE_UNINIT flag and itable_unused count
    /// cleared (seed 004's uninit_bg effect). Root only.
    Fsck(FsckArgs),
    /// Sequential write, fsync and cold read of one file, and the extents
    /// it ended in (`--size`, `--io-size`).
    Seqio(suite::SuiteArgs),
    /// Seed 004: PostMark, the mail server load: a pool of files, then
    /// transactions (read or append, create or delete), then delete all
    /// (`--preset test1|test2|test3`, or `mount` as `bench mount` runs it;
    /// `--scale`, `-n` files).
    Postmark(suite::SuiteArgs),
    /// Seed 001 Tables 2-3: FFSB's small-file meta-data mix of reads,
    /// writes, creates, appends and deletes on a pool of `-n` files
    /// (`--preset table2|table3|read|write|create|append|delete`,
    /// `--threads`).
    FfsbMeta(suite::SuiteArgs),
    /// Seed 001 tables 1 and 4: compilebench, kernel-like trees created,
    /// patched, compiled, cleaned, read, deleted and stat'ed as the file
    /// system ages; MB/s per phase (`-n` files per tree, `--scale`,
    /// `--preset quick` for 4 trees and 20 operations instead of
    /// compilebench's 10 and 30).
    Compilebench(suite::SuiteArgs),
    /// Seed 003: readdir + stat, copy and delete of every entry of one
    /// large directory, in readdir order and in inode order (`-n` files,
    /// `--size` bytes each, `--preset aged` for the seed's aged file
    /// system).
    ReaddirStat(suite::SuiteArgs),
    /// Seed 002: block size, read-ahead, cache size and direct block
    /// pointers (extents in the inode) inferred from timing alone, beside
    /// the true values (`--size` largest working set, `--io-size`
    /// read-ahead probe).
    Fsparams(suite::SuiteArgs),
    /// Every block of a file written once in a random order, into a new
    /// file and into a fallocated one (unwritten extents converted), each
    /// fsynced (`--size`, `--io-size`).
    Randwrite(suite::SuiteArgs),
    /// Seed 001 figures 7-8: a large file streamed while small files are
    /// written between its chunks; the extents it ends in (`--size`, `-n`
    /// small files, `--io-size`).
    Interleave(suite::SuiteArgs),
    /// Seed 000 in brief: `-n` empty files created in one directory;
    /// creates per second and the median µs of one create among the first
    /// and the last 5 %.
    Create(suite::SuiteArgs),
    /// A source-like tarball of `-n` files extracted through the file
    /// system (mkdir, create + write in `--io-size` calls + close), then
    /// sync.
    Untar(suite::SuiteArgs),
    /// Warm caches: stat, readdir and open+close of `-n` empty files in
    /// one directory.
    Cached(suite::SuiteArgs),
    /// Create + write 4 KiB + close, then unlink, of `-n` files from one
    /// thread, then from `--threads` (2) in directories of their own.
    Threads(suite::SuiteArgs),
    /// Issue 15: a new image filled to 70% with compilebench-like trees,
    /// then rounds of create, patch and delete; extents per file and
    /// free-space extents of the image left, counted offline (`--size`
    /// image, default 1 GiB; `-n` files per tree; `--preset quick`;
    /// `--scale` multiplies the 30 rounds).
    Aging(suite::SuiteArgs),
}

#[derive(clap::Args, Debug)]
struct CreateScaleArgs {
    /// An image file (made if missing, sized for N files) or a directory
    /// on any mounted file system.
    #[arg(
        long,
        value_name = "PATH",
        required_unless_present = "kernel",
        conflicts_with = "kernel"
    )]
    target: Option<PathBuf>,
    /// Make a kernel file system of this type (ext2, ext3, ext4) on a loop
    /// device in /var/tmp for the run, sized for N files, and remove it
    /// after (root).
    #[arg(long, value_name = "TYPE")]
    kernel: Option<String>,
    /// Files to create.
    #[arg(short = 'n', value_name = "N", default_value_t = 100_000)]
    n: usize,
    /// Disk model profile (images): hp-sas-10k, ssd or none.
    #[arg(long, value_name = "PROFILE", default_value = "hp-sas-10k")]
    disk: String,
    /// Page cache in front of the disk model (images), e.g. 64M; 0 for
    /// none.
    #[arg(long, value_name = "SIZE", default_value = "64M")]
    cache: String,
    /// Files per batch [default: N/20].
    #[arg(long, value_name = "B")]
    batch: Option<usize>,
    /// Make the new image (or --kernel file system) without dir_index
    /// (linear directories).
    #[arg(long)]
    no_dir_index: bool,
    /// Create without the existence lookup (the engine's create_new, seed
    /// 000's S_CR736 mode; images only).
    #[arg(long)]
    no_lookup: bool,
    /// Seed of the random open order.
    #[arg(long, value_name = "SEED", default_value_t = ext4kit_bench::create_scale::DEFAULT_SEED)]
    seed: u64,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also plot µs per create and per open against entries (.svg or .png).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct HugedirArgs {
    /// Targets, comma-separated: library, mount, kernel.
    #[arg(long, default_value = "library,mount,kernel")]
    targets: String,
    /// Entries on the library and kernel targets.
    #[arg(long, value_name = "N", default_value_t = 10_000_000)]
    entries: u64,
    /// Entries on the mount target [default: 5,000,000, or --entries when
    /// smaller].
    #[arg(long, value_name = "N")]
    mount_entries: Option<u64>,
    /// Random lookups [default: one per entry].
    #[arg(long, value_name = "N")]
    lookups: Option<u64>,
    /// Also lstat every entry while listing.
    #[arg(long)]
    stat: bool,
    /// Block size of the images (1024 forces a 3-level htree sooner).
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    block_size: u32,
    /// Seed of the lookup order.
    #[arg(long, value_name = "SEED", default_value_t = 0x5eed)]
    seed: u64,
    /// Metadata cache of the library target, in MiB [default: the
    /// engine's, 64].
    #[arg(long, value_name = "MIB")]
    cache_mib: Option<usize>,
    /// Where images and mount points go.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp")]
    scratch: PathBuf,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct FsckArgs {
    /// Files in the image, in directories of 1,000.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    files: u64,
    /// Size of the sparse image (K, M, G, T suffixes).
    #[arg(long, value_name = "SIZE", default_value = "100G")]
    size: String,
    /// Runs of each checker on each layout (medians are reported).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=100))]
    runs: u16,
    /// Checkers, comma-separated: ext4kit, ext4kit-serial (pass 1 on one
    /// thread), e2fsck.
    #[arg(long, default_value = "ext4kit,ext4kit-serial,e2fsck")]
    checkers: String,
    /// Skip the layout with the group flags cleared.
    #[arg(long)]
    keep_flags_only: bool,
    /// Leave the images in the scratch directory after the run (for
    /// profiling one checker on them); their paths are logged.
    #[arg(long)]
    keep_images: bool,
    /// Where the images go.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp")]
    scratch: PathBuf,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
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
    /// `allow_other`. Repeat it to run several ext4kit configurations side
    /// by side, as targets `ext4kit[OPTS]` compared with each other.
    #[arg(long, value_name = "OPTS")]
    ext4kit_options: Vec<String>,
    /// Count every workload's FUSE requests on the FUSE targets, by opcode
    /// and per operation, with the time from send to reply, from the
    /// kernel's fuse tracepoints (root; tracefs).
    #[arg(long)]
    profile: bool,
    /// Run every target N times, alternating, and report medians.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    rounds: u16,
}

pub fn run(a: Args) -> Result<()> {
    match a.what {
        What::Mount(a) => run_mount(a),
        What::Journal(a) => run_journal(a),
        What::CreateScale(a) => run_create_scale(a),
        What::Hugedir(a) => run_hugedir(a),
        What::Fsck(a) => run_fsck(a),
        What::Seqio(a) => suite::run("seqio", &a),
        What::Postmark(a) => suite::run("postmark", &a),
        What::FfsbMeta(a) => suite::run("ffsb-meta", &a),
        What::Compilebench(a) => suite::run("compilebench", &a),
        What::ReaddirStat(a) => suite::run("readdir-stat", &a),
        What::Fsparams(a) => suite::run("fsparams", &a),
        What::Randwrite(a) => suite::run("randwrite", &a),
        What::Interleave(a) => suite::run("interleave", &a),
        What::Create(a) => suite::run("create", &a),
        What::Untar(a) => suite::run("untar", &a),
        What::Cached(a) => suite::run("cached", &a),
        What::Threads(a) => suite::run("threads", &a),
        What::Aging(a) => suite::run("aging", &a),
    }
}

fn run_create_scale(a: CreateScaleArgs) -> Result<()> {
    if a.batch == Some(0) {
        bail!("--batch must be at least 1");
    }
    let target = match (&a.target, &a.kernel) {
        (Some(p), None) => TargetSpec::from_path(p)?,
        (None, Some(k)) => TargetSpec::kernel(k)?,
        _ => bail!("give --target PATH or --kernel TYPE"),
    };
    let cfg = ext4kit_bench::create_scale::Config {
        target,
        n: a.n,
        batch: a.batch.unwrap_or(0),
        disk: a.disk.parse().with_context(|| format!("--disk {}", a.disk))?,
        cache_bytes: ext4kit_engine::mkfs::parse_size(&a.cache).with_context(|| format!("--cache {}", a.cache))?,
        no_dir_index: a.no_dir_index,
        no_lookup: a.no_lookup,
        seed: a.seed,
        scratch: PathBuf::from("/var/tmp"),
    };
    let (flag, _guard) = ext4kit_bench::suite::interrupt_flag()?;
    let started = Instant::now();
    let mut bar: Option<indicatif::ProgressBar> = None;
    let mut show = |done: u64, total: u64| {
        if bar.is_none() && started.elapsed() > Duration::from_secs(1) {
            let b = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} creates+opens, {elapsed}")
            {
                b.set_style(style);
            }
            bar = Some(b);
        }
        if let Some(b) = &bar {
            b.set_length(total);
            b.set_position(done);
        }
    };
    let report = ext4kit_bench::create_scale::run(&cfg, &mut Progress::new(&mut show, flag));
    if let Some(b) = bar.take() {
        b.finish_and_clear();
    }
    let report = report?;
    outln!("{}", report.to_markdown());
    if let Some(path) = &a.json {
        write_whole(path, &report.to_json())?;
    }
    if let Some(path) = &a.plot {
        ext4kit_bench::create_scale::plot::plot(&report, path)?;
    }
    if report.failed() {
        bail!("{} is not e2fsck-clean after the run", cfg.target.describe());
    }
    Ok(())
}

fn run_hugedir(a: HugedirArgs) -> Result<()> {
    use ext4kit_bench::hugedir::{self, Kind};
    let cfg = hugedir::Config {
        targets: parse_list(&a.targets, &Kind::ALL).map_err(anyhow::Error::msg)?,
        entries: a.entries,
        mount_entries: a.mount_entries.unwrap_or(a.entries.min(5_000_000)),
        lookups: a.lookups.unwrap_or(0),
        stat: a.stat,
        block_size: a.block_size,
        seed: a.seed,
        scratch: a.scratch,
        ext4kit_exe: std::env::current_exe().context("cannot find the ext4kit executable")?,
        cache_bytes: a.cache_mib.map(|m| m << 20),
    };
    let (flag, _guard) = ext4kit_bench::suite::interrupt_flag()?;
    let started = Instant::now();
    let mut bar: Option<indicatif::ProgressBar> = None;
    let mut show = |done: u64, total: u64| {
        if bar.is_none() && started.elapsed() > Duration::from_secs(1) {
            let b = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} operations, {elapsed}") {
                b.set_style(style);
            }
            bar = Some(b);
        }
        if let Some(b) = &bar {
            b.set_length(total);
            b.set_position(done);
        }
    };
    let report = hugedir::run(&cfg, &mut Progress::new(&mut show, flag));
    if let Some(b) = bar.take() {
        b.finish_and_clear();
    }
    let report = report?;
    outln!("{}", report.to_markdown());
    if let Some(path) = &a.json {
        write_whole(path, &report.to_json())?;
    }
    if report.failed() {
        bail!("an image was not e2fsck-clean after its run (see the table)");
    }
    Ok(())
}

fn run_fsck(a: FsckArgs) -> Result<()> {
    use ext4kit_bench::fsck::{self, Checker};
    let cfg = fsck::Config {
        files: a.files,
        image_bytes: ext4kit_engine::mkfs::parse_size(&a.size).with_context(|| format!("--size {}", a.size))?,
        runs: usize::from(a.runs),
        checkers: parse_list(&a.checkers, &Checker::ALL).map_err(anyhow::Error::msg)?,
        without_flags: !a.keep_flags_only,
        keep_images: a.keep_images,
        scratch: a.scratch,
        ext4kit_exe: std::env::current_exe().context("cannot find the ext4kit executable")?,
    };
    let report = fsck::run(&cfg)?;
    outln!("{}", report.to_markdown());
    if let Some(path) = &a.json {
        write_whole(path, &report.to_json())?;
    }
    if report.failed() {
        bail!("a checker did not find the image clean (see the exit column)");
    }
    Ok(())
}

/// Writes `text` to a temporary file beside `path`, then renames it, so an
/// interrupted run leaves no half-written report.
fn write_whole(path: &std::path::Path, text: &str) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", PathBuf::from(&tmp).display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
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
        profile: a.profile,
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
