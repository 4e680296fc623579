//! `bench mount` as a preset of the suite (issue 14): each of its
//! workloads is a [`crate::suite`] workload run through
//! [`HostFs`] in its own directory of the mount, with [`Sizes`] mapped to
//! [`Params`], and the suite's [`Outcome`] turned back into the figures
//! the mount report has always shown (so its tables and JSON keep their
//! metric names). `seqwrite` and `seqread` are the two halves of one
//! `seqio` run.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result, anyhow};

use crate::config::{Sizes, Workload};
use crate::fuse_trace::{self, Profile, Tracer};
use crate::report::Metric;
use crate::suite::host::HostFs;
use crate::suite::{self, Outcome, Params, Phase, Progress};

/// The seed of the `untar` tree: the tarball `bench mount` always used.
const TREE_SEED: u64 = 0x7a11;

/// The suite workload behind `w` and its parameters at `sizes`.
pub fn suite_params(w: Workload, sizes: &Sizes) -> (&'static str, Params) {
    let n = |v: usize| Params {
        n: Some(v as u64),
        ..Params::default()
    };
    match w {
        Workload::Create => ("create", n(sizes.create_files)),
        Workload::Postmark => (
            "postmark",
            Params {
                preset: Some("mount".into()),
                // The preset's 50,000 transactions are the full run's.
                scale: sizes.postmark_transactions as f64 / Sizes::FULL.postmark_transactions as f64,
                ..n(sizes.postmark_files)
            },
        ),
        Workload::Seqwrite | Workload::Seqread => (
            "seqio",
            Params {
                size: Some(sizes.seq_bytes),
                io_size: Some(1 << 20),
                ..Params::default()
            },
        ),
        Workload::Untar => (
            "untar",
            Params {
                seed: TREE_SEED,
                ..n(sizes.untar_files)
            },
        ),
        Workload::Cached => ("cached", n(sizes.cached_files)),
        Workload::Threads => (
            "threads",
            Params {
                threads: Some(2),
                ..n(sizes.thread_files)
            },
        ),
    }
}

/// A suite run on the mount, with its FUSE profile when one was taken.
type Ran = (Outcome, Option<Profile>);

/// Runs the mount's workloads on one mounted file system.
pub struct Runner<'a> {
    mnt: &'a Path,
    sizes: Sizes,
    interrupted: Arc<AtomicBool>,
    /// Records the mount's FUSE requests around each workload (`--profile`).
    tracer: Option<&'a Tracer>,
    /// The `seqio` run `seqwrite` and `seqread` share, once made.
    seqio: Option<Result<Ran, String>>,
}

impl<'a> Runner<'a> {
    /// Works under `mnt`; a workload fails once `interrupted` is set.
    pub fn new(mnt: &'a Path, sizes: Sizes, interrupted: Arc<AtomicBool>) -> Self {
        Self {
            mnt,
            sizes,
            interrupted,
            tracer: None,
            seqio: None,
        }
    }

    /// Profiles every workload with `tracer` (the mount must be FUSE).
    pub fn with_tracer(self, tracer: Option<&'a Tracer>) -> Self {
        Self { tracer, ..self }
    }

    /// Runs `w` (or takes its half of the `seqio` run) and gives its
    /// figures and, with a tracer, its profile (`seqwrite` and `seqread`
    /// share the profile of their one run, split by phase).
    pub fn run(&mut self, w: Workload) -> Result<(Vec<Metric>, Option<Profile>)> {
        let (name, params) = suite_params(w, &self.sizes);
        if name != "seqio" {
            let (out, profile) = self.run_suite(name, &params)?;
            return Ok((metrics(w, &out)?, profile));
        }
        if self.seqio.is_none() {
            self.seqio = Some(self.run_suite(name, &params).map_err(|e| format!("{e:#}")));
        }
        match self.seqio.as_ref() {
            Some(Ok((out, profile))) => Ok((metrics(w, out)?, profile.clone())),
            Some(Err(e)) => Err(anyhow!("seqio: {e}")),
            None => unreachable!("seqio ran just above"),
        }
    }

