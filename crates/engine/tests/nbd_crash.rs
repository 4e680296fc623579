//! Crash tests over NBD: the seeded crash workload runs on a file system
//! whose device is an [`NbdDevice`] (qemu-nbd, or nbdkit's file plugin,
//! on a Unix socket), and the server is killed with SIGKILL at a point
//! drawn from the seed: just before a write or flush goes out, or just
//! after a write was acknowledged but before any flush covered it.
//! Sometimes the server comes back at once on the same socket, so reads
//! reconnect while writes must stay refused.
//!
//! Then the operation in flight fails with EIO, the file system refuses
//! writes (`errors=remount-ro`), nothing panics or hangs, and the backing
//! file, opened directly, recovers its journal, holds every file as the
//! last `sync` that returned `Ok` left it (files changed since may hold
//! any state of their own, never another file's data), and passes
//! `e2fsck -fn`.
//!
//! `EXT4KIT_NBD_CRASH_RUNS` sets how many kills (8 by default),
//! `EXT4KIT_CRASH_SEED` the seed.

#[path = "common/mem_image.rs"]
mod mem_image;
#[path = "common/workload.rs"]
mod workload;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ext4kit_engine::device::{FileDevice, MemDevice, NbdDevice, NbdOptions, nbd::NbdUri};
use ext4kit_engine::{BlockDevice, Error, Filesystem, OpenOptions};
use ext4kit_testkit::nbd::{Listen, NbdServer, servers_missing};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::skipped;
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};
use mem_image::fresh_image;
use workload::{FileModel, Workload, check_own_words, read_tree};

const IMAGE_BYTES: usize = 8 << 20;
const STEPS: usize = 300;

/// Where, around device operation `at` (writes and flushes counted from
/// 0), the server dies.
#[derive(Clone, Copy, Debug, PartialEq)]
enum When {
    /// Before the operation is sent: it meets a dead connection.
    Before,
    /// After the operation returned: a write acknowledged, not yet
    /// covered by a flush.
    After,
}

/// The device under the file system: the NBD client, with the server
/// killed (and maybe restarted) around operation `at`.
struct KillSwitch {
    inner: NbdDevice,
    server: Arc<Mutex<NbdServer>>,
    at: usize,
    when: When,
    restart: bool,
    ops: AtomicUsize,
}

impl KillSwitch {
    fn around<T>(&self, op: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
        let n = self.ops.fetch_add(1, Ordering::SeqCst);
        if n == self.at && self.when == When::Before {
            self.kill();
        }
        let r = op();
        if n == self.at && self.when == When::After {
            self.kill();
        }
        r
    }

    fn kill(&self) {
        let mut s = self.server.lock().unwrap();
        s.kill();
        if self.restart {
            s.restart().expect("restart the server");
        }
    }
}

impl BlockDevice for KillSwitch {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.around(|| self.inner.write_at(offset, buf))
    }
    fn flush(&self) -> std::io::Result<()> {
        self.around(|| self.inner.flush())
    }
    fn read_only(&self) -> bool {
        false
    }
}

/// Counts writes and flushes, for the dry run that sizes the kill range.
struct Counter(MemDevice, AtomicUsize);

impl BlockDevice for Counter {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.flush()
    }
    fn read_only(&self) -> bool {
        false
    }
}

fn options() -> OpenOptions {
    OpenOptions {
        writeback_bytes: 96 << 10,
        ..OpenOptions::default()
    }
}

/// How many writes and flushes the workload of `seed` issues, unmount
/// included, on a healthy device.
fn device_ops(seed: u64) -> usize {
    let dev = Arc::new(Counter(MemDevice::new(fresh_image(IMAGE_BYTES)), AtomicUsize::new(0)));
    let fs = Filesystem::open(Box::new(dev.clone()), options()).expect("open");
    let mut w = Workload::new(seed);
    for i in 0..STEPS {
        w.step(&fs)
            .unwrap_or_else(|e| panic!("dry run, seed {seed}, step {i}: {e}"));
    }
    fs.unmount().expect("unmount");
    dev.1.load(Ordering::SeqCst)
}

/// What the run left: the last durable state and what may differ from it.
struct Outcome {
    synced: BTreeMap<String, FileModel>,
    /// Paths changed since that sync, or named by a step that failed.
    touched: BTreeSet<String>,
    /// Every file id each path ever had; a path named only by a failed
    /// step may hold the data of any file those steps named.
    ever: HashMap<String, BTreeSet<u16>>,
    failure: String,
}

