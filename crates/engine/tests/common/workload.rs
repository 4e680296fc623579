//! A seeded workload for the crash and I/O-error tests, with a model of
//! what every regular file holds.
//!
//! File data is made of 8-byte words that name the file and the word's
//! place in it: `0xA5 << 56 | id << 40 | version << 32 | offset / 8`. Every
//! offset and size is a multiple of 8, so a file read back after a crash can
//! be checked word by word: zero (a hole) or a word of its own at its own
//! place. A block of another file, or of this file's past in another place,
//! shows up at once.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, ROOT_INO, RenameFlags, Result};
use ext4kit_testkit::rng::Rng;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// Most regular files alive at once.
const MAX_FILES: usize = 40;
/// Most directories (besides the root).
const MAX_DIRS: usize = 6;
/// Most bytes of file data in the model, well inside an 8 MiB image.
const MAX_BYTES: usize = 2 << 20;
/// One regular file of the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileModel {
    /// Identity, kept across renames; written into every data word.
    pub id: u16,
    /// Bumped by every write, so an overwrite changes the bytes.
    pub version: u8,
    /// Contents.
    pub data: Arc<Vec<u8>>,
}

/// The data word for file `id`, `version`, at file offset `off`.
pub fn word(id: u16, version: u8, off: u64) -> [u8; 8] {
    let w = (0xA5u64 << 56) | (u64::from(id) << 40) | (u64::from(version) << 32) | (off / 8) & 0xFFFF_FFFF;
    w.to_le_bytes()
}

/// Checks that `data` (a file at `path`) holds only zero words and words
/// of one file at their own places, that file being one of `allowed`.
pub fn check_own_words(path: &str, data: &[u8], allowed: &BTreeSet<u16>) -> std::result::Result<(), String> {
    let mut seen = None;
    for (i, w) in data.chunks(8).enumerate() {
        let Ok(w) = <[u8; 8]>::try_from(w) else {
            return Err(format!("{path}: size {} is not a multiple of 8", data.len()));
        };
        let v = u64::from_le_bytes(w);
        if v == 0 {
            continue;
        }
        let id = (v >> 40) as u16;
        let ok = v >> 56 == 0xA5 && v & 0xFFFF_FFFF == i as u64 && allowed.contains(&id);
        if !ok || seen.is_some_and(|s| s != id) {
            return Err(format!(
                "{path}: foreign data at byte {}: {v:#018x} (file ids allowed here {allowed:?}, first seen {seen:?})",
                i * 8
            ));
        }
        seen = Some(id);
    }
    Ok(())
}

/// What one step did: its name and the file paths it changed.
#[derive(Debug, Clone)]
pub struct Step {
    /// The operation.
    pub op: &'static str,
    /// Paths of regular files whose name or contents it changed.
    pub touched: Vec<String>,
}

/// The workload's state: the generator and the model of the tree.
#[derive(Clone)]
pub struct Workload {
    rng: Rng,
    /// Regular files by absolute path.
    pub files: BTreeMap<String, FileModel>,
    /// Directories besides the root, as absolute paths.
    dirs: Vec<String>,
    /// Every file id that ever had each path.
    pub ever: HashMap<String, BTreeSet<u16>>,
    next_id: u16,
    next_name: u32,
    /// Prefix of the names this workload makes.
    prefix: &'static str,
    /// The paths the last step named (the file it picked, the names it
    /// made up): where a step that failed half-way may have left changes.
    pub attempted: Vec<String>,
}

