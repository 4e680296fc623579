//! Emptied directories give their blocks back: when the last name other
//! than `.` and `..` goes, an htree or a multi-block linear directory
//! returns to one linear block (no `EXT4_INDEX_FL`, `i_size` one block,
//! `i_blocks` one block) in the unlink's own transaction. e2fsck must find
//! the image clean, the kernel must list the directory, and the directory
//! must fill up again (back into an htree) as a new one would.

mod common;

use common::open_rw;
use std::path::{Path, PathBuf};

use common::mkfs;
use ext4kit_engine::{Attr, Filesystem, NodeKind, ROOT_INO};
use ext4kit_format::inode::flags;
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn assert_clean(img: &Path, what: &str) {
    let fsck = e2fsck_fn(img).expect("run e2fsck");
    assert!(fsck.is_clean(), "e2fsck -fn after {what}:\n{}", fsck.output);
}

/// Name `i`, `len` bytes long.
fn name(i: usize, len: usize) -> Vec<u8> {
    let mut v = format!("n{i:06}-").into_bytes();
    v.resize(len.max(8), b'a' + (i % 26) as u8);
    v
}

/// Makes `/d` and `count` names of `len` bytes in it; returns its inode.
fn fill(fs: &Filesystem, count: usize, len: usize) -> u32 {
    let d = match fs.lookup(&fs.inode(ROOT_INO).unwrap(), b"d") {
        Ok(ino) => ino,
        Err(_) => {
            let attr = Attr { perm: 0o755, ..ATTR };
            fs.create(ROOT_INO, b"d", NodeKind::Directory, attr).unwrap().ino
        }
    };
    for i in 0..count {
        fs.create(d, &name(i, len), NodeKind::Regular, ATTR).unwrap();
    }
    d
}

/// Size, index flag and 512-byte sectors of directory `d`.
fn shape(fs: &Filesystem, d: u32) -> (u64, bool, u64) {
    let inode = fs.inode(d).unwrap();
    let sectors = u64::from(inode.raw.i_blocks_lo.get());
    (inode.size(), inode.raw.has_flag(flags::INDEX), sectors)
}

/// Deletes names `0..count` of `/d` in a random order, checking that the
/// directory keeps its blocks while any name is left; returns its shape
/// once empty.
fn empty(fs: &Filesystem, d: u32, count: usize, len: usize, seed: u64) -> (u64, bool, u64) {
    let mut order: Vec<usize> = (0..count).collect();
    let mut rng = Rng::new(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let full = shape(fs, d).0;
    for (k, &i) in order.iter().enumerate() {
        fs.unlink(d, &name(i, len)).unwrap();
        if k + 1 < order.len() {
            assert_eq!(
                shape(fs, d).0,
                full,
                "blocks stay while {} names are left",
                count - k - 1
            );
        }
    }
    let names = fs.read_dir(&fs.inode(d).unwrap()).unwrap();
    assert_eq!(names.len(), 2, "only . and .. left");
    shape(fs, d)
}

/// The kernel lists `/d` with exactly `count` names, adds one, removes it.
fn kernel_check(img: &Path, count: usize) {
    match can_loop_mount() {
        Ok(()) => {}
        Err(why) => {
            ext4kit_testkit::skipped!("kernel read-back ({why})");
            assert!(std::env::var_os("CI").is_none(), "CI needs the kernel: {why}");
            return;
        }
    }
    let m = LoopMount::rw(img, &[]).unwrap();
    let d = m.path().join("d");
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), count, "kernel readdir count");
    std::fs::write(d.join("kernel-made"), b"x").unwrap();
    std::fs::remove_file(d.join("kernel-made")).unwrap();
    m.unmount().unwrap();
    assert_clean(img, "the kernel's create and unlink");
}

fn image(tmp: &Path, args: &[&str]) -> Option<PathBuf> {
    mkfs(tmp, None, args, "64M")
}

