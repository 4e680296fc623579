//! `postmark`: J. Katcher's PostMark (1997), the Internet mail server load
//! of seed 004 (§V "Problem solution", Tests 1–3): a pool of files with
//! random sizes spread over subdirectories, then transactions that each
//! read or append to a random file and create a file or delete a random
//! one, then every file deleted.
//!
//! Presets, the seed's three configurations (§V.A–C):
//! - `test1` (default): files of 1,000–100,000 bytes, 4,000 files, 50,000
//!   transactions;
//! - `test2`: 1–1,000 bytes, 30,000 files, 50,000 transactions;
//! - `test3`: 1,000–300,000 bytes, 4,000 files, 50,000 transactions;
//! - `mount`, what `ext4kit bench mount` runs (not the seed's): 512–16,384
//!   bytes, 10,000 files, 50,000 transactions, one subdirectory per 100
//!   files (at least 10), and every file read or written in one call, as
//!   a program reading a whole small file does.
//!
//! `--scale F` multiplies the file and transaction counts, `-n` sets the
//! file count, `--size` the largest file, `--io-size` the bytes per read
//! or write call (PostMark's block size, 512 by default; the `mount`
//! preset's is its largest file).
//!
//! As in PostMark 1.5: reads and appends are equally likely, so are
//! creates and deletes (its biases of 5); an append adds a random
//! 1..=(largest − size) bytes and none to a file already at the largest
//! size; the file table holds twice the initial count, so a full table
//! turns a create into a delete (PostMark drops the create) and an empty
//! one a delete into a create (PostMark stops "out of files"). Files go to
//! 10 subdirectories in the seed's presets (the seed does not give
//! PostMark's `subdirectories`).
//! A final `sync` phase shows the writeback PostMark leaves to the kernel.

use anyhow::{Result, bail, ensure};

use super::fs::{BenchFs, FileRef, Span, timed};
use super::{Outcome, Params, Phase, Progress, Workload};
use crate::rng::Rng;

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "postmark",
    about: "seed 004: PostMark's pool, read/append + create/delete transactions, delete all",
    image_size,
    run,
    inspect: None,
};

/// One of the seed's PostMark configurations.
struct Preset {
    name: &'static str,
    low: u64,
    high: u64,
    files: u64,
    transactions: u64,
    /// Bytes per read or write call.
    io: u64,
    /// One subdirectory per this many files (at least [`DIRS`]); `None`:
    /// [`DIRS`].
    files_per_dir: Option<u64>,
}

const PRESETS: [Preset; 4] = [
    Preset {
        name: "test1",
        low: 1_000,
        high: 100_000,
        files: 4_000,
        transactions: 50_000,
        io: DEFAULT_IO,
        files_per_dir: None,
    },
    Preset {
        name: "test2",
        low: 1,
        high: 1_000,
        files: 30_000,
        transactions: 50_000,
        io: DEFAULT_IO,
        files_per_dir: None,
    },
    Preset {
        name: "test3",
        low: 1_000,
        high: 300_000,
        files: 4_000,
        transactions: 50_000,
        io: DEFAULT_IO,
        files_per_dir: None,
    },
    Preset {
        name: "mount",
        low: 512,
        high: 16_384,
        files: 10_000,
        transactions: 50_000,
        io: 16_384,
        files_per_dir: Some(100),
    },
];

/// Subdirectories of the seed's presets, and the fewest of any.
const DIRS: u64 = 10;
/// PostMark's default read and write block size.
const DEFAULT_IO: u64 = 512;

/// A run's shape after the preset, scaling and flags.
#[derive(Debug, Clone)]
struct Config {
    preset: &'static str,
    low: u64,
    high: u64,
    files: u64,
    transactions: u64,
    io: u64,
    dirs: u64,
}

fn config(p: &Params) -> Result<Config> {
    let preset = match &p.preset {
        None => &PRESETS[0],
        Some(name) => match PRESETS.iter().find(|x| x.name == name) {
            Some(x) => x,
            None => {
                let names: Vec<&str> = PRESETS.iter().map(|x| x.name).collect();
                bail!("postmark has no preset {name}; it has {}", names.join(", "))
            }
        },
    };
    let high = p.size.unwrap_or(preset.high).max(1);
    let files = p.n_or(preset.files);
    Ok(Config {
        preset: preset.name,
        low: preset.low.min(high),
        high,
        files,
        transactions: p.scaled(preset.transactions),
        io: p.io_size.unwrap_or(preset.io).clamp(1, 64 << 20),
        dirs: preset.files_per_dir.map_or(DIRS, |per| (files / per).max(DIRS)),
    })
}

fn image_size(p: &Params) -> (u64, u64) {
    let Ok(c) = config(p) else {
        return (64 << 20, 0);
    };
    // The pool wanders by about √transactions around its initial count,
    // and appends push every file towards the largest size.
    let live = c.files + 4 * (c.transactions as f64).sqrt() as u64 + 64;
    let bytes = (live * c.high).min(2 * c.files * c.high);
    (bytes + bytes / 3 + (64 << 20), 2 * c.files + c.dirs + 1024)
}

