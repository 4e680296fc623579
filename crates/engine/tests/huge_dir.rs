//! One directory through its whole life at moderate sizes (the large ones
//! are `ext4kit bench hugedir`'s): created, looked up, listed as a stream
//! and emptied, including a three-level `large_dir` htree, which must come
//! back to one linear block that e2fsck and the kernel accept and that
//! fills up again.

mod common;

use common::open_rw;
use std::path::Path;

use common::mkfs;
use ext4kit_engine::{Attr, Filesystem, NodeKind, ROOT_INO};
use ext4kit_format::hash::{HashVersion, dx_hash};
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

fn mkdir(fs: &Filesystem, name: &[u8]) -> u32 {
    let attr = Attr { perm: 0o755, ..ATTR };
    fs.create(ROOT_INO, name, NodeKind::Directory, attr).unwrap().ino
}

/// Names a stream of `read_dir_each` yields besides `.` and `..`.
fn count_names(fs: &Filesystem, dir: u32) -> usize {
    let mut n = 0;
    fs.read_dir_each(&fs.inode(dir).unwrap(), |e| {
        n += usize::from(e.name != b"." && e.name != b"..");
        Ok(true)
    })
    .unwrap();
    n
}

fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for i in (1..n).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
    v
}

#[test]
fn many_short_names_are_created_found_listed_and_emptied() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-N", "60000"], "256M") else {
        return;
    };
    let n = 50_000;
    let name = |i: usize| format!("f{i:08}").into_bytes();
    {
        let fs = open_rw(&img);
        let d = mkdir(&fs, b"d");
        for i in 0..n {
            fs.create(d, &name(i), NodeKind::Regular, ATTR).unwrap();
        }
        let dir = fs.inode(d).unwrap();
        assert_eq!(fs.dir_index_depth(&dir).unwrap(), Some(2), "a two-level htree");
        for i in shuffled(n, 5) {
            assert!(fs.lookup(&dir, &name(i)).is_ok(), "lookup {i}");
        }
        assert_eq!(count_names(&fs, d), n);
        fs.unmount().unwrap();
    }
    assert_clean(&img, "50,000 creates");
    let fs = open_rw(&img);
    let d = fs.lookup(&fs.inode(ROOT_INO).unwrap(), b"d").unwrap();
    for i in 0..n {
        fs.unlink(d, &name(i)).unwrap();
    }
    assert_eq!(count_names(&fs, d), 0);
    let dir = fs.inode(d).unwrap();
    let bs = fs.block_size() as u64;
    assert_eq!((dir.size(), fs.dir_index_depth(&dir).unwrap()), (bs, None));
    fs.unmount().unwrap();
    assert_clean(&img, "deleting all 50,000 names");
}

/// 250-byte names fill a 1 KiB leaf with three entries; created in hash
/// order, every split is on the rightmost path, so a third index level
/// comes after some thousands of names (see `large_dir.rs`).
fn long_name(i: usize) -> Vec<u8> {
    let mut v = format!("n{i:06}-").into_bytes();
    v.resize(250, b'a' + (i % 26) as u8);
    v
}

fn hash_ordered(fs: &Filesystem, n: usize) -> Vec<Vec<u8>> {
    let sb = fs.superblock();
    let unsigned = sb.s_flags.get() & 2 != 0;
    let version = HashVersion::from_code(sb.s_def_hash_version)
        .unwrap()
        .with_unsigned(unsigned);
    let seed = sb.s_hash_seed.map(|w| w.get());
    let mut v: Vec<(u32, Vec<u8>)> = (0..n)
        .map(|i| (dx_hash(&long_name(i), version, &seed).unwrap().major, long_name(i)))
        .collect();
    v.sort();
    v.into_iter().map(|(_, n)| n).collect()
}

