//! A bigalloc image the kernel filled, served by `ext4kit mount`: read-only,
//! every path, its data, xattrs, `st_blocks` (whole clusters) and `statfs`
//! equal what the kernel's read-only loop mount shows, and `ext4kit export`
//! copies the same tree out; read-write, a second workload (append,
//! overwrite, truncate and punch inside a cluster, fallocate, a block
//! sharing a cluster with the file's other blocks, rm -r, an htree
//! directory, an xattr block) leaves the tree a host directory gets from
//! the same commands, as the kernel reads it, and e2fsck -fn clean.
//! Needs root, a loop device and /dev/fuse; skips loudly otherwise (and
//! fails under CI).

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::compare::{CompareOptions, compare_trees, format_differences, sizes_and_blocks};
use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, extent_count, require_tools};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ready() -> bool {
    let tools = require_tools(&["mkfs.ext4", "setfattr", "fallocate", "stat", "truncate", "base64"]);
    for check in [can_fuse_mount(), can_loop_mount(), tools] {
        if let Err(why) = check {
            eprintln!("SKIPPED: {why}");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root with loop devices, /dev/fuse and e2fsprogs: {why}"
            );
            return false;
        }
    }
    true
}

/// Files ending mid-cluster, sparse and punched files, preallocation,
/// hard and symbolic links, xattrs, a directory of 200 names.
const WORKLOAD: &str = r#"
set -e
cd "$1"
mkdir -p d/sub many
head -c 1000 /dev/urandom > small
head -c 3000000 /dev/urandom > big
dd if=/dev/urandom of=sparse bs=1k seek=100 count=3 status=none
head -c 300000 /dev/urandom > punched
fallocate -p -o 5000 -l 100000 punched
fallocate -l 100000 prealloc
ln small d/hardlink
ln -s ../small d/sym
setfattr -n user.a -v hello small
for i in $(seq 200); do echo "file $i" > many/f$i; done
head -c 17000 /dev/urandom > d/sub/x
"#;

/// Run on the read-write mount and on a host copy of the tree: every
/// command deterministic given the tree.
const RW_WORKLOAD: &str = r#"
set -e
cd "$1"
cat small >> big
dd if=small of=big bs=1 seek=20000 conv=notrunc status=none
truncate -s 40000 big
fallocate -p -o 3000 -l 20000 punched
fallocate -o 200000 -l 50000 prealloc
dd if=small of=sparse bs=1k seek=97 count=1 conv=notrunc status=none
rm -r d
mkdir e
for i in $(seq 300); do echo "new name number $i" > e/name-of-some-length-$i; done
rm many/f1*
setfattr -n user.big -v "$(base64 -w0 punched | head -c 600)" small
cp big e/copy
"#;

/// `stat -f`: total, free and available blocks, files and free files.
fn statfs(p: &Path) -> String {
    let out = Command::new("stat")
        .args(["-f", "-c", "%b %f %a %c %d"])
        .arg(p)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn kernel_filled_bigalloc_image_is_served_read_only_then_written_as_the_kernel_sees_it() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024", "-O", "bigalloc", "-C", "16384"])
        .arg(&img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let kernel = LoopMount::rw(&img, &[]).unwrap();
    let run = Command::new("sh")
        .args(["-c", WORKLOAD, "fill"])
        .arg(kernel.path())
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    kernel.unmount().unwrap();

    let ours = FuseMount::start(exe(), &img, "ro").unwrap();
    let kernel = LoopMount::ro(&img).unwrap();
    let diffs = compare_trees(kernel.path(), ours.path(), CompareOptions::default());
    assert!(diffs.is_empty(), "{}", format_differences(&diffs));
    assert_eq!(sizes_and_blocks(ours.path()), sizes_and_blocks(kernel.path()));
    assert_eq!(statfs(ours.path()), statfs(kernel.path()));
    let dest = tmp.path().join("export");
    let st = Command::new(exe())
        .args(["export", "-q"])
        .arg(&img)
        .arg("/")
        .arg(&dest)
        .status()
        .unwrap();
    assert!(st.success());
    let diffs = compare_trees(kernel.path(), &dest, CompareOptions::default());
    assert!(diffs.is_empty(), "export: {}", format_differences(&diffs));
    assert!(ours.unmount().unwrap().success());
    let host = tmp.path().join("host");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(kernel.path())
        .arg(&host)
        .status()
        .unwrap();
    assert!(cp.success());
    kernel.unmount().unwrap();
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
    read_write_workload(&img, &host);
}

/// [`RW_WORKLOAD`] through a read-write mount of `img` and on `host` (a
/// copy of its tree); then the kernel's view of `img` is `host`'s.
fn read_write_workload(img: &Path, host: &Path) {
    let ours = FuseMount::start(exe(), img, "").unwrap();
    for root in [ours.path(), host] {
        let run = Command::new("sh")
            .args(["-c", RW_WORKLOAD, "rw"])
            .arg(root)
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{root:?}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    assert!(ours.unmount().unwrap().success());
    let fsck = e2fsck_fn(img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
    let kernel = LoopMount::ro(img).unwrap();
    let opts = CompareOptions {
        mtime: false,
        root_metadata: false,
        ignore_lost_found: true,
        ..CompareOptions::default()
    };
    let diffs = compare_trees(host, kernel.path(), opts);
    assert!(diffs.is_empty(), "{}", format_differences(&diffs));
    let ours = FuseMount::start(exe(), img, "ro").unwrap();
    assert_eq!(sizes_and_blocks(ours.path()), sizes_and_blocks(kernel.path()));
    assert_eq!(statfs(ours.path()), statfs(kernel.path()));
    assert!(ours.unmount().unwrap().success());
    kernel.unmount().unwrap();
}

/// Two files held open and written alternately in 128 KiB pieces.
const INTERLEAVED: &str = r#"
set -e
cd "$1"
exec 3>a 4>b
i=0
while [ $i -lt 256 ]; do
  head -c 131072 /dev/zero >&3
  head -c 131072 /dev/zero >&4
  i=$((i + 1))
done
exec 3>&- 4>&-
"#;

/// Issue 18, item 1: two 32 MiB files written alternately through the
/// mount on a 1 KiB/16 KiB bigalloc image end in about the kernel's
/// extents (its loop mount: 1 + 1, with `nodelalloc` 3 + 2); without
/// windows in clusters each piece was an extent of its own (256 + 256).
/// The bound is the kernel's `nodelalloc` count plus one
/// (`docs/allocators.md`, "Bigalloc layout").
#[test]
fn files_written_alternately_through_the_mount_stay_in_few_extents() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024", "-O", "bigalloc", "-C", "16384"])
        .arg(&img)
        .arg("256M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ours = FuseMount::start(exe(), &img, "").unwrap();
    let run = Command::new("sh")
        .args(["-c", INTERLEAVED, "inter"])
        .arg(ours.path())
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(ours.unmount().unwrap().success());
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
    let (a, b) = (extent_count(&img, "/a").unwrap(), extent_count(&img, "/b").unwrap());
    assert!(
        a <= 3 + 1 && b <= 2 + 1,
        "{a} and {b} extents; the kernel 1 + 1 (nodelalloc 3 + 2)"
    );
}
