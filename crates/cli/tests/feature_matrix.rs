//! Issue 18's feature matrix: for each feature mke2fs can lay out, and the
//! pairs users combine, an image made by `mkfs.ext4` and filled through a
//! kernel loop mount (a 2,000-entry directory, large, sparse and
//! preallocated files, symbolic and hard links, xattrs in the inode and in
//! a block) is
//!
//! 1. read by `ext4kit mount -o ro` exactly as the kernel shows it (names,
//!    contents, modes, owners, nanosecond times, xattrs, link targets,
//!    sizes and `st_blocks`);
//! 2. changed by one scripted workload (create, append, overwrite,
//!    truncate, punch, rename, hard links, small and large xattrs, `rm -r`
//!    of 1,000 names) run twice: through `ext4kit mount` on one copy and
//!    through the kernel on another;
//! 3. judged: `e2fsck -fn` clean on both copies, the kernel's view of
//!    ext4kit's copy equal to the kernel's own copy (all but times), and
//!    ext4kit's view of its copy equal to the kernel's view of it.
//!
//! Needs root, loop devices and /dev/fuse; skips loudly otherwise (and
//! fails under CI).

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::compare::{CompareOptions, compare_trees, format_differences, sizes_and_blocks};
use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tools};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ready() -> bool {
    let tools = require_tools(&[
        "mkfs.ext4",
        "mkfs.ext2",
        "mkfs.ext3",
        "setfattr",
        "fallocate",
        "truncate",
    ]);
    for check in [can_fuse_mount(), can_loop_mount(), tools] {
        if let Err(why) = check {
            ext4kit_testkit::skipped!("feature_matrix: {why}");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root with loop devices, /dev/fuse and e2fsprogs: {why}"
            );
            return false;
        }
    }
    true
}

/// One row of the matrix: how mke2fs makes the image and what the
/// workload may do on it.
struct Spec {
    label: &'static str,
    mkfs: &'static str,
    args: &'static [&'static str],
    /// Extent-mapped files: `fallocate` (preallocation, punch) works.
    extents: bool,
    /// 256-byte inodes keep nanoseconds; 128-byte ones do not.
    nanoseconds: bool,
    /// A 20,000-byte xattr value (EA inode) is accepted.
    ea_inode: bool,
    /// The image size (mke2fs syntax): the fill and the workload take
    /// about 3,000 clusters at their peak.
    size: &'static str,
}

const fn ext4(label: &'static str, args: &'static [&'static str]) -> Spec {
    Spec {
        label,
        mkfs: "mkfs.ext4",
        args,
        extents: true,
        nanoseconds: true,
        ea_inode: false,
        size: "64M",
    }
}

const fn sized(mut s: Spec, size: &'static str) -> Spec {
    s.size = size;
    s
}

const fn with_ea_inode(mut s: Spec) -> Spec {
    s.ea_inode = true;
    s
}

const fn block_mapped(label: &'static str, mkfs: &'static str, args: &'static [&'static str]) -> Spec {
    Spec {
        label,
        mkfs,
        args,
        extents: false,
        nanoseconds: true,
        ea_inode: false,
        size: "64M",
    }
}

/// Block sizes, mappings and inode sizes.
const LAYOUTS: &[Spec] = &[
    ext4("ext4-4k", &["-b", "4096"]),
    ext4("ext4-1k", &["-b", "1024"]),
    block_mapped("ext2", "mkfs.ext2", &["-b", "4096"]),
    block_mapped("ext3-1k", "mkfs.ext3", &["-b", "1024"]),
    ext4("64bit-meta-bg", &["-b", "4096", "-O", "64bit,meta_bg,^resize_inode"]),
    ext4("no-metadata-csum", &["-b", "4096", "-O", "^metadata_csum"]),
    Spec {
        nanoseconds: false,
        ..ext4("inode-128", &["-b", "4096", "-I", "128"])
    },
];

