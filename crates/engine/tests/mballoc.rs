//! The multiblock allocator's in-memory state against the image: buddies
//! built ahead of need serve later requests without another build, a
//! failed transaction leaves no allocation behind in them, and the
//! counts say where requests were served and what choosing blocks cost.

mod common;

use common::mkfs;
use ext4kit_engine::device::{FileDevice, MemDevice};
use ext4kit_engine::{AllocOptions, Attr, BlockAllocator, Error, Filesystem, MbStats, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn open(img: &std::path::Path) -> Filesystem {
    let dev = FileDevice::open(img, true).unwrap();
    Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap()
}

#[test]
fn warmed_buddies_serve_later_requests_without_another_build() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "1024", "-g", "2048"], "64M") else {
        return;
    };
    let fs = open(&img);
    let with_free = fs.group_descs().iter().filter(|d| d.free_blocks() > 0).count() as u32;
    let built = fs.warm_buddies(&|| false).unwrap();
    assert_eq!(u64::from(built), fs.mb_stats().buddies_built);
    assert_eq!(built, with_free, "one buddy per group with free blocks");
    assert_eq!(fs.warm_buddies(&|| false).unwrap(), 0, "nothing left to build");
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    fs.open_file(f).unwrap();
    for k in 0..64u64 {
        fs.write(f, k << 16, &[k as u8; 64 << 10]).unwrap();
    }
    fs.release_file(f).unwrap();
    fs.sync().unwrap();
    let stats = fs.mb_stats();
    assert!(stats.requests > 0, "{stats:?}");
    // Windows set and released drop buddies; nothing else needs a build.
    assert!(
        stats.buddies_built <= u64::from(built) + 8,
        "{stats:?} after warming {built}"
    );
    fs.unmount().unwrap();
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}

#[test]
fn a_write_that_fails_for_space_leaves_the_buddies_as_the_bitmaps() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "32M") else {
        return;
    };
    let fs = open(&img);
    let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR).unwrap().ino;
    // Data may not take the kernel's reserved clusters.
    let free = fs.statfs().blocks_free - fs.resv_blocks();
    let too_big = vec![1u8; ((free + 100) * 4096) as usize];
    assert!(matches!(fs.write(a, 0, &too_big), Err(Error::NoSpace)));
    // Everything the failed write searched is free again: the same
    // space can be written whole, in pieces, and reads back.
    let fits = ((free - 64) * 4096) as usize;
    for (k, piece) in vec![2u8; fits].chunks(1 << 20).enumerate() {
        fs.write(a, (k as u64) << 20, piece).unwrap();
    }
    let inode = fs.inode(a).unwrap();
    assert_eq!(fs.read_all(&inode, 1 << 30).unwrap(), vec![2u8; fits]);
    fs.unmount().unwrap();
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}

/// Writes `blocks` 4 KiB blocks to one open file in 4 KiB writes on a
/// fresh 64 MiB image (the engine's own mkfs, so the test never skips),
/// syncs, and returns the allocator's counts.
fn counts_after_small_writes(blocks: u64, alloc: AllocOptions) -> MbStats {
    let dev = MemDevice::new(vec![0; 64 << 20]);
    let opts = ext4kit_engine::mkfs::MkfsOptions {
        block_size: Some(4096),
        uuid: Some([7; 16]),
        hash_seed: Some([9; 16]),
        timestamp: Some(1_700_000_000),
        device_zeroed: true,
        ..Default::default()
    };
    ext4kit_engine::mkfs::mkfs(&dev, &opts).unwrap();
    let open = OpenOptions {
        alloc,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(dev), open).unwrap();
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    fs.open_file(f).unwrap();
    for k in 0..blocks {
        fs.write(f, k * 4096, &[k as u8; 4096]).unwrap();
    }
    fs.sync().unwrap();
    fs.release_file(f).unwrap();
    let stats = fs.mb_stats();
    assert_eq!(fs.file_frag(&fs.inode(f).unwrap()).unwrap().blocks, blocks);
    stats
}

#[test]
fn the_allocators_time_and_blocks_are_counted_per_request() {
    let delayed = counts_after_small_writes(300, AllocOptions::default());
    assert_eq!(delayed.data_blocks, 300, "{delayed:?}");
    assert!(delayed.alloc_ns > 0, "{delayed:?}");
    assert!(
        (1..=2).contains(&delayed.data_requests),
        "write-back asks once per contiguous run: {delayed:?}"
    );
    for blocks in [BlockAllocator::Mballoc, BlockAllocator::Ext3] {
        let alloc = AllocOptions {
            blocks,
            delalloc: false,
            ..AllocOptions::default()
        };
        let direct = counts_after_small_writes(300, alloc);
        assert_eq!(
            (direct.data_requests, direct.data_blocks),
            (300, 300),
            "{blocks:?}: {direct:?}"
        );
        assert!(direct.alloc_ns > 0, "{direct:?}");
    }
}
