//! Writers of different files in parallel (per-inode locks, data written
//! outside the writer lock): readers never see another file's bytes or a
//! new block's stale contents, the files end as modelled, e2fsck is clean;
//! one writer's data write can be held on the device while another file
//! is written meanwhile; opens and releases do not wait for transactions;
//! a journal commit held on the device holds up neither new changes nor
//! reads, and the fsyncs that queue behind it share one commit.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::mkfs;
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, BlockDevice, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// Long enough never to be hit by a working engine; only turns a
/// regression into a failure instead of a hang.
const PATIENCE: Duration = Duration::from_secs(60);

/// What free blocks hold before the writers start: never a valid byte.
const STALE: u8 = 0xFF;

/// The byte file `f` (0..4) holds at `pos` after its `gen`th write there:
/// 1..=252, and `(b - 1) % 4 == f`, so a byte of another file (or stale
/// data) is recognised wherever it is read.
fn val(f: usize, pos: u64, generation: u64) -> u8 {
    1 + 4 * ((pos + 13 * generation) % 63) as u8 + f as u8
}

fn ok_byte(f: usize, b: u8) -> bool {
    b == 0 || (b != STALE && b <= 252 && usize::from((b - 1) % 4) == f)
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn open_rw(img: &Path) -> Filesystem {
    let dev = FileDevice::open(img, true).expect("open rw");
    Filesystem::open(Box::new(dev), OpenOptions::default()).expect("open fs")
}

/// Fills most free blocks with [`STALE`] and frees them again, so a block
/// read before its new data is written shows up.
fn poison_free_space(fs: &Filesystem) {
    let f = fs.create(ROOT_INO, b"poison", NodeKind::Regular, ATTR).unwrap();
    let chunk = vec![STALE; 1 << 20];
    let free = fs.statfs().blocks_free * fs.block_size() as u64;
    let mut off = 0u64;
    while off + (2 << 20) < free * 3 / 4 {
        fs.write(f.ino, off, &chunk).unwrap();
        off += chunk.len() as u64;
    }
    fs.unlink(ROOT_INO, b"poison").unwrap();
}

/// One writer's run on file `f`: appends, overwrites and truncates (down
/// and up); returns the model of the file.
fn writer(fs: &Filesystem, ino: u32, f: usize, ops: usize) -> Vec<u8> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (f as u64 + 1));
    let mut model: Vec<u8> = Vec::new();
    for op in 0..ops as u64 {
        let len = model.len() as u64;
        match rng.below(10) {
            0..=4 => {
                let n = 1 + rng.below(70_000);
                write_model(fs, ino, f, &mut model, len, n, op);
            }
            5..=7 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below(50_000);
                write_model(fs, ino, f, &mut model, at, n, op);
            }
            _ => {
                let size = rng.below(len + 20_000);
                fs.truncate(ino, size).unwrap();
                model.resize(size as usize, 0);
            }
        }
    }
    model
}

fn write_model(fs: &Filesystem, ino: u32, f: usize, model: &mut Vec<u8>, at: u64, n: u64, generation: u64) {
    let data: Vec<u8> = (at..at + n).map(|p| val(f, p, generation)).collect();
    assert_eq!(fs.write(ino, at, &data).unwrap(), data.len());
    let end = (at + n) as usize;
    if model.len() < end {
        model.resize(end, 0);
    }
    model[at as usize..end].copy_from_slice(&data);
}

/// Reads random ranges of the files until `stop`; panics on a byte that
/// file never held. Returns the number of reads.
fn reader(fs: &Filesystem, inos: &[u32], seed: u64, stop: &AtomicBool) -> u64 {
    let mut rng = Rng(seed);
    let mut reads = 0;
    let mut buf = vec![0u8; 80_000];
    while !stop.load(Ordering::Acquire) {
        let f = rng.below(inos.len() as u64) as usize;
        let off = rng.below(400_000);
        let len = 1 + rng.below(buf.len() as u64) as usize;
        // Not `read_at` with an inode read before: a truncate and another
        // file's write may reuse its blocks in between.
        let n = fs.read_file_at(inos[f], off, &mut buf[..len]).unwrap();
        if let Some(i) = buf[..n].iter().position(|&b| !ok_byte(f, b)) {
            panic!("file {f} byte {} read as {:#x}", off + i as u64, buf[i]);
        }
        reads += 1;
    }
    reads
}

