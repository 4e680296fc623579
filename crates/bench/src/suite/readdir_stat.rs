//! `readdir-stat`: seed 003 (the itree RFC, "an auxiliary tree for the
//! directory index" sorted by inode number): why the order `readdir`
//! returns entries in matters on an htree directory. Readdir walks the
//! hash order, so a program that stats, copies or deletes every entry in
//! that order visits the inode table (and the files' blocks) at random;
//! in inode order it sweeps them. The seed measures this copying and
//! deleting up to 5,000,000 files in one directory, empty or 4 KiB each
//! (its copy is 14x faster with itree, 11x at 4 KiB), also on a file
//! system aged by "0.8 chance to create, 0.2 to delete a file".
//!
//! `-n` files (default 20,000, scaled) of `--size` bytes each (default 0)
//! in one directory `files`; `--preset aged` makes them the seed's aged
//! way. Every phase after the creates starts cold (caches dropped):
//! - readdir + stat of every entry in readdir order, then in inode order
//!   (readdir, sort by inode number, stat);
//! - a copy (read each file, write it into a new directory) in readdir
//!   order to `copy-readdir`, then in inode order to `copy-inode`;
//! - a mass delete: `files` unlinked in readdir order, then `copy-inode`
//!   (laid out like `files`: made in its creation order) in inode order.
//!
//! Values: how far readdir order is from inode order (the share of
//! neighbours in readdir order whose inode numbers ascend), each ordering
//! pair's time ratio, and on an image each phase's head positionings and
//! seeks (non-zero distance) with a lower bound of the cylinders crossed.

use anyhow::{Result, bail, ensure};
use serde_json::{Map, Value, json};

use super::fs::{BenchFs, Cold, Entry, Span, timed};
use super::{Outcome, Params, Phase, Progress, Workload};
use crate::rng::Rng;

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "readdir-stat",
    about: "seed 003: readdir+stat, copy and delete of one large directory in readdir order vs inode order",
    image_size,
    run,
    inspect: None,
};

const DEFAULT_FILES: u64 = 20_000;
const DIR: &str = "files";

/// The order a whole-directory pass visits the entries in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Readdir,
    Inode,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Readdir => "readdir order",
            Order::Inode => "inode order",
        }
    }

    /// `entries` as read, or sorted by inode number.
    fn apply(self, mut entries: Vec<Entry>) -> Vec<Entry> {
        if self == Order::Inode {
            entries.sort_by_key(|e| e.ino);
        }
        entries
    }
}

fn counts(p: &Params) -> (u64, u64) {
    (p.n_or(DEFAULT_FILES), p.size.unwrap_or(0))
}

fn image_size(p: &Params) -> (u64, u64) {
    let (n, size) = counts(p);
    // Three directories of n files at the peak, 4 KiB blocks rounded up,
    // and about 64 bytes of directory entry per name.
    let per_file = size.div_ceil(4096) * 4096 + 64;
    let inodes = 3 * n + 1024;
    // A kernel target's mke2fs gets the size alone: one inode per 16 KiB
    // (its default ratio) must cover them. At least 512 MiB, so mke2fs
    // (and the engine's mkfs) pick 4 KiB blocks, as on the seed's disks.
    let bytes = (3 * n * per_file + (64 << 20)).max(inodes * (16 << 10)).max(512 << 20);
    (bytes, inodes)
}

/// The bytes of file number `key`: every 8-byte word differs, so a copy
/// of the wrong file or block is seen.
fn fill(buf: &mut [u8], key: u64) {
    for (w, chunk) in buf.chunks_mut(8).enumerate() {
        let v = Rng::new(key.wrapping_mul(0x1_0000_0001) ^ w as u64).next_u64();
        chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
    }
}

/// File names carry their key, so any pass can check what it read.
fn key_of(name: &str) -> Result<u64> {
    match name.strip_prefix('f').map(str::parse) {
        Some(Ok(k)) => Ok(k),
        _ => bail!("{DIR}: an entry the run did not make: {name}"),
    }
}

