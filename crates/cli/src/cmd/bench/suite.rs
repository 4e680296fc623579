//! `ext4kit bench WORKLOAD`: one workload of the suite
//! (`ext4kit_bench::suite`) on an image (the engine on the disk model,
//! modeled time), a directory, or a kernel loop mount made for the run.
//! Prints Markdown; `--json` also writes the report. Fails on an image
//! e2fsck does not find clean. Ctrl-C ends the run through its cleanup:
//! no mount, loop device or half-written report is left.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ext4kit_bench::suite::compare::{self, Variant};
use ext4kit_bench::suite::{self, Params, Progress, TargetOptions, TargetSpec};
use ext4kit_engine::dir::{DEFAULT_SNAPSHOT_LIMIT, ReadDirOptions, ReadDirOrder};
use ext4kit_engine::mkfs::parse_size;
use ext4kit_engine::{AllocOptions, BlockAllocator, InodeAllocator};

/// The flags every suite workload takes.
#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// An image file (made if missing, with --features) or a directory on
    /// any mounted file system.
    #[arg(
        long,
        value_name = "PATH",
        required_unless_present = "kernel",
        conflicts_with = "kernel"
    )]
    target: Option<PathBuf>,
    /// Make a kernel file system of this type (ext2, ext3, ext4) on a loop
    /// device for the run, and remove it after (root).
    #[arg(long, value_name = "TYPE")]
    kernel: Option<String>,
    /// Entries or files.
    #[arg(short = 'n', value_name = "N")]
    n: Option<u64>,
    /// Bytes (per file or in all, as the workload says), e.g. 256M.
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Bytes per read or write call, e.g. 1M.
    #[arg(long, value_name = "SIZE")]
    io_size: Option<String>,
    /// Multiplies the preset's counts, e.g. 0.1 for a quick run.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    scale: f64,
    /// A named configuration of the workload.
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// Threads, for workloads that run several.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Seed of the random choices.
    #[arg(long, value_name = "SEED", default_value_t = 0x5eed)]
    seed: u64,
    /// Disk model profile under an image: hp-sas-10k, ssd or none.
    #[arg(long, value_name = "PROFILE", default_value = "hp-sas-10k")]
    disk: String,
    /// Page cache in front of the disk model, e.g. 64M; 0 for none.
    #[arg(long, value_name = "SIZE", default_value = "64M")]
    cache: String,
    /// `-t` of an image the run makes: ext2, ext3 or ext4.
    #[arg(long = "type", value_name = "TYPE")]
    fs_type: Option<String>,
    /// `-O` features of an image the run makes (new image or --kernel),
    /// e.g. ^dir_index,^flex_bg.
    #[arg(long, value_name = "LIST")]
    features: Option<String>,
    /// Block size of an image the run makes (new image or --kernel), e.g.
    /// 1024 or 4096 [default: an image by its size as mke2fs picks, 1 KiB
    /// below 512 MiB; --kernel 4096].
    #[arg(long, value_name = "BYTES")]
    block_size: Option<u32>,
    /// Size of an image the run makes [default: what the workload needs].
    #[arg(long, value_name = "SIZE")]
    image_size: Option<String>,
    /// Block allocator the engine uses on an image: mballoc (default) or
    /// ext3. Not for a directory or --kernel, which allocate as their own
    /// file system does.
    #[arg(long, value_name = "ALLOC")]
    alloc: Option<BlockAllocator>,
    /// Inode allocator the engine uses on an image: orlov (default),
    /// flexbg or parent. Not for a directory or --kernel.
    #[arg(long, value_name = "ALLOC")]
    inode_alloc: Option<InodeAllocator>,
    /// Order the engine lists directories in on an image: hash (the
    /// kernel's, default) or inode (a sorted snapshot, as `-o readdir=inode`).
    /// A directory with an itree lists in inode order either way.
    #[arg(long, value_name = "ORDER")]
    readdir: Option<ReadDirOrder>,
    /// Most entries a `--readdir inode` snapshot holds (the mount's
    /// `readdir_snapshot=`); a bigger directory is listed in hash order.
    #[arg(long, value_name = "N")]
    readdir_snapshot: Option<usize>,
    /// Where --kernel puts its image.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp")]
    scratch: PathBuf,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also plot the report to this .svg or .png (phase times; a modeled
    /// run adds FILE-seeks with its seek distances).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Run the workload again with these settings changed, for a side by
    /// side table (repeatable): key=value pairs, comma-separated, of
    /// type, features (joined by +), disk, cache, alloc, inode_alloc,
    /// mb_flex_aware (0 or 1), readdir (hash or inode) and readdir_snapshot
    /// (entries: the mount options),
    /// flex (mkfs -G: a number or auto),
    /// flex_meta (mkfs -E: start or middle), target, kernel; e.g.
    /// `--compare features=^dir_index --compare alloc=ext3`.
    #[arg(long, value_name = "SPEC")]
    compare: Vec<String>,
    /// Runs of each variant with --compare, alternating; medians are
    /// reported.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=100))]
    rounds: u16,
}

fn size(flag: &str, v: &Option<String>) -> Result<Option<u64>> {
    v.as_deref()
        .map(|s| parse_size(s).with_context(|| format!("--{flag} {s}")))
        .transpose()
}

