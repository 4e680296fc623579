//! `threads`: small-file metadata throughput from one thread, then from
//! several working at once in directories of their own. Each file is
//! created, given 4 KiB in one write and closed; then every file is
//! unlinked. The ratio of the two rates shows whether the file system
//! lets independent writers proceed in parallel — on FUSE, whether the
//! server and its locking do; on an image, the engine's locks (seed 001
//! §4.3 makes the same 1-vs-many comparison with FFSB, Table 3). The
//! `bench mount` workload of the same name.
//!
//! `-n` files per configuration (default 20,000, scaled), shared out over
//! the threads; `--threads` for the second configuration (default 2).
//! Several threads share the disk model's clock, so a threaded run's
//! modeled figures are not deterministic. The `scaling` value is the ratio
//! of wall-clock rates even on an image: the disk model charges no CPU or
//! lock waits, and files that stay in the page cache cost no modeled time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, mpsc};
use std::time::Duration;

use anyhow::{Result, anyhow, bail, ensure};

use super::fs::{BenchFs, Span};
use super::postmark::fuse_hidden;
use super::{Outcome, Params, Phase, Progress, Workload};

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "threads",
    about: "create+write 4 KiB+close then unlink N files from 1 thread, then from --threads (2)",
    image_size,
    run,
    inspect: None,
};

const DEFAULT_FILES: u64 = 20_000;
const DEFAULT_THREADS: usize = 2;
const FILE_BYTES: usize = 4096;

fn image_size(p: &Params) -> (u64, u64) {
    let n = p.n_or(DEFAULT_FILES);
    ((64 << 20) + n * (FILE_BYTES as u64 + 256), n + 1024)
}

/// The error of a worker that stopped because another one failed.
const STOPPED: &str = "stopped: another thread failed or the run was interrupted";

/// What the worker threads share with the thread that reports progress.
struct Shared<'a> {
    fs: &'a dyn BenchFs,
    done: AtomicU64,
    stop: AtomicBool,
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let n = p.n_or(DEFAULT_FILES);
    let many = p.threads.unwrap_or(DEFAULT_THREADS).clamp(1, 256);
    progress.set_total(4 * n);
    let mut out = Outcome::default();
    out.params.insert("files".into(), n.into());
    out.params.insert("threads".into(), many.into());
    out.params.insert("file_bytes".into(), FILE_BYTES.into());
    let fs: &dyn BenchFs = fs;
    let mut rates = Vec::new();
    for (dir, label, threads) in [
        ("one", "1 thread".to_string(), 1),
        ("many", format!("{many} threads"), many),
    ] {
        let span = churn_all(fs, dir, threads, n, progress)?;
        for t in 0..threads {
            let listed = fs.read_dir(&format!("{dir}/w{t}"))?;
            let left = listed.iter().filter(|e| !fuse_hidden(&e.name)).count();
            ensure!(left == 0, "{dir}/w{t}: {left} files left after unlinking all");
        }
        let phase = Phase::new(label, 2 * n, n * FILE_BYTES as u64, span);
        rates.push(phase.ops as f64 * 1e9 / phase.span.wall_ns.max(1) as f64);
        out.phases.push(phase);
    }
    out.values
        .insert("scaling".into(), (rates[1] / rates[0].max(1e-9)).into());
    if many > 1 && out.phases[1].span.modeled.is_some() {
        out.notes
            .push("threads share the disk model's clock: a threaded run is not deterministic".into());
    }
    Ok(out)
}

/// The span of `threads` threads, each in its own directory under `dir`,
/// doing their share of `n` files; this thread reports progress.
fn churn_all(fs: &dyn BenchFs, dir: &str, threads: usize, n: u64, progress: &mut Progress) -> Result<Span> {
    fs.mkdir(dir)?;
    for t in 0..threads {
        fs.mkdir(&format!("{dir}/w{t}"))?;
    }
    let sh = Shared {
        fs,
        done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    let barrier = Barrier::new(threads + 1);
    let (ended, ends) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let share = n / threads as u64 + u64::from((t as u64) < n % threads as u64);
                let (sh, barrier, d, ended) = (&sh, &barrier, format!("{dir}/w{t}"), ended.clone());
                s.spawn(move || {
                    barrier.wait();
                    let r = churn(sh, &d, share);
                    if r.is_err() {
                        sh.stop.store(true, Ordering::Relaxed);
                    }
                    let _ = ended.send(());
                    r
                })
            })
            .collect();
        drop(ended);
        barrier.wait();
        let start = fs.sample();
        let watched = watch(&sh, &ends, threads, progress);
        let span = start.until(&fs.sample());
        if watched.is_err() {
            sh.stop.store(true, Ordering::Relaxed);
        }
        let mut failed = None;
        for w in workers {
            let r = w.join().map_err(|_| anyhow!("a worker thread panicked"))?;
            match r {
                Err(e) if e.to_string() == STOPPED => {}
                r => failed = failed.or(r.err()),
            }
        }
        watched?;
        failed.map_or(Ok(span), Err)
    })
}

/// Creates `n` files of 4 KiB in `dir`, then unlinks them.
fn churn(sh: &Shared, dir: &str, n: u64) -> Result<()> {
    let data = [0x5au8; FILE_BYTES];
    let names: Vec<String> = (0..n).map(|i| format!("{dir}/m{i:06}")).collect();
    for name in &names {
        let f = sh.fs.create(name)?;
        sh.fs.write_at(&f, 0, &data)?;
        sh.fs.close(f)?;
        tick(sh)?;
    }
    for name in &names {
        sh.fs.unlink(name)?;
        tick(sh)?;
    }
    Ok(())
}

fn tick(sh: &Shared) -> Result<()> {
    sh.done.fetch_add(1, Ordering::Relaxed);
    if sh.stop.load(Ordering::Relaxed) {
        bail!(STOPPED);
    }
    Ok(())
}

/// Steps `progress` by the operations done until all `threads` workers
/// said they ended (waking at once for the last, so the span ends with
/// it); fails once the run is interrupted.
fn watch(sh: &Shared, ends: &mpsc::Receiver<()>, threads: usize, progress: &mut Progress) -> Result<()> {
    let (mut reported, mut ended) = (0, 0);
    while ended < threads {
        match ends.recv_timeout(Duration::from_millis(10)) {
            Ok(()) => ended += 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("a worker thread ended without saying so"),
        }
        let done = sh.done.load(Ordering::Relaxed);
        progress.step(done - reported)?;
        reported = done;
    }
    Ok(())
}