    /// Runs suite workload `name` in a new directory `mnt/name`.
    fn run_suite(&self, name: &str, params: &Params) -> Result<Ran> {
        let w = suite::workload(name)?;
        let dir = self.mnt.join(if name == "seqio" { "seq" } else { name });
        std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        let mut fs = HostFs::new(&dir)?;
        let mut quiet = |_: u64, _: u64| {};
        let mut progress = Progress::new(&mut quiet, self.interrupted.clone());
        let Some(tracer) = self.tracer else {
            return Ok(((w.run)(&mut fs, params, &mut progress)?, None));
        };
        let (out, cap) = tracer.capture(self.mnt, || (w.run)(&mut fs, params, &mut progress))?;
        let out = out?;
        let profile = fuse_trace::profile_of(&cap, &out.phases);
        Ok((out, Some(profile)))
    }
}

fn phase<'o>(out: &'o Outcome, name: &str) -> Result<&'o Phase> {
    out.phases
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| anyhow!("the suite workload reported no phase {name:?}"))
}

fn value(out: &Outcome, key: &str) -> Result<f64> {
    out.values
        .get(key)
        .or_else(|| out.params.get(key))
        .and_then(serde_json::Value::as_f64)
        .ok_or_else(|| anyhow!("the suite workload reported no value {key:?}"))
}

fn secs(p: &Phase) -> f64 {
    p.span.ns() as f64 / 1e9
}

/// Per second over `s` seconds.
fn rate(n: f64, s: f64) -> f64 {
    n / s.max(1e-9)
}

