//! Delayed allocation on bigalloc (issue 18, item 1: "clusters shared by
//! two extents of one file counted once"): a held page reserves a whole
//! cluster unless its logical cluster already has its physical cluster or
//! another held page that reserved one (the kernel's pending
//! reservations), and every reservation goes exactly when its pages are
//! allocated, truncated, punched or unlinked, so `statfs` and `ENOSPC`
//! are exact. e2fsck -fn judges every image: its free counts must equal
//! the bitmaps.

mod common;

use std::path::Path;

use common::{mkfs, open_rw};
use ext4kit_engine::{Attr, FallocMode, Filesystem, NodeKind, ROOT_INO};
use ext4kit_testkit::tools::assert_fsck_clean;

const FILE: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

const KIB: u64 = 1024;

fn image_1k_16k(dir: &Path) -> Option<std::path::PathBuf> {
    mkfs(dir, None, &["-b", "1024", "-O", "bigalloc", "-C", "16384"], "64M")
}

fn new_file(fs: &Filesystem, name: &str) -> u32 {
    fs.create(ROOT_INO, name.as_bytes(), NodeKind::Regular, FILE)
        .unwrap()
        .ino
}

/// `st_blocks` in file-system blocks.
fn blocks(fs: &Filesystem, ino: u32) -> u64 {
    let inode = fs.inode(ino).unwrap();
    fs.metadata(&inode).unwrap().blocks / 2
}

#[test]
fn a_cluster_is_reserved_once_and_not_at_all_once_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image_1k_16k(dir.path()) else {
        return;
    };
    let fs = open_rw(&img);
    let f = new_file(&fs, "f");
    let free0 = fs.statfs().blocks_free;
    let block = vec![7u8; KIB as usize];
    // Blocks 0 and 2 share logical cluster 0; 20 is in cluster 1, 1 back
    // in cluster 0. (No more than four runs: the extents then fit in the
    // inode, and no tree block is reserved.)
    for (lblk, reserved) in [(0u64, 16u64), (2, 16), (20, 32), (1, 32)] {
        fs.write(f, lblk * KIB, &block).unwrap();
        assert_eq!(fs.delayed_blocks(), reserved, "after block {lblk}");
        assert_eq!(fs.statfs().blocks_free, free0 - reserved);
    }
    assert_eq!(blocks(&fs, f), 32, "stat counts the held clusters");
    fs.sync().unwrap();
    assert_eq!(fs.delayed_blocks(), 0);
    assert_eq!(fs.statfs().blocks_free, free0 - 32, "two clusters allocated");
    assert_eq!(blocks(&fs, f), 32);
    // A hole in a cluster the file has: nothing more to reserve or take.
    fs.write(f, 7 * KIB, &block).unwrap();
    assert_eq!(fs.delayed_blocks(), 0);
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, free0 - 32);
    drop(fs);
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn truncate_punch_and_unlink_give_back_exactly_what_they_held() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image_1k_16k(dir.path()) else {
        return;
    };
    let fs = open_rw(&img);
    let free0 = fs.statfs().blocks_free;
    let data = vec![9u8; (40 * KIB) as usize];
    // Truncated to zero before write-back: nothing allocated, all back.
    let t = new_file(&fs, "t");
    fs.write(t, 0, &data).unwrap();
    assert_eq!(fs.delayed_blocks(), 48, "40 KiB in three 16 KiB clusters");
    fs.truncate(t, 0).unwrap();
    assert_eq!(fs.delayed_blocks(), 0);
    assert_eq!(fs.statfs().blocks_free, free0);
    // Truncated into the second cluster: two clusters stay.
    fs.write(t, 0, &data).unwrap();
    fs.truncate(t, 20 * KIB).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.delayed_blocks(), 0);
    assert_eq!(fs.statfs().blocks_free, free0 - 32);
    // A hole punched through held pages: the middle cluster goes.
    let p = new_file(&fs, "p");
    fs.write(p, 0, &data).unwrap();
    fs.fallocate(p, 16 * KIB, 16 * KIB, FallocMode::PunchHole).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, free0 - 32 - 32);
    // Unlinked while held: the reservation goes with the inode.
    let u = new_file(&fs, "u");
    fs.write(u, 0, &data).unwrap();
    fs.unlink(ROOT_INO, b"u").unwrap();
    assert_eq!(fs.delayed_blocks(), 0);
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, free0 - 64);
    drop(fs);
    assert_fsck_clean(&img).unwrap();
}

/// Files written in two delayed pieces each until `ENOSPC`: the error
/// comes from a write (never from write-back), everything accepted is
/// stored, no reservation outlives its pages, the free count e2fsck
/// checks against the bitmaps, and deleting everything gives every
/// cluster back. Returns (files, free blocks beyond the kernel's reserved
/// clusters after the sync).
fn fill_to_enospc(args: &[&str], size: &str, piece: usize) -> Option<(u32, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path(), None, args, size)?;
    let fs = open_rw(&img);
    let empty = fs.statfs().blocks_free;
    let mut sizes = Vec::new();
    'fill: for i in 0u32.. {
        let ino = match fs.create(ROOT_INO, format!("f{i}").as_bytes(), NodeKind::Regular, FILE) {
            Ok(inode) => inode.ino,
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                break;
            }
        };
        // Odd sizes: every file ends inside a cluster.
        let len = piece + (i as usize % 5) * 3000;
        let mut size = 0;
        for half in [&vec![i as u8; len / 2][..], &vec![!(i as u8); len - len / 2][..]] {
            match fs.write(ino, size as u64, half) {
                Ok(n) => size += n,
                Err(e) => {
                    assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                    sizes.push((ino, size));
                    break 'fill;
                }
            }
        }
        sizes.push((ino, size));
    }
    assert!(fs.delayed_blocks() > 0, "the last files are still held");
    fs.sync().unwrap();
    assert_eq!(fs.delayed_blocks(), 0, "no reservation outlives its pages");
    for &(ino, size) in &sizes {
        assert_eq!(fs.inode(ino).unwrap().size(), size as u64, "inode {ino}");
    }
    // The kernel's reserved clusters stay free (`resv_blocks`); what is
    // left beyond them is what the fill could not use.
    let left = fs.statfs().blocks_free - fs.resv_blocks();
    drop(fs);
    assert_fsck_clean(&img).unwrap();
    let fs = open_rw(&img);
    for i in 0..sizes.len() {
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, empty, "every cluster back");
    drop(fs);
    assert_fsck_clean(&img).unwrap();
    Some((sizes.len() as u32, left))
}

#[test]
fn filling_a_1k_16k_image_with_delayed_writes() {
    let args = ["-b", "1024", "-O", "bigalloc", "-C", "16384"];
    let Some((files, left)) = fill_to_enospc(&args, "16M", 70_000) else {
        return;
    };
    eprintln!("1k/16k: {files} files, {left} blocks free beyond the reserve after the sync");
    assert!(files > 100, "{files} files");
    // What stays free is at most the tree-block allowance of the files
    // held at the end, a cluster a tree block, and the request refused.
    assert!(left <= 8 * 16, "{left} blocks left free");
}

#[test]
fn filling_a_4k_64k_image_with_delayed_writes() {
    let args = ["-b", "4096", "-O", "bigalloc", "-C", "65536"];
    let Some((files, left)) = fill_to_enospc(&args, "32M", 70_000) else {
        return;
    };
    eprintln!("4k/64k: {files} files, {left} blocks free beyond the reserve after the sync");
    assert!(files > 100, "{files} files");
    assert!(left <= 8 * 16, "{left} blocks left free");
}
