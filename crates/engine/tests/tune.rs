//! `tune` against the real tools: images made by `mkfs.ext4 -d` from a tree
//! with an htree directory of thousands of names (indexed by `e2fsck -fyD`),
//! xattrs in blocks, a file whose extent tree has index blocks, short and
//! long symlinks. Every change must leave `e2fsck -fn` clean, agree with
//! `dumpe2fs -h`, and mount in the kernel with the same tree; refusals must
//! leave the image untouched. The crash tests cut the tune's writes at
//! every point a power loss could and check that recovery (ext4kit's open
//! or `e2fsck -fy`) gives the old image or the new one.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ext4kit_engine::device::{CrashDevice, FileDevice, MemDevice, Survivors};
use ext4kit_engine::tune::{ErrorBehavior, FeatureEdit, TuneRequest, UuidChange, tune, tune_image};
use ext4kit_engine::{Error, Filesystem, OpenOptions, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tools, run};

/// True when the e2fsprogs tools are here; a skip is a failure under CI.
fn have_tools() -> bool {
    match require_tools(&["mkfs.ext4", "e2fsck", "dumpe2fs", "debugfs"]) {
        Ok(()) => true,
        Err(why) => {
            assert!(std::env::var_os("CI").is_none(), "CI must have e2fsprogs: {why}");
            ext4kit_testkit::skipped!("{why}");
            false
        }
    }
}

/// True when the kernel can loop-mount (root); a skip fails under CI.
fn have_kernel() -> bool {
    match can_loop_mount() {
        Ok(()) => true,
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run as root with loop devices: {why}"
            );
            ext4kit_testkit::skipped!("{why}");
            false
        }
    }
}

/// The source tree: `names` files in one directory (an htree after
/// `e2fsck -D`), a file with xattrs too big for the inode, a sparse file
/// with hundreds of extents (index blocks), symlinks of both kinds.
fn make_tree(dir: &Path, names: usize) -> PathBuf {
    let t = dir.join("tree");
    std::fs::create_dir_all(t.join("big")).unwrap();
    std::fs::create_dir_all(t.join("sub/deep")).unwrap();
    for i in 0..names {
        std::fs::write(t.join(format!("big/file_with_a_longish_name_{i:05}")), i.to_string()).unwrap();
    }
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(t.join("sub/data.bin"), &data).unwrap();
    for i in 0..8 {
        xattr::set(t.join("sub/data.bin"), format!("user.attr{i}"), &[b'v'; 60]).unwrap();
    }
    let f = std::fs::File::create(t.join("sub/sparse.bin")).unwrap();
    for i in 0..400u64 {
        std::os::unix::fs::FileExt::write_all_at(&f, &[b'x'; 4096], i * 16384).unwrap();
    }
    std::os::unix::fs::symlink("sub/data.bin", t.join("link_short")).unwrap();
    std::os::unix::fs::symlink("y".repeat(200), t.join("sub/deep/link_long")).unwrap();
    t
}

/// `mkfs.ext4 -d` then `e2fsck -fyD` (indexes the big directory).
fn make_image(dir: &Path, tree: &Path, args: &[&str], size: &str) -> PathBuf {
    let img = common::mkfs(dir, Some(tree), args, size).expect("mkfs.ext4");
    let r = run("e2fsck", &["-fyD".as_ref(), img.as_os_str()]).unwrap();
    assert!(matches!(r.code, Some(0 | 1)), "e2fsck -fyD: {}", r.combined());
    assert_clean(&img);
    let htree = run("debugfs", &["-R".as_ref(), "htree /big".as_ref(), img.as_os_str()]).unwrap();
    let indexed = htree.stdout.contains("Root node dump");
    assert!(
        indexed || tree_names(tree) < 1000,
        "big is not indexed: {}",
        htree.combined()
    );
    img
}

fn tree_names(tree: &Path) -> usize {
    std::fs::read_dir(tree.join("big")).unwrap().count()
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).unwrap();
    assert!(r.is_clean(), "e2fsck -fn exited {}:\n{}", r.code, r.output);
}

fn dumpe2fs(img: &Path) -> String {
    run("dumpe2fs", &["-h".as_ref(), img.as_os_str()]).unwrap().stdout
}

fn feature_line(img: &Path) -> String {
    dumpe2fs(img)
        .lines()
        .find(|l| l.starts_with("Filesystem features:"))
        .unwrap_or_default()
        .to_string()
}