/// Runs the workload's steps; from the kill on, the first device write
/// or flush fails (reads may too, until the server is back), and with
/// them the step or the final unmount. A step that succeeds even then
/// (one served from memory, or after a reconnect that lost nothing)
/// counts as any other: a `sync` that returns `Ok` must have made
/// everything so far durable.
fn run(fs: Filesystem, seed: u64, restarted: bool) -> Outcome {
    let mut w = Workload::new(seed);
    let mut synced = BTreeMap::new();
    let mut touched = BTreeSet::new();
    let mut failed_paths = BTreeSet::new();
    let mut failure = None;
    for i in 0..STEPS {
        match w.step(&fs) {
            Ok(step) if step.op == "sync" => {
                synced = w.files.clone();
                touched.clear();
            }
            Ok(step) => touched.extend(step.touched),
            Err(e) => {
                assert_refused(&e, seed, i);
                failed_paths.extend(w.attempted.iter().cloned());
                failure.get_or_insert_with(|| format!("step {i}: {e}"));
            }
        }
    }
    if restarted {
        read_tree(&fs).unwrap_or_else(|e| panic!("seed {seed}: reads after the server came back: {e}"));
    }
    match fs.unmount() {
        Ok(()) => {
            assert!(
                restarted && failure.is_none(),
                "seed {seed}: the unmount succeeded with the server killed"
            );
            synced = w.files.clone();
            touched.clear();
        }
        Err(e) => {
            assert_refused(&e, seed, STEPS);
            failure.get_or_insert_with(|| format!("unmount: {e}"));
        }
    }
    let mut ever = w.ever;
    let ids: BTreeSet<u16> = failed_paths
        .iter()
        .filter_map(|p| ever.get(p))
        .flatten()
        .copied()
        .collect();
    for p in &failed_paths {
        ever.entry(p.clone()).or_default().extend(ids.iter().copied());
    }
    touched.extend(failed_paths);
    Outcome {
        synced,
        touched,
        ever,
        failure: failure.unwrap_or_else(|| "nothing (nothing was lost)".into()),
    }
}

/// A step after the kill fails with EIO (the device) or EROFS (the file
/// system refusing writes since).
fn assert_refused(e: &Error, seed: u64, step: usize) {
    assert!(
        matches!(e.errno(), libc::EIO | libc::EROFS),
        "seed {seed}, step {step}: {e} (errno {})",
        e.errno()
    );
}

/// Opens the backing file directly (the journal replays), checks every
/// file against the last sync, and e2fscks it.
fn check_backing(img: &Path, out: &Outcome) -> Result<(), String> {
    let dev = FileDevice::open(img, true).map_err(|e| e.to_string())?;
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).map_err(|e| format!("open: {e}"))?;
    let tree = read_tree(&fs).map_err(|e| format!("reading the tree: {e}"))?;
    fs.unmount().map_err(|e| format!("unmount after recovery: {e}"))?;
    for (path, data) in &tree {
        let ever = out.ever.get(path).ok_or(format!("{path} was never made"))?;
        check_own_words(path, data, ever)?;
        if out.touched.contains(path) {
            continue;
        }
        match out.synced.get(path) {
            None => return Err(format!("{path} exists but was absent at the last sync")),
            Some(f) if f.data[..] != data[..] => return Err(format!("{path}: not what was synced")),
            Some(_) => {}
        }
    }
    if let Some(p) = out
        .synced
        .keys()
        .find(|p| !out.touched.contains(*p) && !tree.contains_key(*p))
    {
        return Err(format!("{p} was synced but is gone"));
    }
    let r = e2fsck_fn(img).map_err(|e| e.to_string())?;
    if !r.is_clean() {
        return Err(format!("e2fsck -fn exited {}:\n{}", r.code, r.output));
    }
    Ok(())
}

fn seed() -> u64 {
    std::env::var("EXT4KIT_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_c0de)
}

fn runs() -> u64 {
    std::env::var("EXT4KIT_NBD_CRASH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
}

fn start(qemu: bool, img: &Path, sock: &Path) -> NbdServer {
    let listen = Listen::Unix(sock.to_path_buf());
    if qemu {
        NbdServer::qemu_nbd(img, "", &listen).expect("qemu-nbd")
    } else {
        NbdServer::nbdkit(&["file", &format!("file={}", img.display())], &listen).expect("nbdkit")
    }
}

#[test]
fn killed_servers_lose_nothing_synced() {
    if let Some(why) = servers_missing() {
        skipped!("NBD servers missing: {why}");
        return;
    }
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = seed();
    let mut rng = Rng::new(base ^ 0x4e8d);
    let mut failures = Vec::new();
    for i in 0..runs() {
        let seed = base.wrapping_add(i);
        let total = device_ops(seed);
        let at = rng.below(total as u64) as usize;
        let when = if rng.below(2) == 0 { When::Before } else { When::After };
        let restart = rng.below(2) == 0;
        let qemu = i % 2 == 0;
        let img = dir.path().join(format!("run{i}.img"));
        std::fs::write(&img, fresh_image(IMAGE_BYTES)).unwrap();
        let server = Arc::new(Mutex::new(start(qemu, &img, &dir.path().join(format!("s{i}")))));
        let uri = server.lock().unwrap().uri("");
        let opts = NbdOptions {
            writable: true,
            ..NbdOptions::default()
        };
        let dev = KillSwitch {
            inner: NbdDevice::open(&NbdUri::parse(&uri).unwrap(), opts).unwrap(),
            server: server.clone(),
            at,
            when,
            restart,
            ops: AtomicUsize::new(0),
        };
        let fs = Filesystem::open(Box::new(dev), options()).expect("open over NBD");
        let out = run(fs, seed, restart);
        drop(server);
        let what = format!(
            "seed {seed}, {} killed {when:?} op {at} of {total}{}",
            if qemu { "qemu-nbd" } else { "nbdkit" },
            if restart { ", restarted" } else { "" }
        );
        eprintln!("{what}: failed at {}", out.failure);
        if let Err(e) = check_backing(&img, &out) {
            eprintln!("FAILED: {what}: {e}");
            failures.push(what);
        }
        std::fs::remove_file(&img).unwrap();
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