#[test]
fn parallel_writers_and_readers() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "96M") else {
        return;
    };
    let models = {
        let fs = open_rw(&img);
        poison_free_space(&fs);
        let inos: Vec<u32> = (0..4)
            .map(|f| {
                let name = format!("f{f}");
                fs.create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR)
                    .unwrap()
                    .ino
            })
            .collect();
        let stop = AtomicBool::new(false);
        let (models, reads) = std::thread::scope(|s| {
            let readers: Vec<_> = (0..2)
                .map(|r| {
                    let (fs, inos, stop) = (&fs, &inos, &stop);
                    s.spawn(move || reader(fs, inos, 77 + r, stop))
                })
                .collect();
            let writers: Vec<_> = inos
                .iter()
                .enumerate()
                .map(|(f, &ino)| {
                    let fs = &fs;
                    s.spawn(move || writer(fs, ino, f, 300))
                })
                .collect();
            // Stop the readers before a writer's failure is raised: the
            // scope waits for them, and they only end on `stop`.
            let models: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
            stop.store(true, Ordering::Release);
            let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
            let models: Vec<Vec<u8>> = models.into_iter().map(|m| m.expect("a writer failed")).collect();
            (models, reads)
        });
        assert!(reads > 0);
        for (f, model) in models.iter().enumerate() {
            let inode = fs.inode(inos[f]).unwrap();
            assert_eq!(inode.size(), model.len() as u64, "size of f{f}");
            assert!(fs.read_all(&inode, 1 << 30).unwrap() == *model, "contents of f{f}");
        }
        models
    };
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
    let fs = open_rw(&img);
    for (f, model) in models.iter().enumerate() {
        let inode = fs.resolve(format!("/f{f}").as_bytes()).unwrap();
        assert!(fs.read_all(&inode, 1 << 30).unwrap() == *model, "f{f} after reopening");
    }
    drop(fs);
    match can_loop_mount() {
        Ok(()) => {
            let mnt = LoopMount::ro(&img).expect("kernel mount");
            for (f, model) in models.iter().enumerate() {
                let got = std::fs::read(mnt.path().join(format!("f{f}"))).unwrap();
                assert!(got == *model, "kernel view of f{f}");
            }
        }
        Err(why) => ext4kit_testkit::skipped!("kernel read-back ({why})"),
    }
}

/// A device whose writes that begin with [`GATE`] stop until released:
/// the test holds one writer inside its data write.
struct GatedDevice {
    inner: FileDevice,
    /// Flushes stop at the gate too while this is set.
    gate_flushes: Arc<AtomicBool>,
    entered: Mutex<Sender<()>>,
    release: Mutex<Receiver<()>>,
}

const GATE: &[u8] = b"HOLD-THIS-WRITE!";

/// An image, the file system on it, and the gate's two ends: the receiver
/// hears when a gated write starts, the sender lets it finish.
type Gated = (std::path::PathBuf, Arc<Filesystem>, Receiver<()>, Sender<()>);

/// A fresh 32 MiB image in `dir` opened over a [`GatedDevice`].
fn gated_fs(dir: &std::path::Path) -> Option<Gated> {
    gated_fs_and_flushes(dir, Arc::default())
}

/// [`gated_fs`] whose flushes stop at the gate while `gate_flushes` is set.
fn gated_fs_and_flushes(dir: &std::path::Path, gate_flushes: Arc<AtomicBool>) -> Option<Gated> {
    let img = mkfs(dir, None, &[], "32M")?;
    let (entered_tx, entered) = channel();
    let (release, release_rx) = channel();
    let dev = GatedDevice {
        inner: FileDevice::open(&img, true).unwrap(),
        gate_flushes,
        entered: Mutex::new(entered_tx),
        release: Mutex::new(release_rx),
    };
    // The gate catches the data write of `write` itself: the direct path
    // (nodelalloc), where data goes out as the write returns.
    let opts = OpenOptions {
        alloc: ext4kit_engine::AllocOptions {
            delalloc: false,
            ..Default::default()
        },
        ..OpenOptions::default()
    };
    let fs = Arc::new(Filesystem::open(Box::new(dev), opts).unwrap());
    Some((img, fs, entered, release))
}

impl GatedDevice {
    fn wait_at_gate(&self) -> std::io::Result<()> {
        self.entered.lock().unwrap().send(()).unwrap();
        self.release
            .lock()
            .unwrap()
            .recv_timeout(PATIENCE)
            .map(drop)
            .map_err(|_| std::io::Error::other("the test never released the gate"))
    }
}

