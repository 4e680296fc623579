//! Backup superblocks on the command line: with the primary superblock
//! zeroed, every command names the intact backups and the flags that read
//! one; `-b`/`-B` (e2fsck's) and `mount -o ro,sb=N` (the kernel's) read the
//! image through a backup, read-only, leaving every byte as it was.

use std::hash::{DefaultHasher, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ext4kit(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(exe())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ext4kit");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = ext4kit(args, b"");
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(args: &[&str]) -> String {
    let out = ext4kit(args, b"");
    assert!(!out.status.success(), "ext4kit {args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

/// The first backup of a file system made with the default blocks per
/// group (8 × block size): group 1's first block.
fn first_backup(block_size: u32) -> u64 {
    u64::from(block_size) * 8 + u64::from(block_size == 1024)
}

/// An ext4 image with a few directories made after mkfs (so the backup
/// descriptors are older than the groups they describe), each holding a
/// file, then its primary superblock zeroed. None (skipped) without mkfs.
fn damaged_image(dir: &Path, block_size: u32) -> Option<PathBuf> {
    skip_unless(require_tool("mkfs.ext4"))?;
    let img = dir.join("img.ext4");
    let size = if block_size == 1024 { "64M" } else { "288M" };
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", &block_size.to_string()])
        .arg(&img)
        .arg(size)
        .output()
        .expect("run mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let i = img.to_str().unwrap();
    for d in 0..6 {
        ok(&["mkdir", i, &format!("/d{d}")]);
        let w = ext4kit(&["write", i, &format!("/d{d}/f")], content(d).as_bytes());
        assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    }
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(&[0u8; 1024], 1024).unwrap();
    Some(img)
}

fn content(d: usize) -> String {
    format!("file {d}\n").repeat(100 * (d + 1))
}

/// A digest of the whole image, read in pieces (the 4 KiB one is 288 MiB).
fn digest(img: &Path) -> u64 {
    let mut f = std::fs::File::open(img).unwrap();
    let mut h = DefaultHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return h.finish();
        }
        h.write(&buf[..n]);
    }
}

fn reads_through_the_backup(block_size: u32) {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = damaged_image(dir.path(), block_size) else {
        assert!(std::env::var_os("CI").is_none(), "mkfs.ext4 is needed in CI");
        return;
    };
    let before = digest(&img);
    let fsck_before = e2fsck_fn(&img).expect("run e2fsck");
    let i = img.to_str().unwrap();
    let (b, bs) = (first_backup(block_size).to_string(), block_size.to_string());

    let err = fails(&["ls", i, "/"]);
    assert!(err.contains("primary superblock is damaged"), "{err}");
    assert!(err.contains(&format!("at block {b} ({bs}-byte blocks)")), "{err}");
    assert!(err.contains(&format!("read with -b {b} -B {bs}")), "{err}");

    let listed = ok(&["ls", "-b", &b, "-B", &bs, i, "/"]);
    for d in 0..6 {
        assert!(listed.lines().any(|l| l == format!("d{d}")), "{listed}");
        let path = format!("/d{d}/f");
        assert_eq!(ok(&["cat", "-b", &b, "-B", &bs, i, &path]), content(d));
    }
    // Without -B each block size is tried, as e2fsck does.
    assert_eq!(ok(&["cat", "-b", &b, i, "/d0/f"]), content(0));

    let err = fails(&["mkdir", "-b", &b, "-B", &bs, i, "/new"]);
    assert!(
        err.contains("cannot be written") && err.contains("backup superblock"),
        "{err}"
    );

    assert_eq!(digest(&img), before, "reading through a backup changed the image");
    let fsck_after = e2fsck_fn(&img).expect("run e2fsck");
    assert_eq!(fsck_after.code, fsck_before.code, "{}", fsck_after.output);
}

#[test]
fn one_kib_blocks_read_through_a_backup() {
    reads_through_the_backup(1024);
}

#[test]
fn four_kib_blocks_read_through_a_backup() {
    reads_through_the_backup(4096);
}

#[test]
fn a_block_size_that_is_not_one_is_refused() {
    let err = fails(&["ls", "-b", "8193", "-B", "1000", "img", "/"]);
    assert!(err.contains("power of two"), "{err}");
    let err = fails(&["ls", "-B", "1024", "img", "/"]);
    assert!(err.contains("-b"), "{err}");
}

/// `-o ro,sb=N` serves the image through the backup N KiB in; without
/// `ro` the mount is refused, and the refusal of the plain mount names the
/// option.
#[test]
fn mount_serves_the_image_through_sb() {
    if skip_unless(can_fuse_mount()).is_none() {
        assert!(std::env::var_os("CI").is_none(), "FUSE mounts are needed in CI");
        return;
    }
    for block_size in [1024u32, 4096] {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = damaged_image(dir.path(), block_size) else {
            assert!(std::env::var_os("CI").is_none(), "mkfs.ext4 is needed in CI");
            return;
        };
        let before = digest(&img);
        let kib = first_backup(block_size) * u64::from(block_size) / 1024;
        let sb = format!("sb={kib}");

        let err = mount_refused(&img, "");
        assert!(err.contains(&format!("mount with -o ro,{sb}")), "{err}");
        let err = mount_refused(&img, &sb);
        assert!(err.contains("backup superblock"), "{err}");

        let m = FuseMount::start(exe(), &img, &format!("ro,{sb}")).expect("mount -o ro,sb=");
        for d in 0..6 {
            let got = std::fs::read_to_string(m.path().join(format!("d{d}/f"))).unwrap();
            assert_eq!(got, content(d), "{block_size}-byte blocks, d{d}");
        }
        assert!(m.unmount().unwrap().success());
        assert_eq!(digest(&img), before, "serving through a backup changed the image");
    }
}

fn mount_refused(img: &Path, options: &str) -> String {
    match FuseMount::start(exe(), img, options) {
        Ok(_) => panic!("mounted {} with -o {options:?}", img.display()),
        Err(e) => e.to_string(),
    }
}

/// Damaged primary descriptors (the superblock intact) are named too: a
/// backup's descriptor copy reads the image.
#[test]
fn damaged_primary_descriptors_name_the_backups() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = damaged_image(dir.path(), 1024) else {
        assert!(std::env::var_os("CI").is_none(), "mkfs.ext4 is needed in CI");
        return;
    };
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&img).unwrap();
    let mut backup = [0u8; 1024];
    f.read_exact_at(&mut backup, 8193 * 1024).unwrap();
    f.write_all_at(&backup, 1024).unwrap();
    // Group 0's descriptor block, with every pointer out of range.
    f.write_all_at(&[0xff; 1024], 2048).unwrap();
    let i = img.to_str().unwrap();
    let err = fails(&["ls", i, "/"]);
    assert!(err.contains("primary group descriptors are damaged"), "{err}");
    assert!(err.contains("read with -b 8193 -B 1024"), "{err}");
    assert!(ok(&["ls", "-b", "8193", i, "/"]).contains("d0"));
}
