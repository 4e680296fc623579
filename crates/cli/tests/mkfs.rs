//! `ext4kit mkfs` against the oracles. Every image of the matrix (sizes from
//! 1 MiB to 16 TiB, block sizes 1–64 KiB, ext2/3/4, 64bit on and off, flex
//! groups of 1–256, inode sizes 128–512, meta_bg, uninit_bg, metadata_csum_seed,
//! orphan_file, block-mapped journals) must pass `e2fsck -fn`, open in the engine with the
//! root directory listing `.`, `..`, `lost+found`, and, where the kernel can
//! mount it (not 64 KiB blocks), take a file and a directory through a
//! read-write loop mount and pass `e2fsck -fn` again. A subset is compared
//! with `mke2fs` on the same options, UUID, hash seed and time: byte for byte
//! (but for `s_kbytes_written` and the superblock checksum covering it) up to
//! 64 MiB, and as whole `dumpe2fs` listings above.

use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Filesystem, OpenOptions};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{self, assert_fsck_clean, require_tools, skip_unless};

const UUID: &str = "11111111-2222-3333-4444-555555555555";
const SEED: &str = "66666666-7777-8888-9999-aaaaaaaaaaaa";
const EPOCH: &str = "1700000000";

/// Runs `ext4kit mkfs` with a fixed UUID, hash seed and time.
fn ext4kit_mkfs(img: &Path, size: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .arg("mkfs")
        .arg("-q")
        .args(args)
        .args(["-U", UUID, "-E", &format!("hash_seed={SEED}")])
        .arg(img)
        .arg(size)
        .output()
        .expect("run ext4kit")
}

