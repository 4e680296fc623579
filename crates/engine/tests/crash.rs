//! Crash consistency: a seeded workload runs once on a [`CrashDevice`]
//! over a fresh 8 MiB ext4 image; then, for crash points in the write log,
//! the image a power loss could have left is rebuilt, opened with the
//! engine (which replays the journal once the journal writer lands),
//! unmounted, and must pass `e2fsck -fn`; every file untouched since the
//! last `sync` that returned before the crash must hold exactly what it held
//! then (and be there, or be absent if it was absent then), and no file may
//! hold another file's data.
//!
//! `EXT4KIT_CRASH_KEEP=DIR` keeps the images of failing points there.
//! `EXT4KIT_CRASH_POINTS` sets how many random points the full test checks
//! (1000 by default), `EXT4KIT_CRASH_SEED` the workload seed.

#[path = "common/crash_cases.rs"]
mod crash_cases;
#[path = "common/mem_image.rs"]
mod mem_image;
#[path = "common/workload.rs"]
mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use ext4kit_engine::device::{CrashDevice, MemDevice, Survivors};
use ext4kit_engine::{AllocOptions, BlockAllocator, BlockDevice, Filesystem, OpenOptions};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};
use mem_image::{fresh_image, fresh_image_featuring};
use workload::{FileModel, Workload, check_own_words, read_tree};

const IMAGE_BYTES: usize = 8 << 20;
const STEPS: usize = 400;

/// The state a `sync` made durable.
struct SyncRec {
    /// Steps run before it (steps `0..ops` are covered by it).
    ops: usize,
    /// Writes issued before it returned: crash points from here on keep it.
    flush_point: usize,
    files: BTreeMap<String, FileModel>,
}

/// One step: the writes issued before it began, and the paths it changed.
struct OpRec {
    start: usize,
    touched: Vec<String>,
}

/// What one workload thread did.
struct Thread {
    syncs: Vec<SyncRec>,
    ops: Vec<OpRec>,
    ever: std::collections::HashMap<String, BTreeSet<u16>>,
}

/// A recorded run of the workload, on one thread or several.
struct Run {
    dev: Arc<CrashDevice>,
    threads: Vec<Thread>,
}

/// Runs `w` for `steps` steps on `fs`, noting each step's start and each
/// sync's return in device writes.
fn run_thread(fs: &Filesystem, dev: &CrashDevice, mut w: Workload, steps: usize, seed: u64) -> Thread {
    let mut syncs = vec![SyncRec {
        ops: 0,
        flush_point: 0,
        files: BTreeMap::new(),
    }];
    let mut ops = Vec::new();
    for _ in 0..steps {
        let start = dev.writes();
        let step = w
            .step(fs)
            .unwrap_or_else(|e| panic!("workload seed {seed}, step {}: {e}", ops.len()));
        ops.push(OpRec {
            start,
            touched: step.touched,
        });
        if step.op == "sync" {
            syncs.push(SyncRec {
                ops: ops.len(),
                flush_point: dev.writes(),
                files: w.files.clone(),
            });
        }
    }
    // The unmount's final flush covers every step; its point is set then.
    syncs.push(SyncRec {
        ops: ops.len(),
        flush_point: usize::MAX,
        files: w.files,
    });
    Thread {
        syncs,
        ops,
        ever: w.ever,
    }
}

/// A [`CrashDevice`] whose flushes take `FLUSH_DELAY`, as a disk's do:
/// with several writers, the other threads then run while a commit waits
/// for its flush, which is the window where a freed block reused too early
/// or a commit that holds up changes would show.
struct SlowFlush(Arc<CrashDevice>);

const FLUSH_DELAY: std::time::Duration = std::time::Duration::from_micros(300);

impl BlockDevice for SlowFlush {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.0.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        std::thread::sleep(FLUSH_DELAY);
        self.0.flush()
    }
    fn read_only(&self) -> bool {
        false
    }
}

/// Records `threads` workloads drawn from `seed` running at once, each in
/// names of its own, `steps` steps each, on a fresh image of `bytes`.
fn record_threads(seed: u64, threads: usize, steps: usize, bytes: usize, alloc: AllocOptions) -> Run {
    record_on(fresh_image(bytes), seed, threads, steps, alloc)
}

