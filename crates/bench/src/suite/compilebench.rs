//! `compilebench`: seed 001 tables 1 and 4 (compilebench, "which tries to
//! age a file system by simulating some of the disk IO common in
//! creating, compiling, patching, stating and reading kernel trees"): how
//! well the allocator keeps directory locality as the disk fills and the
//! trees age. Reported as the seed reports it: MB/s for the phases that
//! move data, time for delete and stat.
//!
//! One synthetic kernel tree is generated from `--seed`: `-n` files
//! (default 3,000, scaled by `--scale`) in one directory per ten files,
//! the directories a random recursive tree (mostly shallow, a few deep
//! chains), sizes log-uniform from 200 B to 64 KiB (mean about 11 KiB,
//! the 2.6 kernel's) with one file in fifty of 64–256 KiB; 45% are `.c`.
//! Every tree is a copy of it with its own contents.
//!
//! The run: "initial create" of the initial trees (10, compilebench's
//! `-i 10`; `--preset quick`: 4), then rounds (3, i.e. compilebench's
//! `-r 30`; quick: 2) each running the ten operations once in a
//! seeded random order on randomly chosen trees, so later operations see
//! the file system the earlier ones aged:
//! - create: one more tree, directory by directory;
//! - patch: of a tree's files, 8% rewritten to a temporary name and
//!   renamed over the old (as `patch` does; read and written bytes
//!   count), 2% appended to, 0.5% new files, 0.5% deleted;
//! - compile: an `.o` beside each `.c`, 1–2 times its size;
//! - clean: the `.o` files deleted (their bytes count, as compilebench's);
//! - read tree / read compiled tree: every file read and checked, in
//!   readdir order;
//! - delete tree / delete compiled tree: `rm -r` in readdir order;
//! - stat tree / stat compiled tree: every entry stat'ed.
//!
//! An operation that needs a compiled (or plain) tree when there is none
//! first compiles (or creates) one, counted in that phase. Every
//! operation starts cold (caches dropped, untimed) and ends with a sync
//! inside its time, so the writes are charged to it.

use std::collections::{BTreeMap, HashSet};

use anyhow::{Result, bail, ensure};

use super::fs::{BenchFs, Cold, Sample, Span};
use super::{Outcome, Params, Phase, Progress, Workload};
use crate::rng::Rng;

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "compilebench",
    about: "seed 001 tables 1 and 4: create, patch, compile, clean, read, delete and stat kernel-like trees as the file system ages; MB/s per phase",
    image_size,
    run,
    inspect: None,
};

const DEFAULT_FILES: u64 = 3_000;
const FILES_PER_DIR: usize = 10;

/// Counts of the run, from the flags.
#[derive(Debug, Clone, Copy)]
struct Shape {
    files: usize,
    initial: usize,
    rounds: usize,
}

fn shape(p: &Params) -> Result<Shape> {
    let (initial, rounds) = match p.preset.as_deref() {
        None | Some("default") => (10, 3),
        Some("quick") => (4, 2),
        Some(other) => bail!("compilebench has no preset {other}; it has default and quick"),
    };
    let files = usize::try_from(p.n_or(DEFAULT_FILES))?;
    Ok(Shape { files, initial, rounds })
}

fn image_size(p: &Params) -> (u64, u64) {
    let s = shape(p).unwrap_or(Shape {
        files: p.n_or(DEFAULT_FILES) as usize,
        initial: 10,
        rounds: 3,
    });
    let layout = Layout::new(s.files, p.seed);
    let block = 4096u64;
    let up = |b: u64| b.div_ceil(block) * block;
    // Sources, their objects at most twice their size, the directories.
    let tree: u64 =
        layout.dirs.len() as u64 * block + layout.files.iter().map(|f| up(f.size) + up(2 * f.size)).sum::<u64>();
    let trees = (s.initial + 3 * s.rounds) as u64;
    let inodes = trees * (2 * s.files + layout.dirs.len()) as u64 + 1024;
    // A kernel target's mke2fs gets the size alone: one inode per 16 KiB
    // (its default ratio) must cover them. At least 512 MiB, so mke2fs
    // (and the engine's mkfs) pick 4 KiB blocks, as a kernel tree's disk.
    let bytes = (trees * tree / 4 * 5 + (64 << 20))
        .max(inodes * (16 << 10))
        .max(512 << 20);
    (bytes, inodes)
}