/// The figures of mount workload `w` from its suite run `out`.
pub fn metrics(w: Workload, out: &Outcome) -> Result<Vec<Metric>> {
    let ph = |name| phase(out, name);
    Ok(match w {
        Workload::Create => {
            let (c, o) = (ph("create")?, ph("open (cold, random order)")?);
            let first = value(out, "median_us_first_5pct")?;
            let last = value(out, "median_us_last_5pct")?;
            vec![
                Metric::lower("total", secs(c), "s"),
                Metric::higher("files/s", rate(c.ops as f64, secs(c)), "files/s"),
                Metric::lower("median create, first 5%", first, "µs"),
                Metric::lower("median create, last 5%", last, "µs"),
                Metric::lower("flatness last/first", last / first.max(1e-9), "ratio"),
                Metric::higher("cold random open/s", rate(o.ops as f64, secs(o)), "ops/s"),
            ]
        }
        Workload::Postmark => {
            let t = ph("transactions")?;
            vec![
                Metric::higher("transactions/s", rate(t.ops as f64, secs(t)), "tx/s"),
                Metric::lower("transactions", secs(t), "s"),
                Metric::lower("initial pool", secs(ph("create (initial pool)")?), "s"),
            ]
        }
        Workload::Seqwrite => {
            let (write, fsync) = (ph("write")?, ph("fsync")?);
            let mb = write.bytes as f64 / 1e6;
            vec![
                Metric::higher("MB/s incl. fsync", rate(mb, secs(write) + secs(fsync)), "MB/s"),
                Metric::higher("MB/s before fsync", rate(mb, secs(write)), "MB/s"),
                Metric::lower("fsync", secs(fsync), "s"),
            ]
        }
        Workload::Seqread => {
            let read = ph("read (cold)")?;
            vec![Metric::higher(
                "MB/s cold",
                rate(read.bytes as f64 / 1e6, secs(read)),
                "MB/s",
            )]
        }
        Workload::Untar => {
            let (extract, sync, rm) = (ph("extract")?, ph("sync")?, ph("rm -rf")?);
            let total = secs(extract) + secs(sync);
            vec![
                Metric::lower("total incl. sync", total, "s"),
                Metric::lower("extract", secs(extract), "s"),
                Metric::lower("sync", secs(sync), "s"),
                Metric::higher("files/s", rate(extract.ops as f64, total), "files/s"),
                Metric::lower("rm -rf", secs(rm), "s"),
                Metric::higher("rm -rf entries/s", rate(rm.ops as f64, secs(rm)), "entries/s"),
            ]
        }
        Workload::Cached => {
            let (stat, list, open) = (ph("stat (warm)")?, ph("readdir (warm, entries)")?, ph("open+close")?);
            vec![
                Metric::higher("stat/s", rate(stat.ops as f64, secs(stat)), "ops/s"),
                Metric::higher("readdir entries/s", rate(list.ops as f64, secs(list)), "entries/s"),
                Metric::higher(
                    "readdir passes/s",
                    rate(value(out, "readdir_passes")?, secs(list)),
                    "passes/s",
                ),
                Metric::higher("open+close/s", rate(open.ops as f64, secs(open)), "ops/s"),
            ]
        }
        Workload::Threads => {
            let (one, two) = (ph("1 thread")?, ph("2 threads")?);
            vec![
                Metric::higher("1 thread", rate(one.ops as f64, secs(one)), "ops/s"),
                Metric::higher("2 threads", rate(two.ops as f64, secs(two)), "ops/s"),
                Metric::higher("2/1 scaling", value(out, "scaling")?, "ratio"),
            ]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Sizes {
        Sizes {
            image_bytes: 0,
            create_files: 200,
            postmark_files: 50,
            postmark_dirs: 10,
            postmark_transactions: 200,
            seq_bytes: 3 << 20,
            untar_files: 40,
            cached_files: 50,
            thread_files: 20,
        }
    }

    /// Every mount workload runs its suite workload on a plain directory
    /// (no root: caches stay warm) at tiny sizes and gives the metric
    /// names the report has always had, finite and not negative; the
    /// sizes reach the suite as parameters.
    #[test]
    fn every_workload_runs_through_the_suite_on_a_plain_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Runner::new(dir.path(), tiny(), Arc::new(AtomicBool::new(false)));
        for w in Workload::ALL {
            let (m, profile) = r.run(w).unwrap_or_else(|e| panic!("{w}: {e:#}"));
            assert!(profile.is_none(), "no tracer, no profile");
            assert!(!m.is_empty(), "{w}");
            for x in &m {
                assert!(x.value.is_finite() && x.value >= 0.0, "{w} {}: {}", x.name, x.value);
            }
        }
        assert_eq!(std::fs::read_dir(dir.path().join("create")).unwrap().count(), 200);
        let names: Vec<String> = r
            .run(Workload::Seqread)
            .unwrap()
            .0
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(names, ["MB/s cold"], "seqread reuses the one seqio run");
    }

    /// The mount preset of postmark runs the sizes' files, transactions
    /// and subdirectories, full and quick.
    #[test]
    fn postmark_gets_the_sizes_files_transactions_and_subdirectories() {
        for sizes in [Sizes::FULL, Sizes::QUICK] {
            let (name, p) = suite_params(Workload::Postmark, &sizes);
            assert_eq!(name, "postmark");
            assert_eq!(p.n, Some(sizes.postmark_files as u64));
            assert_eq!(p.scaled(50_000), sizes.postmark_transactions as u64);
        }
        let dir = tempfile::tempdir().unwrap();
        let sizes = tiny();
        let r = Runner::new(dir.path(), sizes, Arc::new(AtomicBool::new(false)));
        let (_, p) = suite_params(Workload::Postmark, &sizes);
        let (out, _) = r.run_suite("postmark", &p).unwrap();
        assert_eq!(out.params["files"], 50);
        assert_eq!(out.params["transactions"], 200);
        assert_eq!(out.params["subdirectories"], sizes.postmark_dirs);
        assert_eq!(out.params["size_high"], 16_384);
    }
}
