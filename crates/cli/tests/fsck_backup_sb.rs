//! `ext4kit fsck -b BLOCK [-B SIZE]` (e2fsck's backup superblock options) on
//! images `mkfs.ext4` builds and these tests damage: a check exits as
//! `e2fsck -fn -b` does, a repair rewrites the primary superblock and
//! descriptors so the image is e2fsck-clean and opens without `-b`, and a
//! `-b` that names no superblock, or `-B` alone, is refused.

mod fsck_common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fsck_common::{e2fsck_fn, ext4kit_fsck, have_e2fsprogs, mkfs_d, run_timed};

const LIMIT: Duration = Duration::from_secs(60);

/// An image of a few files with block size `bs`, large enough for a backup
/// in group 1.
fn image(dir: &Path, bs: &str, size: &str) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("hello"), b"hello, backup\n").unwrap();
    std::fs::write(src.join("sub/big"), vec![0x42u8; 200 * 1024]).unwrap();
    let img = dir.join("b.img");
    mkfs_d("mkfs.ext4", &["-b", bs], &src, &img, size);
    img
}

/// Overwrites `len` bytes at `off` with `byte`.
fn smash(img: &Path, off: u64, len: usize, byte: u8) {
    let f = OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(&vec![byte; len], off).unwrap();
}

/// `e2fsck -fn -b BLOCK -B SIZE` on a copy of `img` (e2fsck -n leaves it
/// alone, but a copy keeps the two runs independent).
fn e2fsck_fn_b(img: &Path, block: &str, bs: &str) -> Option<i32> {
    let copy = img.with_extension("e2.img");
    std::fs::copy(img, &copy).unwrap();
    let args = ["-fn", "-b", block, "-B", bs, copy.to_str().unwrap()];
    let r = run_timed("e2fsck", &args, LIMIT);
    std::fs::remove_file(&copy).unwrap();
    r.code
}

fn ext4kit_cat(img: &Path, path: &str) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["cat", img.to_str().unwrap(), path])
        .output()
        .expect("ext4kit cat");
    assert!(
        out.status.success(),
        "cat {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The whole round: the damage is real, `-fn -b` agrees with e2fsck's exit
/// status, `-fy -b` repairs to e2fsck-clean, and the files read back
/// without `-b`.
fn check_and_repair(img: &Path, block: &str, bs: &str) {
    assert_ne!(e2fsck_fn(img, LIMIT).code, Some(0), "the damage is real");
    let want = e2fsck_fn_b(img, block, bs);
    let n = ext4kit_fsck(&["-fn", "-b", block, "-B", bs], img, LIMIT);
    assert_eq!(n.code, want, "-fn -b exits as e2fsck's: {}{}", n.stdout, n.stderr);
    let y = ext4kit_fsck(&["-fy", "-b", block, "-B", bs], img, LIMIT);
    assert_eq!(y.code, Some(1), "repaired: {}{}", y.stdout, y.stderr);
    let after = e2fsck_fn(img, LIMIT);
    assert_eq!(after.code, Some(0), "e2fsck-clean after: {}", after.stdout);
    assert_eq!(ext4kit_cat(img, "/hello"), b"hello, backup\n");
    assert_eq!(ext4kit_cat(img, "/sub/big"), vec![0x42u8; 200 * 1024]);
}

#[test]
fn zeroed_primary_superblock_is_rewritten_from_the_backup() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "4096", "200M");
    smash(&img, 1024, 1024, 0);
    check_and_repair(&img, "32768", "4096");
}

#[test]
fn corrupt_primary_descriptors_are_rewritten_from_the_backup() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "4096", "200M");
    smash(&img, 4096, 4096, 0xa5);
    check_and_repair(&img, "32768", "4096");
}

#[test]
fn one_kib_blocks_use_the_backup_at_8193() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "1024", "20M");
    smash(&img, 1024, 1024, 0);
    check_and_repair(&img, "8193", "1024");
}

#[test]
fn without_dash_capital_b_each_block_size_is_tried() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "4096", "200M");
    smash(&img, 1024, 1024, 0);
    let y = ext4kit_fsck(&["-fy", "-b", "32768"], &img, LIMIT);
    assert_eq!(y.code, Some(1), "repaired: {}{}", y.stdout, y.stderr);
    assert_eq!(e2fsck_fn(&img, LIMIT).code, Some(0));
}

#[test]
fn a_block_that_is_no_superblock_is_a_clear_error() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "4096", "200M");
    let before = std::fs::read(&img).unwrap();
    for mode in ["-fn", "-fy"] {
        let r = ext4kit_fsck(&[mode, "-b", "100", "-B", "4096"], &img, LIMIT);
        assert_eq!(r.code, Some(8), "{mode}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("no usable superblock at block 100"), "{}", r.stderr);
    }
    // Block numbers whose byte offset reaches the end of a u64.
    for args in [
        ["-fn", "-b", "18014398509481983", "-B", "1024"],
        ["-fn", "-b", &u64::MAX.to_string(), "-B", "65536"],
    ] {
        let r = ext4kit_fsck(&args, &img, LIMIT);
        assert_eq!(r.code, Some(8), "{args:?}: {}{}", r.stdout, r.stderr);
    }
    assert!(std::fs::read(&img).unwrap() == before, "nothing written");
    assert_eq!(e2fsck_fn(&img, LIMIT).code, Some(0));
}

#[test]
fn dash_capital_b_alone_or_a_bad_size_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("none.img");
    std::fs::write(&img, b"").unwrap();
    for args in [&["-fn", "-B", "4096"][..], &["-fn", "-b", "32768", "-B", "1000"][..]] {
        let r = ext4kit_fsck(args, &img, LIMIT);
        assert_eq!(r.code, Some(16), "{args:?}: {}", r.stderr);
    }
}