#[test]
fn an_emptied_htree_returns_to_one_linear_block_and_fills_again() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = image(tmp.path(), &["-b", "1024", "-N", "8192"]) else {
        return;
    };
    let (count, len) = (3000, 100);
    {
        let fs = open_rw(&img);
        let d = fill(&fs, count, len);
        let (size, indexed, _) = shape(&fs, d);
        assert!(indexed && size > 100 * 1024, "an htree of many blocks: {size} bytes");
        assert_eq!(fs.dir_index_depth(&fs.inode(d).unwrap()).unwrap(), Some(2));
        let (size, indexed, sectors) = empty(&fs, d, count, len, 7);
        assert_eq!((size, indexed, sectors), (1024, false, 2), "one linear 1 KiB block");
        fs.unmount().unwrap();
    }
    assert_clean(&img, "emptying an htree");
    kernel_check(&img, 0);
    {
        let fs = open_rw(&img);
        let d = fill(&fs, count, len);
        assert!(shape(&fs, d).1, "indexed again once it outgrew one block");
        let root = fs.inode(d).unwrap();
        for i in (0..count).step_by(97) {
            assert!(fs.lookup(&root, &name(i, len)).is_ok(), "lookup after refill");
        }
        fs.unmount().unwrap();
    }
    assert_clean(&img, "refilling the emptied directory");
    kernel_check(&img, count);
}

#[test]
fn an_emptied_linear_directory_returns_to_one_block() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = image(tmp.path(), &["-b", "1024", "-O", "^dir_index", "-N", "4096"]) else {
        return;
    };
    let (count, len) = (400, 60);
    {
        let fs = open_rw(&img);
        let d = fill(&fs, count, len);
        let (size, indexed, _) = shape(&fs, d);
        assert!(
            !indexed && size >= 20 * 1024,
            "a linear directory of many blocks: {size}"
        );
        assert_eq!(empty(&fs, d, count, len, 11), (1024, false, 2));
        fs.unmount().unwrap();
    }
    assert_clean(&img, "emptying a linear directory");
    kernel_check(&img, 0);
    {
        let fs = open_rw(&img);
        let d = fill(&fs, count, len);
        assert_eq!(fs.read_dir(&fs.inode(d).unwrap()).unwrap().len(), count + 2);
        fs.unmount().unwrap();
    }
    assert_clean(&img, "refilling the linear directory");
}

#[test]
fn a_block_mapped_htree_empties_too() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = image(tmp.path(), &["-t", "ext3", "-b", "1024", "-N", "4096"]) else {
        return;
    };
    let (count, len) = (800, 100);
    {
        let fs = open_rw(&img);
        let d = fill(&fs, count, len);
        assert!(shape(&fs, d).1, "indexed");
        assert_eq!(empty(&fs, d, count, len, 3), (1024, false, 2));
        fs.unmount().unwrap();
    }
    assert_clean(&img, "emptying a block-mapped htree");
    kernel_check(&img, 0);
}

#[test]
fn rmdir_of_an_emptied_directory_and_a_remount_between_unlinks() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = image(tmp.path(), &["-b", "1024", "-N", "4096"]) else {
        return;
    };
    let (count, len) = (600, 100);
    let d = {
        let fs = open_rw(&img);
        let d = fill(&fs, count, len);
        for i in 0..count - 1 {
            fs.unlink(d, &name(i, len)).unwrap();
        }
        fs.unmount().unwrap();
        d
    };
    assert_clean(&img, "all but one name deleted");
    let fs = open_rw(&img);
    assert!(shape(&fs, d).0 > 1024, "a name is left: the blocks stay");
    fs.unlink(d, &name(count - 1, len)).unwrap();
    assert_eq!(
        shape(&fs, d),
        (1024, false, 2),
        "the last unlink after a remount shrinks it"
    );
    fs.rmdir(ROOT_INO, b"d").unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "rmdir of the emptied directory");
}
