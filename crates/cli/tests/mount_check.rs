//! `ext4kit mount -o check`: the image is checked (`ext4kit fsck`) before
//! it is served. A clean image mounts; one with a wrong link count is
//! refused read-write with the problem named, and served with `ro`;
//! `check=preen` repairs the link count and mounts, and refuses a block
//! claimed by two files, which preening does not repair. Needs root and
//! /dev/fuse; skips loudly otherwise (and fails under CI).

use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_testkit::fuse::FuseMount;
use ext4kit_testkit::tools::e2fsck_fn;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ready() -> bool {
    ext4kit_testkit::fuse::ready_with("debugfs")
}

/// A 64 MiB image holding `/f` ("hello\n").
fn image_with_a_file(dir: &Path) -> PathBuf {
    image_with(dir, &[("f", "hello\n")])
}

/// A 64 MiB image made by `mkfs.ext4 -d` from `files` (name, content).
fn image_with(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
    let img = dir.join("img.ext4");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for (name, content) in files {
        std::fs::write(src.join(name), content).unwrap();
    }
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-d"])
        .arg(&src)
        .arg(&img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    img
}

#[test]
fn a_clean_image_is_checked_and_served() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = image_with_a_file(tmp.path());
    for opts in ["check", "check=auto"] {
        let m = FuseMount::start(exe(), &img, opts).unwrap_or_else(|e| panic!("-o {opts}: {e}"));
        assert_eq!(std::fs::read_to_string(m.path().join("f")).unwrap(), "hello\n");
        std::fs::write(m.path().join(format!("written-{}", opts.len())), "x").unwrap();
        assert!(m.unmount().unwrap().success());
    }
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}

#[test]
fn an_image_with_errors_is_refused_read_write_and_served_read_only() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = image_with_a_file(tmp.path());
    let out = Command::new("debugfs")
        .args(["-w", "-R", "sif /f links_count 3"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!e2fsck_fn(&img).unwrap().is_clean(), "the link count should be wrong");
    let before = std::fs::read(&img).unwrap();
    let err = FuseMount::start(exe(), &img, "check").unwrap_err().to_string();
    assert!(
        err.contains("1 problem found, not mounted read-write") && err.contains("e2fsck -fy"),
        "{err}"
    );
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a refused mount changed the image"
    );
    let m = FuseMount::start(exe(), &img, "check,ro").expect("served read-only");
    assert_eq!(std::fs::read_to_string(m.path().join("f")).unwrap(), "hello\n");
    assert!(m.unmount().unwrap().success());
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a read-only mount changed the image"
    );
    let bad = FuseMount::start(exe(), &img, "check=sometimes")
        .unwrap_err()
        .to_string();
    assert!(bad.contains("expects auto, force, preen or none"), "{bad}");
}

fn debugfs_w(img: &Path, request: &str) -> String {
    let out = Command::new("debugfs")
        .args(["-w", "-R", request])
        .arg(img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{request}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn check_preen_repairs_what_preen_may_and_mounts() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = image_with_a_file(tmp.path());
    debugfs_w(&img, "sif /f links_count 3");
    let m = FuseMount::start(exe(), &img, "check=preen").expect("preened and served");
    assert_eq!(std::fs::read_to_string(m.path().join("f")).unwrap(), "hello\n");
    std::fs::write(m.path().join("g"), "after").unwrap();
    assert!(m.unmount().unwrap().success());
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}

/// Two files sharing a block (e2fsck's pass 1B) is not a preen repair:
/// the mount is refused, naming it, and the image keeps both files.
#[test]
fn check_preen_refuses_what_preen_may_not_repair() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = image_with(tmp.path(), &[("f", "hello\n"), ("g", "world\n")]);
    let f_block: u64 = debugfs_w(&img, "bmap /f 0").trim().parse().expect("a block number");
    // i_block[5] is the first extent's ee_start_lo (ext4_extent_header, then ee_block, ee_len/ee_start_hi).
    debugfs_w(&img, &format!("sif /g block[5] {f_block}"));
    assert!(!e2fsck_fn(&img).unwrap().is_clean(), "the block should be shared");
    let err = FuseMount::start(exe(), &img, "check=preen").unwrap_err().to_string();
    assert!(
        err.contains("that preening does not repair, not mounted read-write"),
        "{err}"
    );
    let m = FuseMount::start(exe(), &img, "check=preen,ro").expect("served read-only");
    assert_eq!(std::fs::read_to_string(m.path().join("f")).unwrap(), "hello\n");
    assert!(m.unmount().unwrap().success());
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.output.contains("multiply-claimed"), "{}", fsck.output);
}