/// The operations, in the order of the seed's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    InitialCreate,
    Create,
    Patch,
    Compile,
    Clean,
    ReadTree,
    ReadCompiled,
    DeleteTree,
    DeleteCompiled,
    StatTree,
    StatCompiled,
}

const OPS: [Op; 11] = [
    Op::InitialCreate,
    Op::Create,
    Op::Patch,
    Op::Compile,
    Op::Clean,
    Op::ReadTree,
    Op::ReadCompiled,
    Op::DeleteTree,
    Op::DeleteCompiled,
    Op::StatTree,
    Op::StatCompiled,
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::InitialCreate => "initial create",
            Op::Create => "create total",
            Op::Patch => "patch total",
            Op::Compile => "compile total",
            Op::Clean => "clean total",
            Op::ReadTree => "read tree total",
            Op::ReadCompiled => "read compiled tree total",
            Op::DeleteTree => "delete tree total",
            Op::DeleteCompiled => "delete compiled tree total",
            Op::StatTree => "stat tree total",
            Op::StatCompiled => "stat compiled tree total",
        }
    }
}

/// One source file of the generated tree.
#[derive(Debug, Clone)]
pub(super) struct Source {
    pub(super) name: String,
    pub(super) size: u64,
}

/// The generated kernel tree every tree copies: directory paths relative
/// to the tree's root (the root is ""; a parent comes before its
/// children) and the files. `aging` ages copies of it too.
pub(super) struct Layout {
    pub(super) dirs: Vec<String>,
    dir_set: HashSet<String>,
    /// Files of each directory, by index into `files`.
    pub(super) by_dir: Vec<Vec<usize>>,
    pub(super) files: Vec<Source>,
}

impl Layout {
    /// The tree of `files` files generated from `seed`.
    pub(super) fn new(files: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed ^ 0x00c0_3b1e_bec4);
        let ndirs = (files / FILES_PER_DIR).max(1);
        let mut dirs = vec![String::new()];
        for i in 1..ndirs {
            // The smaller of two draws: most directories hang near the top.
            let parent = rng.below(i).min(rng.below(i));
            dirs.push(join(&dirs[parent], &format!("d{i}")));
        }
        let mut by_dir = vec![Vec::new(); ndirs];
        let files: Vec<Source> = (0..files)
            .map(|j| {
                let dir = rng.below(ndirs);
                by_dir[dir].push(j);
                let ext = match rng.below(100) {
                    0..45 => "c",
                    45..80 => "h",
                    80..85 => "S",
                    _ => "txt",
                };
                let size = source_size(&mut rng);
                let name = format!("f{j}.{ext}");
                Source { name, size }
            })
            .collect();
        let dir_set = dirs.iter().cloned().collect();
        Self {
            dirs,
            dir_set,
            by_dir,
            files,
        }
    }
}

/// A kernel source file's size: log-uniform over 200 B–64 KiB (mean
/// about 11 KiB), one in fifty a large 64–256 KiB file.
pub(super) fn source_size(rng: &mut Rng) -> u64 {
    if rng.below(50) == 0 {
        return rng.range(64 << 10, 256 << 10) as u64;
    }
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (200.0 * (65_536.0f64 / 200.0).powf(u)) as u64
}

/// `dir/name`, or `name` in the tree's root ("").
pub(super) fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// What a file holds: `size` bytes of the pattern of `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Content {
    pub(super) size: u64,
    pub(super) key: u64,
}

/// The byte pattern of `key` from file offset `at`: every 8-byte word
/// differs, so a read of the wrong block or file is seen.
pub(super) fn fill(buf: &mut [u8], key: u64, at: u64) {
    let mut word = 0;
    for (i, b) in buf.iter_mut().enumerate() {
        let o = at + i as u64;
        if i == 0 || o & 7 == 0 {
            word = Rng::new(key ^ (o >> 3).wrapping_mul(0x9e37_79b9)).next_u64();
        }
        *b = (word >> ((o & 7) * 8)) as u8;
    }
}