fn has_feature(img: &Path, name: &str) -> bool {
    feature_line(img).split_whitespace().any(|w| w == name)
}

fn features(items: &[&str]) -> TuneRequest {
    TuneRequest {
        features: items
            .iter()
            .map(|s| match s.strip_prefix('^') {
                Some(n) => FeatureEdit {
                    name: n.into(),
                    enable: false,
                },
                None => FeatureEdit {
                    name: (*s).into(),
                    enable: true,
                },
            })
            .collect(),
        ..TuneRequest::default()
    }
}

/// Files, symlinks and directories as the kernel reads them: path →
/// kind, contents (hashed), link target, user xattrs.
fn kernel_tree(img: &Path) -> BTreeMap<String, String> {
    let m = LoopMount::ro(img).expect("kernel mount");
    let mut out = BTreeMap::new();
    let mut stack = vec![m.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(m.path()).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let v = if meta.is_symlink() {
                format!("L {}", std::fs::read_link(&p).unwrap().display())
            } else if meta.is_dir() {
                stack.push(p.clone());
                "D".to_string()
            } else {
                let mut attrs: Vec<String> = xattr::list(&p).unwrap().map(|n| n.to_string_lossy().into()).collect();
                attrs.sort();
                format!("F {:x} {attrs:?}", fnv(&std::fs::read(&p).unwrap()))
            };
            out.insert(rel, v);
        }
    }
    out
}

/// The kernel writes through the tuned image (new names in the htree
/// directory, a new file, a removal), then e2fsck checks what it wrote.
fn kernel_writes(img: &Path) {
    let m = LoopMount::rw(img, &[]).expect("kernel rw mount");
    for i in 0..200 {
        std::fs::write(m.path().join(format!("big/kernel_{i}")), b"k").unwrap();
    }
    std::fs::write(m.path().join("sub/kernel.bin"), vec![7u8; 100_000]).unwrap();
    std::fs::remove_file(m.path().join("big/file_with_a_longish_name_00007")).unwrap();
    drop(m);
    assert_clean(img);
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Regular files as the engine reads them.
fn engine_tree(fs: &Filesystem) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(String::new(), fs.inode(ROOT_INO).unwrap())];
    while let Some((path, dir)) = stack.pop() {
        for e in fs.read_dir(&dir).unwrap() {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let inode = fs.inode(e.ino).unwrap();
            if inode.is_dir() {
                stack.push((p, inode));
            } else if inode.raw.file_type() == Some(ext4kit_format::inode::FileType::Regular) {
                out.insert(p, fnv(&fs.read_all(&inode, 64 << 20).unwrap()));
            }
        }
    }
    out
}

fn engine_tree_of(img: &Path) -> BTreeMap<String, u64> {
    let fs = common::open(img, OpenOptions::default()).unwrap();
    engine_tree(&fs)
}

/// Tunes `img` and checks e2fsck, the engine's reading and (as root) the
/// kernel's: the tree must read the same as `before`.
fn tune_and_check(img: &Path, req: &TuneRequest, before: &BTreeMap<String, String>) {
    let files = engine_tree_of(img);
    tune_image(img, req).unwrap_or_else(|e| panic!("tune {req:?}: {e}"));
    assert_clean(img);
    assert_eq!(
        engine_tree_of(img),
        files,
        "the engine reads another tree after {req:?}"
    );
    if !before.is_empty() {
        assert_eq!(&kernel_tree(img), before, "the kernel reads another tree after {req:?}");
    }
}

fn setup(names: usize, args: &[&str], size: &str) -> Option<(tempfile::TempDir, PathBuf, BTreeMap<String, String>)> {
    if !have_tools() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let tree = make_tree(dir.path(), names);
    let img = make_image(dir.path(), &tree, args, size);
    let before = if have_kernel() {
        kernel_tree(&img)
    } else {
        BTreeMap::new()
    };
    Some((dir, img, before))
}

