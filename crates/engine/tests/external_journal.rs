//! External journals (`journal_dev`): a journal device and a file system
//! attached to it, made by mke2fs (`-O journal_dev`, `-J device=`, which
//! needs the journal on a block device: a loop device here), opened with
//! the journal device given ([`OpenOptions::journal_device`]).
//!
//! - Writing commits to the journal device and checkpoints to the image;
//!   `e2fsck -fn -j JOURNAL IMAGE` is clean after.
//! - Without the journal a writable open is read-only, saying how to give
//!   it; a wrong journal device is refused.
//! - A crash mid-workload (both devices [`CrashDevice`]s, one crash point
//!   in the combined write order) replays through the engine and through
//!   `e2fsck -fy -j` to images e2fsck finds clean, holding every synced file.
//! - A journal the kernel left dirty (`-o journal_path=`, both images
//!   copied while mounted) replays through the engine to what the kernel
//!   showed.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use ext4kit_engine::device::{BlockDevice, CrashDevice, FileDevice, MemDevice, Survivors};
use ext4kit_engine::journal::JournalDevice;
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::skip_unless;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// A loop device attached to an image file, detached when dropped.
struct Loop(String);

impl Loop {
    fn attach(img: &Path) -> Loop {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(img)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Loop(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

fn mke2fs(args: &[&str]) {
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .args(args)
        .env("MKE2FS_CONFIG", "/etc/mke2fs.conf")
        .output()
        .expect("run mkfs.ext4");
    assert!(
        out.status.success(),
        "mkfs.ext4 {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A journal device and a file system using it, made by mke2fs:
/// `(image, journal)`; `None` (skipped loudly) without loop devices.
fn pair(dir: &Path, bs: &str) -> Option<(PathBuf, PathBuf)> {
    skip_unless(can_loop_mount())?;
    let (img, jnl) = (dir.join("fs.img"), dir.join("journal.img"));
    mke2fs(&["-O", "journal_dev", "-b", bs, jnl.to_str().unwrap(), "8M"]);
    let lo = Loop::attach(&jnl);
    let device = format!("device={}", lo.0);
    mke2fs(&["-b", bs, "-J", &device, img.to_str().unwrap(), "64M"]);
    Some((img, jnl))
}

/// `e2fsck ARGS -j JOURNAL IMAGE`: exit code and output.
fn e2fsck_j(flags: &str, img: &Path, jnl: &Path) -> (i32, String) {
    let out = Command::new("e2fsck")
        .arg(flags)
        .arg("-j")
        .arg(jnl)
        .arg(img)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn assert_clean(img: &Path, jnl: &Path) {
    let (code, out) = e2fsck_j("-fn", img, jnl);
    assert_eq!(code, 0, "e2fsck -fn -j {} {}:\n{out}", jnl.display(), img.display());
}

fn with_journal(dev: Arc<dyn BlockDevice>) -> OpenOptions {
    OpenOptions {
        journal_device: Some(JournalDevice(dev)),
        ..OpenOptions::default()
    }
}

fn open_files(img: &Path, jnl: &Path) -> ext4kit_engine::Result<Filesystem> {
    let j: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(jnl, true).unwrap());
    Filesystem::open(Box::new(FileDevice::open(img, true).unwrap()), with_journal(j))
}

fn pattern(n: usize, v: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ (n as u8).wrapping_mul(29) ^ v)
        .collect()
}

fn read_all(fs: &Filesystem, path: &str) -> Vec<u8> {
    let ino = fs.resolve(path.as_bytes()).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut buf = vec![0u8; ino.size() as usize];
    let n = fs.read_at(&ino, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn writes_commit_to_the_journal_device() {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, jnl)) = pair(dir.path(), "4096") else {
        return;
    };
    let before = std::fs::read(&jnl).unwrap();
    let fs = open_files(&img, &jnl).unwrap();
    assert_eq!(fs.read_only_reason(), None);
    assert!(fs.journal_info().external);
    let d = fs
        .create(ROOT_INO, b"d", NodeKind::Directory, Attr { perm: 0o755, ..ATTR })
        .unwrap()
        .ino;
    for n in 0..30 {
        let ino = fs
            .create(d, format!("f{n}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap()
            .ino;
        fs.write(ino, 0, &pattern(n, 1, 500 + n * 1111)).unwrap();
        if n % 10 == 9 {
            fs.sync().unwrap();
        }
    }
    let stats = fs.journal_stats().expect("journaling");
    assert!(stats.commits >= 3, "{stats:?}");
    drop(fs);
    let after = std::fs::read(&jnl).unwrap();
    assert_ne!(before, after, "the commits went to the journal device");
    assert_clean(&img, &jnl);
    let fs = open_files(&img, &jnl).unwrap();
    assert!(!fs.journal_info().needs_recovery);
    assert_eq!(read_all(&fs, "/d/f17"), pattern(17, 1, 500 + 17 * 1111));
}

#[test]
fn without_the_journal_writing_is_refused_and_a_wrong_journal_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, jnl)) = pair(dir.path(), "1024") else {
        return;
    };
    let fs = common::open_rw(&img);
    let why = fs
        .read_only_reason()
        .expect("read-only without the journal")
        .to_string();
    assert!(why.contains("--journal PATH") && why.contains("journal_path="), "{why}");
    assert!(fs.create(ROOT_INO, b"x", NodeKind::Regular, ATTR).is_err());
    assert!(fs.resolve(b"/lost+found").is_ok(), "reading works");
    drop(fs);
    // Another journal device, not this file system's.
    let other = dir.path().join("other.img");
    mke2fs(&["-O", "journal_dev", "-b", "1024", other.to_str().unwrap(), "4M"]);
    let Err(err) = open_files(&img, &other) else {
        panic!("a journal device of another file system was accepted")
    };
    assert!(err.to_string().contains("s_journal_uuid"), "{err}");
    // The right one with 1 KiB blocks: the journal superblock is block 2.
    let fs = open_files(&img, &jnl).unwrap();
    fs.create(ROOT_INO, b"x", NodeKind::Regular, ATTR).unwrap();
    drop(fs);
    assert_clean(&img, &jnl);
}

/// Tags each write with the device it went to, so that one crash point in
/// the combined order gives each device its own.
struct Tagged {
    dev: Arc<CrashDevice>,
    id: usize,
    order: Arc<Mutex<Vec<usize>>>,
}

impl BlockDevice for Tagged {
    fn len(&self) -> u64 {
        self.dev.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.dev.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        let mut order = self.order.lock().unwrap();
        order.push(self.id);
        self.dev.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.dev.flush()
    }
    fn read_only(&self) -> bool {
        false
    }
}

/// What a crash at a point must keep: (writes before the sync returned,
/// files then).
type Synced = Vec<(usize, BTreeMap<String, Vec<u8>>)>;

fn workload(fs: &Filesystem, order: &Mutex<Vec<usize>>) -> Synced {
    let mut model = BTreeMap::new();
    let mut synced = Vec::new();
    let d = fs
        .create(ROOT_INO, b"d", NodeKind::Directory, Attr { perm: 0o755, ..ATTR })
        .unwrap()
        .ino;
    for n in 0..40usize {
        let name = format!("f{n}");
        let ino = fs.create(d, name.as_bytes(), NodeKind::Regular, ATTR).unwrap().ino;
        let data = pattern(n, 2, 300 + n * 2111);
        fs.write(ino, 0, &data).unwrap();
        model.insert(format!("/d/{name}"), data);
        if n % 7 == 3 {
            let gone = format!("f{}", n / 2);
            fs.unlink(d, gone.as_bytes()).unwrap();
            model.remove(&format!("/d/{gone}"));
        }
        if n % 5 == 4 {
            fs.sync().unwrap();
            synced.push((order.lock().unwrap().len(), model.clone()));
        }
    }
    synced
}

fn crash_images(devs: &[Arc<CrashDevice>; 2], order: &[usize], point: usize, s: Survivors) -> [Vec<u8>; 2] {
    let at = |id| order[..point].iter().filter(|&&x| x == id).count();
    [devs[0].crash_image(at(0), s), devs[1].crash_image(at(1), s)]
}

fn check_replayed(fs: &Filesystem, synced: &Synced, point: usize) {
    let Some((_, model)) = synced.iter().rev().find(|(w, _)| *w <= point) else {
        return;
    };
    for (path, data) in model {
        assert_eq!(&read_all(fs, path), data, "{path} after a crash at write {point}");
    }
}

#[test]
fn crash_mid_workload_replays_in_the_engine_and_in_e2fsck() {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, jnl)) = pair(dir.path(), "4096") else {
        return;
    };
    let devs = [
        Arc::new(CrashDevice::with_atomic_unit(std::fs::read(&img).unwrap(), 4096)),
        Arc::new(CrashDevice::with_atomic_unit(std::fs::read(&jnl).unwrap(), 4096)),
    ];
    let order = Arc::new(Mutex::new(Vec::new()));
    let tagged = |id: usize| Tagged {
        dev: devs[id].clone(),
        id,
        order: order.clone(),
    };
    let fs = Filesystem::open(Box::new(tagged(0)), with_journal(Arc::new(tagged(1)))).unwrap();
    let synced = workload(&fs, &order);
    drop(fs);
    let order = order.lock().unwrap().clone();
    let points: Vec<usize> = (1..=12).map(|k| order.len() * k / 13).chain([order.len()]).collect();
    for (i, &point) in points.iter().enumerate() {
        let s = if i % 2 == 0 { Survivors::None } else { Survivors::All };
        let [fsb, jb] = crash_images(&devs, &order, point, s);
        // Through the engine.
        let (a, aj) = (dir.path().join("a.img"), dir.path().join("a.jnl"));
        std::fs::write(&a, &fsb).unwrap();
        std::fs::write(&aj, &jb).unwrap();
        let fs = open_files(&a, &aj).unwrap_or_else(|e| panic!("replay at write {point}: {e}"));
        check_replayed(&fs, &synced, point);
        drop(fs);
        assert_clean(&a, &aj);
        // Through e2fsck.
        std::fs::write(&a, &fsb).unwrap();
        std::fs::write(&aj, &jb).unwrap();
        let (code, out) = e2fsck_j("-fy", &a, &aj);
        assert!(code <= 1, "e2fsck -fy -j at write {point}: {out}");
        assert_clean(&a, &aj);
        let fs = Filesystem::open(
            Box::new(MemDevice::new(std::fs::read(&a).unwrap())),
            OpenOptions::default(),
        );
        check_replayed(&fs.unwrap(), &synced, point);
    }
}

#[test]
fn kernel_dirty_external_journal_replays_to_what_the_kernel_showed() {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, jnl)) = pair(dir.path(), "4096") else {
        return;
    };
    let (copy, jcopy) = (dir.path().join("copy.img"), dir.path().join("copy.jnl"));
    let mut seen = BTreeMap::new();
    {
        let lo = Loop::attach(&jnl);
        let opt = format!("journal_path={}", lo.0);
        let mnt = LoopMount::rw(&img, &[&opt]).expect("mount -o journal_path=");
        std::fs::create_dir(mnt.path().join("k")).unwrap();
        for n in 0..40usize {
            let p = mnt.path().join(format!("k/f{n}"));
            std::fs::write(&p, pattern(n, 3, 100 + n * 3001)).unwrap();
        }
        std::fs::remove_file(mnt.path().join("k/f5")).unwrap();
        common::run("sync", &[]);
        for e in std::fs::read_dir(mnt.path().join("k")).unwrap() {
            let e = e.unwrap();
            let name = format!("/k/{}", e.file_name().to_string_lossy());
            seen.insert(name, std::fs::read(e.path()).unwrap());
        }
        std::fs::copy(&img, &copy).unwrap();
        std::fs::copy(&jnl, &jcopy).unwrap();
        mnt.unmount().expect("unmount");
    }
    let stale = OpenOptions {
        dirty_journal: ext4kit_engine::DirtyJournal::ReadStale,
        ..OpenOptions::default()
    };
    let Err(e) = common::open(&copy, OpenOptions::default()) else {
        panic!("a dirty external journal not given was ignored")
    };
    assert!(
        e.to_string().contains("needs recovery") && e.to_string().contains("--journal"),
        "{e}"
    );
    let fs = common::open(&copy, stale).unwrap();
    assert!(fs.journal_info().needs_recovery, "the kernel left the log to replay");
    drop(fs);
    let fs = open_files(&copy, &jcopy).unwrap();
    let rec = fs.journal_info().recovered.clone().expect("replayed");
    assert!(rec.transactions > 0, "{rec:?}");
    let k = fs.resolve(b"/k").unwrap();
    assert_eq!(
        fs.read_dir(&k)
            .unwrap()
            .iter()
            .filter(|e| e.name.starts_with(b"f"))
            .count(),
        39
    );
    for (path, data) in &seen {
        assert_eq!(&read_all(&fs, path), data, "{path}");
    }
    drop(fs);
    assert_clean(&copy, &jcopy);
    assert_clean(&img, &jnl);
}
