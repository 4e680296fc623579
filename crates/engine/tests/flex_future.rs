//! Seed 001 §4.5's future work, each behind an option, counted on images
//! the engine's mkfs makes: flex-group-aware block allocation
//! (`AllocOptions::flex_aware`), metadata in the middle of each flex group
//! (`-E flex_meta=middle`), and `-G auto`. Every image ends `e2fsck -fn`
//! clean; the middle layout also goes through a kernel loop mount.

use std::path::{Path, PathBuf};

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::mkfs::{FlexMeta, Media, MkfsOptions, mkfs};
use ext4kit_engine::{AllocOptions, Attr, Filesystem, InodeAllocator, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, skip_unless};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// A sparse image of `bytes` made by the engine's mkfs with `edit`.
fn image(dir: &Path, bytes: u64, edit: impl FnOnce(&mut MkfsOptions)) -> PathBuf {
    let path = dir.join("img");
    std::fs::File::create(&path).unwrap().set_len(bytes).unwrap();
    let mut o = MkfsOptions {
        uuid: Some([3; 16]),
        hash_seed: Some([5; 16]),
        timestamp: Some(1_700_000_000),
        device_zeroed: true,
        ..MkfsOptions::default()
    };
    edit(&mut o);
    mkfs(&FileDevice::open(&path, true).unwrap(), &o).unwrap();
    path
}

fn open(img: &Path, flex_aware: bool) -> Filesystem {
    let alloc = AllocOptions {
        inodes: InodeAllocator::Parent,
        flex_aware,
        ..AllocOptions::default()
    };
    let opts = OpenOptions {
        alloc,
        ..OpenOptions::default()
    };
    Filesystem::open(Box::new(FileDevice::open(img, true).unwrap()), opts).unwrap()
}

fn assert_clean(img: &Path, what: &str) {
    match e2fsck_fn(img) {
        Ok(r) => assert!(r.is_clean(), "{what}: e2fsck -fn:\n{}", r.output),
        Err(e) => {
            ext4kit_testkit::skipped!("e2fsck of {what}: {e}");
            assert!(std::env::var_os("CI").is_none(), "CI has e2fsprogs");
        }
    }
}

/// Writes a file of `blocks` blocks in root and returns the groups its
/// blocks lie in, in order.
fn write_file(fs: &Filesystem, name: &str, blocks: u64) -> Vec<u32> {
    let ino = fs
        .create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR)
        .unwrap()
        .ino;
    fs.open_file(ino).unwrap();
    let bs = fs.block_size() as u64;
    let chunk = vec![0x5a; (64 * bs) as usize];
    let mut at = 0;
    while at < blocks * bs {
        let n = chunk.len().min((blocks * bs - at) as usize);
        fs.write(ino, at, &chunk[..n]).unwrap();
        at += n as u64;
    }
    fs.release_file(ino).unwrap();
    fs.sync().unwrap();
    groups_of(fs, ino)
}

fn groups_of(fs: &Filesystem, ino: u32) -> Vec<u32> {
    let g = fs.geometry();
    let inode = fs.inode(ino).unwrap();
    let mut out: Vec<u32> = fs
        .all_runs(&inode)
        .unwrap()
        .iter()
        .flat_map(|r| [r.physical, r.physical + r.len - 1])
        .map(|b| ((b - u64::from(g.first_data_block)) / u64::from(g.blocks_per_group)) as u32)
        .collect();
    out.dedup();
    out
}

fn free_in(fs: &Filesystem, groups: std::ops::Range<u32>) -> u64 {
    let d = fs.group_descs();
    groups.map(|g| u64::from(d[g as usize].free_blocks())).sum()
}

/// Fills `groups` with one file, written flex-aware in pieces no larger
/// than what is still free there, until the descriptors count no free
/// block in them.
fn fill(img: &Path, groups: std::ops::Range<u32>) {
    let fs = open(img, true);
    let ino = fs.create(ROOT_INO, b"filler", NodeKind::Regular, ATTR).unwrap().ino;
    fs.open_file(ino).unwrap();
    let bs = fs.block_size() as u64;
    let mut at = 0;
    for _ in 0..10_000 {
        let free = free_in(&fs, groups.clone());
        if free == 0 {
            break;
        }
        let n = free.min(256) * bs;
        fs.write(ino, at, &vec![1; n as usize]).unwrap();
        fs.sync().unwrap();
        at += n;
    }
    assert_eq!(free_in(&fs, groups.clone()), 0, "groups {groups:?} filled");
    fs.release_file(ino).unwrap();
    fs.unmount().unwrap();
}

/// 128 MiB of 1 KiB blocks: 16 groups of 8,192, flex groups of 4; the
/// inodes all in group 0 (the parent-group policy), so every file's
/// inode is in flex group 0.
fn four_flex_groups(dir: &Path) -> PathBuf {
    image(dir, 128 << 20, |o| {
        o.block_size = Some(1024);
        o.groups_per_flex = Some(4);
    })
}

