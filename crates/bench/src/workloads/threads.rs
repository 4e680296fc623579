//! `threads`: small-file metadata throughput from one thread and from two
//! threads working in separate directories. Each file is created, given
//! 4 KiB and closed; then all are unlinked. The 2/1 ratio shows whether
//! the file system (on FUSE: the server and its locking) lets two
//! independent writers proceed in parallel.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use super::{per_sec, workdir};
use crate::report::Metric;

/// Runs `files` create+write+close and `files` unlinks from 1 thread, then
/// the same split over 2 threads.
pub fn run(mnt: &Path, files: usize) -> Result<Vec<Metric>> {
    let root = workdir(mnt, "threads")?;
    let one = timed(&root.join("one"), 1, files)?;
    let two = timed(&root.join("two"), 2, files)?;
    let ops = 2.0 * files as f64;
    let (r1, r2) = (per_sec(ops, one), per_sec(ops, two));
    Ok(vec![
        Metric::higher("1 thread", r1, "ops/s"),
        Metric::higher("2 threads", r2, "ops/s"),
        Metric::higher("2/1 scaling", r2 / r1.max(1e-9), "ratio"),
    ])
}

/// Wall time for `threads` threads, each in its own directory under
/// `base`, to do their share of `files`.
fn timed(base: &Path, threads: usize, files: usize) -> Result<Duration> {
    fs::create_dir(base)?;
    let dirs: Vec<_> = (0..threads).map(|t| base.join(format!("t{t}"))).collect();
    for d in &dirs {
        fs::create_dir(d)?;
    }
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(t, d)| {
                let share = files / threads + usize::from(t < files % threads);
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    churn(d, share)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for w in workers {
            w.join().map_err(|_| anyhow!("a worker thread panicked"))??;
        }
        Ok(start.elapsed())
    })
}

/// Creates `n` files of 4 KiB in `dir`, then unlinks them.
fn churn(dir: &Path, n: usize) -> Result<()> {
    let data = [0x5au8; 4096];
    let names: Vec<_> = (0..n).map(|i| dir.join(format!("m{i:06}"))).collect();
    for p in &names {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p)
            .with_context(|| format!("create {}", p.display()))?;
        f.write_all(&data).with_context(|| format!("write {}", p.display()))?;
    }
    for p in &names {
        fs::remove_file(p).with_context(|| format!("unlink {}", p.display()))?;
    }
    Ok(())
}
