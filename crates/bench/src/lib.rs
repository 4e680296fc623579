//! `ext4kit bench mount`: the same workloads on the same kind of image,
//! mounted three ways — kernel ext4 through a loop device, fuse2fs
//! (e2fsprogs' FUSE driver) and `ext4kit mount` — so that the FUSE front
//! end can be compared with its peer and with the kernel within one run on
//! one machine.
//!
//! Every target gets a fresh image made with the same `mkfs.ext4` options,
//! is mounted, runs the selected workloads, is unmounted (waiting until the
//! server has written the image) and is checked with `e2fsck -fn`: a dirty
//! image makes the run fail, however fast it was.
//!
//! The workloads are the suite's ([`suite`]), each defined once against
//! [`suite::BenchFs`] and run here through [`suite::host::HostFs`] on the
//! mount; [`mount_suite`] maps this benchmark's sizes to their parameters
//! and their phases back to its figures.
//!
//! `ext4kit bench journal` ([`journal`]) measures the engine itself,
//! through its library API: a metadata-heavy workload with and without a
//! jbd2 journal.

pub mod config;
pub mod create_scale;
pub mod fsck;
pub mod fuse_trace;
pub mod hugedir;
pub mod journal;
pub mod modeled;
pub mod mount_suite;
pub mod plot;
pub mod report;
pub mod rng;
pub mod rounds;
pub mod suite;
pub mod system;
pub mod tarball;
pub mod target;

pub use config::{Config, Sizes, Target, TargetRun, Workload};
pub use report::{FsckOutcome, Metric, Report, TargetReport, WorkloadResult};

/// Runs the benchmark described by `cfg`: every target in turn, each on a
/// fresh image, `cfg.rounds` times over (figures are then medians). Never
/// panics on a failing target; failures and skips are recorded in the
/// report (see [`Report::failed`]). Ctrl-C ends the running workload, and
/// the run fails once its target is unmounted and its image checked, so
/// no mount is left behind.
pub fn run(cfg: &Config) -> anyhow::Result<Report> {
    let work = cfg.work_dir()?;
    let (interrupted, _guard) = suite::interrupt_flag()?;
    let mut report = Report::new(cfg);
    let rounds = cfg.rounds.max(1);
    let targets = cfg.runs();
    let tracer = if cfg.profile {
        Some(fuse_trace::Tracer::new()?)
    } else {
        None
    };
    let mut runs: Vec<Vec<TargetReport>> = vec![Vec::new(); targets.len()];
    for round in 1..=rounds {
        if rounds > 1 {
            log(&format!("round {round} of {rounds}"));
        }
        for (runs, t) in runs.iter_mut().zip(&targets) {
            runs.push(target::run_target(cfg, t, work.path(), &interrupted, tracer.as_ref()));
            if interrupted.load(std::sync::atomic::Ordering::Relaxed) {
                anyhow::bail!("interrupted");
            }
        }
    }
    report.targets = runs.into_iter().filter_map(rounds::median_of).collect();
    Ok(report)
}

/// Progress on stderr: the benchmark takes minutes and stdout carries the
/// report.
pub(crate) fn log(msg: &str) {
    eprintln!("bench: {msg}");
}
