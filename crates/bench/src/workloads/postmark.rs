//! `postmark`: a PostMark-like small-file mix (after J. Katcher's PostMark,
//! 1997). A pool of files of 512 B–16 KiB spread over subdirectories, then
//! transactions that each (a) read a whole file or append to one and
//! (b) create a new file or delete one, chosen by a seeded generator so
//! every target performs the same operations.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use super::{per_sec, workdir};
use crate::config::Sizes;
use crate::report::Metric;
use crate::rng::Rng;

const MIN_SIZE: usize = 512;
const MAX_SIZE: usize = 16 * 1024;
const SEED: u64 = 0x9057_3a2c;

/// The mix's shape.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Files in the initial pool.
    pub files: usize,
    /// Subdirectories.
    pub dirs: usize,
    /// Transactions after the pool is made.
    pub transactions: usize,
}

impl Params {
    /// The sizes' postmark fields.
    pub fn from_sizes(s: &Sizes) -> Self {
        Params {
            files: s.postmark_files,
            dirs: s.postmark_dirs.max(1),
            transactions: s.postmark_transactions,
        }
    }
}

struct Pool {
    root: PathBuf,
    dirs: usize,
    live: Vec<PathBuf>,
    next_id: usize,
    data: Vec<u8>,
    rng: Rng,
}

impl Pool {
    fn create(&mut self) -> Result<()> {
        let d = self.rng.below(self.dirs);
        let p = self.root.join(format!("s{d:03}/p{:07}", self.next_id));
        self.next_id += 1;
        let size = self.rng.range(MIN_SIZE, MAX_SIZE);
        fs::write(&p, &self.data[..size]).with_context(|| format!("create {}", p.display()))?;
        self.live.push(p);
        Ok(())
    }

    fn delete(&mut self) -> Result<()> {
        let i = self.rng.below(self.live.len());
        let p = self.live.swap_remove(i);
        fs::remove_file(&p).with_context(|| format!("unlink {}", p.display()))
    }

    fn read(&mut self) -> Result<u64> {
        let p = &self.live[self.rng.below(self.live.len())];
        Ok(fs::read(p).with_context(|| format!("read {}", p.display()))?.len() as u64)
    }

    fn append(&mut self) -> Result<()> {
        let p = &self.live[self.rng.below(self.live.len())];
        let size = self.rng.range(MIN_SIZE, MAX_SIZE);
        let mut f = OpenOptions::new()
            .append(true)
            .open(p)
            .with_context(|| format!("open {}", p.display()))?;
        f.write_all(&self.data[..size])
            .with_context(|| format!("append {}", p.display()))
    }

    /// One transaction: read or append, then create or delete.
    fn transaction(&mut self) -> Result<()> {
        if self.live.is_empty() {
            return self.create();
        }
        if self.rng.coin() {
            self.read()?;
        } else {
            self.append()?;
        }
        if self.rng.coin() || self.live.is_empty() {
            self.create()
        } else {
            self.delete()
        }
    }
}

/// Builds the pool under `mnt/postmark`, then runs the transactions.
pub fn run(mnt: &Path, p: &Params) -> Result<Vec<Metric>> {
    let root = workdir(mnt, "postmark")?;
    let mut rng = Rng::new(SEED);
    let mut data = vec![0; MAX_SIZE];
    rng.fill(&mut data);
    let mut pool = Pool {
        root,
        dirs: p.dirs,
        live: Vec::with_capacity(p.files * 2),
        next_id: 0,
        data,
        rng,
    };
    let start = Instant::now();
    for d in 0..p.dirs {
        fs::create_dir(pool.root.join(format!("s{d:03}")))?;
    }
    for _ in 0..p.files {
        pool.create()?;
    }
    let pool_time = start.elapsed();
    let start = Instant::now();
    for _ in 0..p.transactions {
        pool.transaction()?;
    }
    let tx_time = start.elapsed();
    Ok(vec![
        Metric::higher("transactions/s", per_sec(p.transactions as f64, tx_time), "tx/s"),
        Metric::lower("transactions", tx_time.as_secs_f64(), "s"),
        Metric::lower("initial pool", pool_time.as_secs_f64(), "s"),
    ])
}