/// [`record_threads`] on the image `image`.
fn record_on(image: Vec<u8>, seed: u64, threads: usize, steps: usize, alloc: AllocOptions) -> Run {
    // Torn writes split at 4 KiB, the atomic unit of most current drives:
    // with 512-byte tearing the 1 KiB superblock itself can tear, which
    // the kernel cannot mount either (bad superblock checksum) and only
    // e2fsck's backup superblocks repair.
    let dev = Arc::new(CrashDevice::with_atomic_unit(image, 4096));
    // A small write-back budget: metadata also goes out between syncs.
    let opts = OpenOptions {
        writeback_bytes: 96 << 10,
        alloc,
        ..OpenOptions::default()
    };
    let fs = if threads > 1 {
        Filesystem::open(Box::new(SlowFlush(dev.clone())), opts)
    } else {
        Filesystem::open(Box::new(dev.clone()), opts)
    }
    .expect("open fresh image");
    const PREFIXES: [&str; 4] = ["", "b", "c", "d"];
    let mut recorded: Vec<Thread> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let w = Workload::new(seed.wrapping_add(t as u64)).named(PREFIXES[t], 1 + 4096 * t as u16);
                let (fs, dev) = (&fs, &dev);
                scope.spawn(move || run_thread(fs, dev, w, steps, seed))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("workload thread"))
            .collect()
    });
    fs.unmount().expect("unmount");
    for t in &mut recorded {
        t.syncs.last_mut().expect("the final record").flush_point = dev.writes();
    }
    Run { dev, threads: recorded }
}

fn record(seed: u64) -> Run {
    record_threads(seed, 1, STEPS, IMAGE_BYTES, AllocOptions::default())
}

impl Thread {
    /// What must hold at crash point `point`: the last sync durable there,
    /// and the paths changed by steps that may have reached the disk since.
    fn expected(&self, point: usize) -> (&SyncRec, BTreeSet<&str>) {
        let sync = self
            .syncs
            .iter()
            .rev()
            .find(|s| s.flush_point <= point)
            .expect("the first record is at point 0");
        let touched = self.ops[sync.ops..]
            .iter()
            .take_while(|o| o.start < point)
            .flat_map(|o| o.touched.iter().map(String::as_str))
            .collect();
        (sync, touched)
    }

    /// Checks the files of this thread in `tree` (those it ever made).
    fn check_contents(&self, point: usize, tree: &BTreeMap<String, Vec<u8>>) -> Result<(), String> {
        let (sync, touched) = self.expected(point);
        for (path, data) in tree.iter().filter(|(p, _)| self.ever.contains_key(*p)) {
            check_own_words(path, data, &self.ever[path])?;
            if touched.contains(path.as_str()) {
                continue;
            }
            match sync.files.get(path) {
                None => return Err(format!("{path} exists but was absent at the last sync")),
                Some(f) if f.data[..] != data[..] => {
                    return Err(format!(
                        "{path}: {} bytes, not the {} synced (first difference at byte {:?})",
                        data.len(),
                        f.data.len(),
                        data.iter().zip(f.data.iter()).position(|(a, b)| a != b)
                    ));
                }
                Some(_) => {}
            }
        }
        for path in sync.files.keys() {
            if !touched.contains(path.as_str()) && !tree.contains_key(path) {
                return Err(format!("{path} was synced but is gone"));
            }
        }
        Ok(())
    }
}

impl Run {
    /// Rebuilds the image at `point`, opens, checks and fscks it; keeps a
    /// failing image in `$EXT4KIT_CRASH_KEEP` when that is set.
    fn check(&self, point: usize, survivors: Survivors) -> Result<(), String> {
        let img = self.dev.crash_image(point, survivors);
        let r = self.check_image(point, img.clone());
        if r.is_err()
            && let Some(dir) = std::env::var_os("EXT4KIT_CRASH_KEEP")
        {
            let path = std::path::Path::new(&dir).join(format!("crash-{point}.img"));
            let _ = std::fs::write(&path, &img);
            eprintln!("kept {}", path.display());
        }
        r
    }