#[test]
fn metadata_csum_on_then_off_round_trips() {
    let Some((_d, img, before)) = setup(3000, &["-b", "4096", "-O", "^metadata_csum,uninit_bg"], "160M") else {
        return;
    };
    tune_and_check(&img, &features(&["metadata_csum"]), &before);
    assert!(has_feature(&img, "metadata_csum") && !has_feature(&img, "uninit_bg"));
    assert!(dumpe2fs(&img).contains("Checksum type:            crc32c"));
    let backup = run(
        "dumpe2fs",
        &[
            "-h".as_ref(),
            "-o".as_ref(),
            "superblock=32768".as_ref(),
            "-o".as_ref(),
            "blocksize=4096".as_ref(),
            img.as_os_str(),
        ],
    )
    .unwrap();
    assert!(
        backup.stdout.contains("metadata_csum"),
        "backup superblock: {}",
        backup.combined()
    );
    if !before.is_empty() {
        kernel_writes(&img);
    }
    let before = if before.is_empty() { before } else { kernel_tree(&img) };
    tune_and_check(&img, &features(&["^metadata_csum"]), &before);
    assert!(!has_feature(&img, "metadata_csum") && has_feature(&img, "uninit_bg"));
    tune_and_check(&img, &features(&["metadata_csum"]), &before);
    assert!(has_feature(&img, "metadata_csum"));
}

#[test]
fn csum_and_dir_index_changes_with_1k_blocks() {
    // 2,000 names: the root points at leaves (full nodes: see below).
    let Some((_d, img, before)) = setup(2000, &["-b", "1024", "-O", "^metadata_csum,^uninit_bg"], "48M") else {
        return;
    };
    tune_and_check(&img, &features(&["metadata_csum"]), &before);
    assert!(has_feature(&img, "metadata_csum"));
    tune_and_check(&img, &features(&["^dir_index"]), &before);
    assert!(!has_feature(&img, "dir_index"));
    let stat = run("debugfs", &["-R".as_ref(), "stat /big".as_ref(), img.as_os_str()]).unwrap();
    assert!(!stat.stdout.contains("Flags: 0x1000"), "INDEX_FL left: {}", stat.stdout);
    tune_and_check(&img, &features(&["dir_index", "^metadata_csum", "^uninit_bg"]), &before);
    assert!(has_feature(&img, "dir_index") && !has_feature(&img, "metadata_csum") && !has_feature(&img, "uninit_bg"));
    tune_and_check(&img, &features(&["uninit_bg"]), &before);
    assert!(has_feature(&img, "uninit_bg"));
}

#[test]
fn superblock_fields_reach_primary_and_backups() {
    let Some((_d, img, before)) = setup(500, &["-b", "1024"], "20M") else {
        return;
    };
    let uuid = *b"\x11\x22\x33\x44\x55\x66\x47\x88\x99\xaa\xbb\xcc\xdd\xee\xff\x00";
    let req = TuneRequest {
        label: Some("tuned-label".into()),
        uuid: Some(UuidChange::Set(uuid)),
        errors: Some(ErrorBehavior::Panic),
        max_mount_count: Some(0),
        check_interval: Some(ext4kit_engine::tune::parse_interval("2w").unwrap()),
        ..TuneRequest::default()
    };
    tune_and_check(&img, &req, &before);
    let h = dumpe2fs(&img);
    for want in [
        "Filesystem volume name:   tuned-label",
        "Filesystem UUID:          11223344-5566-4788-99aa-bbccddeeff00",
        "Errors behavior:          Panic",
        "Maximum mount count:      -1",
        "Check interval:           1209600 (2 weeks)",
    ] {
        assert!(h.contains(want), "dumpe2fs -h lacks {want:?}:\n{h}");
    }
    // metadata_csum: the seed of the old UUID is kept in the superblock.
    assert!(has_feature(&img, "metadata_csum_seed"));
    let backup = run(
        "dumpe2fs",
        &[
            "-h".as_ref(),
            "-o".as_ref(),
            "superblock=8193".as_ref(),
            "-o".as_ref(),
            "blocksize=1024".as_ref(),
            img.as_os_str(),
        ],
    )
    .unwrap();
    assert!(backup.stdout.contains("tuned-label"), "backup: {}", backup.combined());
    tune_and_check(
        &img,
        &TuneRequest {
            uuid: Some(UuidChange::Random),
            ..TuneRequest::default()
        },
        &before,
    );
    tune_and_check(
        &img,
        &TuneRequest {
            uuid: Some(UuidChange::Time),
            ..TuneRequest::default()
        },
        &before,
    );
    tune_and_check(
        &img,
        &TuneRequest {
            uuid: Some(UuidChange::Clear),
            ..TuneRequest::default()
        },
        &before,
    );
    assert!(dumpe2fs(&img).contains("Filesystem UUID:          <none>"));
}

