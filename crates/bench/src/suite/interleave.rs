//! `interleave`: a large file streamed while small files are written
//! between its chunks — seed 001's figures 7 and 8, where a 256 MiB file
//! written beside small-file writers stays in a few extents under mballoc
//! (its preallocation keeps the stream apart) and interleaves under the
//! ext3 allocator. Here one thread alternates the two writers, so the
//! image's layout is the same on every run; on a kernel target delayed
//! allocation decides at write-back, as it would with two threads.
//!
//! `--size` the large file (default 256 MiB, scaled), `-n` small files
//! (default 200, 16 KiB each), `--io-size` the large file's write size
//! (default 1 MiB). Results: the large file's extents and how far its
//! blocks spread, the small files' extents, and both layouts for
//! `--plot`.

use anyhow::Result;

use super::fs::{BenchFs, Span, timed};
use super::{Outcome, Params, Phase, Progress, Workload};

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "interleave",
    about: "seed 001 figures 7-8: a large file streamed between small-file writes; its extents",
    image_size,
    run,
    inspect: None,
};

const SMALL_BYTES: usize = 16 << 10;

fn sizes(p: &Params) -> (u64, u64, u64) {
    let io = p.io_size.unwrap_or(1 << 20).clamp(4096, 64 << 20);
    let big = p.size.unwrap_or_else(|| p.scaled(256 << 20)).max(io) / io * io;
    (big, io, p.n_or(200))
}

fn image_size(p: &Params) -> (u64, u64) {
    let (big, _, n) = sizes(p);
    (2 * big + n * SMALL_BYTES as u64 + (64 << 20), n + 1024)
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let (big, io, n) = sizes(p);
    let chunks = big / io;
    progress.set_total(chunks + n);
    let mut out = Outcome::default();
    out.params.insert("size".into(), big.into());
    out.params.insert("io_size".into(), io.into());
    out.params.insert("small_files".into(), n.into());
    fs.mkdir("small")?;
    let f = fs.create("big")?;
    let (chunk, small) = (vec![0xb5u8; io as usize], vec![0x5au8; SMALL_BYTES]);
    let (mut big_span, mut small_span) = (Span::default(), Span::default());
    let mut written = 0;
    for c in 0..chunks {
        let ((), s) = timed(fs, || fs.write_at(&f, c * io, &chunk))?;
        big_span.add(&s);
        progress.step(1)?;
        // Small files spread evenly between the chunks.
        while written < n && written * chunks < (c + 1) * n {
            let ((), s) = timed(fs, || {
                let g = fs.create(&format!("small/s{written:05}"))?;
                fs.write_at(&g, 0, &small)?;
                fs.close(g)
            })?;
            small_span.add(&s);
            written += 1;
            progress.step(1)?;
        }
    }
    let ((), s) = timed(fs, || fs.fsync(&f))?;
    fs.close(f)?;
    let ((), sync) = timed(fs, || fs.sync())?;
    out.phases.push(Phase::new("large file: writes", chunks, big, big_span));
    out.phases.push(Phase::new(
        "small files: create+write",
        n,
        n * SMALL_BYTES as u64,
        small_span,
    ));
    out.phases.push(Phase::new("large file: fsync", 1, 0, s));
    out.phases.push(Phase::new("sync", 1, 0, sync));
    record(fs, &mut out, n)?;
    Ok(out)
}

/// The large file's extents and spread, the small files' extents, and
/// the layouts.
fn record(fs: &dyn BenchFs, out: &mut Outcome, n: u64) -> Result<()> {
    let map = fs.extent_map("big")?;
    let lo = map.iter().map(|e| e.physical).min().unwrap_or(0);
    let hi = map.iter().map(|e| e.physical + e.len).max().unwrap_or(0);
    let blocks: u64 = map.iter().map(|e| e.len).sum();
    out.values
        .insert("large_file_extents".into(), fs.extents("big")?.into());
    // 1.0 when the file's blocks are all the blocks of its span.
    out.values.insert(
        "large_file_spread".into(),
        ((hi - lo) as f64 / blocks.max(1) as f64).into(),
    );
    let mut small = 0;
    for k in 0..n {
        small += fs.extents(&format!("small/s{k:05}"))?;
    }
    out.values.insert("small_file_extents".into(), small.into());
    out.layouts.push(("large file".into(), map));
    for k in (0..n).step_by((n as usize / 8).max(1)) {
        let name = format!("small/s{k:05}");
        out.layouts.push((name.clone(), fs.extent_map(&name)?));
    }
    Ok(())
}
