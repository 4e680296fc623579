//! `aging` (issue 15): does the allocator keep files whole and free space
//! in long runs as a file system ages near full? A new image is filled to
//! about 70% with compilebench's synthetic kernel trees (many small files,
//! one in fifty of 64–256 KiB), then each round runs, in a seeded random
//! order, compilebench's create (one more tree), patch (of a random tree's
//! files 8% rewritten to a temporary name and renamed over, 2% appended
//! to, 0.5% added, 0.5% deleted) and delete (a random tree, `rm -r`); a
//! tree more is created or deleted when the planned fullness has drifted
//! by more than half a tree. Every operation ends with a sync.
//!
//! What it measures is the image the run leaves, read offline by the
//! engine's library ([`super::image_counts`]): extents per regular file
//! and free-space extents with their histogram. Counts, not times: they
//! depend only on the operation sequence and the allocator, and the
//! sequence is planned from the parameters alone (never from what a
//! target reports), so every target — the engine under each allocator, a
//! kernel loop mount — runs exactly the same operations.
//!
//! Parameters: `--size` the image (default 1 GiB; `--preset quick`
//! 128 MiB, which mke2fs and the engine's mkfs make with 1 KiB blocks
//! unless `--block-size 4096`), `-n` files per tree (default 1,500; quick
//! 300), rounds 30 (quick 4; `--scale` multiplies them), `--seed`.

use std::collections::BTreeMap;

use anyhow::{Result, bail, ensure};

use super::compilebench::{Content, Layout, fill, join, source_size};
use super::fs::{BenchFs, Span};
use super::{Outcome, Params, Phase, Progress, Workload, image_counts};
use crate::rng::Rng;

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "aging",
    about: "issue 15: compilebench-like create/patch/delete rounds on a 70%-full image; extents per file and free-space extents of the image left",
    image_size,
    run,
    inspect: Some(image_counts::inspect),
};

/// The share of the image the run keeps in use.
const TARGET_FULLNESS: f64 = 0.70;
/// The unit of the plan's bookkeeping: mke2fs's block size from 512 MiB
/// up. Fixed, so the plan (and the operation sequence) does not depend on
/// the target.
const PLAN_BLOCK: u64 = 4096;

/// The run's size, from the flags.
#[derive(Debug, Clone, Copy)]
struct Shape {
    image_bytes: u64,
    files_per_tree: usize,
    rounds: usize,
}

fn shape(p: &Params) -> Result<Shape> {
    let (image_bytes, files, rounds) = match p.preset.as_deref() {
        None | Some("default") => (1u64 << 30, 1_500, 30),
        Some("quick") => (128 << 20, 300, 4),
        Some(other) => bail!("aging has no preset {other}; it has default and quick"),
    };
    let image_bytes = p.size.unwrap_or(image_bytes);
    ensure!(
        image_bytes >= 32 << 20,
        "--size {image_bytes}: aging needs an image of at least 32 MiB"
    );
    let files_per_tree = usize::try_from(p.n_or(files))?;
    ensure!(
        files_per_tree >= 10,
        "-n {files_per_tree}: a tree needs at least 10 files (one directory per ten)"
    );
    Ok(Shape {
        image_bytes,
        files_per_tree,
        rounds: usize::try_from(p.scaled(rounds as u64))?,
    })
}

fn image_size(p: &Params) -> (u64, u64) {
    // 0 inodes: mkfs's default ratio, as on any ext4 made with defaults.
    (shape(p).map_or(1 << 30, |s| s.image_bytes), 0)
}

/// Blocks of `bytes` the plan expects metadata to take on an ext4 made
/// with defaults: inode tables (256-byte inodes, one per 16 KiB, or per
/// 4 KiB below 512 MiB: mke2fs.conf's "small" type), the journal
/// (mke2fs's default size by block count), and 0.3% for bitmaps, group
/// descriptors and their reserve. An estimate, within 1% of the image's
/// blocks for 96 MiB to 1 GiB; the real fullness is measured at the end.
fn overhead_blocks(bytes: u64) -> u64 {
    let blocks = bytes / PLAN_BLOCK;
    let bytes_per_inode: u64 = if bytes < 512 << 20 { 4 << 10 } else { 16 << 10 };
    let inode_tables = bytes / bytes_per_inode * 256 / PLAN_BLOCK;
    let journal = match blocks {
        ..32_768 => 1_024,
        32_768..262_144 => 4_096,
        262_144..524_288 => 8_192,
        524_288..4_194_304 => 16_384,
        _ => 32_768,
    };
    inode_tables + journal + blocks * 3 / 1000
}