#[test]
fn a_three_level_htree_empties_to_one_block_and_fills_again() {
    let tmp = tempfile::tempdir().unwrap();
    let args = ["-b", "1024", "-O", "large_dir", "-N", "30000"];
    let Some(img) = mkfs(tmp.path(), None, &args, "160M") else {
        return;
    };
    let made = {
        let fs = open_rw(&img);
        let d = mkdir(&fs, b"big");
        let names = hash_ordered(&fs, 26_000);
        let mut made = 0;
        for n in &names {
            fs.create(d, n, NodeKind::Regular, ATTR).unwrap();
            made += 1;
            if made % 500 == 0 && fs.dir_index_depth(&fs.inode(d).unwrap()).unwrap() == Some(3) {
                break;
            }
        }
        assert_eq!(
            fs.dir_index_depth(&fs.inode(d).unwrap()).unwrap(),
            Some(3),
            "a third level"
        );
        for k in shuffled(made, 9) {
            fs.unlink(d, &names[k]).unwrap();
        }
        let dir = fs.inode(d).unwrap();
        assert_eq!((dir.size(), fs.dir_index_depth(&dir).unwrap()), (1024, None));
        assert_eq!(u64::from(dir.raw.i_blocks_lo.get()), 2, "one 1 KiB block");
        fs.unmount().unwrap();
        made
    };
    assert!(made > 1000, "{made} names before a third level");
    assert_clean(&img, "emptying a three-level htree");
    kernel_lists(&img, 0);
    {
        let fs = open_rw(&img);
        let d = fs.lookup(&fs.inode(ROOT_INO).unwrap(), b"big").unwrap();
        for i in 0..2000 {
            fs.create(d, &long_name(i), NodeKind::Regular, ATTR).unwrap();
        }
        assert!(fs.dir_index_depth(&fs.inode(d).unwrap()).unwrap().is_some());
        fs.unmount().unwrap();
    }
    assert_clean(&img, "refilling the emptied directory");
    kernel_lists(&img, 2000);
}

/// The kernel lists `/big` with `count` names and can add one to it.
fn kernel_lists(img: &Path, count: usize) {
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("kernel read-back ({why})");
        assert!(std::env::var_os("CI").is_none(), "CI needs the kernel: {why}");
        return;
    }
    let m = LoopMount::rw(img, &[]).unwrap();
    let big = m.path().join("big");
    assert_eq!(std::fs::read_dir(&big).unwrap().count(), count, "kernel readdir");
    std::fs::write(big.join("k"), b"").unwrap();
    std::fs::remove_file(big.join("k")).unwrap();
    m.unmount().unwrap();
    assert_clean(img, "the kernel's create and unlink");
}

/// A rename that replaces a name, or moves one out, of a directory of
/// 30,000 names finds it through the index: it reads a few blocks where a
/// scan of the directory (its old way) read hundreds. Counted on the disk
/// model with a metadata cache too small to hold the directory.
#[test]
fn renames_in_a_big_directory_read_a_few_blocks() {
    use ext4kit_engine::device::{DiskModel, DiskProfile, FileDevice};
    use ext4kit_engine::{OpenOptions, RenameFlags};
    use std::sync::Arc;

    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-N", "40000"], "128M") else {
        return;
    };
    let n = 30_000;
    let name = |i: usize| format!("entry-{i:06}").into_bytes();
    let (big, other) = {
        let fs = open_rw(&img);
        let big = mkdir(&fs, b"big");
        let other = mkdir(&fs, b"other");
        for i in 0..n {
            fs.create(big, &name(i), NodeKind::Regular, ATTR).unwrap();
        }
        fs.unmount().unwrap();
        (big, other)
    };
    let disk = Arc::new(
        DiskModel::new(
            FileDevice::open(&img, true).unwrap(),
            &"hp-sas-10k".parse::<DiskProfile>().unwrap(),
        )
        .unwrap(),
    );
    let opts = OpenOptions {
        cache_bytes: 64 << 10,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(disk.clone()), opts).unwrap();
    let dir_blocks = fs.inode(big).unwrap().size() / 4096;
    assert!(
        dir_blocks > 200,
        "the directory should span hundreds of blocks: {dir_blocks}"
    );
    for (k, i) in [(0, 17), (1, 20_011), (2, 29_998)] {
        let before = disk.stats();
        match k {
            0 => fs
                .rename(big, &name(i), big, &name(i + 1), RenameFlags::default())
                .unwrap(),
            1 => fs
                .rename(big, &name(i), other, b"moved", RenameFlags::default())
                .unwrap(),
            _ => fs
                .rename(other, b"moved", big, &name(i), RenameFlags::default())
                .unwrap(),
        }
        let read = disk.stats().since(&before).bytes_read / 4096;
        assert!(
            read <= 40,
            "rename {k} read {read} blocks of a {dir_blocks}-block directory"
        );
    }
    assert_eq!(count_names(&fs, big), n - 2);
    fs.unmount().unwrap();
    assert_clean(&img, "renames in a big directory");
}
