//! `create`: `-n` empty files created in the workload's new directory, each timed
//! alone, then a sync. Besides the rate, the median time of one create
//! among the first and among the last 5 % shows whether a create's cost
//! grows with the directory — the effect seed 000 measures (§3, Figure 1:
//! ext2's linear directory, where every create first scans the whole
//! directory for the name); an htree keeps the two medians close.
//! `create-scale` plots the whole curve; this is its two-point summary,
//! cheap enough for `bench mount`.
//!
//! `-n` files (default 100,000, scaled). Names are `f0000000`…, so every
//! target sees the same directory.

use anyhow::{Result, ensure};

use super::fs::{BenchFs, Span, timed};
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

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let n = p.n_or(DEFAULT_FILES);
    progress.set_total(n);
    let mut out = Outcome::default();
    out.params.insert("files".into(), n.into());
    let fs: &dyn BenchFs = fs;
    let (mut each, mut wall) = (Vec::with_capacity(n as usize), Vec::with_capacity(n as usize));
    let mut all = Span::default();
    for i in 0..n {
        let name = format!("f{i:07}");
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

    medians(&mut out, &mut each, "");
    if modeled {
        // A create whose blocks are all in the page cache costs no modeled
        // time; the engine's own work shows in wall time.
        medians(&mut out, &mut wall, "wall_");
    }
    Ok(out)
}
