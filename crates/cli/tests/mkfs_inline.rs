//! `ext4kit mkfs -O inline_data -d` against `mke2fs -O inline_data -d` on
//! the same tree, UUID, hash seed and time: every file, directory and
//! symlink mke2fs keeps inline is inline in ours with the same inode record
//! (but for times, `i_generation` and the checksum, which the copy sets
//! differently), the rest are not inline in either; both e2fsck-clean; the
//! engine and the kernel read every file back.

use std::path::Path;
use std::process::Command;

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Filesystem, OpenOptions};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{self, assert_fsck_clean, require_tools, skip_unless};

const UUID: &str = "11111111-2222-3333-4444-555555555555";
const SEED: &str = "66666666-7777-8888-9999-aaaaaaaaaaaa";
const EPOCH: &str = "1700000000";
const INLINE_DATA_FL: u32 = 0x1000_0000;

/// Files of sizes around the limits (60 bytes of `i_block`, 128 with the
/// `system.data` room of a 256-byte inode), symlinks fast, inline and in a
/// block, a directory inline, nested, and one that outgrows `i_block`.
fn build_tree(src: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    std::fs::create_dir_all(src.join("d1/sub")).unwrap();
    std::fs::create_dir_all(src.join("many")).unwrap();
    for n in [0usize, 1, 59, 60, 61, 100, 127, 128, 129, 1000, 5000] {
        let name = format!("f{n}");
        let body: Vec<u8> = (0..n).map(|i| (i * 7 + n) as u8).collect();
        std::fs::write(src.join(&name), body).unwrap();
        paths.push(name);
    }
    for n in [5usize, 59, 60, 80, 124, 125, 128, 129, 130] {
        let name = format!("l{n}");
        std::os::unix::fs::symlink("t".repeat(n), src.join(&name)).unwrap();
        paths.push(name);
    }
    std::fs::write(src.join("d1/a"), b"in d1\n").unwrap();
    for i in 0..8 {
        std::fs::write(src.join(format!("many/file_{i}")), format!("{i}\n")).unwrap();
        paths.push(format!("many/file_{i}"));
    }
    paths.extend(["d1", "d1/a", "d1/sub", "many"].map(String::from));
    paths
}

fn ext4kit_mkfs(img: &Path, src: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .args(["mkfs", "-q", "-O", "inline_data", "-d"])
        .arg(src)
        .args(["-U", UUID, "-E", &format!("hash_seed={SEED}")])
        .arg(img)
        .arg("64M")
        .output()
        .expect("run ext4kit");
    assert!(
        out.status.success(),
        "ext4kit mkfs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn mke2fs(img: &Path, src: &Path) {
    std::fs::File::create(img).unwrap().set_len(64 << 20).unwrap();
    let out = Command::new(tools::require_tool("mke2fs").unwrap())
        .env("E2FSPROGS_FAKE_TIME", EPOCH)
        .args(["-q", "-F", "-t", "ext4", "-O", "inline_data", "-d"])
        .arg(src)
        .args(["-U", UUID, "-E", &format!("hash_seed={SEED}")])
        .arg(img)
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
}

fn open(img: &Path) -> Filesystem {
    let dev = FileDevice::open(img, false).expect("open image");
    Filesystem::open(Box::new(dev), OpenOptions::default()).expect("engine opens the image")
}

/// The record with what the two copies set differently zeroed: the four
/// times, `i_generation`, the checksum halves and the extra time fields.
fn masked(record: &[u8]) -> Vec<u8> {
    let mut r = record.to_vec();
    for range in [0x08..0x18, 0x64..0x68, 0x7C..0x7E, 0x82..0x98] {
        r[range].fill(0);
    }
    r
}

#[test]
fn small_files_dirs_and_symlinks_go_inline_as_mke2fs_does() {
    if skip_unless(require_tools(&["e2fsck", "mke2fs"])).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI must have e2fsprogs");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let paths = build_tree(&src);
    let (ours, theirs) = (dir.path().join("ours.img"), dir.path().join("theirs.img"));
    ext4kit_mkfs(&ours, &src);
    mke2fs(&theirs, &src);
    assert_fsck_clean(&ours).unwrap();
    assert_fsck_clean(&theirs).unwrap();
    let (a, b) = (open(&ours), open(&theirs));
    let mut inline = 0;
    for p in &paths {
        let (x, y) = (
            a.resolve_opts(p.as_bytes(), false).unwrap(),
            b.resolve_opts(p.as_bytes(), false).unwrap(),
        );
        let (fx, fy) = (x.raw.flags() & INLINE_DATA_FL, y.raw.flags() & INLINE_DATA_FL);
        assert_eq!(fx, fy, "{p}: inline flag, ours vs mke2fs");
        if fy != 0 {
            inline += 1;
            assert_eq!(masked(&x.record), masked(&y.record), "{p}: inline inode record");
        }
        assert_eq!(x.size(), y.size(), "{p}: size");
    }
    // f0..f128 (8), l60..l128 (5), d1, d1/a, d1/sub, many/file_* (8).
    assert_eq!(inline, 8 + 5 + 3 + 8, "inline inodes in mke2fs's image");
    for p in paths.iter().filter(|p| p.starts_with('f') || p.contains("file_")) {
        let ino = a.resolve(p.as_bytes()).unwrap();
        let got = a.read_all(&ino, 1 << 20).unwrap();
        assert_eq!(got, std::fs::read(src.join(p)).unwrap(), "{p}: the engine reads it");
    }
    let link = a.resolve_opts(b"l80", false).unwrap();
    assert_eq!(a.read_link(&link).unwrap(), "t".repeat(80).into_bytes());
    kernel_reads(&ours, &src, &paths);
}

/// The kernel reads every file, link and directory of our image.
fn kernel_reads(img: &Path, src: &Path, paths: &[String]) {
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("kernel read of the inline image: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must loop-mount");
        return;
    }
    let mnt = LoopMount::ro(img).expect("kernel mounts the image");
    for p in paths {
        let (ours, theirs) = (mnt.path().join(p), src.join(p));
        let meta = std::fs::symlink_metadata(&theirs).unwrap();
        if meta.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(&ours).unwrap(),
                std::fs::read_link(&theirs).unwrap(),
                "{p}"
            );
        } else if meta.is_dir() {
            let names = |d: &Path| {
                let mut v: Vec<_> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name()).collect();
                v.sort();
                v
            };
            assert_eq!(names(&ours), names(&theirs), "{p}");
        } else {
            assert_eq!(std::fs::read(&ours).unwrap(), std::fs::read(&theirs).unwrap(), "{p}");
        }
    }
    mnt.unmount().unwrap();
}
