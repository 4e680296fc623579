//! `ext4kit mkfs -O bigalloc -C SIZE` against mke2fs 1.47.0: the same
//! options, UUID, hash seed and time give the same `dumpe2fs` listing
//! (superblock and every group: cluster size, clusters per group, overhead
//! clusters, free clusters per group, bitmaps and their checksums, flags),
//! and up to 64 MiB the same bytes but for `s_kbytes_written` and the
//! superblock checksum over it. Each image passes `e2fsck -fn`, opens in
//! the engine with the root directory listing `.`, `..` and `lost+found`,
//! and, where the kernel can loop-mount, takes files through a read-write
//! mount and passes `e2fsck -fn` again. The matrix covers 1 KiB blocks
//! (where `s_first_data_block` is 0 and the superblock is block 1 of
//! cluster 0) and 4 KiB blocks, clusters of 2 to 64 KiB, a partial last
//! group, 64bit and flex_bg each on and off, uninit_bg, meta_bg.

use std::path::Path;
use std::process::Command;

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Filesystem, OpenOptions};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{self, assert_fsck_clean, require_tools, skip_unless};

const UUID: &str = "11111111-2222-3333-4444-555555555555";
const SEED: &str = "66666666-7777-8888-9999-aaaaaaaaaaaa";
const EPOCH: &str = "1700000000";

fn ext4kit_mkfs(img: &Path, size: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .args(["mkfs", "-q", "-F"])
        .args(args)
        .args(["-U", UUID, "-E", &format!("hash_seed={SEED}")])
        .arg(img)
        .arg(size)
        .output()
        .expect("run ext4kit")
}

