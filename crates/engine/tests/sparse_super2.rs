//! `sparse_super2` (superblock backups only in the groups `s_backup_bgs`
//! names) and `stable_inodes` images, made by mke2fs and by ext4kit's
//! mkfs, filled through the engine across every group: uninitialized
//! groups get bitmaps without backup blocks where there are none, and the
//! images stay e2fsck-clean and readable by the kernel.

mod common;

use std::path::Path;

use common::{mkfs, open_rw};
use ext4kit_engine::mkfs::{MkfsOptions, mkfs as ext4kit_mkfs};
use ext4kit_engine::{Attr, NodeKind, ROOT_INO};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// 60 files of 400 KiB: enough to reach every group of a 32 MiB image
/// with 1 KiB blocks.
fn fill(img: &Path) {
    let fs = open_rw(img);
    for i in 0..60u32 {
        let ino = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap()
            .ino;
        fs.write(ino, 0, &vec![i as u8; 400 << 10]).unwrap();
    }
    fs.unmount().unwrap();
    let r = e2fsck_fn(img).expect("e2fsck");
    assert!(r.is_clean(), "{}", r.output);
    let fs = common::open(img, Default::default()).unwrap();
    for i in [0u32, 31, 59] {
        let f = fs.resolve(format!("/f{i}").as_bytes()).unwrap();
        assert!(fs.read_all(&f, 1 << 20).unwrap() == vec![i as u8; 400 << 10], "f{i}");
    }
    kernel_reads(img);
}

fn kernel_reads(img: &Path) {
    if let Err(why) = ext4kit_testkit::mount::can_loop_mount() {
        ext4kit_testkit::skipped!("kernel read: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run the kernel check: {why}");
        return;
    }
    let m = ext4kit_testkit::mount::LoopMount::ro(img).expect("loop mount");
    assert_eq!(std::fs::read(m.path().join("f59")).unwrap(), vec![59u8; 400 << 10]);
}

#[test]
fn mke2fs_images_fill_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(
        dir.path(),
        None,
        &["-b", "1024", "-O", "sparse_super2,stable_inodes"],
        "32M",
    ) else {
        return;
    };
    fill(&img);
}

#[test]
fn ext4kit_mkfs_images_fill_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("i.img");
    std::fs::write(&img, vec![0u8; 32 << 20]).unwrap();
    let dev = ext4kit_engine::device::FileDevice::open(&img, true).unwrap();
    let opts = MkfsOptions {
        block_size: Some(1024),
        feature_edits: vec![("sparse_super2".into(), true), ("stable_inodes".into(), true)],
        ..MkfsOptions::default()
    };
    ext4kit_mkfs(&dev, &opts).expect("mkfs");
    drop(dev);
    let sb = common::read_sb(&img);
    let sb = ext4kit_format::superblock::RawSuperblock::parse(&sb).unwrap();
    let bgs = sb.s_backup_bgs.map(|b| b.get());
    assert_eq!(bgs, [1, 3], "backups in group 1 and the last of 4 groups");
    fill(&img);
}