/// Blocks a file of `bytes` takes in the plan.
fn plan_blocks(bytes: u64) -> u64 {
    bytes.div_ceil(PLAN_BLOCK)
}

/// One tree on the file system, as the run believes it to be.
struct Tree {
    id: u64,
    /// Regular files by path relative to the tree's root.
    files: BTreeMap<String, Content>,
    /// Files patch has added, for new names.
    added: u64,
}

impl Tree {
    fn path(&self, rel: &str) -> String {
        if rel.is_empty() {
            format!("t{}", self.id)
        } else {
            format!("t{}/{rel}", self.id)
        }
    }

    /// Blocks it takes in the plan: its files and a block per directory.
    fn blocks(&self, layout: &Layout) -> u64 {
        let files: u64 = self.files.values().map(|c| plan_blocks(c.size)).sum();
        files + layout.dirs.len() as u64
    }
}

/// The operations of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Patch,
    Delete,
}

/// A phase's running sums.
#[derive(Default)]
struct Tally {
    ops: u64,
    bytes: u64,
    span: Span,
}

/// The run's state.
struct Aging<'r, 'p> {
    fs: &'r mut dyn BenchFs,
    progress: &'r mut Progress<'p>,
    layout: Layout,
    rng: Rng,
    trees: Vec<Tree>,
    next_id: u64,
    buf: Vec<u8>,
    /// Blocks the trees take in the plan.
    used: u64,
    created: u64,
    deleted: u64,
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let s = shape(p)?;
    let layout = Layout::new(s.files_per_tree, p.seed);
    let total = s.image_bytes / PLAN_BLOCK;
    let overhead = overhead_blocks(s.image_bytes);
    let target = ((total as f64 * TARGET_FULLNESS) as u64).saturating_sub(overhead);
    let mut a = Aging {
        fs,
        progress,
        layout,
        rng: Rng::new(p.seed ^ 0xa9e1_0000),
        trees: Vec::new(),
        next_id: 0,
        buf: Vec::new(),
        used: 0,
        created: 0,
        deleted: 0,
    };
    let tree_blocks = a.new_tree_blocks();
    ensure!(
        target >= 2 * tree_blocks,
        "a tree of {} files takes about {} KiB; {} MiB at {:.0}% full holds fewer than two: give a larger --size or a smaller -n",
        s.files_per_tree,
        (tree_blocks * PLAN_BLOCK) >> 10,
        s.image_bytes >> 20,
        TARGET_FULLNESS * 100.0
    );
    let trees_at_target = target / tree_blocks;
    a.progress
        .set_total((trees_at_target + 3 * s.rounds as u64) * s.files_per_tree as u64);
    let mut tally: [Tally; 4] = Default::default();
    while a.used + tree_blocks / 2 < target {
        a.timed(&mut tally[0], Op::Create)?;
    }
    let (mut rounds_run, mut rebalanced) = (0u64, 0u64);
    for _ in 0..s.rounds {
        let mut order = [Op::Create, Op::Patch, Op::Delete];
        for i in (1..order.len()).rev() {
            order.swap(i, a.rng.below(i + 1));
        }
        for op in order {
            a.timed(&mut tally[1 + op as usize], op)?;
        }
        // Back to the target when patches (or an unlucky pick of trees)
        // moved the plan by more than half a tree.
        while a.used + tree_blocks / 2 < target {
            a.timed(&mut tally[1 + Op::Create as usize], Op::Create)?;
            rebalanced += 1;
        }
        while a.used > target + tree_blocks / 2 && a.trees.len() > 1 {
            a.timed(&mut tally[1 + Op::Delete as usize], Op::Delete)?;
            rebalanced += 1;
        }
        rounds_run += 1;
    }
    let mut out = Outcome::default();
    let pr = &mut out.params;
    pr.insert("image_bytes".into(), s.image_bytes.into());
    pr.insert("files_per_tree".into(), s.files_per_tree.into());
    pr.insert("rounds".into(), s.rounds.into());
    pr.insert("target_fullness".into(), TARGET_FULLNESS.into());
    pr.insert("seed".into(), p.seed.into());
    for (name, t) in ["fill", "create", "patch", "delete"].iter().zip(tally) {
        out.phases.push(Phase::new(*name, t.ops, t.bytes, t.span));
    }
    let v = &mut out.values;
    v.insert("rounds_run".into(), rounds_run.into());
    v.insert("trees_created".into(), a.created.into());
    v.insert("trees_deleted".into(), a.deleted.into());
    v.insert("trees_left".into(), a.trees.len().into());
    let files: usize = a.trees.iter().map(|t| t.files.len()).sum();
    v.insert("files_planned".into(), files.into());
    v.insert("rebalancing_ops".into(), rebalanced.into());
    let planned = (a.used + overhead) as f64 / total as f64;
    v.insert("planned_fullness".into(), planned.into());
    Ok(out)
}

