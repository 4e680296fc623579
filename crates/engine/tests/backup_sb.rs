//! Opening from a backup superblock ([`OpenOptions::superblock`]): the
//! standard backups are found when the primary is damaged, each location
//! form (e2fsck's block and size, a block alone, the kernel's KiB) reads
//! the same file system, descriptors come from the backup's copy (with
//! `meta_bg` too), and the result is read-only and writes nothing.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{mkfs, open};
use ext4kit_engine::backup_sb::{Backup, describe_backups, find_backups, primary_damaged};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO, SuperblockAt};

fn zero_primary(img: &Path) {
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(&[0u8; 1024], 1024).unwrap();
}

fn read_file(fs: &ext4kit_engine::Filesystem, path: &str) -> Vec<u8> {
    let inode = fs.resolve(path.as_bytes()).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        let n = fs.read_at(&inode, out.len() as u64, &mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn at(at: SuperblockAt) -> OpenOptions {
    OpenOptions {
        superblock: Some(at),
        ..OpenOptions::default()
    }
}

/// A 1 KiB-block image of `extra` features holding this test's source,
/// with its primary superblock zeroed.
fn damaged(dir: &Path, extra: &[&str]) -> Option<std::path::PathBuf> {
    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"backup superblocks\n".repeat(500)).unwrap();
    let mut args = vec!["-b", "1024"];
    args.extend_from_slice(extra);
    let img = mkfs(dir, Some(&src), &args, "64M")?;
    zero_primary(&img);
    Some(img)
}

#[test]
fn backups_are_found_and_named_when_the_primary_is_zeroed() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = damaged(dir.path(), &[]) else {
        assert!(std::env::var_os("CI").is_none(), "mkfs.ext4 is needed in CI");
        return;
    };
    let err = open(&img, OpenOptions::default()).unwrap_err();
    assert_eq!(primary_damaged(&err), Some("the primary superblock is"), "{err}");
    let found = find_backups(&FileDevice::open(&img, false).unwrap());
    let blocks: Vec<u64> = found.iter().map(|b| b.block).collect();
    assert_eq!(blocks, [8193, 24577, 40961, 57345]);
    assert_eq!(found[1].group, 3);
    assert!(found.iter().all(|b| b.block_size == 1024));
    assert_eq!(
        describe_backups(&found[..2]).unwrap(),
        "intact backup superblocks at block 8193 (1024-byte blocks), 24577"
    );
    assert_eq!(describe_backups(&[] as &[Backup]), None);
}

#[test]
fn every_location_form_reads_the_same_file_system_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = damaged(dir.path(), &[]) else {
        assert!(std::env::var_os("CI").is_none(), "mkfs.ext4 is needed in CI");
        return;
    };
    let before = std::fs::read(&img).unwrap();
    let forms = [
        SuperblockAt::Block {
            block: 8193,
            block_size: Some(1024),
        },
        SuperblockAt::Block {
            block: 24577,
            block_size: None,
        },
        SuperblockAt::Kib(8193),
    ];
    for form in forms {
        // A writable device: the engine itself must keep from writing.
        let dev = FileDevice::open(&img, true).unwrap();
        let fs = Filesystem::open(Box::new(dev), at(form)).unwrap();
        assert_eq!(read_file(&fs, "/f"), b"backup superblocks\n".repeat(500), "{form:?}");
        let why = fs.read_only_reason().unwrap();
        assert!(why.contains("backup superblock"), "{why}");
        let attr = Attr {
            perm: 0o644,
            uid: 0,
            gid: 0,
        };
        let made = fs.create(ROOT_INO, b"new", NodeKind::Regular, attr);
        assert!(matches!(made, Err(Error::ReadOnly)), "{form:?}: {made:?}");
    }
    assert!(
        std::fs::read(&img).unwrap() == before,
        "opening from a backup changed the image"
    );
}

#[test]
fn a_wrong_block_size_or_location_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = damaged(dir.path(), &[]) else {
        assert!(std::env::var_os("CI").is_none(), "mkfs.ext4 is needed in CI");
        return;
    };
    let wrong = at(SuperblockAt::Block {
        block: 8193,
        block_size: Some(4096),
    });
    assert!(open(&img, wrong).is_err());
    let past = at(SuperblockAt::Block {
        block: u64::MAX,
        block_size: None,
    });
    assert!(matches!(open(&img, past), Err(Error::InvalidArgument(_))));
    let empty = at(SuperblockAt::Kib(8000));
    assert!(matches!(open(&img, empty), Err(Error::NotExt4(_))));
}

/// With `meta_bg` the descriptors past `s_first_meta_bg` live in each meta
/// group; read from a backup, the copy in the meta group's second group.
#[test]
fn meta_bg_descriptors_come_from_the_backup_copies() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = damaged(dir.path(), &["-O", "meta_bg,^resize_inode"]) else {
        assert!(std::env::var_os("CI").is_none(), "mkfs.ext4 is needed in CI");
        return;
    };
    // The primary descriptor block of meta group 0 (block 2) goes too.
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(&[0u8; 1024], 2048).unwrap();
    let fs = open(&img, at(SuperblockAt::Kib(8193))).unwrap();
    assert_eq!(fs.superblock().s_first_meta_bg.get(), 0);
    assert_eq!(read_file(&fs, "/f"), b"backup superblocks\n".repeat(500));
    assert_eq!(fs.group_descs().len(), 8);
}

/// A primary whose checksum fails is damaged too; its backups are named.
#[test]
fn a_checksum_mismatch_in_the_primary_names_the_backups() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "1024"], "64M") else {
        assert!(std::env::var_os("CI").is_none(), "mkfs.ext4 is needed in CI");
        return;
    };
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(b"X", 1024 + 0x78).unwrap(); // s_volume_name
    let err = open(&img, OpenOptions::default()).unwrap_err();
    assert_eq!(primary_damaged(&err), Some("the primary superblock is"), "{err}");
    let found = find_backups(&FileDevice::open(&img, false).unwrap());
    assert_eq!(found.first().map(|b| b.block), Some(8193));
    let fs = open(
        &img,
        at(SuperblockAt::Block {
            block: 8193,
            block_size: None,
        }),
    )
    .unwrap();
    assert_eq!(fs.superblock().volume_name(), "");
}
