//! `Filesystem::create_new` and `Batch::create_new`: creates whose caller
//! promises the name is new (seed 000 §5.4, the S_CR736 mode). 20,000 names
//! in one linear (`^dir_index`) or hashed directory list and look up as
//! with `create`; a linear directory with holes refills them; the directory
//! blocks a create reads from the device stay flat as the directory grows,
//! where `create` reads the whole directory (figures printed with
//! `cargo test -p ext4kit-engine --test create_new -- --nocapture`); a
//! broken promise the placement can see is `EEXIST` with nothing changed.
//! Every image ends `e2fsck -fn` clean.

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, BlockDevice, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_format::inode::flags::INDEX;
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// Entries of the big directories: about 140 blocks of 4 KiB when linear,
/// twice the 64 blocks the engine caches at least (`cache_bytes: 0`).
const N: usize = 20_000;

/// A fresh 96 MiB image without a journal (so every committed block is
/// written home at once) and, unless `dir_index`, without hashed directories.
fn image(dir_index: bool) -> Arc<MemDevice> {
    let dev = MemDevice::new(vec![0; 96 << 20]);
    let mut feature_edits = vec![("has_journal".to_string(), false)];
    if !dir_index {
        feature_edits.push(("dir_index".to_string(), false));
    }
    let opts = MkfsOptions {
        uuid: Some([7; 16]),
        hash_seed: Some([9; 16]),
        timestamp: Some(1_700_000_000),
        device_zeroed: true,
        inode_count: Some(32_768),
        block_size: Some(4096),
        feature_edits,
        ..MkfsOptions::default()
    };
    mkfs(&dev, &opts).expect("mkfs");
    Arc::new(dev)
}

fn open(dev: Arc<dyn BlockDevice>, opts: OpenOptions) -> Filesystem {
    Filesystem::open(Box::new(dev), opts).expect("open")
}

/// Name `i`: 13 to 21 bytes, so records of several lengths share blocks.
fn name(i: usize) -> Vec<u8> {
    let mut v = format!("entry-{i:06}-").into_bytes();
    v.resize(v.len() + i % 9, b'x');
    v
}

/// `e2fsck -fn` on the image in `dev`.
fn assert_clean(dev: &MemDevice) {
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), dev.snapshot()).unwrap();
    let r = e2fsck_fn(tmp.path()).unwrap();
    assert!(r.is_clean(), "e2fsck -fn:\n{}", r.output);
}

/// The entries of `dir` but `.` and `..`, by name; every one also found
/// by a lookup.
fn listing(fs: &Filesystem, dir: u32) -> BTreeMap<Vec<u8>, u32> {
    let d = fs.inode(dir).unwrap();
    let mut out = BTreeMap::new();
    for e in fs.read_dir(&d).unwrap() {
        if e.name != b"." && e.name != b".." {
            assert!(out.insert(e.name.clone(), e.ino).is_none(), "{:?} listed twice", e.name);
        }
    }
    for (n, &ino) in &out {
        assert_eq!(
            fs.lookup(&d, n).unwrap(),
            ino,
            "lookup of {:?}",
            String::from_utf8_lossy(n)
        );
    }
    out
}

/// Fills a new directory with `N` names through one batch, by
/// `create_new` or `create`; returns its listing, size in bytes and
/// whether it became an htree.
fn fill(dir_index: bool, new: bool) -> (BTreeMap<Vec<u8>, u32>, u64, bool) {
    let dev = image(dir_index);
    let fs = open(dev.clone(), OpenOptions::default());
    let dir = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap().ino;
    let mut b = fs.batch().unwrap();
    for i in 0..N {
        if new {
            b.create_new(dir, &name(i), NodeKind::Regular, ATTR).unwrap();
        } else {
            b.create(dir, &name(i), NodeKind::Regular, ATTR).unwrap();
        }
    }
    b.finish().unwrap();
    let list = listing(&fs, dir);
    let d = fs.inode(dir).unwrap();
    let out = (list, d.size(), d.raw.has_flag(INDEX));
    drop(fs);
    assert_clean(&dev);
    out
}