/// The byte at `offset` of file `id`: differs between neighbouring bytes
/// and between files, so a read of the wrong block or file is seen.
fn pattern(id: u64, offset: u64) -> u8 {
    let x = offset ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x ^ (x >> 8) ^ (x >> 19)) as u8
}

fn content(id: u64, from: u64, len: u64) -> Vec<u8> {
    (from..from + len).map(|o| pattern(id, o)).collect()
}

/// Count, bytes and summed time of one kind of operation.
#[derive(Default)]
struct Tally {
    ops: u64,
    bytes: u64,
    span: Span,
}

impl Tally {
    fn add(&mut self, bytes: u64, span: &Span) {
        self.ops += 1;
        self.bytes += bytes;
        self.span.add(span);
    }

    fn phase(&self, name: &str) -> Phase {
        Phase::new(name, self.ops, self.bytes, self.span.clone())
    }
}

struct File {
    id: u64,
    dir: u64,
    size: u64,
}

fn path(f: &File) -> String {
    format!("s{}/f{}", f.dir, f.id)
}

/// PostMark's file table and the tallies of its operations.
struct Pool<'a> {
    fs: &'a dyn BenchFs,
    c: Config,
    rng: Rng,
    live: Vec<File>,
    next_id: u64,
    read: Tally,
    append: Tally,
    create: Tally,
    delete: Tally,
}

impl Pool<'_> {
    fn write_calls(&self, f: &FileRef, at: u64, data: &[u8]) -> Result<()> {
        for (i, chunk) in data.chunks(self.c.io as usize).enumerate() {
            self.fs.write_at(f, at + i as u64 * self.c.io, chunk)?;
        }
        Ok(())
    }

    /// Makes a new file of a random size; returns its bytes and span.
    fn create(&mut self) -> Result<(u64, Span)> {
        let size = self.rng.range(self.c.low as usize, self.c.high as usize) as u64;
        let file = File {
            id: self.next_id,
            dir: self.rng.below(self.c.dirs as usize) as u64,
            size,
        };
        self.next_id += 1;
        let data = content(file.id, 0, size);
        let fs = self.fs;
        let ((), span) = timed(fs, || {
            let f = fs.create(&path(&file))?;
            self.write_calls(&f, 0, &data)?;
            fs.close(f)
        })?;
        self.live.push(file);
        Ok((size, span))
    }

    fn read(&mut self) -> Result<()> {
        let i = self.rng.below(self.live.len());
        let file = &self.live[i];
        let (fs, io) = (self.fs, self.c.io as usize);
        let mut buf = vec![0u8; file.size as usize];
        let ((), span) = timed(fs, || {
            let f = fs.open(&path(file), false)?;
            for (i, chunk) in buf.chunks_mut(io).enumerate() {
                let n = fs.read_at(&f, (i * io) as u64, chunk)?;
                ensure!(n == chunk.len(), "{}: short read at {}", path(file), i * io);
            }
            fs.close(f)
        })?;
        ensure!(
            buf == content(file.id, 0, file.size),
            "{}: the bytes read are not those written",
            path(file)
        );
        self.read.add(file.size, &span);
        Ok(())
    }

    fn append(&mut self) -> Result<()> {
        let i = self.rng.below(self.live.len());
        let (id, size) = (self.live[i].id, self.live[i].size);
        if size >= self.c.high {
            return Ok(());
        }
        let block = self.rng.below((self.c.high - size) as usize) as u64 + 1;
        let data = content(id, size, block);
        let (fs, name) = (self.fs, path(&self.live[i]));
        let ((), span) = timed(fs, || {
            let f = fs.open(&name, true)?;
            self.write_calls(&f, size, &data)?;
            fs.close(f)
        })?;
        self.live[i].size += block;
        self.append.add(block, &span);
        Ok(())
    }

    fn delete(&mut self, i: usize) -> Result<Span> {
        let file = self.live.swap_remove(i);
        let ((), span) = timed(self.fs, || self.fs.unlink(&path(&file)))?;
        Ok(span)
    }

    /// One transaction: read or append, then create or delete. Returns
    /// whether the read-or-append half had no file to work on.
    fn transaction(&mut self) -> Result<bool> {
        let empty = self.live.is_empty();
        if !empty {
            if self.rng.below(10) < 5 {
                self.read()?;
            } else {
                self.append()?;
            }
        }
        let create = self.rng.below(10) < 5;
        let full = self.live.len() as u64 >= 2 * self.c.files;
        if self.live.is_empty() || (create && !full) {
            let (bytes, span) = self.create()?;
            self.create.add(bytes, &span);
        } else {
            let i = self.rng.below(self.live.len());
            let span = self.delete(i)?;
            self.delete.add(0, &span);
        }
        Ok(empty)
    }
}

