//! `fsparams`: seed 002 (Gibson, "Measuring Parameters of the EXT2 File
//! System"): the block size, the read-ahead, the cache size and the number
//! of block entries an inode holds, inferred from timing alone (the span's
//! ranking time, [`Span::ns`]: the disk model's on an image, the wall
//! clock on a directory) and reported beside the true values where the
//! target knows them.
//!
//! - `block_size` (seed §2, fig. 2: steps at block boundaries): one byte
//!   written at the start of a sparse file (two such files, see
//!   [`HOLES`]). After dropping caches, 1-byte
//!   reads walk down from 128 KiB in 512-byte steps; holes cost nothing,
//!   and the first read that reaches the disk lies in the last 512 bytes
//!   of the one allocated block. Resolution 512 bytes; block sizes up to
//!   64 KiB. Reading holes rather than data keeps a page cache whose pages
//!   are larger than the block (the engine's are 4 KiB) from hiding the
//!   step.
//! - `readahead_bytes` (§2, fig. 3: latency spikes every prefetch size):
//!   after dropping caches, the data file read in order in `--io-size`
//!   pieces; the reads far dearer than the median are the ones that went
//!   to the media, and the most common distance between two of them is
//!   what each one brought in ahead.
//! - `cache_bytes` (§2, fig. 4): a working set of n units of the data
//!   file read forward, then backward (the seed's reverse order, so LRU
//!   keeps what the second pass wants first); the second pass reaches the
//!   disk exactly when the n units exceed the cache. n doubles until it
//!   does, then a binary search finds the largest n that fits. The unit
//!   is the cache's own, inferred first as fig. 2 infers the block: the
//!   distance between the cold 512-byte reads that reach the disk (the
//!   engine's 4 KiB pages, even on 1 KiB blocks). One 8-byte read per
//!   unit, so each read touches exactly one cache unit however the file
//!   lies on the disk (its extents need not start on a page). No cache
//!   drop between trials: after a forward pass the n units are the most
//!   recently used, whatever was cached before.
//! - `direct_pointers` (§2, fig. 5: the 13th block needs the indirect
//!   block): block entries in the inode before a mapping block. For each
//!   j ≤ 16 a file with blocks 0..j and j+1 (a hole at j); for each k ≤ 12
//!   a file of k blocks with a hole after each (k extents). After dropping
//!   caches, reading the hole reads a mapping block only when the hole is
//!   mapped through one: block maps first need one at the hole j = 12 (the
//!   indirect block), extent trees at k = 5 extents (i_block holds a
//!   header and four extents). Holes again, so the probe times the
//!   metadata read alone.
//!
//! `--size` is the largest working set tried and the data file's size
//! (default 128 MiB, scaled: twice the default `--cache`); `--io-size` the
//! read-ahead probe's read size (default 4 KiB). The seed's values:
//! 4096-byte blocks, 128 KiB prefetch, a 2 MB cache, 12 direct pointers
//! (§4's table).

use anyhow::{Result, ensure};
use serde_json::{Value, json};

use super::fs::{BenchFs, Cold, FileRef, Span, timed};
use super::{Outcome, Params, Phase, Progress, Workload};

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "fsparams",
    about: "seed 002: block size, read-ahead, cache size and direct pointers inferred from timing",
    image_size,
    run,
    inspect: None,
};

const DEFAULT_MAX_SET: u64 = 128 << 20;
const DEFAULT_IO: u64 = 4096;
/// The hole files' size; the probes walk down from half of it.
const HOLES_BYTES: u64 = 256 << 10;
/// A hole of the hole files for every block size up to 64 KiB, above the
/// probes.
const WARM_HOLE: u64 = 160 << 10;
/// Step of the block-size probes: a sector.
const STEP: u64 = 512;
/// The most the read-ahead probe reads.
const READAHEAD_SPAN: u64 = 8 << 20;
/// The cache unit assumed when none shows: the kernel's page on x86-64.
const PAGE: u64 = 4096;
/// Hole positions probed in block-mapped-style files (past the 12 direct
/// pointers of ext2/3).
const MAX_HOLE_INDEX: u64 = 16;
/// Extent counts probed (past the four extents i_block holds).
const MAX_EXTENTS: u64 = 12;
/// A read costing more wall time than this went to the disk (directory
/// targets; on an image any modeled time does).
const WALL_DISK_NS: u64 = 40_000;
/// A read-ahead probe costing this many times the median went to the media.
const SPIKE: u64 = 4;
/// Bytes per write of the data file.
const CHUNK: u64 = 64 << 10;