/// mkfs leaves groups `BLOCK_UNINIT`/`INODE_UNINIT` with lazily
/// initialized inode tables; with no group checksum left they are written
/// out (bitmaps built, unused records zeroed).
#[test]
fn uninitialized_groups_are_written_out_when_group_checksums_go() {
    let Some((_d, img, before)) = setup(1500, &["-b", "1024"], "24M") else {
        return;
    };
    assert!(
        run("dumpe2fs", &[img.as_os_str()])
            .unwrap()
            .stdout
            .contains("BLOCK_UNINIT")
    );
    tune_and_check(&img, &features(&["^metadata_csum", "^uninit_bg"]), &before);
    assert!(!has_feature(&img, "metadata_csum") && !has_feature(&img, "uninit_bg"));
    assert!(!run("dumpe2fs", &[img.as_os_str()]).unwrap().stdout.contains("UNINIT"));
    tune_and_check(&img, &features(&["uninit_bg"]), &before);
    tune_and_check(&img, &features(&["metadata_csum"]), &before);
    let Some((_d2, img2, before2)) = setup(300, &["-b", "1024", "-O", "^metadata_csum,uninit_bg"], "24M") else {
        return;
    };
    tune_and_check(&img2, &features(&["^uninit_bg"]), &before2);
    assert!(!has_feature(&img2, "uninit_bg"));
}

#[test]
fn uuid_change_with_uninit_bg_rewrites_group_checksums() {
    let Some((_d, img, before)) = setup(300, &["-b", "1024", "-O", "^metadata_csum,uninit_bg"], "20M") else {
        return;
    };
    tune_and_check(
        &img,
        &TuneRequest {
            uuid: Some(UuidChange::Random),
            ..TuneRequest::default()
        },
        &before,
    );
}

#[test]
fn hash_seed_is_refused_while_directories_are_indexed() {
    let Some((_d, img, before)) = setup(3000, &["-b", "4096"], "64M") else {
        return;
    };
    let seed = ext4kit_engine::mkfs::parse_uuid("66666666-7777-8888-9999-aaaaaaaaaaaa").unwrap();
    let req = TuneRequest {
        hash_seed: Some(seed),
        ..TuneRequest::default()
    };
    let image_before = std::fs::read(&img).unwrap();
    let e = tune_image(&img, &req).unwrap_err();
    assert!(e.to_string().contains("indexed"), "{e}");
    assert_eq!(
        std::fs::read(&img).unwrap(),
        image_before,
        "a refusal changed the image"
    );
    let req = TuneRequest {
        hash_seed: Some(seed),
        ..features(&["^dir_index"])
    };
    tune_and_check(&img, &req, &before);
    assert!(dumpe2fs(&img).contains("Directory Hash Seed:      66666666-7777-8888-9999-aaaaaaaaaaaa"));
}

#[test]
fn unsafe_or_unknown_features_are_refused() {
    let Some((_d, img, _)) = setup(100, &["-b", "4096"], "32M") else {
        return;
    };
    let image_before = std::fs::read(&img).unwrap();
    for (items, want) in [
        (&["^extent"][..], "extent"),
        (&["^64bit"][..], "resize2fs"),
        (&["^has_journal"][..], "journal"),
        (&["no_such_feature"][..], "unknown feature"),
        (&["metadata_csum", "^extent"][..], "extent"),
    ] {
        let e = tune_image(&img, &features(items)).unwrap_err();
        assert!(e.to_string().contains(want), "{items:?}: {e}");
    }
    assert_eq!(
        std::fs::read(&img).unwrap(),
        image_before,
        "a refusal changed the image"
    );
    assert_clean(&img);
}

/// A linear directory whose block is full to the last byte cannot take a
/// checksum tail: refused, naming the directory, nothing written.
#[test]
fn directory_block_without_room_for_a_tail_is_refused() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("tree");
    std::fs::create_dir_all(t.join("full")).unwrap();
    // "." and ".." take 24 bytes; 15 entries of 256 and one of 232 fill 4096.
    for i in 0..15 {
        std::fs::write(t.join("full").join(format!("{i:02}{}", "n".repeat(246))), b"").unwrap();
    }
    std::fs::write(t.join("full").join("z".repeat(224)), b"").unwrap();
    let img = common::mkfs(
        dir.path(),
        Some(&t),
        &["-b", "4096", "-O", "^metadata_csum,^dir_index"],
        "16M",
    )
    .unwrap();
    assert_clean(&img);
    let image_before = std::fs::read(&img).unwrap();
    let e = tune_image(&img, &features(&["metadata_csum"])).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("without room for a checksum"), "{e}");
    assert_eq!(
        std::fs::read(&img).unwrap(),
        image_before,
        "a refusal changed the image"
    );
    assert_clean(&img);
}

