//! The seeds' experiments as one suite (issue 14): each workload is
//! written once against [`fs::BenchFs`] and runs on any [`target`]: an
//! image through the engine on the disk model (modeled time, the same on
//! every machine), a mounted directory, or a kernel ext2/3/4 loop mount
//! made for the run. `ext4kit bench WORKLOAD --target PATH` runs one.
//!
//! Common flags: `-n` (entries or files), `--size` (bytes per file or
//! total, the workload says), `--scale` (shrinks a preset), `--preset`,
//! `--threads`, `--seed`; each workload documents what it takes.

pub mod aging;
pub mod cached;
pub mod compare;
pub mod compilebench;
pub mod create;
pub mod ffsb_meta;
pub mod fs;
pub mod fsparams;
pub mod host;
pub mod image;
pub mod image_counts;
pub mod interleave;
pub mod plots;
pub mod postmark;
pub mod randwrite;
pub mod readdir_stat;
pub mod report;
pub mod seqio;
pub mod target;
pub mod threads;
pub mod untar;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Result, bail};

pub use fs::{BenchFs, Span};
pub use report::{Outcome, Phase, SuiteReport};
pub use target::{Target, TargetOptions, TargetSpec};

/// The workload's own parameters, from the common flags.
#[derive(Debug, Clone)]
pub struct Params {
    /// Entries or files (`-n`).
    pub n: Option<u64>,
    /// Bytes (`--size`): per file or in all, as the workload says.
    pub size: Option<u64>,
    /// Multiplies a preset's counts (0 < scale).
    pub scale: f64,
    /// A named configuration of the workload (`--preset`).
    pub preset: Option<String>,
    /// Threads (`--threads`), for workloads that run several.
    pub threads: Option<usize>,
    /// Bytes per read or write call.
    pub io_size: Option<u64>,
    /// Seed of every random choice, so two runs do the same operations.
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            n: None,
            size: None,
            scale: 1.0,
            preset: None,
            threads: None,
            io_size: None,
            seed: 0x5eed,
        }
    }
}

impl Params {
    /// `n` if given, else `default` scaled (at least 1).
    pub fn n_or(&self, default: u64) -> u64 {
        self.n.unwrap_or_else(|| self.scaled(default))
    }

    /// `v` times the scale, at least 1.
    pub fn scaled(&self, v: u64) -> u64 {
        ((v as f64 * self.scale).round() as u64).max(1)
    }
}

/// A workload of the suite.
pub struct Workload {
    /// The name on the command line.
    pub name: &'static str,
    /// The seed it comes from and what it measures, for `--help`.
    pub about: &'static str,
    /// Bytes an image made for it needs, and inodes (0: mkfs's default).
    pub image_size: fn(&Params) -> (u64, u64),
    /// Runs it on a target's file system.
    pub run: fn(&mut dyn BenchFs, &Params, &mut Progress) -> Result<Outcome>,
    /// Reads the target's image once the run is over and it is unmounted,
    /// adding what it counts to the outcome: how a layout turned out is a
    /// property of the image, measured the same way whoever wrote it (the
    /// engine or a kernel). Not called on a directory target, which has no
    /// image of its own.
    pub inspect: Option<fn(&Path, &mut Outcome) -> Result<()>>,
}

/// Every workload, by name.
pub const WORKLOADS: &[Workload] = &[
    seqio::WORKLOAD,
    postmark::WORKLOAD,
    ffsb_meta::WORKLOAD,
    compilebench::WORKLOAD,
    fsparams::WORKLOAD,
    readdir_stat::WORKLOAD,
    randwrite::WORKLOAD,
    interleave::WORKLOAD,
    create::WORKLOAD,
    untar::WORKLOAD,
    cached::WORKLOAD,
    threads::WORKLOAD,
    aging::WORKLOAD,
];

/// The workload called `name`.
pub fn workload(name: &str) -> Result<&'static Workload> {
    match WORKLOADS.iter().find(|w| w.name == name) {
        Some(w) => Ok(w),
        None => {
            let names: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
            bail!("no workload {name}; the suite has {}", names.join(", "))
        }
    }
}

/// Progress of a run, and the way an interrupt reaches the workload: each
/// step fails once SIGINT or SIGTERM arrived, so the run unwinds through
/// the targets' cleanup instead of dying with a mount left behind.
pub struct Progress<'a> {
    done: u64,
    total: u64,
    report: &'a mut dyn FnMut(u64, u64),
    interrupted: Arc<AtomicBool>,
}