/// With groups 1–3 (where flex group 0's files start) full, a new file
/// stays in flex group 0 when flex-aware — group 0 has room after the
/// tables — and goes to the next flex group under the kernel's search,
/// which tries the groups after the goal first.
#[test]
fn a_file_stays_in_its_inodes_flex_group() {
    let mut seen = Vec::new();
    for flex_aware in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let img = four_flex_groups(dir.path());
        fill(&img, 1..4);
        let fs = open(&img, flex_aware);
        let groups = write_file(&fs, "f", 256);
        fs.unmount().unwrap();
        assert_clean(&img, "after the file");
        seen.push(groups);
    }
    eprintln!(
        "groups of the file: flex-aware {:?}, kernel's search {:?}",
        seen[0], seen[1]
    );
    assert!(
        seen[0].iter().all(|&g| g < 4),
        "flex-aware: inside flex group 0: {:?}",
        seen[0]
    );
    assert!(
        seen[1].iter().all(|&g| g >= 4),
        "kernel's search: past it: {:?}",
        seen[1]
    );
}

/// With flex group 0 full, a large file goes to the flex group with the
/// most free blocks (3: no backup superblock, no journal) when
/// flex-aware, and to the next one (1) under the kernel's search.
#[test]
fn a_large_request_goes_to_the_roomiest_flex_group() {
    let mut seen = Vec::new();
    for flex_aware in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let img = four_flex_groups(dir.path());
        fill(&img, 0..4);
        let fs = open(&img, flex_aware);
        let frees: Vec<u64> = (0..4).map(|f| free_in(&fs, f * 4..f * 4 + 4)).collect();
        assert!(
            frees[3] > frees[1] && frees[3] > frees[2],
            "flex group 3 is the roomiest: {frees:?}"
        );
        let groups = write_file(&fs, "big", 1024);
        fs.unmount().unwrap();
        assert_clean(&img, "after the large file");
        seen.push(groups);
    }
    eprintln!(
        "groups of the large file: flex-aware {:?}, kernel's search {:?}",
        seen[0], seen[1]
    );
    assert!(
        seen[0].iter().all(|&g| (12..16).contains(&g)),
        "flex-aware: {:?}",
        seen[0]
    );
    assert!(
        seen[1].iter().all(|&g| (4..8).contains(&g)),
        "kernel's search: {:?}",
        seen[1]
    );
}

/// 4 GiB of 4 KiB blocks with `-E flex_meta=middle`: 32 groups in two
/// flex groups of 16, every table in group 8 or 24.
fn middle_image(dir: &Path) -> PathBuf {
    image(dir, 4 << 30, |o| o.flex_meta = FlexMeta::Middle)
}

/// Every group's bitmaps and inode table lie in the middle group of its
/// flex group; the engine reads and writes such an image, and a new
/// file's first block is next to the tables when flex-aware (the group
/// after them), at the flex group's second group under the kernel's goal.
#[test]
fn metadata_in_the_middle_is_read_written_and_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = middle_image(dir.path());
    assert_clean(&img, "fresh middle layout");
    let mut first_groups = Vec::new();
    for flex_aware in [true, false] {
        let fs = open(&img, flex_aware);
        for (g, d) in fs.group_descs().iter().enumerate() {
            let home = if g < 16 { 8 } else { 24 };
            for b in [d.block_bitmap(), d.inode_bitmap(), d.inode_table()] {
                assert_eq!(b / 32768, home, "group {g}'s tables");
            }
        }
        let name = format!("f{}", u8::from(flex_aware));
        first_groups.push(write_file(&fs, &name, 300)[0]);
        fs.unmount().unwrap();
        assert_clean(&img, "after writing");
    }
    assert_eq!(first_groups, vec![9, 1], "first group: flex-aware, kernel's goal");
}

/// The middle layout mounts in the kernel, takes files there, and stays
/// clean; the engine then reads what the kernel wrote.
#[test]
fn metadata_in_the_middle_mounts_in_the_kernel() {
    if skip_unless(can_loop_mount()).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root with loop devices");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = middle_image(dir.path());
    let mnt = LoopMount::rw(&img, &[]).expect("kernel mount of the middle layout");
    for k in 0..20 {
        let sub = mnt.path().join(format!("d{k}"));
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("data"), vec![k as u8; 300 << 10]).unwrap();
    }
    mnt.unmount().expect("unmount");
    assert_clean(&img, "after the kernel wrote");
    let fs = open(&img, true);
    let data = fs.resolve(b"/d7/data").unwrap();
    let mut buf = vec![0; 300 << 10];
    assert_eq!(fs.read_at(&data, 0, &mut buf).unwrap(), buf.len());
    assert!(buf.iter().all(|&b| b == 7));
    fs.unmount().unwrap();
}

/// `-G auto` on 64 GiB: flash gets 8 flex groups of 64, a rotating disk
/// mke2fs's 16, a 4-disk array 4 times that; each image is clean.
#[test]
fn flex_auto_sizes_by_media_and_stripe() {
    let cases: [(Option<Media>, u32, u32, u32); 3] = [
        (Some(Media::Ssd), 0, 0, 64),
        (Some(Media::Hdd), 0, 0, 16),
        (Some(Media::Hdd), 16, 64, 64),
    ];
    for (media, stride, width, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let img = image(dir.path(), 64 << 30, |o| {
            o.flex_auto = true;
            o.media = media;
            o.stride = stride;
            o.stripe_width = width;
        });
        let fs = open(&img, false);
        assert_eq!(
            fs.geometry().groups_per_flex,
            want,
            "{media:?}, stride {stride}, width {width}"
        );
        fs.unmount().unwrap();
        assert_clean(&img, "-G auto");
    }
}
