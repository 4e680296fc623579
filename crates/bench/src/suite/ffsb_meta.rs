//! `ffsb-meta`: the Flexible File System Benchmark's small-file,
//! meta-data heavy profile of seed 001 (§4.4, Tables 2 and 3): a pool of
//! small files, then a weighted mix of whole-file reads, writes into a
//! file, creates, appends and deletes, from 1 or 16 threads.
//!
//! Presets choose the mix:
//! - `table2` (default): the mix of Table 2, 1 thread;
//! - `table3`: the same mix from 16 threads (Table 3);
//! - `read`, `write`, `create`, `append`, `delete`: one of the tables'
//!   rows alone.
//!
//! `-n` files in the pool (default 10,000, scaled); the run does as many
//! operations as the pool has files. `--threads` overrides the preset's;
//! `--size` sets the largest file (default 128 KiB; the smallest is
//! 1 KiB), `--io-size` the bytes per read or write call (4 KiB).
//!
//! The tables count FFSB "ops": every read or write call of a create,
//! read, write or append, one per delete. The mix's weights turn them
//! into whole operations: a create or a whole-file read is ~16.6 calls of
//! 4 KiB with files of 1–128 KiB, a write or an append 4 calls (16 KiB),
//! so Table 2's ext4 column (67,937 read, 98,488 write, 1,086,604 create,
//! 31,903 append, 59,503 delete) becomes weights 4 : 25 : 65 : 8 : 60 —
//! creates about balance deletes, as in a steady mail spool. The report
//! gives both units: operations, and FFSB's calls.
//!
//! Each thread owns its files (FFSB locks a file per operation; owning
//! avoids the locks) in directories all threads share, and draws from its
//! own seeded generator. Only a single-threaded run is deterministic.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Result, bail, ensure};

use super::fs::{BenchFs, Cold, FileRef, Span, timed};
use super::{Outcome, Params, Phase, Progress, Workload};
use crate::rng::Rng;

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "ffsb-meta",
    about: "seed 001 Tables 2-3: FFSB small-file reads, writes, creates, appends, deletes",
    image_size,
    run,
    inspect: None,
};

/// FFSB's small-file operations, in the tables' row order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    Create,
    Append,
    Delete,
}

const OPS: [Op; 5] = [Op::Read, Op::Write, Op::Create, Op::Append, Op::Delete];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Create => "create",
            Op::Append => "append",
            Op::Delete => "delete",
        }
    }
}

/// Table 2's ext4 column in whole operations (see the module's doc).
const TABLE_MIX: [u64; 5] = [4, 25, 65, 8, 60];

struct Preset {
    name: &'static str,
    weights: [u64; 5],
    threads: usize,
}

const PRESETS: [Preset; 7] = [
    Preset {
        name: "table2",
        weights: TABLE_MIX,
        threads: 1,
    },
    Preset {
        name: "table3",
        weights: TABLE_MIX,
        threads: 16,
    },
    Preset {
        name: "read",
        weights: [1, 0, 0, 0, 0],
        threads: 1,
    },
    Preset {
        name: "write",
        weights: [0, 1, 0, 0, 0],
        threads: 1,
    },
    Preset {
        name: "create",
        weights: [0, 0, 1, 0, 0],
        threads: 1,
    },
    Preset {
        name: "append",
        weights: [0, 0, 0, 1, 0],
        threads: 1,
    },
    Preset {
        name: "delete",
        weights: [0, 0, 0, 0, 1],
        threads: 1,
    },
];

const DEFAULT_FILES: u64 = 10_000;
const LOW: u64 = 1 << 10;
const DEFAULT_HIGH: u64 = 128 << 10;
const DEFAULT_IO: u64 = 4 << 10;
/// Calls of a write into a file, and of an append (FFSB's write_size and
/// append_size over its block size).
const WRITE_CALLS: u64 = 4;
const FILES_PER_DIR: u64 = 100;

/// A run's shape after the preset, scaling and flags.
#[derive(Debug, Clone)]
struct Config {
    preset: &'static str,
    weights: [u64; 5],
    threads: usize,
    files: u64,
    ops: u64,
    high: u64,
    io: u64,
    dirs: u64,
}