/// The object `compile` makes of a `.c` file: 1–2 times its size.
fn object_of(path: &str, c: Content) -> Option<(String, Content)> {
    let stem = path.strip_suffix(".c")?;
    let size = c.size + c.size * (c.key % 101) / 100;
    let key = Rng::new(c.key ^ 0x000b_1ec7).next_u64();
    Some((format!("{stem}.o"), Content { size, key }))
}

/// One tree on the file system, as the run believes it to be.
struct Tree {
    id: u64,
    /// Regular files by path relative to the tree's root.
    files: BTreeMap<String, Content>,
    /// The `.o` files while compiled.
    objects: BTreeMap<String, Content>,
    compiled: bool,
    /// Files `patch` has added so far, for new names.
    added: u64,
}

impl Tree {
    fn root(&self) -> String {
        format!("t{}", self.id)
    }

    fn path(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.root()
        } else {
            format!("t{}/{rel}", self.id)
        }
    }

    fn entries(&self, layout: &Layout) -> u64 {
        (self.files.len() + self.objects.len() + layout.dirs.len()) as u64
    }
}

/// A phase's running sums.
#[derive(Default)]
struct Tally {
    runs: u64,
    ops: u64,
    bytes: u64,
    span: Span,
}

/// The run's state.
struct Bench<'r, 'p> {
    fs: &'r mut dyn BenchFs,
    progress: &'r mut Progress<'p>,
    layout: Layout,
    rng: Rng,
    trees: Vec<Tree>,
    next_id: u64,
    tally: [Tally; OPS.len()],
    buf: Vec<u8>,
    want: Vec<u8>,
    warm: bool,
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let s = shape(p)?;
    let layout = Layout::new(s.files, p.seed);
    let mut out = Outcome::default();
    out.params.insert("files_per_tree".into(), s.files.into());
    out.params.insert("dirs_per_tree".into(), layout.dirs.len().into());
    let tree_bytes: u64 = layout.files.iter().map(|f| f.size).sum();
    out.params.insert("tree_bytes".into(), tree_bytes.into());
    out.params.insert("initial_trees".into(), s.initial.into());
    out.params.insert("rounds".into(), s.rounds.into());
    out.params.insert("seed".into(), p.seed.into());
    // Units: a file or directory handled; about a tree per operation.
    let per_tree = (s.files + layout.dirs.len()) as u64;
    progress.set_total(per_tree * (s.initial + 10 * s.rounds) as u64);
    let mut b = Bench {
        fs,
        progress,
        layout,
        rng: Rng::new(p.seed),
        trees: Vec::new(),
        next_id: 0,
        tally: Default::default(),
        buf: Vec::new(),
        want: Vec::new(),
        warm: false,
    };
    for _ in 0..s.initial {
        b.op(Op::InitialCreate)?;
    }
    for _ in 0..s.rounds {
        let mut order: Vec<Op> = OPS[1..].to_vec();
        for i in (1..order.len()).rev() {
            order.swap(i, b.rng.below(i + 1));
        }
        for op in order {
            b.op(op)?;
        }
    }
    b.finish(out)
}

impl Bench<'_, '_> {
    fn finish(self, mut out: Outcome) -> Result<Outcome> {
        let mut runs = serde_json::Map::new();
        for (op, t) in OPS.iter().zip(self.tally) {
            runs.insert(op.name().into(), t.runs.into());
            out.phases.push(Phase::new(op.name(), t.ops, t.bytes, t.span));
        }
        out.values.insert("runs".into(), runs.into());
        out.values.insert("trees_left".into(), self.trees.len().into());
        if self.warm {
            out.notes.push(
                "not root: the host's caches could not be dropped; operations meant to start cold ran warm".into(),
            );
        }
        Ok(out)
    }