fn max_set(p: &Params) -> u64 {
    p.size.unwrap_or_else(|| p.scaled(DEFAULT_MAX_SET)).max(16 * PAGE)
}

fn image_size(p: &Params) -> (u64, u64) {
    (max_set(p) + max_set(p) / 4 + (32 << 20), 0)
}

/// An inferred value and, where the target knows it, the true one.
#[derive(Debug, Clone, Copy, Default)]
struct Found {
    inferred: Option<u64>,
    actual: Option<u64>,
}

impl Found {
    fn json(self) -> Value {
        let mut v = json!({ "inferred": self.inferred });
        if let Some(a) = self.actual {
            v["actual"] = a.into();
        }
        v
    }
}

/// Whether `s` spent time on the disk: on an image any modeled time (a
/// page-cache hit costs none), on a directory more than [`WALL_DISK_NS`].
fn disk_time(s: &Span) -> bool {
    match &s.modeled {
        Some(m) => m.modeled_ns > 0,
        None => s.wall_ns > WALL_DISK_NS,
    }
}

/// The data file's 8-byte word at `offset` (a multiple of 8): its offset,
/// so a read of the wrong place is seen.
fn fill(buf: &mut [u8], at: u64) {
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&(at + 8 * i as u64).to_le_bytes());
    }
}

/// Checks the first and last word of a read of the data file at `at`.
fn check(buf: &[u8], at: u64) -> Result<()> {
    let word = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
    let last = buf.len() - 8;
    ensure!(
        word(0) == at && word(last) == at + last as u64,
        "the data read at {at} is not what was written there"
    );
    Ok(())
}

fn drop_caches(fs: &mut dyn BenchFs, out: &mut Outcome, what: &str) -> Result<()> {
    if fs.drop_caches()? == Cold::No {
        out.notes.push(format!(
            "not root: the host's caches could not be dropped; the {what} probe ran warm"
        ));
    }
    Ok(())
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let data_len = max_set(p);
    let io = p.io_size.unwrap_or(DEFAULT_IO).clamp(8, 1 << 20) / 8 * 8;
    let bs = fs.block_size();
    let mut out = Outcome::default();
    out.params.insert("max_working_set".into(), data_len.into());
    out.params.insert("io_size".into(), io.into());
    let files = write_files(fs, data_len, bs)?;
    out.phases.push(files);
    progress.set_total(HOLES_BYTES / 2 / STEP + READAHEAD_SPAN.min(data_len) / io + 40);

    let block = block_size(fs, &mut out, progress)?;
    let readahead = readahead(fs, &mut out, progress, data_len.min(READAHEAD_SPAN), io)?;
    let cache = cache_size(fs, &mut out, progress, data_len)?;
    let pointers = direct_pointers(fs, &mut out, progress, bs)?;
    for (k, f) in [
        ("block_size", block),
        ("readahead_bytes", readahead),
        ("cache_bytes", cache),
        ("direct_pointers", pointers),
    ] {
        out.values.insert(k.into(), f.json());
    }
    explain(&mut out, fs.sample().disk.is_some());
    if out.phases[1..].iter().all(|p| p.span.ns() == 0) {
        out.notes
            .push("no probe took any time (disk profile `none`?): nothing could be inferred".into());
    }
    Ok(out)
}

/// What each `actual` means, and the resolution of each inference.
fn explain(out: &mut Outcome, modeled: bool) {
    out.notes
        .push("block_size: inferred to 512 bytes; actual is the file system's block size".into());
    out.notes.push(if modeled {
        "readahead_bytes: the engine's page cache reads only the pages asked for (no read-ahead of \
         its own); what the timing shows is the disk model's drive cache, which reads on to the \
         end of the track, so a sequential stream goes to the media once a track (hp-sas-10k: \
         1,200 sectors, 614,400 bytes, in the outer zone where small images lie). No actual: the \
         workload does not see the disk profile"
            .into()
    } else {
        "readahead_bytes: the distance between reads that waited for the disk; no actual (the \
         kernel's window grows and its read-ahead runs ahead asynchronously)"
            .into()
    });
    out.notes.push(
        "cache_bytes: inferred to one cache unit (the cache_unit parameter, itself inferred); \
         actual is the page cache the image was opened with (--cache, in whole 4 KiB pages); \
         none on a directory, whose cache is the host's"
            .into(),
    );
    out.notes.push(
        "direct_pointers: block entries in the inode before a mapping block is read: 12 direct \
         pointers on a block-mapped file, 4 extents on an extent-mapped one; actual from the \
         probe files' allocated blocks (st_blocks), the first that holds a mapping block"
            .into(),
    );
}