/// One feature each, on or off.
const FEATURES: &[Spec] = &[
    ext4("no-filetype", &["-b", "4096", "-O", "^filetype"]),
    ext4("no-huge-file", &["-b", "4096", "-O", "^huge_file"]),
    ext4("sparse-super2", &["-b", "1024", "-O", "sparse_super2"]),
    ext4("stable-inodes", &["-b", "4096", "-O", "stable_inodes"]),
    ext4(
        "orphan-file+csum-seed",
        &["-b", "4096", "-O", "orphan_file,metadata_csum_seed"],
    ),
    ext4("largedir", &["-b", "1024", "-O", "large_dir"]),
    ext4("mmp", &["-b", "4096", "-O", "mmp"]),
    ext4("fast-commit", &["-b", "4096", "-O", "fast_commit"]),
];

/// Where data lives outside blocks, and the issue's pairs of them.
const BODIES: &[Spec] = &[
    ext4("inline-data+metadata-csum", &["-b", "4096", "-O", "inline_data"]),
    with_ea_inode(ext4("ea-inode", &["-b", "4096", "-O", "ea_inode"])),
    with_ea_inode(ext4(
        "ea-inode+inline-data",
        &["-b", "4096", "-O", "ea_inode,inline_data"],
    )),
];

/// Blocks allocated in clusters, with extents and 64-bit block numbers.
const BIGALLOC: &[Spec] = &[
    sized(
        ext4("bigalloc-1k-16k", &["-b", "1024", "-O", "bigalloc", "-C", "16384"]),
        "128M",
    ),
    sized(
        ext4(
            "bigalloc+64bit-4k-64k",
            &["-b", "4096", "-O", "bigalloc,64bit,extent", "-C", "65536"],
        ),
        "512M",
    ),
];

/// What the kernel writes first: the issue's fill.
const FILL: &str = r#"
set -e
cd "$1"
mkdir -p d/sub many
yes 'small file ' | head -c 1000 > small
yes 'big file contents ' | head -c 3000000 > big
yes 'medium ' | head -c 70000 > medium
dd if=big of=sparse bs=1k seek=300 count=3 status=none
if [ "$EXTENTS" = 1 ]; then fallocate -l 100000 prealloc; fi
ln small d/hardlink
ln -s ../small d/sym
ln -s "$(yes long | head -c 200 | tr -d '\n')" d/longsym
setfattr -n user.small -v hello small
setfattr -n user.block -v "$(yes b | head -c 700 | tr -d '\n')" medium
i=0; while [ $i -lt 2000 ]; do echo "entry $i" > many/name-with-some-length-$i; i=$((i+1)); done
yes 'sub ' | head -c 17000 > d/sub/x
chown 1000:1000 d/sub/x
chmod 0640 d/sub/x
"#;

/// The workload both sides run on the filled image.
const WORKLOAD: &str = r#"
set -e
cd "$1"
echo appended >> small
printf 'OVERWRITTEN' | dd of=big bs=1 seek=4000 conv=notrunc status=none
truncate -s 5000 medium
truncate -s 400000 big
truncate -s 100 d/sub/x
if [ "$EXTENTS" = 1 ]; then
  yes 'punch ' | head -c 300000 > punched
  fallocate -p -o 8192 -l 65536 punched
fi
mv d/sub d/moved
mv small small.renamed
ln big d/big.link
mkdir -p new/dir
yes 'created ' | head -c 12345 > new/dir/file
setfattr -n user.tiny -v t new/dir/file
setfattr -n user.large -v "$(yes L | head -c 900 | tr -d '\n')" new/dir/file
setfattr -x user.block medium
if [ "$EA_INODE" = 1 ]; then
  setfattr -n user.huge -v "$(yes H | head -c 20000 | tr -d '\n')" new/dir/file
fi
mkdir thousand
i=0; while [ $i -lt 1000 ]; do echo "x $i" > thousand/f$i; i=$((i+1)); done
rm -r thousand
rm -r many
ln -s new/dir/file sym2
"#;

