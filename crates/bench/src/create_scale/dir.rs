//! The directory target: the same workload through the host's calls, so
//! any mounted file system (kernel ext4, an `ext4kit mount`, tmpfs) can be
//! measured, in wall time. The files go into a new directory inside the
//! target, removed at the end (not timed). The opens start cold only when
//! the kernel's caches can be dropped, which takes root; otherwise the
//! report says they were warm.

use std::fs::File;
use std::time::Instant;

use anyhow::{Context, Result};

use super::report::{Batch, Report};
use super::{Config, Progress, batches, file_name, open_order};
use crate::system;

pub(super) fn run(cfg: &Config, progress: Progress<'_>) -> Result<Report> {
    let work = tempfile::Builder::new()
        .prefix("create-scale.")
        .tempdir_in(&cfg.target)
        .with_context(|| format!("cannot make a directory in {}", cfg.target.display()))?;
    let dir = work.path();
    let size = cfg.batch_size();
    let total = 2 * cfg.n as u64;
    let mut rows: Vec<Batch> = Vec::new();
    for (k, range) in batches(cfg.n, size).enumerate() {
        let wall = Instant::now();
        for i in range.clone() {
            let p = dir.join(file_name(i));
            File::create_new(&p).with_context(|| format!("cannot create {}", p.display()))?;
        }
        rows.push(Batch {
            batch: k + 1,
            entries: range.end,
            files: range.len(),
            create_wall_us: wall.elapsed().as_secs_f64() * 1e6 / range.len() as f64,
            ..Batch::default()
        });
        progress(range.end as u64, total);
    }
    system::syncfs(dir)?;
    let (cold, note) = if system::is_root() {
        system::drop_caches()?;
        (true, None)
    } else {
        (
            false,
            Some("not root: the kernel's caches could not be dropped, so the opens ran warm".to_string()),
        )
    };
    let order = open_order(cfg.n, cfg.seed);
    for (k, range) in batches(cfg.n, size).enumerate() {
        let wall = Instant::now();
        for &i in &order[range.clone()] {
            let p = dir.join(file_name(i));
            drop(File::open(&p).with_context(|| format!("cannot open {}", p.display()))?);
        }
        rows[k].open_wall_us = wall.elapsed().as_secs_f64() * 1e6 / range.len() as f64;
        progress(cfg.n as u64 + range.end as u64, total);
    }
    work.close()
        .with_context(|| format!("cannot remove the files made in {}", cfg.target.display()))?;
    Ok(Report {
        workload: "create-scale",
        target: cfg.target.display().to_string(),
        target_kind: "directory",
        n: cfg.n,
        batch_size: size,
        seed: cfg.seed,
        opens_cold: cold,
        note,
        batches: rows,
        ..Report::default()
    })
}