fn mke2fs(img: &Path, bytes: u64, args: &[&str]) {
    std::fs::File::create(img).unwrap().set_len(bytes).unwrap();
    let out = Command::new(tools::require_tool("mke2fs").unwrap())
        .env("E2FSPROGS_FAKE_TIME", EPOCH)
        .args(["-q", "-F"])
        .args(args)
        .args(["-U", UUID, "-E", &format!("hash_seed={SEED}")])
        .arg(img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mke2fs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `dumpe2fs` without the lines carrying byte counts.
fn dumpe2fs(img: &Path) -> String {
    let out = tools::run_ok("dumpe2fs", &[img]).expect("dumpe2fs");
    out.stdout
        .lines()
        .filter(|l| !l.starts_with("Lifetime writes:") && !l.starts_with("Checksum:"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Same bytes but for `s_kbytes_written` and `s_checksum` of each
/// superblock copy.
fn compare_bytes(a: &Path, b: &Path, what: &str) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(x.len(), y.len(), "{what}: lengths");
    let first = (0..x.len()).find(|&i| {
        let off = i % 1024;
        x[i] != y[i] && !((0x178..0x180).contains(&off) || off >= 0x3FC)
    });
    assert_eq!(first, None, "{what}: first differing byte");
}

fn root_names(img: &Path, what: &str) -> Vec<String> {
    let dev = FileDevice::open(img, false).expect("open image");
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default())
        .unwrap_or_else(|e| panic!("{what}: the engine opens the bigalloc image: {e}"));
    let root = fs.resolve(b"/").expect("root");
    let mut names: Vec<String> = fs
        .read_dir(&root)
        .expect("read root")
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    names.sort();
    names
}

/// Files of one block, one cluster and many clusters, and a directory.
fn kernel_round_trip(img: &Path) {
    let mnt = LoopMount::rw(img, &[]).expect("kernel mounts the bigalloc image read-write");
    std::fs::write(mnt.path().join("small"), b"one block\n").expect("create a file");
    std::fs::create_dir(mnt.path().join("dir")).expect("create a directory");
    std::fs::write(mnt.path().join("dir/large"), vec![7u8; 3 << 20]).expect("write 3 MiB");
    mnt.unmount().expect("unmount");
}

fn setup() -> Option<tempfile::TempDir> {
    skip_unless(require_tools(&["e2fsck", "mke2fs", "dumpe2fs"]))?;
    Some(tempfile::tempdir().expect("tempdir"))
}

#[test]
fn matches_mke2fs() {
    let Some(dir) = setup() else { return };
    let mount = match can_loop_mount() {
        Ok(()) => true,
        Err(why) => {
            ext4kit_testkit::skipped!("kernel round trips of bigalloc images: {why}");
            assert!(std::env::var_os("CI").is_none(), "CI must loop-mount: {why}");
            false
        }
    };
    for (size, args, kernel) in [
        ("64M", &["-b", "1024", "-O", "bigalloc"][..], true),
        ("64M", &["-b", "4096", "-O", "bigalloc", "-C", "64K"][..], true),
        ("64M", &["-b", "2048", "-O", "bigalloc", "-C", "4K"][..], false),
        ("1000M", &["-b", "1024", "-O", "bigalloc,^64bit"][..], true),
        ("700M", &["-b", "1024", "-O", "bigalloc,^flex_bg"][..], false),
        ("200M", &["-b", "1024", "-C", "2K", "-O", "bigalloc"][..], false),
        ("9G", &["-b", "4096", "-O", "bigalloc,^64bit,^metadata_csum"][..], true),
        (
            "2100M",
            &["-b", "4096", "-C", "16K", "-O", "bigalloc,^flex_bg"][..],
            true,
        ),
        (
            "3G",
            &["-b", "4096", "-C", "32K", "-O", "bigalloc,^metadata_csum,uninit_bg"][..],
            false,
        ),
        (
            "300M",
            &["-b", "1024", "-O", "bigalloc,meta_bg,^resize_inode"][..],
            false,
        ),
        ("64M", &["-b", "1024", "-O", "bigalloc,orphan_file"][..], false),
    ] {
        let what = format!("{args:?} {size}");
        let (ours, theirs) = (dir.path().join("ours.img"), dir.path().join("theirs.img"));
        std::fs::remove_file(&ours).ok();
        let out = ext4kit_mkfs(&ours, size, &[&["-t", "ext4"][..], args].concat());
        assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        let bytes = ext4kit_engine::mkfs::parse_size(size).unwrap();
        mke2fs(&theirs, bytes, &[&["-t", "ext4"][..], args].concat());
        assert_eq!(dumpe2fs(&ours), dumpe2fs(&theirs), "dumpe2fs of {what}");
        if bytes <= 64 << 20 {
            compare_bytes(&ours, &theirs, &what);
        }
        std::fs::remove_file(&theirs).ok();
        assert_fsck_clean(&ours).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(root_names(&ours, &what), [".", "..", "lost+found"], "{what}");
        if kernel && mount {
            kernel_round_trip(&ours);
            assert_fsck_clean(&ours).unwrap_or_else(|e| panic!("{what} after the kernel wrote: {e}"));
        }
    }
}

/// What mkfs cannot or must not do with bigalloc is refused by name,
/// before the image is touched.
#[test]
fn refusals_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("x.img");
    let err = |args: &[&str]| {
        let out = ext4kit_mkfs(&img, "64M", args);
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(err(&["-C", "64K"]).contains("needs the bigalloc feature"));
    assert!(err(&["-O", "bigalloc", "-C", "3K"]).contains("invalid cluster size"));
    assert!(err(&["-b", "4096", "-O", "bigalloc", "-C", "2K"]).contains("smaller than the block size"));
    assert!(err(&["-O", "bigalloc,^extent,^64bit"]).contains("extent"));
}

/// `tune` cannot turn bigalloc on or off (the group layout changes) and
/// says so by name; the image is left as it was.
#[test]
fn tune_refuses_bigalloc_changes_by_name() {
    let Some(dir) = setup() else { return };
    let img = dir.path().join("b.img");
    let out = ext4kit_mkfs(&img, "64M", &["-b", "1024", "-O", "bigalloc"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = std::fs::read(&img).unwrap();
    for edit in ["^bigalloc", "bigalloc"] {
        let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
            .args(["tune", "-O", edit])
            .arg(&img)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("bigalloc"),
            "tune -O {edit}: {err}"
        );
    }
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a refused tune changed the image"
    );
    assert_fsck_clean(&img).unwrap();
}

/// `mkfs -O bigalloc -d DIR` copies a tree in, allocating in clusters:
/// e2fsck -fn is clean and the copy reads back byte for byte.
#[test]
fn populated_bigalloc_image_is_clean_and_exact() {
    let Some(dir) = setup() else { return };
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("big"), &big).unwrap();
    std::fs::write(src.join("sub/small"), b"small file").unwrap();
    for i in 0..50 {
        std::fs::write(src.join(format!("sub/f{i}")), vec![i as u8; 5000 + i]).unwrap();
    }
    for (bs, cluster) in [("1024", "16K"), ("4096", "64K")] {
        let img = dir.path().join(format!("d-{bs}.img"));
        let d = src.to_str().unwrap();
        let out = ext4kit_mkfs(&img, "64M", &["-b", bs, "-O", "bigalloc", "-C", cluster, "-d", d]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_fsck_clean(&img).unwrap_or_else(|e| panic!("-b {bs} -C {cluster}: {e}"));
        let cat = |path: &str| {
            let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
                .arg("cat")
                .arg(&img)
                .arg(path)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            out.stdout
        };
        assert_eq!(cat("/big"), big, "-b {bs}");
        assert_eq!(cat("/sub/small"), b"small file", "-b {bs}");
        assert_eq!(cat("/sub/f49"), vec![49u8; 5049], "-b {bs}");
    }
}
