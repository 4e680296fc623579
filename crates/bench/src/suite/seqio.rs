//! `seqio`: one file written sequentially in fixed-size calls, fsynced,
//! then read back cold; how many extents the file ended in. The
//! allocator's large-file behaviour (seed 001 §3: multiblock allocation
//! and delayed allocation keep a streaming file in few extents).
//!
//! `--size` total bytes (default 256 MiB, scaled), `--io-size` bytes per
//! call (default 1 MiB).

use anyhow::{Result, ensure};

use super::fs::{BenchFs, timed};
use super::{Outcome, Params, Phase, Progress, Workload};

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "seqio",
    about: "sequential write, fsync and cold read of one file; extents afterwards",
    image_size,
    run,
    inspect: None,
};

const DEFAULT_BYTES: u64 = 256 << 20;
const DEFAULT_IO: u64 = 1 << 20;

fn sizes(p: &Params) -> (u64, u64) {
    let total = p.size.unwrap_or_else(|| p.scaled(DEFAULT_BYTES));
    let io = p.io_size.unwrap_or(DEFAULT_IO).clamp(1, 64 << 20);
    (total, io)
}

fn image_size(p: &Params) -> (u64, u64) {
    let (total, _) = sizes(p);
    ((total + total / 4).max(64 << 20), 0)
}

/// The byte at `offset`: a pattern that changes every byte, so a read that
/// returns the wrong block is seen.
fn pattern(offset: u64) -> u8 {
    (offset ^ (offset >> 11) ^ (offset >> 23)) as u8
}

fn fill(buf: &mut [u8], at: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(at + i as u64);
    }
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let (total, io) = sizes(p);
    let calls = total.div_ceil(io);
    progress.set_total(2 * calls);
    let mut out = Outcome::default();
    out.params.insert("size".into(), total.into());
    out.params.insert("io_size".into(), io.into());

    let mut buf = vec![0u8; io as usize];
    let f = fs.create("file")?;
    let mut write = super::Span::default();
    let mut at = 0;
    while at < total {
        let len = io.min(total - at) as usize;
        fill(&mut buf[..len], at);
        let ((), s) = timed(fs, || fs.write_at(&f, at, &buf[..len]))?;
        write.add(&s);
        at += len as u64;
        progress.step(1)?;
    }
    out.phases.push(Phase::new("write", calls, total, write));
    let ((), s) = timed(fs, || fs.fsync(&f))?;
    out.phases.push(Phase::new("fsync", 1, 0, s));
    fs.close(f)?;
    out.values.insert("extents".into(), fs.extents("file")?.into());
    out.layouts.push(("file".into(), fs.extent_map("file")?));

    let cold = fs.drop_caches()?;
    if cold == super::fs::Cold::No {
        out.notes
            .push("not root: the host's caches could not be dropped; the read ran warm".into());
    }
    let f = fs.open("file", false)?;
    let mut read = super::Span::default();
    let mut at = 0;
    while at < total {
        let len = io.min(total - at) as usize;
        let (n, s) = timed(fs, || fs.read_at(&f, at, &mut buf[..len]))?;
        read.add(&s);
        ensure!(n == len, "read {n} bytes at {at}, expected {len}");
        ensure!(
            buf[..len].iter().enumerate().all(|(i, &b)| b == pattern(at + i as u64)),
            "the bytes read at {at} are not those written"
        );
        at += len as u64;
        progress.step(1)?;
    }
    fs.close(f)?;
    out.phases.push(Phase::new("read (cold)", calls, total, read));
    Ok(out)
}