fn run_script(script: &str, dir: &Path, spec: &Spec) {
    let out = Command::new("sh")
        .args(["-c", script, "script"])
        .arg(dir)
        .env("EXTENTS", if spec.extents { "1" } else { "0" })
        .env("EA_INODE", if spec.ea_inode { "1" } else { "0" })
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: script on {}: {}",
        spec.label,
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn assert_clean(img: &Path, what: &str) {
    let r = e2fsck_fn(img).unwrap();
    assert!(r.is_clean(), "{what}: e2fsck -fn:\n{}", r.output);
}

/// ext4kit's read-only view of `img` equals the kernel's, times included.
fn assert_read_exact(img: &Path, spec: &Spec, what: &str) {
    let ours = FuseMount::start(exe(), img, "ro").unwrap();
    let kernel = LoopMount::ro(img).unwrap();
    let opts = CompareOptions {
        mtime_nanoseconds: spec.nanoseconds,
        ..CompareOptions::default()
    };
    let diffs = compare_trees(kernel.path(), ours.path(), opts);
    assert!(
        diffs.is_empty(),
        "{}: {what}: {}",
        spec.label,
        format_differences(&diffs)
    );
    assert_eq!(
        sizes_and_blocks(ours.path()),
        sizes_and_blocks(kernel.path()),
        "{}: {what}: sizes",
        spec.label
    );
    kernel.unmount().unwrap();
    assert!(ours.unmount().unwrap().success());
}

fn copy_sparse(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("--sparse=always")
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success(), "cp: {}", String::from_utf8_lossy(&out.stderr));
}

fn check(spec: &Spec, dir: &Path) {
    let orig = dir.join(format!("{}.img", spec.label));
    let out = Command::new(spec.mkfs)
        .args(["-q", "-F"])
        .args(spec.args)
        .arg(&orig)
        .arg(spec.size)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        spec.label,
        String::from_utf8_lossy(&out.stderr)
    );
    let kernel = LoopMount::rw(&orig, &[]).unwrap();
    run_script(FILL, kernel.path(), spec);
    kernel.unmount().unwrap();
    assert_clean(&orig, "the kernel-filled image");
    assert_read_exact(&orig, spec, "the kernel-filled image");

    let ours = dir.join(format!("{}-ext4kit.img", spec.label));
    let theirs = dir.join(format!("{}-kernel.img", spec.label));
    copy_sparse(&orig, &ours);
    copy_sparse(&orig, &theirs);
    std::fs::remove_file(&orig).unwrap();

    let mount = FuseMount::start(exe(), &ours, "").unwrap();
    run_script(WORKLOAD, mount.path(), spec);
    assert!(mount.unmount().unwrap().success(), "{}: ext4kit mount exit", spec.label);
    let kernel = LoopMount::rw(&theirs, &[]).unwrap();
    run_script(WORKLOAD, kernel.path(), spec);
    kernel.unmount().unwrap();
    assert_clean(&ours, &format!("{}: written by ext4kit mount", spec.label));
    assert_clean(&theirs, &format!("{}: written by the kernel", spec.label));

    let a = LoopMount::ro(&ours).unwrap();
    let b = LoopMount::ro(&theirs).unwrap();
    let opts = CompareOptions {
        mtime: false,
        ..CompareOptions::default()
    };
    let diffs = compare_trees(b.path(), a.path(), opts);
    assert!(
        diffs.is_empty(),
        "{}: the kernel's view of ext4kit's result differs from the kernel's own: {}",
        spec.label,
        format_differences(&diffs)
    );
    a.unmount().unwrap();
    b.unmount().unwrap();
    assert_read_exact(&ours, spec, "the image ext4kit wrote");
    std::fs::remove_file(&ours).unwrap();
    std::fs::remove_file(&theirs).unwrap();
}

fn run_all(specs: &[Spec]) {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for spec in specs {
        eprintln!("feature_matrix: {}", spec.label);
        check(spec, tmp.path());
    }
}

#[test]
fn layouts_are_read_and_written_as_the_kernel_does() {
    run_all(LAYOUTS);
}

#[test]
fn features_are_read_and_written_as_the_kernel_does() {
    run_all(FEATURES);
}

#[test]
fn inline_and_ea_inode_bodies_are_read_and_written_as_the_kernel_does() {
    run_all(BODIES);
}

#[test]
fn bigalloc_is_read_and_written_as_the_kernel_does() {
    run_all(BIGALLOC);
}
