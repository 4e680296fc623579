//! `create`: empty files in one directory. Besides the rate, the median
//! time of one create among the first and the last 5 % shows whether the
//! cost grows with the directory (a linear directory or an htree that
//! splits badly makes the last ones slower).

use std::fs::OpenOptions;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use super::{median, per_sec, workdir};
use crate::report::Metric;

/// Creates `n` empty files `f0000000…` in `mnt/create`.
pub fn run(mnt: &Path, n: usize) -> Result<Vec<Metric>> {
    let dir = workdir(mnt, "create")?;
    let names: Vec<_> = (0..n).map(|i| dir.join(format!("f{i:07}"))).collect();
    let mut times = Vec::with_capacity(n);
    let start = Instant::now();
    for p in &names {
        let t = Instant::now();
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p)
            .with_context(|| format!("create {}", p.display()))?;
        times.push(t.elapsed());
    }
    let total = start.elapsed();
    let k = (n / 20).max(1).min(n);
    let first = median(&mut times[..k]).as_secs_f64() * 1e6;
    let last = median(&mut times[n - k..]).as_secs_f64() * 1e6;
    Ok(vec![
        Metric::lower("total", total.as_secs_f64(), "s"),
        Metric::higher("files/s", per_sec(n as f64, total), "files/s"),
        Metric::lower("median create, first 5%", first, "µs"),
        Metric::lower("median create, last 5%", last, "µs"),
        Metric::lower("flatness last/first", last / first.max(1e-9), "ratio"),
    ])
}