fn same_as_create(dir_index: bool) {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let (want, size_old, indexed_old) = fill(dir_index, false);
    let (got, size_new, indexed_new) = fill(dir_index, true);
    assert_eq!(want.len(), N);
    assert_eq!(got, want, "names and inode numbers");
    assert_eq!(indexed_new, dir_index);
    assert_eq!(indexed_old, dir_index);
    // create fills slack in earlier blocks with short names; create_new
    // does not go back, so it may take a few more blocks, never many.
    assert!(
        size_new >= size_old && size_new <= size_old + size_old / 10,
        "sizes {size_old} (create) and {size_new} (create_new)"
    );
    println!("dir_index={dir_index}: {N} names, directory {size_old} bytes by create, {size_new} by create_new");
}

#[test]
fn linear_directory_lists_and_looks_up_as_create() {
    same_as_create(false);
}

#[test]
fn htree_directory_lists_and_looks_up_as_create() {
    same_as_create(true);
}

/// Fixed-length names for the holes test: a removed record's room takes
/// exactly one new one.
fn hole_name(i: usize) -> Vec<u8> {
    format!("hole-{i:06}").into_bytes()
}

#[test]
fn holes_left_by_unlinks_are_refilled() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dev = image(false);
    let fs = open(dev.clone(), OpenOptions::default());
    let dir = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap().ino;
    let mut want = HashSet::new();
    for i in 0..3000 {
        fs.create_new(dir, &hole_name(i), NodeKind::Regular, ATTR).unwrap();
        want.insert(hole_name(i));
    }
    let size = fs.inode(dir).unwrap().size();
    // Scattered holes, the lowest in the first block.
    let gone: Vec<usize> = (0..3000).filter(|i| i % 7 == 3 || i % 11 == 0).collect();
    for &i in &gone {
        fs.unlink(dir, &hole_name(i)).unwrap();
        want.remove(&hole_name(i));
    }
    for i in 0..gone.len() {
        fs.create_new(dir, &hole_name(10_000 + i), NodeKind::Regular, ATTR)
            .unwrap();
        want.insert(hole_name(10_000 + i));
    }
    assert_eq!(fs.inode(dir).unwrap().size(), size, "the holes took every new name");
    // Past the holes the directory grows again.
    for i in 0..2000 {
        fs.create_new(dir, &hole_name(20_000 + i), NodeKind::Regular, ATTR)
            .unwrap();
        want.insert(hole_name(20_000 + i));
    }
    assert!(fs.inode(dir).unwrap().size() > size);
    let got: HashSet<Vec<u8>> = listing(&fs, dir).into_keys().collect();
    assert_eq!(got, want);
    drop(fs);
    assert_clean(&dev);
}

#[test]
fn a_name_the_placement_reads_is_refused_and_nothing_changes() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    for dir_index in [false, true] {
        let dev = image(dir_index);
        let fs = open(dev.clone(), OpenOptions::default());
        let dir = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap().ino;
        let mut b = fs.batch().unwrap();
        for i in 0..2000 {
            b.create_new(dir, &name(i), NodeKind::Regular, ATTR).unwrap();
        }
        // The last name is in the block a linear insert starts at; any
        // name is in the leaf its hash picks.
        let again = if dir_index { name(5) } else { name(1999) };
        let e = b.create_new(dir, &again, NodeKind::Regular, ATTR).unwrap_err();
        assert!(matches!(e, Error::Exists(_)), "{e:?}");
        // Refused before any change: the batch goes on.
        b.create_new(dir, b"after", NodeKind::Regular, ATTR).unwrap();
        b.finish().unwrap();
        let before = fs.statfs();
        let e = fs.create_new(dir, b"after", NodeKind::Directory, ATTR).unwrap_err();
        assert!(matches!(e, Error::Exists(_)), "{e:?}");
        assert_eq!(fs.statfs(), before, "no inode or block taken");
        assert_eq!(listing(&fs, dir).len(), 2001);
        drop(fs);
        assert_clean(&dev);
    }
}