impl SuiteArgs {
    fn spec(&self) -> Result<TargetSpec> {
        match (&self.target, &self.kernel) {
            (Some(p), None) => TargetSpec::from_path(p),
            (None, Some(k)) => TargetSpec::kernel(k),
            _ => bail!("give --target PATH or --kernel TYPE"),
        }
    }

    fn params(&self) -> Result<Params> {
        if !(self.scale > 0.0 && self.scale.is_finite()) {
            bail!("--scale must be a positive number");
        }
        if self.n == Some(0) || self.threads == Some(0) {
            bail!("-n and --threads must be at least 1");
        }
        Ok(Params {
            n: self.n,
            size: size("size", &self.size)?,
            scale: self.scale,
            preset: self.preset.clone(),
            threads: self.threads,
            io_size: size("io-size", &self.io_size)?,
            seed: self.seed,
        })
    }

    fn target_options(&self, spec: &TargetSpec) -> Result<TargetOptions> {
        if self.alloc.is_some() || self.inode_alloc.is_some() {
            spec.engine_only("--alloc or --inode-alloc")?;
        }
        let defaults = AllocOptions::default();
        Ok(TargetOptions {
            disk: self.disk.parse().with_context(|| format!("--disk {}", self.disk))?,
            cache_bytes: parse_size(&self.cache).with_context(|| format!("--cache {}", self.cache))?,
            image_bytes: size("image-size", &self.image_size)?.unwrap_or(0),
            inodes: 0,
            fs_type: self.fs_type.clone(),
            features: self
                .features
                .iter()
                .flat_map(|f| f.split(','))
                .filter(|f| !f.is_empty())
                .map(str::to_string)
                .collect(),
            block_size: self.block_size,
            flex: None,
            extended: Vec::new(),
            scratch: self.scratch.clone(),
            alloc: AllocOptions {
                blocks: self.alloc.unwrap_or(defaults.blocks),
                inodes: self.inode_alloc.unwrap_or(defaults.inodes),
                ..defaults
            },
            readdir: ReadDirOptions {
                order: self.readdir.unwrap_or_default(),
                snapshot_limit: self.readdir_snapshot.unwrap_or(DEFAULT_SNAPSHOT_LIMIT),
            },
        })
    }
}

/// Runs workload `name` as `a` says.
pub fn run(name: &str, a: &SuiteArgs) -> Result<()> {
    let w = suite::workload(name)?;
    let spec = a.spec()?;
    let params = a.params()?;
    let opts = a.target_options(&spec)?;
    let (flag, _guard) = suite::interrupt_flag()?;
    let started = Instant::now();
    let mut bar: Option<indicatif::ProgressBar> = None;
    let mut show = |done: u64, total: u64| {
        if bar.is_none() && started.elapsed() > Duration::from_secs(1) {
            bar = Some(new_bar(name, total));
        }
        if let Some(b) = &bar {
            b.set_length(total);
            b.set_position(done);
        }
    };
    let mut progress = Progress::new(&mut show, flag);
    let done = if a.compare.is_empty() {
        run_one(w, a, spec, &opts, &params, &mut progress)
    } else {
        run_compare(w, a, spec, opts, &params, &mut progress)
    };
    if let Some(b) = bar.take() {
        b.finish_and_clear();
    }
    let (markdown, json, failed) = done?;
    outln!("{markdown}");
    if let Some(path) = &a.json {
        super::write_whole(path, &json)?;
    }
    if let Some(why) = failed {
        bail!("{why}");
    }
    Ok(())
}

fn new_bar(name: &str, total: u64) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} {elapsed}") {
        b.set_style(style);
    }
    b.set_message(name.to_string());
    b
}

/// Markdown, JSON, and why the run failed if it did.
type Printed = (String, String, Option<String>);

fn run_one(
    w: &suite::Workload,
    a: &SuiteArgs,
    spec: TargetSpec,
    opts: &TargetOptions,
    params: &Params,
    progress: &mut Progress,
) -> Result<Printed> {
    let report = suite::run(w, &spec, opts, params, progress)?;
    if let Some(path) = &a.plot {
        suite::plots::plot_report(&report, path)?;
    }
    let failed = report
        .failed()
        .then(|| format!("{} is not e2fsck-clean after the run", spec.describe()));
    Ok((report.to_markdown(), report.to_json(), failed))
}

fn run_compare(
    w: &suite::Workload,
    a: &SuiteArgs,
    spec: TargetSpec,
    opts: TargetOptions,
    params: &Params,
    progress: &mut Progress,
) -> Result<Printed> {
    let base = Variant {
        label: "base".into(),
        spec,
        opts,
    };
    let mut variants = vec![base.clone()];
    for c in &a.compare {
        variants.push(Variant::derive(&base, c)?);
    }
    let report = compare::compare(w, &variants, params, usize::from(a.rounds), progress)?;
    if let Some(path) = &a.plot {
        suite::plots::plot_compare(&report, path)?;
    }
    let failed = report
        .failed()
        .then(|| "an image was not e2fsck-clean after its run (see above)".to_string());
    Ok((report.to_markdown(), report.to_json(), failed))
}
