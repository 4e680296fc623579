//! `create`: `-n` empty files created in the workload's new directory, each timed
//! alone, then a sync. Besides the rate, the median time of one create
//! among the first and among the last 5 % shows whether a create's cost
//! grows with the directory — the effect seed 000 measures (§3, Figure 1:
//! ext2's linear directory, where every create first scans the whole
//! directory for the name); an htree keeps the two medians close.
//! `create-scale` plots the whole curve; this is its two-point summary,
//! cheap enough for `bench mount`.
//!
//! Then, caches dropped, every file is opened and closed once in a
//! random order (`--seed`): issue 22's "cold random open", each open a
//! look-up the file system must answer from disk.
//!
//! `-n` files (default 100,000, scaled). Names are `f0000000`…, so every
//! target sees the same directory.

use anyhow::{Result, ensure};

use super::fs::{BenchFs, Cold, Span, timed};
use super::{Outcome, Params, Phase, Progress, Workload};

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "create",
    about: "seed 000 in brief: empty files in one directory; rate and median µs of the first and last 5 %",
    image_size,
    run,
    inspect: None,
};

const DEFAULT_FILES: u64 = 100_000;

fn image_size(p: &Params) -> (u64, u64) {
    let n = p.n_or(DEFAULT_FILES);
    // A directory entry of an 8-byte name takes 16 bytes; allow 64.
    ((64 << 20) + 64 * n, n + 1024)
}

/// The median of `v` (reorders it); 0 for none.
pub(crate) fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let mid = v.len() / 2;
    *v.select_nth_unstable(mid).1
}

/// Medians of the first and last 5 % of `each` (ns), in µs, and their
/// ratio (`None` when the first is zero), under keys starting with `prefix`.
fn medians(out: &mut Outcome, each: &mut [u64], prefix: &str) {
    let len = each.len();
    let k = (len / 20).max(1).min(len);
    let first = median(&mut each[..k]) as f64 / 1e3;
    let last = median(&mut each[len - k..]) as f64 / 1e3;
    out.values.insert(format!("{prefix}median_us_first_5pct"), first.into());
    out.values.insert(format!("{prefix}median_us_last_5pct"), last.into());
    let ratio = (first > 0.0).then(|| last / first);
    out.values.insert(format!("{prefix}last_over_first"), ratio.into());
}

fn name(i: u64) -> String {
    format!("f{i:07}")
}

/// Opens and closes every file once in a seeded random order, caches
/// dropped first.
fn open_cold(fs: &mut dyn BenchFs, n: u64, seed: u64, out: &mut Outcome) -> Result<()> {
    let cold = fs.drop_caches()?;
    if cold == Cold::No {
        out.notes
            .push("not root: the host's caches could not be dropped; the opens ran warm".into());
    }
    let mut order: Vec<u64> = (0..n).collect();
    let mut rng = crate::rng::Rng::new(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let fs: &dyn BenchFs = fs;
    let ((), s) = timed(fs, || {
        for &i in &order {
            fs.close(fs.open(&name(i), false)?)?;
        }
        Ok(())
    })?;
    out.phases.push(Phase::new("open (cold, random order)", n, 0, s));
    Ok(())
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let n = p.n_or(DEFAULT_FILES);
    progress.set_total(n);
    let mut out = Outcome::default();
    out.params.insert("files".into(), n.into());
    create_all(fs, n, progress, &mut out)?;
    open_cold(fs, n, p.seed, &mut out)?;
    Ok(out)
}

fn create_all(fs: &dyn BenchFs, n: u64, progress: &mut Progress, out: &mut Outcome) -> Result<()> {
    let (mut each, mut wall) = (Vec::with_capacity(n as usize), Vec::with_capacity(n as usize));
    let mut all = Span::default();
    for i in 0..n {
        let name = name(i);
        let ((), s) = timed(fs, || fs.close(fs.create(&name)?))?;
        each.push(s.ns());
        wall.push(s.wall_ns);
        all.add(&s);
        if i % 256 == 255 {
            progress.step(256)?;
        }
    }
    let modeled = all.modeled.is_some();
    out.phases.push(Phase::new("create", n, 0, all));
    let ((), s) = timed(fs, || fs.sync())?;
    out.phases.push(Phase::new("sync", 1, 0, s));
    let listed = fs.read_dir("")?.len() as u64;
    ensure!(listed == n, "the directory lists {listed} entries after {n} creates");

    medians(out, &mut each, "");
    if modeled {
        // A create whose blocks are all in the page cache costs no modeled
        // time; the engine's own work shows in wall time.
        medians(out, &mut wall, "wall_");
    }
    Ok(())
}