/// Writes every file the probes read, then syncs: the hole files, the data
/// file, and the mapping probes' files.
fn write_files(fs: &dyn BenchFs, data_len: u64, bs: u64) -> Result<Phase> {
    let (mut ops, mut bytes) = (0, 0);
    let ((), span) = timed(fs, || {
        write_holes(fs, HOLES[0])?;
        let f = fs.create("data")?;
        let mut buf = vec![0u8; CHUNK as usize];
        let mut at = 0;
        while at < data_len {
            let len = CHUNK.min(data_len - at) as usize;
            fill(&mut buf[..len], at);
            fs.write_at(&f, at, &buf[..len])?;
            at += len as u64;
        }
        fs.close(f)?;
        let block = vec![0x5Au8; bs as usize];
        for j in 0..=MAX_HOLE_INDEX {
            let f = fs.create(&hole_file(j))?;
            if j > 0 {
                fs.write_at(&f, 0, &vec![0x5Au8; (j * bs) as usize])?;
            }
            fs.write_at(&f, (j + 1) * bs, &block)?;
            fs.close(f)?;
            bytes += (j + 1) * bs;
        }
        for k in 2..=MAX_EXTENTS {
            let f = fs.create(&extent_file(k))?;
            for i in 0..k {
                fs.write_at(&f, 2 * i * bs, &block)?;
            }
            fs.close(f)?;
            bytes += k * bs;
        }
        write_holes(fs, HOLES[1])?;
        ops = 3 + (MAX_HOLE_INDEX + 1) + (MAX_EXTENTS - 1);
        fs.sync()
    })?;
    Ok(Phase::new(
        "write the probe files, sync",
        ops,
        bytes + data_len + 2,
        span,
    ))
}

fn hole_file(j: u64) -> String {
    format!("hole-at-{j:02}")
}

fn extent_file(k: u64) -> String {
    format!("extents-{k:02}")
}

/// The hole files: one written first, one last. With blocks smaller
/// than the cache's pages, a file's block may share a page with the
/// directory, which opening it reads; the other file's block then lies
/// elsewhere.
const HOLES: [&str; 2] = ["holes-first", "holes-last"];

/// One byte at the start and one at the end of a [`HOLES_BYTES`] file.
fn write_holes(fs: &dyn BenchFs, name: &str) -> Result<()> {
    let f = fs.create(name)?;
    fs.write_at(&f, 0, &[0xA5])?;
    fs.write_at(&f, HOLES_BYTES - 1, &[0xA5])?;
    fs.close(f)
}

/// Seed §2's block-size experiment, on holes: see the module doc. The
/// files are probed in turn until one shows the step.
fn block_size(fs: &mut dyn BenchFs, out: &mut Outcome, progress: &mut Progress) -> Result<Found> {
    drop_caches(fs, out, "block size")?;
    for name in HOLES {
        fs.stat(name)?;
    }
    let (mut span, mut probes, mut found) = (Span::default(), 0, None);
    for name in HOLES.iter().rev() {
        let f = fs.open(name, false)?;
        found = probe_holes(&*fs, &f, &mut span, progress)?;
        fs.close(f)?;
        probes += HOLES_BYTES / 2 / STEP;
        if found.is_some() {
            break;
        }
    }
    out.phases.push(Phase::new(
        "block size: 1-byte reads, holes down to data",
        probes,
        probes,
        span,
    ));
    Ok(Found {
        inferred: found,
        actual: Some(fs.block_size()),
    })
}

/// Reads a hole above the probes (a block map reads its indirect block
/// there rather than at the first probe), then 1-byte reads from half the
/// file down to 0; the end of the block holding the first that reaches
/// the disk.
fn probe_holes(fs: &dyn BenchFs, f: &FileRef, span: &mut Span, progress: &mut Progress) -> Result<Option<u64>> {
    let mut b = [0xFFu8];
    fs.read_at(f, WARM_HOLE, &mut b)?;
    ensure!(b[0] == 0, "a hole file reads {:#x} at {WARM_HOLE}", b[0]);
    let mut found = None;
    let mut at = HOLES_BYTES / 2;
    while at > 0 {
        at -= STEP;
        let mut b = [0xFFu8];
        let (n, s) = timed(fs, || fs.read_at(f, at, &mut b))?;
        let want = if at == 0 { 0xA5 } else { 0 };
        ensure!(n == 1 && b[0] == want, "a hole file reads {:#x} at {at}", b[0]);
        if found.is_none() && disk_time(&s) {
            found = Some(at + STEP);
        }
        span.add(&s);
        progress.step(1)?;
    }
    Ok(found)
}