/// The run's state.
struct Run<'r, 'p> {
    fs: &'r mut dyn BenchFs,
    progress: &'r mut Progress<'p>,
    n: u64,
    size: u64,
    out: Outcome,
    buf: Vec<u8>,
    want: Vec<u8>,
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let (n, size) = counts(p);
    let aged = match p.preset.as_deref() {
        None | Some("default") => false,
        Some("aged") => true,
        Some(other) => bail!("readdir-stat has no preset {other}; it has default and aged"),
    };
    progress.set_total(7 * n);
    let mut r = Run {
        fs,
        progress,
        n,
        size,
        out: Outcome::default(),
        buf: vec![0; size as usize],
        want: vec![0; size as usize],
    };
    r.out.params.insert("n".into(), n.into());
    r.out.params.insert("size".into(), size.into());
    r.out.params.insert("aged".into(), aged.into());
    r.out.params.insert("seed".into(), p.seed.into());
    r.create(aged, p.seed)?;
    for order in [Order::Readdir, Order::Inode] {
        r.stat_all(order)?;
    }
    for (order, to) in [(Order::Readdir, "copy-readdir"), (Order::Inode, "copy-inode")] {
        r.copy(order, to)?;
    }
    r.delete(Order::Readdir, DIR)?;
    r.delete(Order::Inode, "copy-inode")?;
    r.summarize();
    Ok(r.out)
}

impl Run<'_, '_> {
    /// Makes file `f{key}` in `dir` holding `key`'s bytes.
    fn make(&mut self, dir: &str, key: u64) -> Result<()> {
        fill(&mut self.buf, key);
        let f = self.fs.create(&format!("{dir}/f{key}"))?;
        let w = if self.size > 0 {
            self.fs.write_at(&f, 0, &self.buf)
        } else {
            Ok(())
        };
        self.fs.close(f)?;
        w
    }

    /// The `n` files: plainly, or aged as the seed's "0.8 chance to
    /// create, 0.2 to delete a file" until `n` are left.
    fn create(&mut self, aged: bool, seed: u64) -> Result<()> {
        let mut rng = Rng::new(seed);
        let (mut live, mut made, mut ops) = (Vec::new(), 0u64, 0u64);
        self.fs.mkdir(DIR)?;
        let start = self.fs.sample();
        while (live.len() as u64) < self.n {
            if aged && !live.is_empty() && rng.below(10) < 2 {
                let k: u64 = live.swap_remove(rng.below(live.len()));
                self.fs.unlink(&format!("{DIR}/f{k}"))?;
            } else {
                self.make(DIR, made)?;
                live.push(made);
                made += 1;
                self.progress.step(1)?;
            }
            ops += 1;
        }
        self.fs.sync()?;
        let span = start.until(&self.fs.sample());
        let bytes = made * self.size;
        self.out.values.insert("created".into(), made.into());
        self.out.phases.push(Phase::new("create", ops, bytes, span));
        Ok(())
    }

    fn cold(&mut self) -> Result<()> {
        if self.fs.drop_caches()? == Cold::No && self.out.notes.is_empty() {
            self.out
                .notes
                .push("not root: the host's caches could not be dropped; the passes meant to be cold ran warm".into());
        }
        Ok(())
    }

    /// Reads `dir`, checking it holds the `n` files.
    fn entries(&self, dir: &str) -> Result<Vec<Entry>> {
        let entries = self.fs.read_dir(dir)?;
        ensure!(
            entries.len() as u64 == self.n,
            "{dir}: readdir returned {} entries, expected {}",
            entries.len(),
            self.n
        );
        Ok(entries)
    }
}

impl Run<'_, '_> {
    /// Readdir, then stat every entry in `order`.
    fn stat_all(&mut self, order: Order) -> Result<()> {
        self.cold()?;
        let start = self.fs.sample();
        let entries = order.apply(self.entries(DIR)?);
        if order == Order::Readdir {
            let ascending = entries.windows(2).filter(|w| w[0].ino < w[1].ino).count();
            let share = ascending as f64 / (entries.len().max(2) - 1) as f64;
            self.out.values.insert("readdir_ascending_share".into(), json!(share));
        }
        for e in &entries {
            let st = self.fs.stat(&format!("{DIR}/{}", e.name))?;
            ensure!(
                st.ino == e.ino && st.size == self.size && !st.is_dir,
                "stat {DIR}/{}: {st:?}, readdir said inode {}",
                e.name,
                e.ino
            );
            self.progress.step(1)?;
        }
        let span = start.until(&self.fs.sample());
        let name = format!("readdir+stat, {}", order.name());
        self.out.phases.push(Phase::new(name, self.n, 0, span));
        Ok(())
    }

