//! `randwrite`: every block of a file written once in a random order, into
//! a new file (allocating as it goes) and into a file preallocated with
//! `fallocate` (converting unwritten extents), each then fsynced — what a
//! database or a VM image does to its preallocated file (issue 15: "fio
//! randwrite into a fallocated file"). The figure to watch is the ratio of
//! the two write phases and the wall µs per block as the file grows: a
//! conversion should cost the same at 64 MiB as at 4 GiB.
//!
//! `--size` bytes per file (default 64 MiB, scaled), `--io-size` bytes per
//! write (default 4 KiB), `--seed` the order.

use anyhow::{Result, ensure};

use super::fs::{BenchFs, FileRef, Span, timed};
use super::{Outcome, Params, Phase, Progress, Workload};
use crate::rng::Rng;

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "randwrite",
    about: "random writes into a new file and into a fallocated one",
    image_size,
    run,
    inspect: None,
};

fn sizes(p: &Params) -> (u64, u64) {
    let io = p.io_size.unwrap_or(4096).clamp(512, 16 << 20);
    let total = p.size.unwrap_or_else(|| p.scaled(64 << 20)).max(io);
    (total / io * io, io)
}

fn image_size(p: &Params) -> (u64, u64) {
    let (total, _) = sizes(p);
    (2 * total + total / 4 + (64 << 20), 0)
}

/// The byte at `offset` of a file: every block differs from its neighbours.
fn pattern(offset: u64) -> u8 {
    (offset ^ (offset >> 9) ^ (offset >> 17)) as u8
}

/// `0..n` shuffled by `seed`.
fn order(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for k in (1..v.len()).rev() {
        v.swap(k, rng.below(k + 1));
    }
    v
}

/// Writes the chunks of `f` in `order`; returns the summed span.
fn write_all(fs: &dyn BenchFs, f: &FileRef, order: &[u64], io: u64, progress: &mut Progress) -> Result<Span> {
    let mut span = Span::default();
    let mut buf = vec![0u8; io as usize];
    for &k in order {
        let at = k * io;
        buf.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = pattern(at + i as u64));
        let ((), s) = timed(fs, || fs.write_at(f, at, &buf))?;
        span.add(&s);
        progress.step(1)?;
    }
    Ok(span)
}

/// Reads back every 61st chunk (untimed): a conversion that lost or
/// misplaced a write shows here.
fn verify(fs: &dyn BenchFs, path: &str, chunks: u64, io: u64) -> Result<()> {
    let f = fs.open(path, false)?;
    let mut buf = vec![0u8; io as usize];
    for k in (0..chunks).step_by(61) {
        let at = k * io;
        ensure!(fs.read_at(&f, at, &mut buf)? == buf.len(), "{path}: short read at {at}");
        let bad = buf.iter().enumerate().position(|(i, &b)| b != pattern(at + i as u64));
        ensure!(
            bad.is_none(),
            "{path}: byte {} is not what was written",
            at + bad.unwrap_or(0) as u64
        );
    }
    fs.close(f)
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let (total, io) = sizes(p);
    let chunks = total / io;
    let order = order(chunks, p.seed);
    progress.set_total(2 * chunks);
    let mut out = Outcome::default();
    out.params.insert("size".into(), total.into());
    out.params.insert("io_size".into(), io.into());

    let f = fs.create("plain")?;
    let plain = write_all(fs, &f, &order, io, progress)?;
    out.phases
        .push(Phase::new("new file: random writes", chunks, total, plain.clone()));
    let ((), s) = timed(fs, || fs.fsync(&f))?;
    out.phases.push(Phase::new("new file: fsync", 1, 0, s));
    fs.close(f)?;

    let f = fs.create("prealloc")?;
    let ((), s) = timed(fs, || fs.fallocate(&f, 0, total))?;
    out.phases.push(Phase::new("fallocate", 1, total, s));
    let pre = write_all(fs, &f, &order, io, progress)?;
    out.phases
        .push(Phase::new("preallocated: random writes", chunks, total, pre.clone()));
    let ((), s) = timed(fs, || fs.fsync(&f))?;
    out.phases.push(Phase::new("preallocated: fsync", 1, 0, s));
    fs.close(f)?;

    verify(fs, "plain", chunks, io)?;
    verify(fs, "prealloc", chunks, io)?;
    let ratio = pre.wall_ns as f64 / plain.wall_ns.max(1) as f64;
    out.values.insert("preallocated_over_new_wall".into(), ratio.into());
    let per = |s: &Span| s.wall_ns as f64 / 1e3 / chunks as f64;
    out.values.insert("wall_us_per_write_new".into(), per(&plain).into());
    out.values
        .insert("wall_us_per_write_preallocated".into(), per(&pre).into());
    out.values.insert("extents_new".into(), fs.extents("plain")?.into());
    out.values
        .insert("extents_preallocated".into(), fs.extents("prealloc")?.into());
    Ok(out)
}