    /// Runs `op` on a tree it picks (making one first if needed) from a
    /// cold start, and adds its figures to the op's phase.
    fn op(&mut self, op: Op) -> Result<()> {
        let t = match op {
            Op::InitialCreate | Op::Create => None,
            Op::Patch => Some(self.any_tree()?),
            Op::Compile | Op::ReadTree | Op::DeleteTree | Op::StatTree => Some(self.tree(false)?),
            _ => Some(self.tree(true)?),
        };
        if self.fs.drop_caches()? == Cold::No {
            self.warm = true;
        }
        let start = self.fs.sample();
        let (ops, bytes) = match (op, t) {
            (Op::InitialCreate | Op::Create, _) => self.create()?,
            (Op::Patch, Some(t)) => self.patch(t)?,
            (Op::Compile, Some(t)) => self.compile(t)?,
            (Op::Clean, Some(t)) => self.clean(t)?,
            (Op::ReadTree | Op::ReadCompiled, Some(t)) => self.read(t)?,
            (Op::DeleteTree | Op::DeleteCompiled, Some(t)) => self.delete(t)?,
            (Op::StatTree | Op::StatCompiled, Some(t)) => self.stat(t)?,
            (_, None) => unreachable!("every op but create is given a tree"),
        };
        self.fs.sync()?;
        self.count(op, ops, bytes, &start);
        Ok(())
    }

    fn count(&mut self, op: Op, ops: u64, bytes: u64, start: &Sample) {
        let span = start.until(&self.fs.sample());
        let t = &mut self.tally[op as usize];
        t.runs += 1;
        t.ops += ops;
        t.bytes += bytes;
        t.span.add(&span);
    }

    /// A random tree, created first if there is none.
    fn any_tree(&mut self) -> Result<usize> {
        if self.trees.is_empty() {
            self.op(Op::Create)?;
        }
        Ok(self.rng.below(self.trees.len()))
    }

    /// A random tree that is (or is not) compiled, made first if there is
    /// none: a plain tree by `create`, a compiled one by `compile`.
    fn tree(&mut self, compiled: bool) -> Result<usize> {
        let pick =
            |trees: &[Tree]| -> Vec<usize> { (0..trees.len()).filter(|&i| trees[i].compiled == compiled).collect() };
        if pick(&self.trees).is_empty() {
            self.op(if compiled { Op::Compile } else { Op::Create })?;
        }
        let fit = pick(&self.trees);
        Ok(fit[self.rng.below(fit.len())])
    }
}

impl Bench<'_, '_> {
    /// Writes `c` to a new file at `path`.
    fn write_new(&mut self, path: &str, c: Content) -> Result<()> {
        self.buf.resize(c.size as usize, 0);
        fill(&mut self.buf, c.key, 0);
        let f = self.fs.create(path)?;
        self.fs.write_at(&f, 0, &self.buf)?;
        self.fs.close(f)
    }

    /// Reads the file at `path` and checks it holds `c`.
    fn read_check(&mut self, path: &str, c: Content) -> Result<()> {
        let len = c.size as usize;
        self.buf.resize(len + 1, 0);
        let f = self.fs.open(path, false)?;
        let n = self.fs.read_at(&f, 0, &mut self.buf);
        self.fs.close(f)?;
        let n = n?;
        ensure!(n == len, "{path}: read {n} bytes, expected {len}");
        self.want.resize(len, 0);
        fill(&mut self.want, c.key, 0);
        ensure!(
            self.buf[..len] == self.want[..],
            "{path}: the bytes read are not those written"
        );
        Ok(())
    }

    /// A new tree, directory by directory as an unpacked tarball.
    fn create(&mut self) -> Result<(u64, u64)> {
        let id = self.next_id;
        self.next_id += 1;
        let mut tree = Tree {
            id,
            files: BTreeMap::new(),
            objects: BTreeMap::new(),
            compiled: false,
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
            self.progress.step(1 + self.layout.by_dir[d].len() as u64)?;
        }
        let ops = tree.files.len() as u64;
        self.trees.push(tree);
        Ok((ops, bytes))
    }

    /// An `.o` beside every `.c` of tree `t`.
    fn compile(&mut self, t: usize) -> Result<(u64, u64)> {
        let objects: Vec<(String, Content)> = self.trees[t]
            .files
            .iter()
            .filter_map(|(rel, &c)| object_of(rel, c))
            .collect();
        let bytes = objects.iter().map(|(_, c)| c.size).sum();
        for (rel, c) in &objects {
            let path = self.trees[t].path(rel);
            self.write_new(&path, *c)?;
            self.progress.step(1)?;
        }
        let tree = &mut self.trees[t];
        tree.objects = objects.into_iter().collect();
        tree.compiled = true;
        Ok((tree.objects.len() as u64, bytes))
    }

