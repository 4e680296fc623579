//! `ext4kit resize` of a mounted image: the request reaches the mount's
//! server through the mount point or through the image (its lock holder);
//! a shrink is refused as the kernel refuses it, a grow the offline resize
//! refuses is refused before the image file is touched, and a grow (also
//! one past the reserved GDT blocks, which moves the tables and data in
//! the longer descriptor table's way) is
//! done while a writer keeps writing and fsyncing files: every write
//! succeeds, `statfs` shows the new size, the new space takes data, every
//! file reads back as written (also a file unlinked while open across the
//! grows), and e2fsck and the kernel accept the image. Needs root and
//! /dev/fuse; skips loudly otherwise (never under `CI`).

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ext4kit_testkit::fuse::FuseMount;
use ext4kit_testkit::tools::e2fsck_fn;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ready() -> bool {
    ext4kit_testkit::fuse::ready_with("mkfs.ext4")
}

fn resize(target: &Path, size: &str) -> Output {
    Command::new(exe())
        .arg("resize")
        .arg(target)
        .arg(size)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_mounted_image_is_asked_through_its_server() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("img.ext4");
    let mk = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024"])
        .arg(&img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(mk.status.success(), "{}", text(&mk));
    let m = FuseMount::start(exe(), &img, "").unwrap();
    std::fs::write(m.path().join("f"), b"kept").unwrap();

    let shrink = resize(m.path(), "32M");
    assert!(!shrink.status.success());
    assert!(
        text(&shrink).contains("shrinking a mounted file system"),
        "{}",
        text(&shrink)
    );

    let same = resize(&img, "64M");
    assert!(same.status.success(), "{}", text(&same));
    assert!(text(&same).contains("Nothing to do"), "{}", text(&same));

    // More descriptor blocks than a group holds (the kernel would switch to
    // meta_bg): the planner's refusal, before the image file is touched.
    let far = resize(&img, "2T");
    assert!(!far.status.success());
    assert!(text(&far).contains("meta_bg"), "{}", text(&far));
    assert_eq!(
        std::fs::metadata(&img).unwrap().len(),
        64 << 20,
        "a refused grow extended the image"
    );

    let elsewhere = resize(work.path(), "128M");
    assert!(!elsewhere.status.success());
    assert!(
        text(&elsewhere).contains("not an ext4kit mount"),
        "{}",
        text(&elsewhere)
    );

    assert_eq!(std::fs::read(m.path().join("f")).unwrap(), b"kept");
    assert!(m.unmount().unwrap().success());
    let r = e2fsck_fn(&img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn: {}", r.output);
}

/// The bytes of writer file `i` (its length and contents follow from `i`).
fn contents(i: usize) -> Vec<u8> {
    let len = 1000 + (i * 7919) % 150_000;
    let mut x = i as u32 ^ 0x9e37_79b9;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 16) as u8
        })
        .collect()
}

/// Creates, writes and fsyncs files `w0`, `w1`… in `dir` until `stop`;
/// `done` counts the files written. Returns the failures, which must be
/// none: the file system never runs short here.
fn writer(dir: PathBuf, stop: Arc<AtomicBool>, done: Arc<AtomicUsize>) -> Vec<String> {
    let mut failed = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let path = dir.join(format!("w{i}"));
        let r = std::fs::File::create(&path).and_then(|mut f| {
            f.write_all(&contents(i))?;
            f.sync_all()
        });
        if let Err(e) = r {
            failed.push(format!("{}: {e}", path.display()));
        }
        i += 1;
        done.store(i, Ordering::Release);
    }
    failed
}

/// Bytes the mount at `mp` reports in total (`df`).
fn df_bytes(mp: &Path) -> u64 {
    let st = rustix::fs::statvfs(mp).unwrap();
    st.f_blocks * st.f_frsize
}