impl Aging<'_, '_> {
    /// Blocks a new tree takes in the plan.
    fn new_tree_blocks(&self) -> u64 {
        let files: u64 = self.layout.files.iter().map(|f| plan_blocks(f.size)).sum();
        files + self.layout.dirs.len() as u64
    }

    /// Runs `op` and a sync, adding its figures to `t`.
    fn timed(&mut self, t: &mut Tally, op: Op) -> Result<()> {
        let start = self.fs.sample();
        let (ops, bytes) = match op {
            Op::Create => self.create()?,
            Op::Patch => match self.pick() {
                Some(k) => self.patch(k)?,
                None => (0, 0),
            },
            Op::Delete => match self.pick() {
                Some(k) => self.delete(k)?,
                None => (0, 0),
            },
        };
        self.fs.sync()?;
        t.span.add(&start.until(&self.fs.sample()));
        t.ops += ops;
        t.bytes += bytes;
        Ok(())
    }

    /// A random tree, if there is one.
    fn pick(&mut self) -> Option<usize> {
        (!self.trees.is_empty()).then(|| self.rng.below(self.trees.len()))
    }

    /// Writes `c` to a new file at `path`.
    fn write_new(&mut self, path: &str, c: Content) -> Result<()> {
        self.buf.resize(c.size as usize, 0);
        fill(&mut self.buf, c.key, 0);
        let f = self.fs.create(path)?;
        let written = self.fs.write_at(&f, 0, &self.buf);
        self.fs.close(f)?;
        written
    }

    /// A new tree, directory by directory as an unpacked tarball.
    fn create(&mut self) -> Result<(u64, u64)> {
        let id = self.next_id;
        self.next_id += 1;
        let mut tree = Tree {
            id,
            files: BTreeMap::new(),
            added: 0,
        };
        let mut bytes = 0;
        for d in 0..self.layout.dirs.len() {
            self.fs.mkdir(&tree.path(&self.layout.dirs[d]))?;
            for j in self.layout.by_dir[d].clone() {
                let src = &self.layout.files[j];
                let rel = join(&self.layout.dirs[d], &src.name);
                let c = Content {
                    size: src.size,
                    key: Rng::new((id << 32) ^ j as u64).next_u64(),
                };
                self.write_new(&tree.path(&rel), c)?;
                tree.files.insert(rel, c);
                bytes += c.size;
            }
            self.progress.step(self.layout.by_dir[d].len() as u64)?;
        }
        self.used += tree.blocks(&self.layout);
        self.created += 1;
        let ops = tree.files.len() as u64;
        self.trees.push(tree);
        Ok((ops, bytes))
    }