    fn check_image(&self, point: usize, img: Vec<u8>) -> Result<(), String> {
        let mem = Arc::new(MemDevice::new(img));
        let fs = Filesystem::open(Box::new(mem.clone()), OpenOptions::default()).map_err(|e| format!("open: {e}"))?;
        let tree = read_tree(&fs).map_err(|e| format!("reading the tree: {e}"))?;
        fs.unmount().map_err(|e| format!("unmount: {e}"))?;
        if let Some(p) = tree
            .keys()
            .find(|p| !self.threads.iter().any(|t| t.ever.contains_key(*p)))
        {
            return Err(format!("{p} was never made by the workload"));
        }
        for t in &self.threads {
            t.check_contents(point, &tree)?;
        }
        let tmp = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
        std::fs::write(tmp.path(), mem.snapshot()).map_err(|e| e.to_string())?;
        let r = e2fsck_fn(tmp.path()).map_err(|e| e.to_string())?;
        if !r.is_clean() {
            return Err(format!("e2fsck -fn exited {}:\n{}", r.code, r.output));
        }
        Ok(())
    }

    /// Checks `n` random crash points with random survivors (subsets,
    /// torn and reordered writes), drawn from `seed` and `salt`; stops
    /// after five failures.
    fn check_random_points(&self, seed: u64, salt: u64, n: usize) -> Vec<(usize, Survivors)> {
        let writes = self.dev.writes();
        let mut rng = Rng::new(seed ^ 0xc4a5 ^ salt);
        let mut failures = Vec::new();
        for (point, s) in crash_cases::random_points(&self.dev, 0, n, &mut rng) {
            if let Err(e) = self.check(point, s) {
                eprintln!("FAILED: crash seed {seed}, point {point} of {writes} ({s:?}): {e}");
                failures.push((point, s));
                if failures.len() >= 5 {
                    break;
                }
            }
        }
        failures
    }
}