fn make(img: &Path, size: &str, args: &[&str]) {
    let out = ext4kit_mkfs(img, size, args);
    assert!(
        out.status.success(),
        "mkfs {args:?} {size}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The root directory as the engine reads it.
fn root_names(img: &Path) -> Vec<String> {
    let dev = FileDevice::open(img, false).expect("open image");
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).expect("engine opens the new image");
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

/// Loop-mounts read-write, writes a file and a directory, unmounts.
fn kernel_round_trip(img: &Path) {
    let mnt = LoopMount::rw(img, &[]).expect("kernel mounts the new image read-write");
    std::fs::write(mnt.path().join("hello.txt"), b"hello from the kernel\n").expect("create a file");
    std::fs::create_dir(mnt.path().join("dir")).expect("create a directory");
    std::fs::write(mnt.path().join("dir/inner"), vec![7u8; 100_000]).expect("create a file in the directory");
    mnt.unmount().expect("unmount");
}

/// One matrix entry: mkfs, fsck, engine open, kernel round trip, fsck.
fn check(dir: &Path, size: &str, args: &[&str], mountable: bool) {
    let name: String = format!("{size}{}", args.join(""))
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let img = dir.join(format!("{name}.img"));
    make(&img, size, args);
    assert_fsck_clean(&img).unwrap_or_else(|e| panic!("{args:?} {size}: {e}"));
    assert_eq!(root_names(&img), [".", "..", "lost+found"], "{args:?} {size}");
    if mountable && can_loop_mount().is_ok() {
        kernel_round_trip(&img);
        assert_fsck_clean(&img).unwrap_or_else(|e| panic!("{args:?} {size} after the kernel wrote: {e}"));
    }
    std::fs::remove_file(&img).ok();
}

fn setup() -> Option<tempfile::TempDir> {
    skip_unless(require_tools(&["e2fsck", "mke2fs", "dumpe2fs"]))?;
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("kernel round trips only: {why}");
    }
    Some(tempfile::tempdir().expect("tempdir"))
}

#[test]
fn sizes_and_types() {
    let Some(dir) = setup() else { return };
    for (size, args) in [
        ("1M", &[][..]),
        ("8M", &["-t", "ext2"][..]),
        ("64M", &["-t", "ext3"][..]),
        ("64M", &[][..]),
        ("1G", &[][..]),
        ("64G", &[][..]),
        ("256M", &["-t", "ext4", "-O", "^extent,^64bit"][..]),
    ] {
        check(dir.path(), size, args, true);
    }
}

#[test]
fn block_and_inode_sizes() {
    let Some(dir) = setup() else { return };
    for (size, args, mountable) in [
        ("64M", &["-b", "1024"][..], true),
        ("64M", &["-b", "2048"][..], true),
        ("64M", &["-b", "4096"][..], true),
        ("1G", &["-b", "65536"][..], false),
        ("64M", &["-I", "128"][..], true),
        ("64M", &["-I", "512"][..], true),
        ("64M", &["-N", "100000", "-m", "1"][..], true),
    ] {
        check(dir.path(), size, args, mountable);
    }
}

#[test]
fn features_and_flex_groups() {
    let Some(dir) = setup() else { return };
    for (size, args) in [
        ("64M", &["-O", "^64bit"][..]),
        ("1G", &["-G", "1"][..]),
        ("1G", &["-G", "4"][..]),
        ("1G", &["-G", "256"][..]),
        ("64M", &["-O", "meta_bg,^resize_inode"][..]),
        ("64M", &["-O", "^metadata_csum,uninit_bg"][..]),
        ("64M", &["-O", "metadata_csum_seed"][..]),
        ("64M", &["-O", "orphan_file"][..]),
        ("256M", &["-t", "ext3", "-O", "orphan_file"][..]),
        ("64M", &["-t", "ext2", "-E", "stride=16,stripe_width=64"][..]),
        ("4G", &["-E", "flex_meta=middle"][..]),
        ("64M", &["-b", "1024", "-G", "4", "-E", "flex_meta=middle"][..]),
        ("8G", &["-G", "auto", "-E", "media=ssd,flex_meta=middle"][..]),
    ] {
        check(dir.path(), size, args, true);
    }
}

/// `-G auto` says what it chose and why; a bad `-G` is refused by name.
#[test]
fn flex_auto_names_its_choice() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("auto.img");
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["mkfs", "-G", "auto", "-E", "media=hdd,stride=16,stripe_width=64"])
        .arg(&img)
        .arg("64G")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("-G auto: 64 groups per flex group") && text.contains("4 data disks"),
        "{text}"
    );
    let out = ext4kit_mkfs(&dir.path().join("bad.img"), "64M", &["-G", "many"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("a number or auto"));
}

/// 16 TiB needs a file system that allows 16 TiB files; tmpfs does.
#[test]
fn sixteen_tib_sparse() {
    let Some(_dir) = setup() else { return };
    let shm = PathBuf::from("/dev/shm");
    let Some(dir) =
        skip_unless(tempfile::tempdir_in(&shm).map_err(|e| format!("no /dev/shm for a 16 TiB sparse image: {e}")))
    else {
        return;
    };
    check(dir.path(), "16T", &[], true);
    // Same layout as mke2fs, journal extent leaf included.
    let (ours, theirs) = (dir.path().join("ours.img"), dir.path().join("theirs.img"));
    make(&ours, "16T", &[]);
    run_mke2fs(&theirs, 16 << 40, &["-t", "ext4"]);
    assert_eq!(dumpe2fs(&ours), dumpe2fs(&theirs), "dumpe2fs of 16 TiB");
}

/// mke2fs on a fresh sparse file with the fixed UUID, hash seed and time.
fn run_mke2fs(img: &Path, bytes: u64, args: &[&str]) {
    run_mke2fs_e(img, bytes, args, &format!("hash_seed={SEED}"));
}

