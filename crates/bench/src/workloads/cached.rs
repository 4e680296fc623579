//! `cached`: operations the kernel can answer from its caches once warm —
//! stat (attribute and dentry caches), readdir (the directory's page
//! cache) — and open+close, which FUSE always sends to the server. On a
//! FUSE mount this measures the front end's cache policy (entry and
//! attribute timeouts, keep-cache for directories).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::{per_sec, workdir};
use crate::report::Metric;

const STAT_PASSES: usize = 5;
const READDIR_PASSES: usize = 20;

/// Makes `n` empty files in `mnt/cached`, warms the caches, then times
/// 5 stat passes, 20 readdir passes and one open+close pass.
pub fn run(mnt: &Path, n: usize) -> Result<Vec<Metric>> {
    let dir = workdir(mnt, "cached")?;
    let names: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("c{i:06}"))).collect();
    for p in &names {
        File::create(p).with_context(|| format!("create {}", p.display()))?;
    }
    stat_all(&names)?;
    readdir(&dir, n)?;

    let start = Instant::now();
    for _ in 0..STAT_PASSES {
        stat_all(&names)?;
    }
    let stat = per_sec((STAT_PASSES * n) as f64, start.elapsed());

    let start = Instant::now();
    for _ in 0..READDIR_PASSES {
        readdir(&dir, n)?;
    }
    let rd = start.elapsed();

    let start = Instant::now();
    for p in &names {
        File::open(p).with_context(|| format!("open {}", p.display()))?;
    }
    let open = per_sec(n as f64, start.elapsed());
    Ok(vec![
        Metric::higher("stat/s", stat, "ops/s"),
        Metric::higher(
            "readdir entries/s",
            per_sec((READDIR_PASSES * n) as f64, rd),
            "entries/s",
        ),
        Metric::higher("readdir passes/s", per_sec(READDIR_PASSES as f64, rd), "passes/s"),
        Metric::higher("open+close/s", open, "ops/s"),
    ])
}

fn stat_all(names: &[PathBuf]) -> Result<()> {
    for p in names {
        fs::metadata(p).with_context(|| format!("stat {}", p.display()))?;
    }
    Ok(())
}

/// Lists `dir` (names only, no stat) and checks it has `n` entries.
fn readdir(dir: &Path, n: usize) -> Result<()> {
    let mut count = 0;
    for e in fs::read_dir(dir)? {
        e?;
        count += 1;
    }
    if count != n {
        bail!("readdir {} listed {count} entries, expected {n}", dir.display());
    }
    Ok(())
}
