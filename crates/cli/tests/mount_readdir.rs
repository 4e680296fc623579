//! Directory listing through the FUSE mount: `readdir` streams from the
//! kernel's offset (nothing listed at `opendir`), in the kernel's hash
//! order or with `-o readdir=inode` in inode order; the kernel's getdents
//! through the mount returns what the library's stream returns, and `ls`
//! of a directory growing meanwhile repeats no name. Needs root and
//! /dev/fuse; skips loudly otherwise (never under `CI`).

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::dir::{ReadDirOptions, ReadDirOrder};
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::fuse::FuseMount;
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ready() -> bool {
    ext4kit_testkit::fuse::ready_with("mkfs.ext4")
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn: {}", r.output);
}

/// Files the creator thread of `ls_while_creating_repeats_no_name` may add.
const MAX_CREATED: usize = 20_000;

/// An image whose `/big` holds `n` empty files, made through the library,
/// with inodes to spare for `MAX_CREATED` more (a fast creator ran out of
/// inodes when only 1,000 were spare).
fn image_with_big_dir(dir: &Path, n: usize) -> (PathBuf, u32) {
    let img = dir.join("img.ext4");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-N", &(n + MAX_CREATED + 1000).to_string()])
        .arg(&img)
        .arg("256M")
        .output()
        .expect("run mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), OpenOptions::default()).unwrap();
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap();
    for i in 0..n {
        let name = format!("file-{:07}-{}", i * 7919 % n, "x".repeat(i % 13));
        fs.create(big.ino, name.as_bytes(), NodeKind::Regular, ATTR).unwrap();
    }
    fs.unmount().unwrap();
    (img, big.ino)
}

/// What the library's stream lists in `big`, without `.` and `..`.
fn library_listing(img: &Path, big: u32, order: ReadDirOrder) -> Vec<(Vec<u8>, u32)> {
    let fs = Filesystem::open(Box::new(FileDevice::open(img, false).unwrap()), OpenOptions::default()).unwrap();
    let dir = fs.inode(big).unwrap();
    let opts = ReadDirOptions {
        order,
        ..ReadDirOptions::default()
    };
    let mut s = fs.dir_stream_with(&dir, opts).unwrap();
    let mut out = Vec::new();
    fs.read_dir_from(&dir, &mut s, 0, |e, _| {
        if e.name != b"." && e.name != b".." {
            out.push((e.name.clone(), e.ino));
        }
        Ok(true)
    })
    .unwrap();
    out
}

/// 20,000 names listed by getdents through the mount, in each order, are
/// the library's stream, entry for entry; the inode order ascends.
#[test]
fn listing_through_the_mount_is_the_librarys_in_both_orders() {
    use std::os::unix::fs::DirEntryExt;
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (img, big) = image_with_big_dir(work.path(), 20_000);
    for (opt, order) in [
        ("readdir=hash", ReadDirOrder::Hash),
        ("readdir=inode", ReadDirOrder::Inode),
    ] {
        let m = FuseMount::start(exe(), &img, opt).unwrap();
        let listed: Vec<(Vec<u8>, u64)> = std::fs::read_dir(m.path().join("big"))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().as_bytes().to_vec(), e.ino())
            })
            .collect();
        assert!(m.unmount().unwrap().success());
        let want = library_listing(&img, big, order);
        assert_eq!(listed.len(), 20_000, "{opt}: count");
        let names: Vec<&[u8]> = listed.iter().map(|l| &l.0[..]).collect();
        let want_names: Vec<&[u8]> = want.iter().map(|w| &w.0[..]).collect();
        assert!(
            names == want_names,
            "{opt}: the mount lists in another order than the library"
        );
        if order == ReadDirOrder::Inode {
            assert!(listed.windows(2).all(|w| w[0].1 <= w[1].1), "{opt}: not in inode order");
        }
    }
    assert_clean(&img);
}

/// `ls -f` of a directory while another thread creates files in it
/// through the mount: no name twice, every name there before listed.
#[test]
fn ls_while_creating_repeats_no_name() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (img, _) = image_with_big_dir(work.path(), 5_000);
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let dir = m.path().join("big");
    let before: BTreeSet<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let creator = s.spawn(|| {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < MAX_CREATED {
                std::fs::write(dir.join(format!("new-{i}-{}", "y".repeat(i % 17))), b"").unwrap();
                i += 1;
            }
            i
        });
        for round in 0..8 {
            let out = Command::new("ls").arg("-f").arg(&dir).output().unwrap();
            assert!(out.status.success(), "ls -f: {}", String::from_utf8_lossy(&out.stderr));
            let lines: Vec<&[u8]> = out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
            let unique: BTreeSet<&[u8]> = lines.iter().copied().collect();
            assert_eq!(unique.len(), lines.len(), "round {round}: ls -f listed a name twice");
            for name in &before {
                assert!(
                    unique.contains(&name[..]),
                    "round {round}: {} missing",
                    String::from_utf8_lossy(name)
                );
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let created = creator.join().unwrap();
        assert!(created > 0, "the creator made no file while ls ran");
    });
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
}

/// A directory with an itree (seed 003) lists in inode order through the
/// mount whatever `readdir=` says, entry for entry as the library does, and
/// `ls -f` while files are created repeats no name. The image loses its
/// itrees before e2fsck, which does not know the feature.
#[test]
fn an_itree_directory_lists_in_inode_order_through_the_mount() {
    use std::os::unix::fs::DirEntryExt;
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("img.ext4");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-N", "40000"])
        .arg(&img)
        .arg("256M")
        .output()
        .expect("run mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let open = || Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), OpenOptions::default()).unwrap();
    let fs = open();
    fs.itree_add_all().unwrap();
    fs.unmount().unwrap();
    let fs = open();
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap();
    for i in 0..20_000 {
        let name = format!("file-{:07}-{}", i * 7919 % 20_000, "x".repeat(i % 13));
        fs.create(big.ino, name.as_bytes(), NodeKind::Regular, ATTR).unwrap();
    }
    fs.unmount().unwrap();
    let want = library_listing(&img, big.ino, ReadDirOrder::Hash);
    assert!(
        want.windows(2).all(|w| w[0].1 < w[1].1),
        "the library lists an itree in inode order"
    );
    let m = FuseMount::start(exe(), &img, "readdir=hash").unwrap();
    let dir = m.path().join("big");
    let listed: Vec<(Vec<u8>, u32)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().as_bytes().to_vec(), e.ino() as u32)
        })
        .collect();
    assert!(listed == want, "the mount lists the itree otherwise than the library");
    std::thread::scope(|s| {
        let creator = s.spawn(|| {
            for i in 0..3000 {
                std::fs::write(dir.join(format!("new-{i}")), b"").unwrap();
            }
        });
        for round in 0..4 {
            let out = Command::new("ls").arg("-f").arg(&dir).output().unwrap();
            let lines: Vec<&[u8]> = out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
            let unique: BTreeSet<&[u8]> = lines.iter().copied().collect();
            assert_eq!(unique.len(), lines.len(), "round {round}: ls -f listed a name twice");
            assert!(lines.len() >= 20_002, "round {round}: {} names", lines.len());
        }
        creator.join().unwrap();
    });
    assert!(m.unmount().unwrap().success());
    let fs = open();
    assert_eq!(fs.itree_remove_all().unwrap().names, 23_000);
    fs.unmount().unwrap();
    assert_clean(&img);
}