/// Seed §2's prefetch experiment: see the module doc.
fn readahead(fs: &mut dyn BenchFs, out: &mut Outcome, progress: &mut Progress, len: u64, io: u64) -> Result<Found> {
    drop_caches(fs, out, "read-ahead")?;
    let f = fs.open("data", false)?;
    let mut buf = vec![0u8; io as usize];
    let (mut span, mut costs) = (Span::default(), Vec::new());
    let mut at = 0;
    while at + io <= len {
        let (n, s) = timed(fs, || fs.read_at(&f, at, &mut buf))?;
        ensure!(n == buf.len(), "read {n} bytes of the data file at {at}");
        check(&buf, at)?;
        costs.push((at, s.ns()));
        span.add(&s);
        at += io;
        progress.step(1)?;
    }
    fs.close(f)?;
    let reads = costs.len() as u64;
    let took_time = span.ns() > 0;
    out.phases.push(Phase::new(
        "read-ahead: sequential reads (cold)",
        reads,
        reads * io,
        span,
    ));
    let inferred = spike_period(&costs);
    if inferred.is_none() && took_time {
        out.notes.push(format!(
            "readahead_bytes: fewer than two reads of {len} bytes went to the media; the \
             read-ahead is at least that much"
        ));
    }
    Ok(Found { inferred, actual: None })
}

/// The most common distance between reads dearer than [`SPIKE`] times
/// the median; 0 when no read stands out (every read cost alike: nothing
/// was read ahead), `None` with one spike only or no time at all.
fn spike_period(costs: &[(u64, u64)]) -> Option<u64> {
    let mut sorted: Vec<u64> = costs.iter().map(|c| c.1).collect();
    sorted.sort_unstable();
    if sorted.last().is_none_or(|&c| c == 0) {
        return None;
    }
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0).max(1);
    let spikes: Vec<u64> = costs.iter().filter(|c| c.1 > SPIKE * median).map(|c| c.0).collect();
    if spikes.is_empty() {
        return Some(0);
    }
    period(&spikes)
}

/// The most common distance between consecutive `positions` (the larger
/// on a tie), `None` with fewer than two.
fn period(positions: &[u64]) -> Option<u64> {
    let mut gaps: Vec<u64> = positions.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    let mut best: Option<(usize, u64)> = None;
    for run in gaps.chunk_by(|a, b| a == b) {
        if best.is_none_or(|(n, _)| run.len() >= n) {
            best = Some((run.len(), run[0]));
        }
    }
    best.map(|(_, gap)| gap)
}

