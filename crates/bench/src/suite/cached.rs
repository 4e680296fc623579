//! `cached`: the calls a warm cache can answer — stat of every file,
//! readdir of their directory, open+close of every file — after one
//! untimed pass has warmed it. On a mount this measures the kernel's
//! attribute, dentry and directory caches and, on FUSE, the front end's
//! cache policy (entry and attribute timeouts, keeping directory pages;
//! open and release always reach the server). On an image it measures
//! the engine's own path with its metadata in the page cache, so the
//! modeled disk time is about zero and wall time is the figure. The
//! `bench mount` workload of the same name (issue 22's "cached stat" and
//! "open+close" goals); no seed has it.
//!
//! `-n` files (default 10,000, scaled); 5 stat passes, 20 readdir passes,
//! one open+close pass.

use anyhow::{Result, ensure};

use super::fs::{BenchFs, Span, timed};
use super::{Outcome, Params, Phase, Progress, Workload};

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "cached",
    about: "warm stat, readdir and open+close of N empty files in one directory",
    image_size,
    run,
    inspect: None,
};

const DEFAULT_FILES: u64 = 10_000;
const STAT_PASSES: u64 = 5;
const READDIR_PASSES: u64 = 20;

fn image_size(p: &Params) -> (u64, u64) {
    let n = p.n_or(DEFAULT_FILES);
    ((64 << 20) + 64 * n, n + 1024)
}

fn name(i: u64) -> String {
    format!("c{i:06}")
}

fn stat_all(fs: &dyn BenchFs, names: &[String]) -> Result<()> {
    for n in names {
        let st = fs.stat(n)?;
        ensure!(!st.is_dir && st.size == 0, "{n}: stat says {st:?}, not an empty file");
    }
    Ok(())
}

fn list(fs: &dyn BenchFs, n: u64) -> Result<()> {
    let listed = fs.read_dir("")?.len() as u64;
    ensure!(listed == n, "readdir listed {listed} entries, expected {n}");
    Ok(())
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let n = p.n_or(DEFAULT_FILES);
    progress.set_total(n * (3 + STAT_PASSES) + READDIR_PASSES + 1);
    let mut out = Outcome::default();
    out.params.insert("files".into(), n.into());
    out.params.insert("stat_passes".into(), STAT_PASSES.into());
    out.params.insert("readdir_passes".into(), READDIR_PASSES.into());
    let fs: &dyn BenchFs = fs;
    let names: Vec<String> = (0..n).map(name).collect();

    let mut made = Span::default();
    for f in &names {
        let ((), s) = timed(fs, || fs.close(fs.create(f)?))?;
        made.add(&s);
    }
    progress.step(n)?;
    out.phases.push(Phase::new("create", n, 0, made));
    stat_all(fs, &names)?;
    list(fs, n)?;
    progress.step(n + 1)?;

    let mut stat = Span::default();
    for _ in 0..STAT_PASSES {
        let ((), s) = timed(fs, || stat_all(fs, &names))?;
        stat.add(&s);
        progress.step(n)?;
    }
    out.phases.push(Phase::new("stat (warm)", STAT_PASSES * n, 0, stat));
    let mut listing = Span::default();
    for _ in 0..READDIR_PASSES {
        let ((), s) = timed(fs, || list(fs, n))?;
        listing.add(&s);
        progress.step(1)?;
    }
    out.phases
        .push(Phase::new("readdir (warm, entries)", READDIR_PASSES * n, 0, listing));
    let ((), s) = timed(fs, || {
        for f in &names {
            fs.close(fs.open(f, false)?)?;
        }
        Ok(())
    })?;
    progress.step(n)?;
    out.phases.push(Phase::new("open+close", n, 0, s));
    Ok(out)
}