/// [`run_mke2fs`] with `-E extended` (which must carry the hash seed:
/// mke2fs keeps only the last `-E`), run in the image's directory so the
/// name it records (the MMP block's device name) is the relative one.
fn run_mke2fs_e(img: &Path, bytes: u64, args: &[&str], extended: &str) {
    std::fs::File::create(img).unwrap().set_len(bytes).unwrap();
    let (dir, name) = (img.parent().unwrap(), img.file_name().unwrap());
    let out = Command::new(tools::require_tool("mke2fs").unwrap())
        .current_dir(dir)
        .env("E2FSPROGS_FAKE_TIME", EPOCH)
        .args(["-q", "-F"])
        .args(args)
        .args(["-U", UUID, "-E", extended])
        .arg(name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mke2fs {args:?} -E {extended}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Same options, UUID, hash seed and time as mke2fs: identical images but
/// for `s_kbytes_written` and `s_checksum` in each superblock copy (the
/// byte counts of the two tools differ).
#[test]
fn matches_mke2fs() {
    let Some(dir) = setup() else { return };
    for (size, args) in [
        ("8M", &["-t", "ext2"][..]),
        ("64M", &["-t", "ext3"][..]),
        ("64M", &["-t", "ext4"][..]),
        ("64M", &["-t", "ext4", "-O", "meta_bg,^resize_inode"][..]),
        ("64M", &["-t", "ext4", "-O", "^metadata_csum,uninit_bg", "-G", "4"][..]),
        (
            "64M",
            &["-t", "ext4", "-b", "2048", "-I", "128", "-O", "metadata_csum_seed"][..],
        ),
        ("64M", &["-t", "ext4", "-N", "100000"][..]),
        ("64M", &["-t", "ext4", "-O", "orphan_file,metadata_csum_seed"][..]),
        ("64M", &["-t", "ext3", "-O", "orphan_file"][..]),
        ("64M", &["-t", "ext4", "-O", "sparse_super2,stable_inodes"][..]),
        ("64M", &["-t", "ext4", "-O", "inline_data"][..]),
        ("64M", &["-t", "ext4", "-O", "casefold"][..]),
        ("64M", &["-t", "ext4", "-O", "verity"][..]),
        ("64M", &["-t", "ext4", "-O", "encrypt"][..]),
        ("8M", &["-t", "ext4", "-O", "encrypt,stable_inodes,^metadata_csum"][..]),
        (
            "64M",
            &["-t", "ext4", "-b", "4096", "-O", "inline_data,^metadata_csum"][..],
        ),
        ("64M", &["-t", "ext4", "-O", "ea_inode,large_dir,^huge_file"][..]),
        ("64M", &["-t", "ext4", "-b", "4096", "-O", "ea_inode,inline_data"][..]),
        ("64M", &["-t", "ext4", "-O", "^filetype,^dir_index,^flex_bg"][..]),
        ("64M", &["-t", "ext4", "-I", "128", "-O", "^has_journal,^dir_nlink"][..]),
        ("64M", &["-t", "ext4", "-b", "4096", "-O", "sparse_super2"][..]),
        ("1G", &["-t", "ext4", "-O", "sparse_super2"][..]),
        ("1G", &["-t", "ext4"][..]),
        ("1G", &["-t", "ext4", "-b", "65536"][..]),
        ("64G", &["-t", "ext4"][..]),
        // -J size= (MiB) and fast_commit_size= (KiB); any -J turns
        // has_journal on, even with -t ext2.
        ("64M", &["-t", "ext4", "-J", "size=8"][..]),
        ("64M", &["-t", "ext2", "-J", "size=4"][..]),
        ("64M", &["-t", "ext3", "-b", "4096", "-J", "size=16"][..]),
        ("64M", &["-t", "ext4", "-O", "fast_commit"][..]),
        (
            "64M",
            &["-t", "ext4", "-O", "fast_commit", "-J", "size=8,fast_commit_size=512"][..],
        ),
        ("1G", &["-t", "ext4", "-J", "size=256"][..]),
    ] {
        let ours = dir.path().join("ours.img");
        let theirs = dir.path().join("theirs.img");
        std::fs::remove_file(&ours).ok();
        make(&ours, size, args);
        let bytes = ext4kit_engine::mkfs::parse_size(size).unwrap();
        run_mke2fs(&theirs, bytes, args);
        assert_eq!(dumpe2fs(&ours), dumpe2fs(&theirs), "dumpe2fs of {args:?} {size}");
        if bytes <= 64 << 20 {
            compare_bytes(&ours, &theirs, &format!("{args:?} {size}"));
        }
    }
}

/// `-E encoding=utf8` turns casefold on and `encoding_flags=strict` sets
/// `s_encoding_flags`, byte for byte as mke2fs; flags without an encoding
/// are refused as mke2fs refuses them.
#[test]
fn casefold_encoding_options_match_mke2fs() {
    let Some(dir) = setup() else { return };
    let (ours, theirs) = (dir.path().join("ours.img"), dir.path().join("theirs.img"));
    for (args, extended) in [
        (&["-t", "ext4"][..], "encoding=utf8,encoding_flags=strict"),
        (&["-t", "ext4", "-O", "casefold"][..], "encoding_flags=strict"),
        (&["-t", "ext4"][..], "encoding=utf8-12.1"),
    ] {
        std::fs::remove_file(&ours).ok();
        let with_e: Vec<&str> = args.iter().copied().chain(["-E", extended]).collect();
        make(&ours, "64M", &with_e);
        run_mke2fs_e(&theirs, 64 << 20, args, &format!("hash_seed={SEED},{extended}"));
        let d = dumpe2fs(&ours);
        assert!(d.contains("utf8-12.1"), "{d}");
        assert_eq!(d, dumpe2fs(&theirs), "dumpe2fs of {args:?} -E {extended}");
        compare_bytes(&ours, &theirs, &format!("{args:?} -E {extended}"));
    }
    let out = ext4kit_mkfs(&ours, "64M", &["-E", "encoding_flags=strict"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("encoding must be explicitly specified"));
}

/// Journal sizes mke2fs refuses are refused here too, with its reason;
/// a fast-commit journal of a requested size mounts in the kernel.
#[test]
fn journal_sizes_out_of_range_are_refused_as_mke2fs() {
    let Some(dir) = setup() else { return };
    let (ours, theirs) = (dir.path().join("ours.img"), dir.path().join("theirs.img"));
    for (args, reason) in [
        // 1 MiB of 4 KiB blocks is 256 blocks, below JBD2_MIN_JOURNAL_BLOCKS.
        (
            &["-b", "4096", "-J", "size=1"][..],
            "must be between 1024 and 10240000 blocks",
        ),
        // 40 MiB is 10240 blocks, more than half of what 64 MiB leaves free.
        (&["-b", "4096", "-J", "size=40"][..], "too big"),
        (&["-J", "size=lots"][..], "bad journal option"),
        (&["-J", "location=0"][..], "bad journal option"),
    ] {
        std::fs::remove_file(&ours).ok();
        let out = ext4kit_mkfs(&ours, "64M", args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(reason), "{args:?}: {err}");
        assert!(!ours.exists(), "{args:?}: the refused image is removed");
        std::fs::File::create(&theirs).unwrap().set_len(64 << 20).unwrap();
        let mke2fs = Command::new("mke2fs")
            .args(["-q", "-F"])
            .args(args)
            .arg(&theirs)
            .output()
            .unwrap();
        if args[1] != "location=0" {
            assert!(!mke2fs.status.success(), "mke2fs {args:?} succeeded");
        }
    }
    check(
        dir.path(),
        "256M",
        &["-O", "fast_commit", "-J", "size=16,fast_commit_size=1024"],
        true,
    );
}

/// `dumpe2fs` output without the lines that carry byte counts.
fn dumpe2fs(img: &Path) -> String {
    let out = tools::run_ok("dumpe2fs", &[img]).expect("dumpe2fs");
    out.stdout
        .lines()
        .filter(|l| !l.starts_with("Lifetime writes:") && !l.starts_with("Checksum:"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn compare_bytes(a: &Path, b: &Path, what: &str) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(x.len(), y.len(), "{what}: lengths");
    let diffs: Vec<usize> = (0..x.len())
        .filter(|&i| x[i] != y[i])
        .filter(|&i| {
            // s_kbytes_written (0x178) and s_checksum (0x3FC) of a superblock copy.
            let off = i % 1024;
            !((0x178..0x180).contains(&off) || off >= 0x3FC)
        })
        .collect();
    assert!(
        diffs.is_empty(),
        "{what}: {} bytes differ, first at {:#x}",
        diffs.len(),
        diffs[0]
    );
}

#[test]
fn identical_inputs_give_identical_images() {
    let Some(dir) = setup() else { return };
    let sha = |p: &Path| tools::run_ok("sha256sum", &[p]).expect("sha256sum").stdout[..64].to_string();
    let (a, b) = (dir.path().join("a.img"), dir.path().join("b.img"));
    make(&a, "64M", &["-L", "repro"]);
    make(&b, "64M", &["-L", "repro"]);
    assert_eq!(sha(&a), sha(&b));
    // Without -U the UUID is random.
    let c = dir.path().join("c.img");
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["mkfs", "-q"])
        .arg(&c)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_ne!(sha(&a), sha(&c));
}

#[test]
fn refusals_are_clear() {
    let Some(dir) = setup() else { return };
    let img = dir.path().join("x.img");
    make(&img, "8M", &[]);
    let err = |args: &[&str], size: &str| String::from_utf8_lossy(&ext4kit_mkfs(&img, size, args).stderr).into_owned();
    assert!(err(&[], "8M").contains("contains a ext4 file system"), "no -F");
    make(&img, "8M", &["-F", "-t", "ext2"]);
    assert!(err(&["-F", "-d", "/nonexistent-source"], "8M").contains("nonexistent-source"));
    let e = err(&["-F", "-O", "dir_prealloc,imagic_inodes"], "8M");
    assert!(
        e.contains("cannot create") && e.contains("dir_prealloc") && e.contains("imagic_inodes"),
        "{e}"
    );
    assert!(err(&["-F"], "16K").contains("too small"));
    assert!(err(&["-F", "-O", "meta_bg"], "8M").contains("resize_inode"));
    assert!(err(&["-F", "-t", "ext2", "-O", "orphan_file"], "8M").contains("journal"));
}

/// `mkfs -d`: the fixture tree through mkfs + import equals the source in
/// the kernel's view (root directory metadata included), e2fsck-clean.
#[test]
fn populate_from_a_directory() {
    use ext4kit_testkit::compare::{CompareOptions, compare_trees, format_differences};
    use ext4kit_testkit::fixture::{TreeOptions, build_tree};
    let Some(dir) = setup() else { return };
    let src = dir.path().join("src");
    build_tree(
        &src,
        &TreeOptions {
            hole_only_len: 64 << 20,
            ..TreeOptions::small()
        },
    )
    .unwrap();
    let img = dir.path().join("d.img");
    let out = ext4kit_mkfs(&img, "256M", &["-d", src.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_fsck_clean(&img).unwrap();
    if skip_unless(can_loop_mount()).is_none() {
        return;
    }
    let mnt = LoopMount::ro(&img).unwrap();
    let diffs = compare_trees(&src, mnt.path(), CompareOptions::default());
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        format_differences(&diffs)
    );
    mnt.unmount().unwrap();
}

/// `mkfs -O ea_inode -d` from the root of a mounted ext4 (the usual way to
/// build an image from another one): the source's `lost+found` is merged
/// into the new one as mke2fs does (it used to fail on the name), and
/// 20,000-byte xattr values go to EA inodes. The kernel reads the copy as
/// the source, e2fsck-clean.
#[test]
fn populate_from_a_mounted_ext4_with_large_xattrs() {
    use ext4kit_testkit::compare::{CompareOptions, compare_trees, format_differences};
    let Some(dir) = setup() else { return };
    if skip_unless(can_loop_mount()).is_none() {
        return;
    }
    let src_img = dir.path().join("src.img");
    run_mke2fs(&src_img, 64 << 20, &["-t", "ext4", "-O", "ea_inode"]);
    let src = LoopMount::rw(&src_img, &[]).unwrap();
    let root = src.path();
    std::fs::write(root.join("lost+found/kept"), b"found").unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    for (name, big) in [("a", b'x'), ("d/b", b'y'), ("d/c", b'x')] {
        let f = root.join(name);
        std::fs::write(&f, name.as_bytes()).unwrap();
        xattr::set(&f, "user.big", &vec![big; 20_000]).unwrap();
        xattr::set(&f, "user.small", b"s").unwrap();
    }
    let img = dir.path().join("d.img");
    let out = ext4kit_mkfs(&img, "64M", &["-O", "ea_inode", "-d", root.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_fsck_clean(&img).unwrap();
    let copy = LoopMount::ro(&img).unwrap();
    let diffs = compare_trees(root, copy.path(), CompareOptions::default());
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        format_differences(&diffs)
    );
    assert_eq!(std::fs::read(copy.path().join("lost+found/kept")).unwrap(), b"found");
    copy.unmount().unwrap();
    src.unmount().unwrap();
}

/// `-O mmp` lays out the MMP block where mke2fs puts it (the first free
/// block after the journal, before the orphan file) with the same record:
/// clean, this host's name, the device name as given, the check interval.
/// Both tools get the same relative image name (each in its own directory)
/// so `mmp_bdevname` matches; `mmp_time` (mke2fs stamps the wall clock,
/// ext4kit the build time) and the checksum covering it are the only
/// bytes of the block that differ. e2fsck verifies the record's checksum.
#[test]
fn mmp_matches_mke2fs() {
    let Some(dir) = setup() else { return };
    let (a, b) = (dir.path().join("mke2fs"), dir.path().join("ext4kit"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    // mke2fs keeps only the last -E, so the interval shares it with the seed.
    for (size, args, interval) in [
        ("64M", &["-t", "ext4", "-O", "mmp"][..], None),
        ("64M", &["-t", "ext4", "-O", "mmp"][..], Some(1)),
        ("8M", &["-t", "ext2", "-O", "mmp"][..], Some(30)),
        ("64M", &["-t", "ext4", "-O", "mmp,orphan_file,^metadata_csum"][..], None),
        ("64M", &["-t", "ext4"][..], Some(7)),
    ] {
        let what = format!("{args:?} {size} interval {interval:?}");
        let (theirs, ours) = (a.join("x.img"), b.join("x.img"));
        std::fs::remove_file(&ours).ok();
        let bytes = ext4kit_engine::mkfs::parse_size(size).unwrap();
        let e = match interval {
            Some(i) => format!("mmp_update_interval={i},hash_seed={SEED}"),
            None => format!("hash_seed={SEED}"),
        };
        run_mke2fs_e(&theirs, bytes, args, &e);
        let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
            .current_dir(&b)
            .env("SOURCE_DATE_EPOCH", EPOCH)
            .args(["mkfs", "-q"])
            .args(args)
            .args(["-U", UUID, "-E", &e, "x.img", size])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ext4kit mkfs {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_fsck_clean(&ours).unwrap_or_else(|e| panic!("{what}: {e}"));
        let skip_time = |l: &&str| !l.contains("mmp_update_date:") && !l.contains("mmp_update_time:");
        let (d_ours, d_theirs) = (dumpe2fs(&ours), dumpe2fs(&theirs));
        assert_eq!(
            d_ours.lines().filter(skip_time).collect::<Vec<_>>(),
            d_theirs.lines().filter(skip_time).collect::<Vec<_>>(),
            "dumpe2fs of {what}"
        );
        let sb = ext4kit_format::superblock::RawSuperblock::parse(&std::fs::read(&ours).unwrap()[1024..2048]).unwrap();
        let mmp_block = sb.s_mmp_block.get();
        let has_mmp = args.iter().any(|a| a.contains("mmp,") || *a == "mmp");
        assert_eq!(mmp_block != 0, has_mmp, "{what}: s_mmp_block {mmp_block}");
        let want = interval.unwrap_or(if has_mmp { 5 } else { 0 });
        assert_eq!(sb.s_mmp_update_interval.get(), want, "{what}");
        let bs = 1024u64 << sb.s_log_block_size.get();
        compare_bytes_except(&ours, &theirs, mmp_block * bs, &what);
    }
}

/// As [`compare_bytes`], also letting `mmp_time` and `mmp_checksum` of the
/// MMP record at byte `mmp_at` (0: none) differ.
fn compare_bytes_except(a: &Path, b: &Path, mmp_at: u64, what: &str) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(x.len(), y.len(), "{what}: lengths");
    let diffs: Vec<usize> = (0..x.len())
        .filter(|&i| x[i] != y[i])
        .filter(|&i| {
            let off = i % 1024;
            let sb_field = (0x178..0x180).contains(&off) || off >= 0x3FC;
            let rel = (i as u64).wrapping_sub(mmp_at);
            let mmp_field = mmp_at != 0 && ((8..16).contains(&rel) || (0x3FC..0x400).contains(&rel));
            !sb_field && !mmp_field
        })
        .collect();
    assert!(
        diffs.is_empty(),
        "{what}: {} bytes differ, first at {:#x}",
        diffs.len(),
        diffs[0]
    );
}

/// `-O ^large_file`: a resize inode of 2 GiB or more (4 KiB blocks) is a
/// large file, and mke2fs turns the feature on for it anyway; with 1 KiB
/// blocks it stays off. ext4kit does the same, and every image is clean
/// (the image used to fail e2fsck at once: "contains large files, but
/// lacks LARGE_FILE flag").
#[test]
fn no_large_file_is_overridden_as_mke2fs_does() {
    let Some(dir) = setup() else { return };
    let features = |img: &Path| {
        let out = Command::new("dumpe2fs").arg("-h").arg(img).output().expect("dumpe2fs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with("Filesystem features:"))
            .unwrap_or_default()
            .contains("large_file")
    };
    for (size, args) in [
        ("64M", &["-O", "^large_file"][..]),
        ("1G", &["-O", "^large_file"][..]),
        ("1G", &["-t", "ext2", "-O", "^large_file"][..]),
    ] {
        let ours = dir.path().join("ours.img");
        make(&ours, size, args);
        assert_fsck_clean(&ours).unwrap_or_else(|e| panic!("{args:?} {size}: {e}"));
        let theirs = dir.path().join("theirs.img");
        std::fs::File::create(&theirs).unwrap();
        let out = Command::new("mke2fs")
            .args(["-q", "-F"])
            .args(args)
            .arg(&theirs)
            .arg(size)
            .output()
            .expect("mke2fs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(features(&ours), features(&theirs), "large_file for {args:?} {size}");
        std::fs::remove_file(&ours).ok();
        std::fs::remove_file(&theirs).ok();
    }
}

/// A bare size counts KiB, or blocks of `-b`, as mke2fs reads it (issue
/// 19: `ext4kit mkfs a.img 65536` made a 64 KiB image).
#[test]
fn a_bare_size_counts_kib_or_blocks_as_mke2fs() {
    let Some(dir) = setup() else { return };
    for (args, size, blocks, bs) in [
        (&[][..], "65536", 65536u64, 1024u64),
        (&["-b", "4096"][..], "16384", 16384, 4096),
        (&["-b", "1024"][..], "8192", 8192, 1024),
    ] {
        let ours = dir.path().join("bare.img");
        std::fs::remove_file(&ours).ok();
        make(&ours, size, args);
        assert_eq!(std::fs::metadata(&ours).unwrap().len(), blocks * bs, "{args:?} {size}");
        let theirs = dir.path().join("bare-mke2fs.img");
        run_mke2fs(&theirs, blocks * bs, args);
        let count = |img: &Path| {
            dumpe2fs(img)
                .lines()
                .find(|l| l.starts_with("Block count:"))
                .unwrap()
                .to_string()
        };
        assert_eq!(count(&ours), count(&theirs), "{args:?} {size}");
    }
}