/// e2fsck -D packs htree index nodes full; a full node has no slot left
/// for its dx_tail, so the leaf pointers are spread over the nodes (and
/// the root follows); the kernel then finds every name through the index.
#[test]
fn full_htree_nodes_are_rebalanced_for_their_tails() {
    let Some((_d, img, before)) = setup(3000, &["-b", "1024", "-O", "^metadata_csum"], "48M") else {
        return;
    };
    let dump = run("debugfs", &["-R".as_ref(), "htree /big".as_ref(), img.as_os_str()])
        .unwrap()
        .stdout;
    assert!(
        dump.contains("Indirect levels: 1") && dump.contains("(count): 127"),
        "{dump}"
    );
    tune_and_check(&img, &features(&["metadata_csum"]), &before);
    let dump = run("debugfs", &["-R".as_ref(), "htree /big".as_ref(), img.as_os_str()])
        .unwrap()
        .stdout;
    assert!(!dump.contains("(count): 127"), "{dump}");
}

/// Without a journal, superblock changes are made in place (backups
/// first); a checksum rewrite is refused, since it could not be atomic.
#[test]
fn without_a_journal_only_superblock_changes_are_made() {
    let Some((_d, img, before)) = setup(200, &["-b", "1024", "-O", "^has_journal,^metadata_csum"], "20M") else {
        return;
    };
    tune_and_check(
        &img,
        &TuneRequest {
            label: Some("nojournal".into()),
            ..TuneRequest::default()
        },
        &before,
    );
    assert!(dumpe2fs(&img).contains("nojournal"));
    let image_before = std::fs::read(&img).unwrap();
    let e = tune_image(&img, &features(&["metadata_csum"])).unwrap_err();
    assert!(e.to_string().contains("without a journal"), "{e}");
    assert_eq!(std::fs::read(&img).unwrap(), image_before);
    assert_clean(&img);
}

#[test]
fn an_image_mounted_by_the_kernel_is_refused() {
    let Some((_d, img, _)) = setup(50, &["-b", "4096"], "32M") else {
        return;
    };
    if !have_kernel() {
        return;
    }
    let m = LoopMount::ro(&img).unwrap();
    let e = tune_image(
        &img,
        &TuneRequest {
            label: Some("x".into()),
            ..TuneRequest::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::InUseElsewhere(_)), "{e:?}");
    assert!(e.to_string().contains("mounted by the kernel"), "{e}");
    drop(m);
    assert_clean(&img);
    assert!(!dumpe2fs(&img).contains("Filesystem volume name:   x\n"));
}

/// The image as a block device (a loop device), mounted: refused, as the
/// mount table and the exclusive open say.
#[test]
fn a_mounted_block_device_is_refused() {
    let Some((d, img, _)) = setup(50, &["-b", "4096"], "32M") else {
        return;
    };
    if !have_kernel() {
        return;
    }
    let lo = run("losetup", &["-f".as_ref(), "--show".as_ref(), img.as_os_str()]).unwrap();
    assert!(lo.success(), "losetup: {}", lo.combined());
    let dev = PathBuf::from(lo.stdout.trim());
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = run("mount", &[dev.as_os_str(), mnt.as_os_str()]).unwrap();
    let label = TuneRequest {
        label: Some("x".into()),
        ..TuneRequest::default()
    };
    let result = m.success().then(|| tune_image(&dev, &label));
    let _ = run("umount", &[mnt.as_os_str()]);
    let _ = run("losetup", &["-d".as_ref(), dev.as_os_str()]);
    assert!(m.success(), "mount: {}", m.combined());
    let e = result.unwrap().unwrap_err();
    assert!(matches!(e, Error::InUseElsewhere(_)), "{e:?}");
    assert_clean(&img);
}