impl Workload {
    /// A workload drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            files: BTreeMap::new(),
            dirs: Vec::new(),
            ever: HashMap::new(),
            next_id: 1,
            next_name: 0,
            prefix: "",
            attempted: Vec::new(),
        }
    }

    /// The same workload making names that start with `prefix` and file
    /// ids from `first_id`, so that it can run beside another workload on
    /// one tree and the data words still tell their files apart.
    pub fn named(mut self, prefix: &'static str, first_id: u16) -> Self {
        self.prefix = prefix;
        self.next_id = first_id;
        self
    }

    fn bytes(&self) -> usize {
        self.files.values().map(|f| f.data.len()).sum()
    }

    fn pick_file(&mut self) -> Option<String> {
        if self.files.is_empty() {
            return None;
        }
        let i = self.rng.below(self.files.len() as u64) as usize;
        self.files.keys().nth(i).cloned()
    }

    fn pick_dir(&mut self) -> String {
        let i = self.rng.below(self.dirs.len() as u64 + 1) as usize;
        self.dirs.get(i).cloned().unwrap_or_default()
    }

    fn new_path(&mut self) -> String {
        self.next_name += 1;
        let path = format!("{}/{}f{}", self.pick_dir(), self.prefix, self.next_name);
        self.attempted.push(path.clone());
        path
    }

    /// Runs one operation drawn at random (`sync` among them) on `fs`; the
    /// model follows only when it succeeds.
    pub fn step(&mut self, fs: &Filesystem) -> Result<Step> {
        let roll = self.rng.below(100);
        let file = self.pick_file();
        self.attempted = file.iter().cloned().collect();
        match (roll, file) {
            (0..8, _) => fs.sync().map(|()| self.done("sync", vec![])),
            (8..12, _) if self.dirs.len() < MAX_DIRS => self.mkdir(fs),
            (_, Some(p)) if roll < 40 && self.bytes() < MAX_BYTES => self.write(fs, p),
            (40..52, Some(p)) => self.overwrite(fs, p),
            (52..60, Some(p)) => self.truncate(fs, p),
            (60..68, Some(p)) => self.unlink(fs, p),
            (68..78, Some(p)) => self.rename(fs, p),
            _ if self.files.len() < MAX_FILES => self.create(fs),
            _ => fs.sync().map(|()| self.done("sync", vec![])),
        }
    }

    fn done(&self, op: &'static str, touched: Vec<String>) -> Step {
        Step { op, touched }
    }

    fn create(&mut self, fs: &Filesystem) -> Result<Step> {
        let path = self.new_path();
        let (dir, name) = split(&path);
        let parent = fs.resolve(dir.as_bytes())?.ino;
        fs.create(parent, name.as_bytes(), NodeKind::Regular, ATTR)?;
        let id = self.next_id;
        self.next_id += 1;
        self.ever.entry(path.clone()).or_default().insert(id);
        let f = FileModel {
            id,
            version: 0,
            data: Arc::new(Vec::new()),
        };
        self.files.insert(path.clone(), f);
        Ok(self.done("create", vec![path]))
    }

    fn mkdir(&mut self, fs: &Filesystem) -> Result<Step> {
        let path = format!("/{}d{}", self.prefix, self.dirs.len());
        let attr = Attr { perm: 0o755, ..ATTR };
        fs.create(ROOT_INO, &path.as_bytes()[1..], NodeKind::Directory, attr)?;
        self.dirs.push(path);
        Ok(self.done("mkdir", vec![]))
    }

    /// Writes `len` bytes at `off` (multiples of 8) as the file's next version.
    fn put(&mut self, fs: &Filesystem, path: String, off: u64, len: u64, op: &'static str) -> Result<Step> {
        let f = &self.files[&path];
        let version = f.version.wrapping_add(1);
        let bytes: Vec<u8> = (0..len / 8).flat_map(|i| word(f.id, version, off + i * 8)).collect();
        let ino = fs.resolve(path.as_bytes())?.ino;
        fs.write(ino, off, &bytes)?;
        let f = self.files.get_mut(&path).expect("picked from the model");
        f.version = version;
        let data = Arc::make_mut(&mut f.data);
        let end = (off + len) as usize;
        if data.len() < end {
            data.resize(end, 0);
        }
        data[off as usize..end].copy_from_slice(&bytes);
        Ok(self.done(op, vec![path]))
    }

    fn write_len(&mut self) -> u64 {
        let sizes = [8u64, 64, 1000, 4096, 10_000, 40_000, 120_000];
        let n = sizes[self.rng.below(sizes.len() as u64) as usize];
        (n + self.rng.below(n)) & !7
    }

    fn write(&mut self, fs: &Filesystem, path: String) -> Result<Step> {
        let size = self.files[&path].data.len() as u64;
        // At the end, or past it (a hole), or somewhere inside.
        let off = match self.rng.below(3) {
            0 => size,
            1 => size + self.rng.below(20_000),
            _ => self.rng.below(size + 1),
        } & !7;
        let len = self.write_len().max(8);
        self.put(fs, path, off, len, "write")
    }

    fn overwrite(&mut self, fs: &Filesystem, path: String) -> Result<Step> {
        let size = self.files[&path].data.len() as u64;
        if size < 8 {
            return self.write(fs, path);
        }
        let off = self.rng.below(size) & !7;
        let len = self.write_len().clamp(8, size - off);
        self.put(fs, path, off, len, "overwrite")
    }

    fn truncate(&mut self, fs: &Filesystem, path: String) -> Result<Step> {
        let size = self.files[&path].data.len() as u64;
        let new = self.rng.below(size + 8192) & !7;
        let ino = fs.resolve(path.as_bytes())?.ino;
        fs.truncate(ino, new)?;
        let f = self.files.get_mut(&path).expect("picked from the model");
        Arc::make_mut(&mut f.data).resize(new as usize, 0);
        Ok(self.done("truncate", vec![path]))
    }

    fn unlink(&mut self, fs: &Filesystem, path: String) -> Result<Step> {
        let (dir, name) = split(&path);
        let parent = fs.resolve(dir.as_bytes())?.ino;
        fs.unlink(parent, name.as_bytes())?;
        self.files.remove(&path);
        Ok(self.done("unlink", vec![path]))
    }

    fn rename(&mut self, fs: &Filesystem, from: String) -> Result<Step> {
        // Onto another file (replacing it) one time in three.
        let to = match self.pick_file() {
            Some(p) if p != from && self.rng.below(3) == 0 => {
                self.attempted.push(p.clone());
                p
            }
            _ => self.new_path(),
        };
        let (fd, fname) = split(&from);
        let (td, tname) = split(&to);
        let fp = fs.resolve(fd.as_bytes())?.ino;
        let tp = fs.resolve(td.as_bytes())?.ino;
        fs.rename(fp, fname.as_bytes(), tp, tname.as_bytes(), RenameFlags::default())?;
        let f = self.files.remove(&from).expect("picked from the model");
        self.ever.entry(to.clone()).or_default().insert(f.id);
        self.files.insert(to.clone(), f);
        Ok(self.done("rename", vec![from, to]))
    }
}

/// `("/d1", "f3")` from `"/d1/f3"`; the root is `""` → resolved as `/`.
fn split(path: &str) -> (String, &str) {
    let (dir, name) = path.rsplit_once('/').expect("absolute path");
    (if dir.is_empty() { "/".into() } else { dir.into() }, name)
}

/// Every regular file of `fs` by absolute path, with its contents.
pub fn read_tree(fs: &Filesystem) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(String::new(), fs.inode(ROOT_INO)?)];
    while let Some((path, dir)) = stack.pop() {
        for e in fs.read_dir(&dir)? {
            if e.name == b"." || e.name == b".." || e.name == b"lost+found" {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let inode = fs.inode(e.ino)?;
            if inode.is_dir() {
                stack.push((p, inode));
            } else {
                out.insert(p, fs.read_all(&inode, 64 << 20)?);
            }
        }
    }
    Ok(out)
}

/// True when `e` is the error a failing disk gives (`EIO`).
pub fn is_eio(e: &Error) -> bool {
    matches!(e, Error::Io { .. }) && e.errno() == libc::EIO
}