    /// Deletes the objects of tree `t`, finding them by readdir as `make
    /// clean` does.
    fn clean(&mut self, t: usize) -> Result<(u64, u64)> {
        let tree = &self.trees[t];
        let mut found = Vec::new();
        walk(&*self.fs, tree, &self.layout, &mut |path, c| {
            if path.ends_with(".o") {
                found.push((path.to_string(), c.map_or(0, |c| c.size)));
            }
            Ok(())
        })?;
        ensure!(
            found.len() == tree.objects.len(),
            "clean found {} objects of {}",
            found.len(),
            tree.objects.len()
        );
        let mut bytes = 0;
        for (path, size) in &found {
            self.fs.unlink(path)?;
            bytes += size;
            self.progress.step(1)?;
        }
        let tree = &mut self.trees[t];
        tree.objects.clear();
        tree.compiled = false;
        Ok((found.len() as u64, bytes))
    }
}

impl Bench<'_, '_> {
    /// Reads and checks every file of tree `t` in readdir order.
    fn read(&mut self, t: usize) -> Result<(u64, u64)> {
        let mut files = Vec::new();
        walk(&*self.fs, &self.trees[t], &self.layout, &mut |path, c| {
            if let Some(c) = c {
                files.push((path.to_string(), c));
            }
            Ok(())
        })?;
        let mut bytes = 0;
        for (path, c) in &files {
            self.read_check(path, *c)?;
            bytes += c.size;
            self.progress.step(1)?;
        }
        Ok((files.len() as u64, bytes))
    }

    /// Stats every entry of tree `t` in readdir order.
    fn stat(&mut self, t: usize) -> Result<(u64, u64)> {
        let fs = &*self.fs;
        let progress = &mut *self.progress;
        let mut n = 0;
        walk(fs, &self.trees[t], &self.layout, &mut |path, c| {
            let st = fs.stat(path)?;
            match c {
                Some(c) => ensure!(st.size == c.size && !st.is_dir, "stat {path}: {st:?}, expected {c:?}"),
                None => ensure!(st.is_dir, "stat {path}: not a directory"),
            }
            n += 1;
            progress.step(1)
        })?;
        Ok((n, 0))
    }

    /// `rm -r` of tree `t`: each directory's entries in readdir order,
    /// the directory after them.
    fn delete(&mut self, t: usize) -> Result<(u64, u64)> {
        let fs = &*self.fs;
        let progress = &mut *self.progress;
        let mut n = 0;
        walk(fs, &self.trees[t], &self.layout, &mut |path, c| {
            match c {
                Some(_) => fs.unlink(path)?,
                None => fs.rmdir(path)?,
            }
            n += 1;
            progress.step(1)
        })?;
        let tree = self.trees.remove(t);
        ensure!(
            n == tree.entries(&self.layout),
            "deleted {n} entries of {}",
            tree.entries(&self.layout)
        );
        Ok((n, 0))
    }
}

impl Bench<'_, '_> {
    /// Modifies, appends to, adds and deletes a share of tree `t`'s files.
    fn patch(&mut self, t: usize) -> Result<(u64, u64)> {
        let n = self.trees[t].files.len();
        let share = |per_mille: usize| (n * per_mille / 1000).max(1);
        let mut bytes = 0;
        for _ in 0..share(80) {
            bytes += self.rewrite(t)?;
        }
        for _ in 0..share(20) {
            bytes += self.append(t)?;
        }
        for _ in 0..share(5) {
            bytes += self.add(t)?;
        }
        for _ in 0..share(5) {
            self.remove(t)?;
        }
        self.progress.step((share(80) + share(20) + 2 * share(5)) as u64)?;
        let ops = (share(80) + share(20) + 2 * share(5)) as u64;
        Ok((ops, bytes))
    }