#[test]
fn an_image_open_in_ext4kit_is_refused() {
    let Some((_d, img, _)) = setup(50, &["-b", "4096"], "32M") else {
        return;
    };
    // What `ext4kit mount` holds: a writable FileDevice under an open Filesystem.
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), OpenOptions::default()).unwrap();
    let e = tune_image(
        &img,
        &TuneRequest {
            label: Some("x".into()),
            ..TuneRequest::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::InUseElsewhere(_)), "{e:?}");
    fs.unmount().unwrap();
    assert_clean(&img);
}

// ---- crash safety -------------------------------------------------------

/// The image as a crash at `point` leaves it, recovered by the engine's
/// open; returns it after checking e2fsck and that it is `old` or `new`
/// (compared by the superblock fields the tune changes).
fn check_crash(
    img: Vec<u8>,
    what: &str,
    old: &BTreeMap<String, u64>,
    is_old: &dyn Fn(&Path) -> bool,
    is_new: &dyn Fn(&Path) -> bool,
    by_e2fsck: bool,
) {
    let tmp = tempfile::NamedTempFile::new().unwrap();
    let mut repair = String::new();
    if by_e2fsck {
        std::fs::write(tmp.path(), &img).unwrap();
        let r = run("e2fsck", &["-fy".as_ref(), tmp.path().as_os_str()]).unwrap();
        repair = r.combined();
        assert!(
            matches!(r.code, Some(0 | 1)),
            "{what}: e2fsck -fy exited {:?}:\n{repair}",
            r.code
        );
    } else {
        let mem = Arc::new(MemDevice::new(img));
        let fs = Filesystem::open(Box::new(mem.clone()), OpenOptions::default())
            .unwrap_or_else(|e| panic!("{what}: open after the crash: {e}"));
        assert_eq!(&engine_tree(&fs), old, "{what}: files differ after recovery");
        fs.unmount().unwrap();
        std::fs::write(tmp.path(), mem.snapshot()).unwrap();
    }
    let r = e2fsck_fn(tmp.path()).unwrap();
    assert!(
        r.is_clean(),
        "{what}: e2fsck -fn exited {}:\n{}\nafter:\n{repair}",
        r.code,
        r.output
    );
    assert!(
        is_old(tmp.path()) || is_new(tmp.path()),
        "{what}: neither the old nor the new state"
    );
}

/// Runs `req` on a crash-recording device holding `img`, then checks a
/// crash at every write (with no, all, and random subsets of the writes
/// since the last flush surviving, torn at 4 KiB), recovered by the engine
/// and, at every flush point, by e2fsck.
fn crash_everywhere(img: &Path, req: &TuneRequest, is_old: &dyn Fn(&Path) -> bool, is_new: &dyn Fn(&Path) -> bool) {
    let files = engine_tree_of(img);
    let dev = Arc::new(CrashDevice::with_atomic_unit(std::fs::read(img).unwrap(), 4096));
    tune(Box::new(dev.clone()), req).unwrap();
    let writes = dev.writes();
    assert!(writes > 4, "only {writes} writes");
    for (point, s) in common::crash_cases::every_write_from(&dev, 0) {
        let what = format!("crash at write {point} of {writes} ({s:?})");
        check_crash(dev.crash_image(point, s), &what, &files, is_old, is_new, false);
    }
    for &point in dev.flush_points().iter().chain([writes].iter()) {
        let what = format!("crash at flush point {point}, recovered by e2fsck -fy");
        check_crash(
            dev.crash_image(point, Survivors::None),
            &what,
            &files,
            is_old,
            is_new,
            true,
        );
    }
}

#[test]
fn crash_during_metadata_csum_rewrite_leaves_old_or_new() {
    let Some((_d, img, _)) = setup(600, &["-b", "1024", "-O", "^metadata_csum,uninit_bg"], "12M") else {
        return;
    };
    let old = |p: &Path| !has_feature(p, "metadata_csum") && has_feature(p, "uninit_bg");
    let new = |p: &Path| has_feature(p, "metadata_csum") && !has_feature(p, "uninit_bg");
    crash_everywhere(&img, &features(&["metadata_csum"]), &old, &new);
}

#[test]
fn crash_during_metadata_csum_removal_leaves_old_or_new() {
    let Some((_d, img, _)) = setup(600, &["-b", "1024"], "12M") else {
        return;
    };
    let old = |p: &Path| has_feature(p, "metadata_csum");
    let new = |p: &Path| !has_feature(p, "metadata_csum") && has_feature(p, "uninit_bg");
    crash_everywhere(&img, &features(&["^metadata_csum"]), &old, &new);
}