/// Makes an image of `size` with `mkfs_args`, mounts it, then grows it to
/// each of `sizes` while a writer thread writes and fsyncs files, and
/// checks the outcome (see the module documentation).
fn grow_under_writes(mkfs_args: &[&str], size: &str, sizes: &[&str]) {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("img.ext4");
    let mk = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .args(mkfs_args)
        .arg(&img)
        .arg(size)
        .output()
        .unwrap();
    assert!(mk.status.success(), "{}", text(&mk));
    let old_bytes = std::fs::metadata(&img).unwrap().len();
    let m = FuseMount::start(exe(), &img, "").unwrap();
    // Unlinked while open: must live on across the grows.
    let mut held = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(m.path().join("held"))
        .unwrap();
    held.write_all(&contents(999_999)).unwrap();
    held.sync_all().unwrap();
    std::fs::remove_file(m.path().join("held")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let w = {
        let (dir, stop, done) = (m.path().to_path_buf(), stop.clone(), done.clone());
        std::thread::spawn(move || writer(dir, stop, done))
    };
    let mut df = df_bytes(m.path());
    for want in sizes {
        // The writer is busy before, during and after each grow.
        let start = done.load(Ordering::Acquire);
        while done.load(Ordering::Acquire) < start + 3 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let o = resize(m.path(), want);
        assert!(o.status.success(), "resize to {want}: {}", text(&o));
        assert!(text(&o).contains("grown while mounted"), "{}", text(&o));
        let now = df_bytes(m.path());
        assert!(now > df, "df after growing to {want}: {now} bytes, was {df}");
        df = now;
    }
    let start = done.load(Ordering::Acquire);
    while done.load(Ordering::Acquire) < start + 3 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    let failed = w.join().unwrap();
    assert!(failed.is_empty(), "writes failed: {failed:?}");
    let written = done.load(Ordering::Acquire);

    // The new space takes data: more than the whole old file system.
    let fill = vec![0x5au8; usize::try_from(old_bytes).unwrap()];
    std::fs::write(m.path().join("fill"), &fill).unwrap();
    assert!(
        std::fs::read(m.path().join("fill")).unwrap() == fill,
        "fill read back wrong"
    );
    for i in 0..written {
        let got = std::fs::read(m.path().join(format!("w{i}"))).unwrap();
        assert!(got == contents(i), "w{i} read back wrong");
    }
    let mut back = Vec::new();
    held.rewind().unwrap();
    held.read_to_end(&mut back).unwrap();
    assert!(back == contents(999_999), "the file unlinked while open lost its data");
    held.write_all(b"still writable").unwrap();
    held.sync_all().unwrap();
    drop(held);
    assert!(m.unmount().unwrap().success());

    let r = e2fsck_fn(&img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn: {}", r.output);
    if ext4kit_testkit::mount::can_loop_mount().is_ok() {
        let k = ext4kit_testkit::mount::LoopMount::ro(&img).unwrap();
        for i in [0, written / 2, written - 1] {
            let got = std::fs::read(k.path().join(format!("w{i}"))).unwrap();
            assert!(got == contents(i), "w{i} read back wrong through the kernel");
        }
        assert_eq!(std::fs::metadata(k.path().join("fill")).unwrap().len(), old_bytes);
        k.unmount().unwrap();
    }
}

#[test]
fn grows_1k_blocks_flex_bg_under_writes() {
    grow_under_writes(&["-b", "1024"], "16M", &["20M", "33M", "64M"]);
}

#[test]
fn grows_4k_blocks_under_writes() {
    grow_under_writes(&["-b", "4096"], "32M", &["36M", "100M", "300M"]);
}

/// Without a resize inode every grow that adds a descriptor block moves
/// what lies after each superblock copy's table: from 1 descriptor block
/// to 8.
#[test]
fn grows_without_resize_inode_far_past_the_reserve_under_writes() {
    grow_under_writes(&["-b", "1024", "-O", "^resize_inode"], "16M", &["64M", "300M", "1G"]);
}

/// One reserved GDT block (room for 32 groups): the first grow uses it,
/// the next goes past it (5 descriptor blocks).
#[test]
fn grows_1k_past_a_used_up_reserve_under_writes() {
    grow_under_writes(&["-b", "1024", "-E", "resize=200000"], "16M", &["200M", "600M"]);
}

#[test]
fn grows_meta_bg_under_writes() {
    grow_under_writes(&["-b", "1024", "-O", "meta_bg,^resize_inode"], "16M", &["40M", "70M"]);
}

#[test]
fn grows_without_journal_or_flex_bg_under_writes() {
    grow_under_writes(&["-b", "1024", "-O", "^has_journal,^flex_bg"], "16M", &["24M", "48M"]);
}

/// A directory listing open across a grow goes on where it stood: every
/// name once.
#[test]
fn a_listing_open_across_a_grow_goes_on() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("img.ext4");
    let mk = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024"])
        .arg(&img)
        .arg("16M")
        .output()
        .unwrap();
    assert!(mk.status.success(), "{}", text(&mk));
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let dir = m.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    let names: std::collections::BTreeSet<String> =
        (0..3000).map(|i| format!("file-with-a-longish-name-{i}")).collect();
    for n in &names {
        std::fs::write(dir.join(n), b"").unwrap();
    }
    let mut list = std::fs::read_dir(&dir).unwrap();
    let mut seen: Vec<String> = (&mut list)
        .take(5)
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let o = resize(m.path(), "40M");
    assert!(o.status.success(), "{}", text(&o));
    seen.extend(list.map(|e| e.unwrap().file_name().into_string().unwrap()));
    let set: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(set.len(), seen.len(), "a name was listed twice");
    assert_eq!(set, names);
    assert!(m.unmount().unwrap().success());
    let r = e2fsck_fn(&img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn: {}", r.output);
}