    /// A random file of tree `t`, if it has any.
    fn some_file(&mut self, t: usize) -> Option<(String, Content)> {
        let files = &self.trees[t].files;
        let k = self.rng.below(files.len().max(1));
        files.iter().nth(k).map(|(p, c)| (p.clone(), *c))
    }

    /// Reads a file and replaces it with a new version of a slightly
    /// different size: written to a temporary name, renamed over it.
    fn rewrite(&mut self, t: usize) -> Result<u64> {
        let Some((rel, old)) = self.some_file(t) else {
            return Ok(0);
        };
        let path = self.trees[t].path(&rel);
        self.read_check(&path, old)?;
        let delta = self.rng.below(old.size as usize / 5 + 2) as u64;
        let size = (old.size + delta).saturating_sub(old.size / 10 + 1).max(1);
        let new = Content {
            size,
            key: self.rng.next_u64(),
        };
        let tmp = format!("{path}.patch");
        self.write_new(&tmp, new)?;
        self.fs.rename(&tmp, &path)?;
        self.trees[t].files.insert(rel, new);
        Ok(old.size + new.size)
    }

    /// Appends a few hundred bytes to a file.
    fn append(&mut self, t: usize) -> Result<u64> {
        let Some((rel, old)) = self.some_file(t) else {
            return Ok(0);
        };
        let path = self.trees[t].path(&rel);
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
        self.trees[t].files.insert(rel, new);
        Ok(extra)
    }

    /// A new `.c` file in a random directory.
    fn add(&mut self, t: usize) -> Result<u64> {
        let d = self.rng.below(self.layout.dirs.len());
        let tree = &mut self.trees[t];
        tree.added += 1;
        let rel = join(&self.layout.dirs[d], &format!("p{}.c", tree.added));
        let c = Content {
            size: source_size(&mut self.rng),
            key: self.rng.next_u64(),
        };
        let path = self.trees[t].path(&rel);
        self.write_new(&path, c)?;
        self.trees[t].files.insert(rel, c);
        Ok(c.size)
    }

    /// Deletes a random source file (and its object, as `patch` on a
    /// built tree leaves a stale one `make` would remove).
    fn remove(&mut self, t: usize) -> Result<()> {
        let Some((rel, c)) = self.some_file(t) else {
            return Ok(());
        };
        let path = self.trees[t].path(&rel);
        self.fs.unlink(&path)?;
        let tree = &mut self.trees[t];
        tree.files.remove(&rel);
        if let Some((o, _)) = object_of(&rel, c)
            && tree.objects.remove(&o).is_some()
        {
            self.fs.unlink(&tree.path(&o))?;
        }
        Ok(())
    }
}

/// Walks tree `tree` depth first in readdir order, calling `visit` with
/// each entry's path: a file with what it should hold, a directory (the
/// tree's root last) with `None` after its entries. Fails on an entry
/// the tree should not have, or a missing one.
fn walk(
    fs: &dyn BenchFs,
    tree: &Tree,
    layout: &Layout,
    visit: &mut dyn FnMut(&str, Option<Content>) -> Result<()>,
) -> Result<()> {
    let mut seen = 0;
    walk_dir(fs, tree, layout, "", visit, &mut seen)?;
    let want = tree.entries(layout);
    ensure!(
        seen == want,
        "{}: readdir found {seen} entries, the tree has {want}",
        tree.root()
    );
    Ok(())
}

fn walk_dir(
    fs: &dyn BenchFs,
    tree: &Tree,
    layout: &Layout,
    dir: &str,
    visit: &mut dyn FnMut(&str, Option<Content>) -> Result<()>,
    seen: &mut u64,
) -> Result<()> {
    for e in fs.read_dir(&tree.path(dir))? {
        let rel = join(dir, &e.name);
        let c = tree.files.get(&rel).or_else(|| tree.objects.get(&rel));
        match c {
            Some(&c) => {
                *seen += 1;
                visit(&tree.path(&rel), Some(c))?;
            }
            None if layout.dir_set.contains(&rel) => walk_dir(fs, tree, layout, &rel, visit, seen)?,
            None => bail!("{}: an entry the tree does not have", tree.path(&rel)),
        }
    }
    *seen += 1;
    visit(&tree.path(dir), None)
}