/// `-O quota,project`: the quota files, made from a scan, and the
/// feature bits land in one transaction; every crash point is e2fsck
/// clean, its quota check included.
#[test]
fn crash_while_turning_quota_on_leaves_old_or_new() {
    let Some((_d, img, _)) = setup(200, &["-b", "1024", "-I", "256"], "12M") else {
        return;
    };
    let old = |p: &Path| !has_feature(p, "quota") && !has_feature(p, "project");
    let new = |p: &Path| has_feature(p, "quota") && has_feature(p, "project");
    crash_everywhere(&img, &features(&["quota", "project"]), &old, &new);
}

/// `-O ^quota`: the files freed and the feature bits cleared at once.
#[test]
fn crash_while_turning_quota_off_leaves_old_or_new() {
    let Some((_d, img, _)) = setup(200, &["-b", "1024", "-I", "256", "-O", "quota,project"], "12M") else {
        return;
    };
    let old = |p: &Path| has_feature(p, "quota") && has_feature(p, "project");
    let new = |p: &Path| !has_feature(p, "quota") && !has_feature(p, "project");
    crash_everywhere(&img, &features(&["^quota"]), &old, &new);
}

#[test]
fn crash_while_writing_out_uninitialized_groups_leaves_old_or_new() {
    let Some((_d, img, _)) = setup(300, &["-b", "1024", "-O", "^metadata_csum,uninit_bg"], "12M") else {
        return;
    };
    let old = |p: &Path| has_feature(p, "uninit_bg");
    let new = |p: &Path| !has_feature(p, "uninit_bg");
    crash_everywhere(&img, &features(&["^uninit_bg"]), &old, &new);
}

#[test]
fn crash_during_label_change_leaves_old_or_new() {
    let Some((_d, img, _)) = setup(100, &["-b", "1024"], "12M") else {
        return;
    };
    let label = |p: &Path| {
        dumpe2fs(p)
            .lines()
            .any(|l| l == "Filesystem volume name:   crash-label")
    };
    let none = |p: &Path| dumpe2fs(p).lines().any(|l| l == "Filesystem volume name:   <none>");
    let req = TuneRequest {
        label: Some("crash-label".into()),
        ..features(&["^dir_index"])
    };
    crash_everywhere(&img, &req, &none, &label);
}

/// An image whose journal holds a committed transaction (a crash in the
/// middle of an earlier tune) is replayed by the next tune before it
/// plans anything.
#[test]
fn a_dirty_journal_is_replayed_before_a_tune() {
    let Some((_d, img, _)) = setup(300, &["-b", "1024", "-O", "^metadata_csum"], "12M") else {
        return;
    };
    let dev = Arc::new(CrashDevice::with_atomic_unit(std::fs::read(&img).unwrap(), 4096));
    tune(Box::new(dev.clone()), &features(&["metadata_csum"])).unwrap();
    // Flushes: after needs_recovery, after the log blocks, after the
    // commit block; the third leaves the change logged, not yet home.
    let flushes = dev.flush_points();
    let committed = flushes[2];
    let crashed = dev.crash_image(committed, Survivors::None);
    std::fs::write(&img, &crashed).unwrap();
    assert!(dumpe2fs(&img).contains("needs_recovery"), "no transaction pending");
    let label = TuneRequest {
        label: Some("after-replay".into()),
        ..TuneRequest::default()
    };
    tune_image(&img, &label).unwrap();
    assert_clean(&img);
    let f = feature_line(&img);
    assert!(f.contains("metadata_csum") && !f.contains("needs_recovery"), "{f}");
    assert!(dumpe2fs(&img).contains("after-replay"));
}

/// A rewrite larger than the journal cannot be one transaction: refused,
/// and the image is as it was.
#[test]
fn a_change_larger_than_the_journal_is_refused() {
    let Some((_d, img, _)) = setup(
        6000,
        &["-b", "1024", "-N", "12000", "-J", "size=1", "-O", "^metadata_csum"],
        "64M",
    ) else {
        return;
    };
    let image_before = std::fs::read(&img).unwrap();
    let e = tune_image(&img, &features(&["metadata_csum"])).unwrap_err();
    assert!(e.to_string().contains("cannot be made atomic"), "{e}");
    assert_eq!(
        std::fs::read(&img).unwrap(),
        image_before,
        "a refusal changed the image"
    );
    assert_clean(&img);
}