impl BlockDevice for GatedDevice {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        if buf.starts_with(GATE) {
            self.wait_at_gate()?;
        }
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        if self.gate_flushes.load(Ordering::Acquire) {
            self.wait_at_gate()?;
        }
        self.inner.flush()
    }
    fn read_only(&self) -> bool {
        false
    }
}

#[test]
fn writers_of_different_files_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, fs, entered, release)) = gated_fs(dir.path()) else {
        return;
    };
    let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", NodeKind::Regular, ATTR).unwrap().ino;
    let held: Vec<u8> = GATE.iter().copied().cycle().take(256 << 10).collect();
    let body_b: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();

    // Writer A: allocates its blocks, then stops inside its data write.
    let (fs_a, held_a) = (fs.clone(), held.clone());
    let writer_a = std::thread::spawn(move || fs_a.write(a, 0, &held_a).unwrap());
    entered
        .recv_timeout(PATIENCE)
        .expect("writer A never reached its data write");

    // Meanwhile another file is created, written (new blocks) and read:
    // none of it waits for A.
    let (done_tx, done) = channel();
    let (fs_b, body) = (fs.clone(), body_b.clone());
    let writer_b = std::thread::spawn(move || {
        fs_b.write(b, 0, &body).unwrap();
        fs_b.write(b, 1000, &body[..5000]).unwrap();
        let c = fs_b.create(ROOT_INO, b"c", NodeKind::Regular, ATTR).unwrap().ino;
        fs_b.write(c, 0, b"third file").unwrap();
        fs_b.open_file(b).unwrap();
        fs_b.release_file(b).unwrap();
        let mut got = vec![0u8; body.len()];
        assert_eq!(fs_b.read_file_at(b, 0, &mut got).unwrap(), body.len());
        done_tx.send(got).unwrap();
    });
    let got = done.recv_timeout(PATIENCE);
    // Let A finish whatever happened, so a failure does not hang.
    release.send(()).unwrap();
    let got = got.expect("writing file b waited for file a's data write");
    let mut want_b = body_b.clone();
    want_b[1000..6000].copy_from_slice(&body_b[..5000]);
    assert!(got == want_b);
    writer_b.join().unwrap();
    assert_eq!(writer_a.join().unwrap(), held.len());

    let mut got_a = vec![0u8; held.len()];
    assert_eq!(fs.read_file_at(a, 0, &mut got_a).unwrap(), held.len());
    assert!(got_a == held);
    drop(Arc::into_inner(fs).expect("threads are done"));
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
    let fs = open_rw(&img);
    let got = fs.read_all(&fs.resolve(b"/b").unwrap(), 1 << 20).unwrap();
    assert!(got == want_b);
    let got = fs.read_all(&fs.resolve(b"/a").unwrap(), 1 << 20).unwrap();
    assert!(got == held);
}

#[test]
fn reader_waits_for_the_data_of_a_write_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, fs, entered, release)) = gated_fs(dir.path()) else {
        return;
    };
    let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR).unwrap().ino;
    let held: Vec<u8> = GATE.iter().copied().cycle().take(64 << 10).collect();
    let (fs_a, held_a) = (fs.clone(), held.clone());
    let writer_a = std::thread::spawn(move || fs_a.write(a, 0, &held_a).unwrap());
    entered
        .recv_timeout(PATIENCE)
        .expect("writer A never reached its data write");
    // The new size and blocks are published; a reader of the file must
    // not read the blocks before their data is written. It either waits
    // (and sees the data) or read before the publish (and sees nothing):
    // released only after it started, it can never see zeros or old bytes.
    let (fs_r, len) = (fs.clone(), held.len());
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; len];
        let n = fs_r.read_file_at(a, 0, &mut buf).unwrap();
        buf.truncate(n);
        buf
    });
    release.send(()).unwrap();
    let got = reader.join().unwrap();
    assert!(
        got.is_empty() || got == held,
        "read {} bytes, not the written ones",
        got.len()
    );
    assert_eq!(writer_a.join().unwrap(), held.len());
    drop(Arc::into_inner(fs).expect("threads are done"));
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
}