/// Seed §2's cache experiment: see the module doc.
fn cache_size(fs: &mut dyn BenchFs, out: &mut Outcome, progress: &mut Progress, max: u64) -> Result<Found> {
    drop_caches(fs, out, "cache")?;
    let f = fs.open("data", false)?;
    let page = page_size(&*fs, &f, out)?;
    let mut trial = Trial {
        fs: &*fs,
        f: &f,
        page,
        passes: [(0, Span::default()), (0, Span::default())],
    };
    let most = max / page;
    let (mut lo, mut hi) = (0u64, None);
    let mut n = 1;
    while n <= most {
        progress.step(1)?;
        if !trial.fits(n)? {
            hi = Some(n);
            break;
        }
        lo = n;
        n = if n == most { n + 1 } else { (n * 2).min(most) };
    }
    if let Some(mut hi) = hi {
        while hi - lo > 1 {
            progress.step(1)?;
            let mid = lo + (hi - lo) / 2;
            if trial.fits(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    let [forward, backward] = trial.passes.clone();
    fs.close(f)?;
    out.phases
        .push(Phase::new("cache: forward passes", forward.0, 8 * forward.0, forward.1));
    out.phases.push(Phase::new(
        "cache: backward passes",
        backward.0,
        8 * backward.0,
        backward.1,
    ));
    if hi.is_none() {
        out.notes.push(format!(
            "cache_bytes: every working set up to {max} bytes stayed cached; the cache is larger"
        ));
    }
    out.params.insert("cache_unit".into(), page.into());
    Ok(Found {
        inferred: hi.map(|_| lo * page),
        actual: fs.cache_capacity(),
    })
}

/// The unit the cache keeps (seed §2, fig. 2's steps in small
/// sequential reads): cold 512-byte reads of the data file's first
/// 64 KiB; the most common distance between those that reach the disk.
/// [`PAGE`] when the reads show none (a kernel reads ahead of them).
fn page_size(fs: &dyn BenchFs, f: &FileRef, out: &mut Outcome) -> Result<u64> {
    let mut misses = Vec::new();
    let mut b = [0u8; STEP as usize];
    for at in (0..64 << 10).step_by(STEP as usize) {
        let (n, s) = timed(fs, || fs.read_at(f, at, &mut b))?;
        ensure!(n == b.len(), "read {n} bytes of the data file at {at}");
        check(&b, at)?;
        if disk_time(&s) {
            misses.push(at);
        }
    }
    match period(&misses) {
        Some(p) if p >= STEP => Ok(p),
        _ => {
            out.notes.push(format!(
                "cache_bytes: the cache's unit did not show in small cold reads; counted in {PAGE}-byte pages"
            ));
            Ok(PAGE)
        }
    }
}

/// Trials of working sets over the data file: one 8-byte read in each
/// cache unit, so each read touches one unit whatever the block size and
/// however the file lies on the disk; totals of every trial's passes.
struct Trial<'a> {
    fs: &'a dyn BenchFs,
    f: &'a FileRef,
    page: u64,
    /// Reads and time, forward and backward.
    passes: [(u64, Span); 2],
}

impl Trial<'_> {
    /// Whether a working set of `n` units read forward then backward is
    /// read from memory the second time (on a directory: all but 1 % of
    /// the reads, for the wall clock's noise).
    fn fits(&mut self, n: u64) -> Result<bool> {
        for i in 0..n {
            self.read(i, 0)?;
        }
        let mut slow = 0;
        for i in (0..n).rev() {
            slow += u64::from(self.read(i, 1)?);
        }
        let modeled = self.passes[1].1.modeled.is_some();
        Ok(if modeled { slow == 0 } else { slow * 100 <= n })
    }

    /// Reads the first word of unit `i` in pass `pass`; whether it went to
    /// the disk.
    fn read(&mut self, i: u64, pass: usize) -> Result<bool> {
        let (fs, f, at) = (self.fs, self.f, i * self.page);
        let mut b = [0u8; 8];
        let (n, s) = timed(fs, || fs.read_at(f, at, &mut b))?;
        ensure!(n == 8, "read {n} bytes of the data file at {at}");
        check(&b, at)?;
        self.passes[pass].0 += 1;
        self.passes[pass].1.add(&s);
        Ok(disk_time(&s))
    }
}

/// Seed §2's direct-pointer experiment: see the module doc.
fn direct_pointers(fs: &mut dyn BenchFs, out: &mut Outcome, progress: &mut Progress, bs: u64) -> Result<Found> {
    drop_caches(fs, out, "mapping")?;
    let (mut span, mut probes) = (Span::default(), 0);
    let mut probe = |name: &str, hole: u64, data_blocks: u64| -> Result<(bool, bool)> {
        let st = fs.stat(name)?;
        let mapping_block = st.blocks * 512 > data_blocks * bs;
        let f = fs.open(name, false)?;
        let mut b = [0xFFu8];
        let (n, s) = timed(fs, || fs.read_at(&f, hole * bs + bs / 2, &mut b))?;
        fs.close(f)?;
        ensure!(
            n == 1 && b[0] == 0,
            "{name}: the hole at block {hole} reads {:#x}",
            b[0]
        );
        span.add(&s);
        probes += 1;
        progress.step(1)?;
        Ok((disk_time(&s), mapping_block))
    };
    let (mut inferred, mut actual) = (None, None);
    for j in 0..=MAX_HOLE_INDEX {
        let (slow, mapped) = probe(&hole_file(j), j, j + 1)?;
        inferred = inferred.or(slow.then_some(j));
        actual = actual.or(mapped.then_some(j + 1));
    }
    if inferred.is_none() || actual.is_none() {
        for k in 2..=MAX_EXTENTS {
            let (slow, mapped) = probe(&extent_file(k), 2 * k - 3, k)?;
            inferred = inferred.or(slow.then_some(k - 1));
            actual = actual.or(mapped.then_some(k - 1));
        }
    }
    out.phases
        .push(Phase::new("pointers: 1-byte hole reads (cold)", probes, probes, span));
    Ok(Found { inferred, actual })
}