    /// Copies every file of `files` into the new directory `to`, in
    /// `order`, checking what it reads.
    fn copy(&mut self, order: Order, to: &str) -> Result<()> {
        self.cold()?;
        let start = self.fs.sample();
        self.fs.mkdir(to)?;
        let entries = order.apply(self.entries(DIR)?);
        for e in &entries {
            let key = key_of(&e.name)?;
            let src = self.fs.open(&format!("{DIR}/{}", e.name), false)?;
            let read = self.fs.read_at(&src, 0, &mut self.buf);
            self.fs.close(src)?;
            ensure!(read? == self.buf.len(), "{DIR}/{}: short read", e.name);
            fill(&mut self.want, key);
            ensure!(
                self.buf == self.want,
                "{DIR}/{}: the bytes read are not those written",
                e.name
            );
            let dst = self.fs.create(&format!("{to}/{}", e.name))?;
            let w = if self.size > 0 {
                self.fs.write_at(&dst, 0, &self.buf)
            } else {
                Ok(())
            };
            self.fs.close(dst)?;
            w?;
            self.progress.step(1)?;
        }
        self.fs.sync()?;
        let span = start.until(&self.fs.sample());
        let name = format!("copy, {}", order.name());
        self.out.phases.push(Phase::new(name, self.n, self.n * self.size, span));
        Ok(())
    }

    /// Unlinks every file of `dir` in `order` (the directory stays).
    fn delete(&mut self, order: Order, dir: &str) -> Result<()> {
        self.cold()?;
        let ((), span) = timed(self.fs, || {
            let entries = order.apply(self.entries(dir)?);
            for e in &entries {
                self.fs.unlink(&format!("{dir}/{}", e.name))?;
            }
            self.fs.sync()
        })?;
        self.progress.step(self.n)?;
        ensure!(self.fs.read_dir(dir)?.is_empty(), "{dir} is not empty after the delete");
        let name = format!("delete, {}", order.name());
        self.out.phases.push(Phase::new(name, self.n, 0, span));
        Ok(())
    }
}

impl Run<'_, '_> {
    /// Each ordering pair's time ratio, and each phase's seeks.
    fn summarize(&mut self) {
        let ns = |name: &str| {
            self.out
                .phases
                .iter()
                .find(|p| p.name == name)
                .map_or(0, |p| p.span.ns())
        };
        let mut ratio = Map::new();
        for what in ["readdir+stat", "copy", "delete"] {
            let (r, i) = (
                ns(&format!("{what}, readdir order")),
                ns(&format!("{what}, inode order")),
            );
            if i > 0 {
                ratio.insert(what.into(), json!(r as f64 / i as f64));
            }
        }
        self.out.values.insert("readdir_over_inode_time".into(), ratio.into());
        let seeks: Map<String, Value> = self
            .out
            .phases
            .iter()
            .filter_map(|p| Some((p.name.clone(), seek_figures(&p.span)?)))
            .collect();
        if !seeks.is_empty() {
            self.out.values.insert("seeks".into(), seeks.into());
        }
    }
}

/// A modeled span's head positionings, seeks of non-zero distance, and
/// the cylinders they crossed at least (each seek's bucket's low end).
fn seek_figures(span: &Span) -> Option<Value> {
    let m = span.modeled.as_ref()?;
    let seeks: u64 = m.seek_histogram.iter().filter(|b| b[0] > 0).map(|b| b[2]).sum();
    let cylinders: u64 = m.seek_histogram.iter().map(|b| b[0] * b[2]).sum();
    Some(json!({
        "positionings": m.positionings,
        "seeks": seeks,
        "cylinders_at_least": cylinders,
    }))
}