fn config(p: &Params) -> Result<Config> {
    let name = p.preset.as_deref().unwrap_or(PRESETS[0].name);
    let Some(preset) = PRESETS.iter().find(|x| x.name == name) else {
        let names: Vec<&str> = PRESETS.iter().map(|x| x.name).collect();
        bail!("ffsb-meta has no preset {name}; it has {}", names.join(", "));
    };
    let files = p.n_or(DEFAULT_FILES);
    Ok(Config {
        preset: preset.name,
        weights: preset.weights,
        threads: p.threads.unwrap_or(preset.threads).clamp(1, 1024),
        files,
        ops: files,
        high: p.size.unwrap_or(DEFAULT_HIGH).max(LOW),
        io: p.io_size.unwrap_or(DEFAULT_IO).clamp(1, 64 << 20),
        dirs: files.div_ceil(FILES_PER_DIR).max(1),
    })
}

fn image_size(p: &Params) -> (u64, u64) {
    let Ok(c) = config(p) else {
        return (64 << 20, 0);
    };
    let sum: u64 = c.weights.iter().sum();
    let creates = c.ops * c.weights[2] / sum + 1;
    let appends = c.ops * c.weights[3] / sum + 1;
    let bytes = (c.files + creates) * c.high + appends * WRITE_CALLS * c.io;
    (bytes + bytes / 3 + (64 << 20), c.files + creates + c.dirs + 1024)
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

/// Count, bytes, FFSB calls and summed time of one kind of operation.
#[derive(Default, Clone)]
struct Tally {
    ops: u64,
    bytes: u64,
    calls: u64,
    span: Span,
}

impl Tally {
    fn add(&mut self, bytes: u64, calls: u64, span: &Span) {
        self.ops += 1;
        self.bytes += bytes;
        self.calls += calls;
        self.span.add(span);
    }

    fn merge(&mut self, other: &Tally) {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.calls += other.calls;
        self.span.add(&other.span);
    }
}

struct File {
    id: u64,
    size: u64,
}

/// What the threads share.
struct Shared<'a> {
    fs: &'a dyn BenchFs,
    c: &'a Config,
    done: AtomicU64,
    stop: AtomicBool,
}

impl Shared<'_> {
    fn path(&self, id: u64) -> String {
        format!("d{}/f{id}", id % self.c.dirs)
    }

    /// Writes `data` at `at` in io-size calls; returns the calls.
    fn write(&self, f: &FileRef, at: u64, data: &[u8]) -> Result<u64> {
        let io = self.c.io as usize;
        for (i, chunk) in data.chunks(io).enumerate() {
            self.fs.write_at(f, at + (i * io) as u64, chunk)?;
        }
        Ok(data.len().div_ceil(io) as u64)
    }

    /// Creates file `id` of `size` bytes.
    fn create(&self, id: u64, size: u64) -> Result<(u64, Span)> {
        let data = content(id, 0, size);
        timed(self.fs, || {
            let f = self.fs.create(&self.path(id))?;
            let calls = self.write(&f, 0, &data)?;
            self.fs.close(f)?;
            Ok(calls)
        })
    }
}

/// One thread: its generator, its files, its tallies by operation.
struct Worker<'s, 'a> {
    sh: &'s Shared<'a>,
    rng: Rng,
    files: Vec<File>,
    next_id: u64,
    tallies: [Tally; 5],
}

impl Worker<'_, '_> {
    /// The next operation by the mix's weights; a read, write, append or
    /// delete with no file left becomes a create.
    fn choose(&mut self) -> Op {
        let w = &self.sh.c.weights;
        let mut x = self.rng.below(w.iter().sum::<u64>() as usize) as u64;
        let mut op = Op::Create;
        for (i, &wi) in w.iter().enumerate() {
            if x < wi {
                op = OPS[i];
                break;
            }
            x -= wi;
        }
        if self.files.is_empty() { Op::Create } else { op }
    }

    fn run(mut self, ops: u64) -> Result<[Tally; 5]> {
        for _ in 0..ops {
            if self.sh.stop.load(Ordering::Relaxed) {
                bail!(STOPPED);
            }
            let op = self.choose();
            let (bytes, calls, span) = match op {
                Op::Read => self.read()?,
                Op::Write => self.overwrite()?,
                Op::Create => self.create()?,
                Op::Append => self.append()?,
                Op::Delete => self.delete()?,
            };
            self.tallies[op as usize].add(bytes, calls, &span);
            self.sh.done.fetch_add(1, Ordering::Relaxed);
        }
        Ok(self.tallies)
    }

    fn pick(&mut self) -> usize {
        self.rng.below(self.files.len())
    }