impl<'a> Progress<'a> {
    /// Reports through `report(done, total)`; steps fail once `interrupted` is set.
    pub fn new(report: &'a mut dyn FnMut(u64, u64), interrupted: Arc<AtomicBool>) -> Self {
        Self {
            done: 0,
            total: 0,
            report,
            interrupted,
        }
    }

    /// Work units expected in all.
    pub fn set_total(&mut self, total: u64) {
        self.total = total;
        (self.report)(self.done, self.total);
    }

    /// `n` more units done; fails when the run was interrupted.
    pub fn step(&mut self, n: u64) -> Result<()> {
        self.done += n;
        (self.report)(self.done, self.total.max(self.done));
        if self.interrupted.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        Ok(())
    }
}

/// A flag SIGINT and SIGTERM set (instead of ending the process) while the
/// returned guard lives.
pub fn interrupt_flag() -> Result<(Arc<AtomicBool>, InterruptGuard)> {
    let flag = Arc::new(AtomicBool::new(false));
    let mut ids = Vec::new();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        ids.push(signal_hook::flag::register(sig, flag.clone())?);
    }
    Ok((flag, InterruptGuard(ids)))
}

/// Gives SIGINT and SIGTERM their usual effect back when dropped.
pub struct InterruptGuard(Vec<signal_hook::SigId>);

impl Drop for InterruptGuard {
    fn drop(&mut self) {
        for id in self.0.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Wall ns one timing sample pair costs on `fs`: what the harness adds
/// to every timed operation.
pub fn harness_cost(fs: &dyn BenchFs) -> f64 {
    const PAIRS: u32 = 2_000;
    let t = Instant::now();
    let mut sink = 0u64;
    for _ in 0..PAIRS {
        let a = fs.sample();
        sink = sink.wrapping_add(a.until(&fs.sample()).wall_ns);
    }
    std::hint::black_box(sink);
    t.elapsed().as_nanos() as f64 / f64::from(PAIRS)
}

/// [`run`] of the workload called `name`, showing no progress and never
/// interrupted: for programs and tests that embed the suite.
pub fn run_quietly(name: &str, spec: &TargetSpec, opts: &TargetOptions, params: &Params) -> Result<SuiteReport> {
    let mut show = |_: u64, _: u64| {};
    let mut progress = Progress::new(&mut show, Arc::new(AtomicBool::new(false)));
    run(workload(name)?, spec, opts, params, &mut progress)
}

/// Runs workload `w` on `spec`: opens the target, measures the harness,
/// runs, closes and checks. The image stays; a directory target keeps
/// nothing.
pub fn run(
    w: &Workload,
    spec: &TargetSpec,
    opts: &TargetOptions,
    params: &Params,
    progress: &mut Progress,
) -> Result<SuiteReport> {
    let started = Instant::now();
    let mut opts = opts.clone();
    let (bytes, inodes) = (w.image_size)(params);
    opts.image_bytes = opts.image_bytes.max(bytes);
    if opts.inodes == 0 {
        opts.inodes = inodes;
    }
    let mut target = Target::open(spec, w.name, &opts)?;
    let harness = harness_cost(target.fs());
    let modeled = target.fs().sample().disk.is_some();
    let alloc = target.alloc();
    let mut outcome = (w.run)(target.fs(), params, progress);
    // Close whatever happened, so no mount or half-open image is left;
    // inspect only what a whole run left.
    let mut inspect = |image: &Path| match (&mut outcome, w.inspect) {
        (Ok(out), Some(f)) => f(image, out),
        _ => Ok(()),
    };
    let closed = target.close(&mut inspect);
    let mut outcome = outcome?;
    let closed = closed?;
    if w.inspect.is_some() && matches!(spec, TargetSpec::Dir(_)) {
        outcome.notes.push(format!(
            "{} is judged by counts of the image it leaves; a directory target has no image of its own, so they were not taken",
            w.name
        ));
    }
    let is_image = matches!(spec, TargetSpec::Image(_));
    Ok(SuiteReport {
        workload: w.name.to_string(),
        target: spec.describe(),
        target_kind: spec.kind(),
        disk: is_image.then(|| opts.disk.name().to_string()),
        page_cache_bytes: is_image.then_some(opts.cache_bytes),
        block_alloc: alloc.map(|a| {
            let mut name = a.blocks.to_string();
            if a.flex_aware {
                name.push_str(" flex-aware");
            }
            if !a.delalloc {
                name.push_str(" nodelalloc");
            }
            name
        }),
        inode_alloc: alloc.map(|a| a.inodes.to_string()),
        image_made: closed.image_made,
        modeled,
        outcome,
        harness_ns_per_sample: harness,
        fsck: closed.fsck,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}