    /// `rm -r` of tree `k`, in the plan's order (files by path, then the
    /// directories deepest first), not readdir's: readdir order follows
    /// each file system's hash seed, and the sequence must be the same on
    /// every target.
    fn delete(&mut self, k: usize) -> Result<(u64, u64)> {
        let tree = self.trees.remove(k);
        let mut bytes = 0;
        for (rel, c) in &tree.files {
            self.fs.unlink(&tree.path(rel))?;
            bytes += c.size;
        }
        // A parent comes before its children in the layout.
        for dir in self.layout.dirs.iter().rev() {
            self.fs.rmdir(&tree.path(dir))?;
        }
        self.progress.step(tree.files.len() as u64)?;
        self.used -= tree.blocks(&self.layout);
        self.deleted += 1;
        Ok((tree.files.len() as u64, bytes))
    }

    /// Rewrites, appends to, adds and deletes a share of tree `k`'s files,
    /// in compilebench's proportions.
    fn patch(&mut self, k: usize) -> Result<(u64, u64)> {
        let before = self.trees[k].blocks(&self.layout);
        let n = self.trees[k].files.len();
        let share = |per_mille: usize| (n * per_mille / 1000).max(1);
        let mut bytes = 0;
        for _ in 0..share(80) {
            bytes += self.rewrite(k)?;
        }
        for _ in 0..share(20) {
            bytes += self.append(k)?;
        }
        for _ in 0..share(5) {
            bytes += self.add(k)?;
        }
        for _ in 0..share(5) {
            self.remove(k)?;
        }
        let ops = (share(80) + share(20) + 2 * share(5)) as u64;
        self.progress.step(ops)?;
        self.used = self.used - before + self.trees[k].blocks(&self.layout);
        Ok((ops, bytes))
    }

    /// A random file of tree `k`, if it has any.
    fn some_file(&mut self, k: usize) -> Option<(String, Content)> {
        let files = &self.trees[k].files;
        let i = self.rng.below(files.len().max(1));
        files.iter().nth(i).map(|(p, c)| (p.clone(), *c))
    }

    /// Replaces a file with a version of a slightly different size,
    /// written to a temporary name and renamed over it, as `patch` does.
    fn rewrite(&mut self, k: usize) -> Result<u64> {
        let Some((rel, old)) = self.some_file(k) else {
            return Ok(0);
        };
        let path = self.trees[k].path(&rel);
        let delta = self.rng.below(old.size as usize / 5 + 2) as u64;
        let size = (old.size + delta).saturating_sub(old.size / 10 + 1).max(1);
        let new = Content {
            size,
            key: self.rng.next_u64(),
        };
        let tmp = format!("{path}.patch");
        self.write_new(&tmp, new)?;
        self.fs.rename(&tmp, &path)?;
        self.trees[k].files.insert(rel, new);
        Ok(new.size)
    }

    /// Appends a few hundred bytes to a file: the block a grown file
    /// needs next is where aging shows first.
    fn append(&mut self, k: usize) -> Result<u64> {
        let Some((rel, old)) = self.some_file(k) else {
            return Ok(0);
        };
        let path = self.trees[k].path(&rel);
        let extra = self.rng.range(40, 1_000) as u64;
        self.buf.resize(extra as usize, 0);
        fill(&mut self.buf, old.key, old.size);
        let f = self.fs.open(&path, true)?;
        let written = self.fs.write_at(&f, old.size, &self.buf);
        self.fs.close(f)?;
        written?;
        let new = Content {
            size: old.size + extra,
            key: old.key,
        };
        self.trees[k].files.insert(rel, new);
        Ok(extra)
    }

    /// A new `.c` file in a random directory.
    fn add(&mut self, k: usize) -> Result<u64> {
        let d = self.rng.below(self.layout.dirs.len());
        let tree = &mut self.trees[k];
        tree.added += 1;
        let rel = join(&self.layout.dirs[d], &format!("p{}.c", tree.added));
        let c = Content {
            size: source_size(&mut self.rng),
            key: self.rng.next_u64(),
        };
        let path = self.trees[k].path(&rel);
        self.write_new(&path, c)?;
        self.trees[k].files.insert(rel, c);
        Ok(c.size)
    }

    /// Deletes a random file.
    fn remove(&mut self, k: usize) -> Result<()> {
        let Some((rel, _)) = self.some_file(k) else {
            return Ok(());
        };
        self.fs.unlink(&self.trees[k].path(&rel))?;
        self.trees[k].files.remove(&rel);
        Ok(())
    }
}