fn seed() -> u64 {
    std::env::var("EXT4KIT_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_c0de)
}

fn points_wanted() -> usize {
    std::env::var("EXT4KIT_CRASH_POINTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

fn have_e2fsck() -> bool {
    skip_unless(require_tool("e2fsck")).is_some()
}

/// Crashes exactly at each flush (every write before it kept, none after):
/// what the engine guarantees without a journal, so it passes today.
#[test]
fn crash_at_flush_points_keeps_synced_state() {
    if !have_e2fsck() {
        return;
    }
    let seed = seed();
    let run = record(seed);
    let points: BTreeSet<usize> = run.threads[0].syncs.iter().map(|s| s.flush_point).collect();
    assert!(points.len() > 10, "the workload should sync often: {points:?}");
    let t = Instant::now();
    let cases = crash_cases::at_points(&run.dev, points.iter().copied());
    for &(p, s) in &cases {
        if let Err(e) = run.check(p, s) {
            panic!("crash seed {seed}, point {p} ({s:?}): {e}");
        }
    }
    let per = t.elapsed() / cases.len() as u32;
    eprintln!(
        "{} flush points of {} writes, {per:?} per crash point",
        points.len(),
        run.dev.writes()
    );
}

/// The harness itself: a file holding another file's words is caught.
#[test]
fn foreign_data_is_detected() {
    let allowed: BTreeSet<u16> = [3].into_iter().collect();
    let own: Vec<u8> = (0..4).flat_map(|i| workload::word(3, 1, i * 8)).collect();
    assert!(check_own_words("/f", &own, &allowed).is_ok());
    let mut other = own.clone();
    other[8..16].copy_from_slice(&workload::word(4, 1, 8));
    assert!(check_own_words("/f", &other, &allowed).is_err());
    let mut moved = own.clone();
    moved[8..16].copy_from_slice(&workload::word(3, 1, 800));
    assert!(check_own_words("/f", &moved, &allowed).is_err());
    let mut hole = own;
    hole[8..16].fill(0);
    assert!(check_own_words("/f", &hole, &allowed).is_ok());
}

/// Random crash points with random survivors (subsets, torn and
/// reordered writes): the journal must bring every one back to a state
/// e2fsck finds clean, with every synced file intact.
#[test]
fn crash_anywhere_recovers() {
    if !have_e2fsck() {
        return;
    }
    let seed = seed();
    let run = record(seed);
    let n = points_wanted();
    let t = Instant::now();
    let failures = run.check_random_points(seed, 0, n);
    eprintln!("{n} crash points, {:?} per point", t.elapsed() / n.max(1) as u32);
    assert!(failures.is_empty(), "seed {seed}: failing points {failures:?}");
}

/// Two workloads at once, each syncing: commits run while the other
/// thread changes, frees and reads (blocks freed during a commit, revokes
/// of blocks a commit carries, one thread's sync carrying the other's
/// changes). The interleaving differs from run to run; the seed fixes
/// each thread's operations.
#[test]
fn crash_anywhere_with_two_writers_recovers() {
    if !have_e2fsck() {
        return;
    }
    let seed = seed();
    let run = record_threads(seed, 2, STEPS, 2 * IMAGE_BYTES, AllocOptions::default());
    let n = points_wanted() / 2;
    let t = Instant::now();
    let failures = run.check_random_points(seed, 2, n);
    eprintln!(
        "two writers: {} writes, {n} crash points, {:?} per point",
        run.dev.writes(),
        t.elapsed() / n.max(1) as u32
    );
    assert!(failures.is_empty(), "seed {seed}: failing points {failures:?}");
}

/// The other policies: every write allocating at once (`nodelalloc`)
/// under the ext3 allocator. A quarter of the points.
#[test]
fn crash_anywhere_recovers_without_delalloc_under_ext3() {
    if !have_e2fsck() {
        return;
    }
    let seed = seed();
    let alloc = AllocOptions {
        blocks: BlockAllocator::Ext3,
        delalloc: false,
        ..AllocOptions::default()
    };
    let run = record_threads(seed, 1, STEPS, IMAGE_BYTES, alloc);
    let n = points_wanted() / 4;
    let failures = run.check_random_points(seed, 3, n);
    assert!(failures.is_empty(), "seed {seed}: failing points {failures:?}");
}

/// Bigalloc (1 KiB blocks in 16 KiB clusters, an image from mke2fs),
/// writes delayed with reservations in clusters: clusters freed by a
/// transaction stay busy until it commits, and a cluster shared by two
/// extents of a file survives any crash point. A quarter of the points.
#[test]
fn crash_anywhere_recovers_on_bigalloc() {
    if !have_e2fsck() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let out = std::process::Command::new("mkfs.ext4")
        .args([
            "-q",
            "-F",
            "-b",
            "1024",
            "-O",
            "bigalloc",
            "-C",
            "16384",
            "-E",
            "root_owner=0:0",
        ])
        .arg(&img)
        .arg("16M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seed = seed();
    let run = record_on(std::fs::read(&img).unwrap(), seed, 1, STEPS, AllocOptions::default());
    let n = points_wanted() / 4;
    let failures = run.check_random_points(seed, 4, n);
    assert!(failures.is_empty(), "seed {seed}: failing points {failures:?}");
}

/// Inline bodies (`inline_data`): small files and directories start in
/// the inode and move to blocks as they grow, under crashes. A quarter of
/// the points.
#[test]
fn crash_anywhere_recovers_with_inline_data() {
    if !have_e2fsck() {
        return;
    }
    let seed = seed();
    let image = fresh_image_featuring(IMAGE_BYTES, &["inline_data"]);
    let run = record_on(image, seed, 1, STEPS, AllocOptions::default());
    let n = points_wanted() / 4;
    let failures = run.check_random_points(seed, 5, n);
    assert!(failures.is_empty(), "seed {seed}: failing points {failures:?}");
}

/// Quotas (`quota` with user, group and project files, on inline data): every
/// transaction carries its quota blocks, so whatever crash point the
/// journal recovers, e2fsck's quota check finds usage exact (orphans
/// finished at the next open included). A quarter of the points.
#[test]
fn crash_anywhere_recovers_with_quota() {
    if !have_e2fsck() {
        return;
    }
    let seed = seed();
    let image = fresh_image_featuring(IMAGE_BYTES, &["quota", "project", "inline_data"]);
    let run = record_on(image, seed, 1, STEPS, AllocOptions::default());
    let n = points_wanted() / 4;
    let failures = run.check_random_points(seed, 6, n);
    assert!(failures.is_empty(), "seed {seed}: failing points {failures:?}");
}