/// A device counting the reads of the blocks in `watch` (4 KiB blocks).
struct Counting {
    inner: Arc<MemDevice>,
    watch: std::sync::Mutex<HashSet<u64>>,
    hits: AtomicU64,
}

impl BlockDevice for Counting {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let watch = self.watch.lock().unwrap();
        let first = offset / 4096;
        let end = (offset + buf.len() as u64).div_ceil(4096);
        let n = (first..end).filter(|b| watch.contains(b)).count();
        self.hits.fetch_add(n as u64, Ordering::Relaxed);
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn read_only(&self) -> bool {
        false
    }
}

/// Directory blocks read from the device by each of `N` creates in one
/// linear directory, one transaction each, with the smallest metadata
/// cache (64 blocks) and every commit written home at once.
fn blocks_read_per_create(new: bool) -> (Vec<u64>, u64) {
    let dev = image(false);
    let counting = Arc::new(Counting {
        inner: dev.clone(),
        watch: Default::default(),
        hits: AtomicU64::new(0),
    });
    let opts = OpenOptions {
        cache_bytes: 0,
        writeback_bytes: 0,
        ..OpenOptions::default()
    };
    let fs = open(counting.clone(), opts);
    assert_eq!(fs.superblock().s_log_block_size.get(), 2, "4 KiB blocks");
    let dir = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap().ino;
    let mut per_create = Vec::with_capacity(N);
    for i in 0..N {
        let d = fs.inode(dir).unwrap();
        let blocks = fs
            .all_runs(&d)
            .unwrap()
            .iter()
            .flat_map(|r| r.physical..r.physical + r.len)
            .collect();
        *counting.watch.lock().unwrap() = blocks;
        let before = counting.hits.load(Ordering::Relaxed);
        if new {
            fs.create_new(dir, &name(i), NodeKind::Regular, ATTR).unwrap();
        } else {
            fs.create(dir, &name(i), NodeKind::Regular, ATTR).unwrap();
        }
        per_create.push(counting.hits.load(Ordering::Relaxed) - before);
    }
    let blocks = fs.inode(dir).unwrap().size() / 4096;
    drop(fs);
    assert_clean(&dev);
    (per_create, blocks)
}

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len() as f64
}

#[test]
fn directory_blocks_read_per_create_new_stay_flat() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let tail = N / 20;
    let (old, old_blocks) = blocks_read_per_create(false);
    let (new, new_blocks) = blocks_read_per_create(true);
    let (old_first, old_last) = (mean(&old[..tail]), mean(&old[N - tail..]));
    let (new_first, new_last) = (mean(&new[..tail]), mean(&new[N - tail..]));
    println!(
        "directory blocks read per create, linear directory of {N} entries (64-block cache):\n  \
         create:     first 5% {old_first:.2}, last 5% {old_last:.2}, most {} ({old_blocks} blocks at the end)\n  \
         create_new: first 5% {new_first:.2}, last 5% {new_last:.2}, most {} ({new_blocks} blocks at the end)",
        old.iter().max().unwrap(),
        new.iter().max().unwrap(),
    );
    // The measurement sees a scan: create reads most of a directory that
    // no longer fits the cache.
    assert!(
        old_last >= old_blocks as f64 / 2.0,
        "create read {old_last} of {old_blocks}"
    );
    assert!(
        new_last <= 1.0 && new_last <= new_first + 0.5,
        "create_new read {new_first} then {new_last}"
    );
    assert!(
        *new.iter().max().unwrap() <= 2,
        "a create_new reads at most the hint block and the next"
    );
}