#[test]
fn open_and_release_do_not_wait_for_the_writer_lock() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "16M") else {
        return;
    };
    let fs = open_rw(&img);
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    // A batch holds the writer lock until finished.
    let mut batch = fs.batch().unwrap();
    batch.create(ROOT_INO, b"g", NodeKind::Regular, ATTR).unwrap();
    let (tx, rx) = channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            fs.open_file(f).unwrap();
            fs.open_file(f).unwrap();
            fs.release_file(f).unwrap();
            fs.release_file(f).unwrap();
            tx.send(()).unwrap();
        });
        let r = rx.recv_timeout(PATIENCE);
        batch.finish().unwrap();
        r.expect("open/release waited for the batch");
    });
    drop(fs);
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
}

/// Opens racing unlinks: every unlinked inode is freed exactly once, by
/// the unlink or by the last release, and the image stays consistent.
#[test]
fn opens_race_unlinks() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "32M") else {
        return;
    };
    let fs = open_rw(&img);
    let stop = AtomicBool::new(false);
    let (tx, rx) = channel::<u32>();
    std::thread::scope(|s| {
        let (fs, stop) = (&fs, &stop);
        s.spawn(move || {
            for ino in rx {
                // The name may already be gone: then the open fails or
                // keeps an orphan alive until the release.
                if fs.open_file(ino).is_ok() {
                    fs.write(ino, 0, b"still here").unwrap();
                    fs.release_file(ino).unwrap();
                }
            }
            stop.store(true, Ordering::Release);
        });
        for i in 0..300 {
            let name = format!("x{i}");
            let ino = fs
                .create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR)
                .unwrap()
                .ino;
            fs.write(ino, 0, &[7u8; 5000]).unwrap();
            tx.send(ino).unwrap();
            fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
        }
        drop(tx);
    });
    assert!(stop.load(Ordering::Acquire));
    assert_eq!(fs.read_dir(&fs.inode(ROOT_INO).unwrap()).unwrap().len(), 3);
    drop(fs);
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
}

#[test]
fn a_commit_in_flight_holds_up_neither_changes_nor_reads_and_queued_fsyncs_share_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let gate_flushes = Arc::new(AtomicBool::new(false));
    let Some((img, fs, entered, release)) = gated_fs_and_flushes(dir.path(), gate_flushes.clone()) else {
        return;
    };
    let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(a, 0, b"committed before").unwrap();
    fs.sync().unwrap();
    let before = fs.journal_stats().expect("the image has a journal");

    // A commit of a's change, stopped at its first flush.
    fs.write(a, 0, b"being committed!").unwrap();
    gate_flushes.store(true, Ordering::Release);
    let fs_a = fs.clone();
    let committer = std::thread::spawn(move || fs_a.sync().unwrap());
    entered
        .recv_timeout(PATIENCE)
        .expect("the commit never reached its flush");

    // Meanwhile a new file is created, written and read, and a is read.
    let (done_tx, done) = channel();
    let fs_b = fs.clone();
    let changer = std::thread::spawn(move || {
        let b = fs_b.create(ROOT_INO, b"b", NodeKind::Regular, ATTR).unwrap().ino;
        fs_b.write(b, 0, b"next transaction").unwrap();
        let mut got = [0u8; 16];
        fs_b.read_file_at(a, 0, &mut got).unwrap();
        done_tx.send(got).unwrap();
    });
    let got = done.recv_timeout(PATIENCE);
    gate_flushes.store(false, Ordering::Release);
    // Two fsyncs queue behind the commit in flight.
    let syncers: Vec<_> = (0..2)
        .map(|_| {
            let fs = fs.clone();
            std::thread::spawn(move || fs.sync().unwrap())
        })
        .collect();
    release.send(()).unwrap();
    assert_eq!(
        &got.expect("a change waited for the commit in flight"),
        b"being committed!"
    );
    changer.join().unwrap();
    committer.join().unwrap();
    for s in syncers {
        s.join().unwrap();
    }
    let after = fs.journal_stats().unwrap();
    assert_eq!(after.write_backs - before.write_backs, 3, "three syncs");
    assert_eq!(
        after.commits - before.commits,
        2,
        "a's commit, then one for b shared by both fsyncs"
    );

    drop(Arc::into_inner(fs).expect("threads are done"));
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
    let fs = open_rw(&img);
    assert_eq!(
        fs.read_all(&fs.resolve(b"/a").unwrap(), 64).unwrap(),
        b"being committed!"
    );
    assert_eq!(
        fs.read_all(&fs.resolve(b"/b").unwrap(), 64).unwrap(),
        b"next transaction"
    );
}