    /// Reads a whole file in io-size calls; checks it after the clock stops.
    fn read(&mut self) -> Result<(u64, u64, Span)> {
        let i = self.pick();
        let (id, size) = (self.files[i].id, self.files[i].size);
        let (sh, io) = (self.sh, self.sh.c.io as usize);
        let mut buf = vec![0u8; size as usize];
        let (calls, span) = timed(sh.fs, || {
            let f = sh.fs.open(&sh.path(id), false)?;
            for (k, chunk) in buf.chunks_mut(io).enumerate() {
                let n = sh.fs.read_at(&f, (k * io) as u64, chunk)?;
                ensure!(n == chunk.len(), "{}: short read at {}", sh.path(id), k * io);
            }
            sh.fs.close(f)?;
            Ok(size.div_ceil(io as u64))
        })?;
        ensure!(
            buf == content(id, 0, size),
            "{}: the bytes read are not those written",
            sh.path(id)
        );
        Ok((size, calls, span))
    }

    /// Writes over an io-aligned run of a file, its own content again, so
    /// a later read still knows what to expect.
    fn overwrite(&mut self) -> Result<(u64, u64, Span)> {
        let i = self.pick();
        let (id, size, io) = (self.files[i].id, self.files[i].size, self.sh.c.io);
        let len = size.min(WRITE_CALLS * io);
        let at = self.rng.below(((size - len) / io + 1) as usize) as u64 * io;
        self.write_at(id, at, len)
    }

    fn append(&mut self) -> Result<(u64, u64, Span)> {
        let i = self.pick();
        let (id, size) = (self.files[i].id, self.files[i].size);
        let len = WRITE_CALLS * self.sh.c.io;
        let r = self.write_at(id, size, len)?;
        self.files[i].size += len;
        Ok(r)
    }

    fn write_at(&self, id: u64, at: u64, len: u64) -> Result<(u64, u64, Span)> {
        let (sh, data) = (self.sh, content(id, at, len));
        let (calls, span) = timed(sh.fs, || {
            let f = sh.fs.open(&sh.path(id), true)?;
            let calls = sh.write(&f, at, &data)?;
            sh.fs.close(f)?;
            Ok(calls)
        })?;
        Ok((len, calls, span))
    }

    fn create(&mut self) -> Result<(u64, u64, Span)> {
        let id = self.next_id;
        self.next_id += self.sh.c.threads as u64;
        let size = self.rng.range(LOW as usize, self.sh.c.high as usize) as u64;
        let (calls, span) = self.sh.create(id, size)?;
        self.files.push(File { id, size });
        Ok((size, calls, span))
    }

    fn delete(&mut self) -> Result<(u64, u64, Span)> {
        let i = self.pick();
        let file = self.files.swap_remove(i);
        let sh = self.sh;
        let ((), span) = timed(sh.fs, || sh.fs.unlink(&sh.path(file.id)))?;
        Ok((0, 1, span))
    }
}

/// The message of a thread that stopped because another one failed.
const STOPPED: &str = "stopped: another thread failed or the run was interrupted";

fn params(out: &mut Outcome, c: &Config, seed: u64) {
    out.params.insert("preset".into(), c.preset.into());
    let mix: Vec<String> = OPS
        .iter()
        .zip(c.weights)
        .map(|(op, w)| format!("{}:{w}", op.name()))
        .collect();
    out.params.insert("mix".into(), mix.join(" ").into());
    out.params.insert("threads".into(), c.threads.into());
    out.params.insert("files".into(), c.files.into());
    out.params.insert("operations".into(), c.ops.into());
    out.params.insert("size_low".into(), LOW.into());
    out.params.insert("size_high".into(), c.high.into());
    out.params.insert("directories".into(), c.dirs.into());
    out.params.insert("io_size".into(), c.io.into());
    out.params.insert("seed".into(), seed.into());
}