fn params(out: &mut Outcome, c: &Config, seed: u64) {
    out.params.insert("preset".into(), c.preset.into());
    out.params.insert("files".into(), c.files.into());
    out.params.insert("transactions".into(), c.transactions.into());
    out.params.insert("size_low".into(), c.low.into());
    out.params.insert("size_high".into(), c.high.into());
    out.params.insert("subdirectories".into(), c.dirs.into());
    out.params.insert("io_size".into(), c.io.into());
    out.params.insert("seed".into(), seed.into());
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let c = config(p)?;
    let mut out = Outcome::default();
    params(&mut out, &c, p.seed);
    progress.set_total(2 * c.files + c.transactions);
    for d in 0..c.dirs {
        fs.mkdir(&format!("s{d}"))?;
    }
    let fs: &dyn BenchFs = fs;
    let mut pool = Pool {
        fs,
        c: c.clone(),
        rng: Rng::new(p.seed),
        live: Vec::with_capacity(2 * c.files as usize),
        next_id: 0,
        read: Tally::default(),
        append: Tally::default(),
        create: Tally::default(),
        delete: Tally::default(),
    };
    let mut initial = Tally::default();
    for _ in 0..c.files {
        let (bytes, span) = pool.create()?;
        initial.add(bytes, &span);
        progress.step(1)?;
    }
    out.phases.push(initial.phase("create (initial pool)"));
    transactions(&mut pool, &mut out, progress)?;
    delete_all(&mut pool, &mut out, progress)?;
    let ((), span) = timed(fs, || fs.sync())?;
    out.phases.push(Phase::new("sync", 1, 0, span));
    remove_dirs(fs, c.dirs, &mut out)?;
    Ok(out)
}

/// Whether `name` is the file libfuse's high-level API (fuse2fs) renames a
/// file to when it is unlinked while a release of it is still in flight;
/// it goes away once the release arrives.
pub(crate) fn fuse_hidden(name: &str) -> bool {
    name.starts_with(".fuse_hidden")
}

/// Removes the subdirectories, which must be empty but for libfuse's
/// hidden files (noted, and the directory then left).
fn remove_dirs(fs: &dyn BenchFs, dirs: u64, out: &mut Outcome) -> Result<()> {
    for d in 0..dirs {
        let dir = format!("s{d}");
        let left: Vec<String> = fs.read_dir(&dir)?.into_iter().map(|e| e.name).collect();
        ensure!(
            left.iter().all(|n| fuse_hidden(n)),
            "{dir} holds {left:?} after deleting all"
        );
        if left.is_empty() {
            fs.rmdir(&dir)?;
        } else {
            out.notes.push(format!(
                "{dir} kept {} of libfuse's .fuse_hidden files: files unlinked while their \
                 release was in flight",
                left.len()
            ));
        }
    }
    Ok(())
}

fn transactions(pool: &mut Pool, out: &mut Outcome, progress: &mut Progress) -> Result<()> {
    let t = pool.c.transactions;
    let mut skipped = 0u64;
    let start = pool.fs.sample();
    for _ in 0..t {
        skipped += u64::from(pool.transaction()?);
        progress.step(1)?;
    }
    // The phase ends with its data on the device: under delayed
    // allocation a small run would otherwise do no I/O at all, and the
    // rate would count nothing the disk did.
    pool.fs.sync()?;
    let span = start.until(&pool.fs.sample());
    let bytes = pool.read.bytes + pool.append.bytes + pool.create.bytes;
    let tps = (span.ns() > 0).then(|| t as f64 * 1e9 / span.ns() as f64);
    out.phases.push(Phase::new("transactions", t, bytes, span));
    out.phases.push(pool.read.phase("read"));
    out.phases.push(pool.append.phase("append"));
    out.phases.push(pool.create.phase("create (transactions)"));
    out.phases.push(pool.delete.phase("delete (transactions)"));
    out.values.insert("transactions_per_sec".into(), tps.into());
    out.values.insert("bytes_read".into(), pool.read.bytes.into());
    out.values
        .insert("bytes_written".into(), (pool.append.bytes + pool.create.bytes).into());
    if skipped > 0 {
        out.notes.push(format!(
            "the pool ran empty: {skipped} transactions had no file to read or append to"
        ));
    }
    Ok(())
}

fn delete_all(pool: &mut Pool, out: &mut Outcome, progress: &mut Progress) -> Result<()> {
    let done = pool.c.files + pool.c.transactions;
    progress.set_total(done + pool.live.len() as u64);
    let mut all = Tally::default();
    // In the table's order, as PostMark does.
    for file in std::mem::take(&mut pool.live) {
        let ((), span) = timed(pool.fs, || pool.fs.unlink(&path(&file)))?;
        all.add(0, &span);
        progress.step(1)?;
    }
    out.phases.push(all.phase("delete (all)"));
    Ok(())
}