/// Makes the pool: file `id` belongs to thread `id % threads`. Returns
/// each thread's files.
fn setup(
    fs: &dyn BenchFs,
    c: &Config,
    seed: u64,
    out: &mut Outcome,
    progress: &mut Progress,
) -> Result<Vec<Vec<File>>> {
    let sh = Shared {
        fs,
        c,
        done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    for d in 0..c.dirs {
        fs.mkdir(&format!("d{d}"))?;
    }
    let mut rng = Rng::new(seed);
    let mut pools: Vec<Vec<File>> = (0..c.threads).map(|_| Vec::new()).collect();
    let mut made = Tally::default();
    for id in 0..c.files {
        let size = rng.range(LOW as usize, c.high as usize) as u64;
        let (calls, span) = sh.create(id, size)?;
        made.add(size, calls, &span);
        pools[(id % c.threads as u64) as usize].push(File { id, size });
        progress.step(1)?;
    }
    out.phases
        .push(Phase::new("create pool (setup)", made.ops, made.bytes, made.span));
    Ok(pools)
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let c = config(p)?;
    let mut out = Outcome::default();
    params(&mut out, &c, p.seed);
    progress.set_total(c.files + c.ops);
    let pools = setup(fs, &c, p.seed, &mut out, progress)?;
    if fs.drop_caches()? == Cold::No {
        out.notes
            .push("not root: the host's caches could not be dropped; the mix started warm".into());
    }
    let fs: &dyn BenchFs = fs;
    let sh = Shared {
        fs,
        c: &c,
        done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    let start = fs.sample();
    let tallies = run_threads(&sh, pools, p.seed, progress)?;
    let span = start.until(&fs.sample());
    report(&mut out, &c, &tallies, span);
    Ok(out)
}

/// Runs the threads, each its share of the operations, and sums their
/// tallies; this thread only reports progress.
fn run_threads(sh: &Shared, pools: Vec<Vec<File>>, seed: u64, progress: &mut Progress) -> Result<[Tally; 5]> {
    let c = sh.c;
    let threads = c.threads as u64;
    std::thread::scope(|s| {
        let handles: Vec<_> = pools
            .into_iter()
            .enumerate()
            .map(|(t, files)| {
                let t = t as u64;
                let w = Worker {
                    sh,
                    rng: Rng::new(seed ^ (t + 1).wrapping_mul(0xA24B_AED4_963E_E407)),
                    files,
                    next_id: c.files.next_multiple_of(threads) + t,
                    tallies: Default::default(),
                };
                let ops = c.ops / threads + u64::from(t < c.ops % threads);
                s.spawn(move || {
                    let r = w.run(ops);
                    if r.is_err() {
                        sh.stop.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        let watched = watch(sh, &handles, progress);
        if watched.is_err() {
            sh.stop.store(true, Ordering::Relaxed);
        }
        let mut total: [Tally; 5] = Default::default();
        let mut failed = None;
        for h in handles {
            match h.join() {
                Ok(Ok(t)) => total.iter_mut().zip(&t).for_each(|(a, b)| a.merge(b)),
                Ok(Err(e)) if e.to_string() == STOPPED => {}
                Ok(Err(e)) => failed = failed.or(Some(e)),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        watched?;
        failed.map_or(Ok(total), Err)
    })
}

/// Steps `progress` by the operations done until every thread ended;
/// fails once the run is interrupted.
fn watch<T>(sh: &Shared, handles: &[std::thread::ScopedJoinHandle<T>], progress: &mut Progress) -> Result<()> {
    let mut reported = 0;
    loop {
        let finished = handles.iter().all(|h| h.is_finished());
        let done = sh.done.load(Ordering::Relaxed);
        progress.step(done - reported)?;
        reported = done;
        if finished {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn report(out: &mut Outcome, c: &Config, tallies: &[Tally; 5], run: Span) {
    let mut all = Tally::default();
    for (op, t) in OPS.iter().zip(tallies) {
        out.phases.push(Phase::new(op.name(), t.ops, t.bytes, t.span.clone()));
        out.values.insert(format!("{}_ffsb_calls", op.name()), t.calls.into());
        all.merge(t);
    }
    let per_sec = |n: u64| (run.ns() > 0).then(|| n as f64 * 1e9 / run.ns() as f64);
    out.values.insert("ops_per_sec".into(), per_sec(all.ops).into());
    out.values
        .insert("ffsb_calls_per_sec".into(), per_sec(all.calls).into());
    out.phases
        .push(Phase::new("all operations (run)", all.ops, all.bytes, run));
    if c.threads > 1 {
        out.notes.push(format!(
            "{} threads: each operation's phase sums its spans over the threads, which overlap, \
             so those times add up to more than the run's; \"all operations (run)\" is the run's \
             span from before the first thread started to after the last ended, and ops/s of the \
             run is over it. On an image the disk model is shared, so an operation's modeled span \
             also holds other threads' disk time. Threaded figures are not deterministic.",
            c.threads
        ));
    }
}
