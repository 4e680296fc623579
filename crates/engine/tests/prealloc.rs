//! Per-inode preallocation (seed 001 figures 7 and 8): an open file that
//! streams keeps the free run after its blocks, so small files written
//! between its writes go elsewhere and it stays in few extents; without
//! the option the two interleave. The kept space never causes ENOSPC and
//! never reaches the disk: every image ends e2fsck-clean.

mod common;

use common::mkfs;
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{AllocOptions, Attr, BlockAllocator, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn open(img: &std::path::Path, prealloc: bool) -> Filesystem {
    open_with(
        img,
        AllocOptions {
            inode_prealloc: prealloc,
            ..AllocOptions::default()
        },
    )
}

/// Windows serve writes that allocate as they come: the direct path
/// (`nodelalloc`). Under delayed allocation a run is allocated whole at
/// write-back (`delalloc.rs`).
fn open_with(img: &std::path::Path, alloc: AllocOptions) -> Filesystem {
    let dev = FileDevice::open(img, true).unwrap();
    let opts = OpenOptions {
        alloc: AllocOptions {
            delalloc: false,
            ..alloc
        },
        ..OpenOptions::default()
    };
    Filesystem::open(Box::new(dev), opts).unwrap()
}

/// Creates, opens, writes 8 KiB to and closes file `s<k>` in the root.
fn small_file(fs: &Filesystem, k: u64) {
    let name = format!("s{k:03}");
    let s = fs
        .create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR)
        .unwrap()
        .ino;
    fs.open_file(s).unwrap();
    fs.write(s, 0, &[0x5a; 8192]).unwrap();
    fs.release_file(s).unwrap();
}

/// A 32 MiB file written in 256 KiB pieces by an open file, one small
/// file of 8 KiB written, opened and closed after each piece; returns the
/// large file's extent count.
fn stream_between_small_files(alloc: AllocOptions) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "256M") else {
        return 0;
    };
    let fs = open_with(&img, alloc);
    let big = fs.create(ROOT_INO, b"big", NodeKind::Regular, ATTR).unwrap().ino;
    fs.open_file(big).unwrap();
    let piece = vec![0xa5u8; 256 << 10];
    for k in 0..128u64 {
        fs.write(big, k * piece.len() as u64, &piece).unwrap();
        small_file(&fs, k);
    }
    fs.release_file(big).unwrap();
    let inode = fs.inode(big).unwrap();
    let extents = fs.file_frag(&inode).unwrap().extents;
    assert_eq!(fs.read_all(&inode, 1 << 30).unwrap(), vec![0xa5u8; 32 << 20]);
    fs.unmount().unwrap();
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
    extents
}

#[test]
fn a_streaming_file_keeps_its_run_and_small_files_go_elsewhere() {
    let with = stream_between_small_files(AllocOptions::default());
    let no_window = AllocOptions {
        inode_prealloc: false,
        ..AllocOptions::default()
    };
    let without = stream_between_small_files(no_window);
    let ext3 = AllocOptions {
        blocks: BlockAllocator::Ext3,
        ..AllocOptions::default()
    };
    let ext3 = stream_between_small_files(ext3);
    if with == 0 {
        return;
    }
    eprintln!(
        "32 MiB streamed between small files: {with} extents with preallocation, {without} without, {ext3} with the ext3 allocator"
    );
    assert!(with <= 2, "32 MiB streamed between small files in {with} extents");
    assert!(
        without <= 2,
        "the locality group keeps small files off the stream: {without} extents"
    );
    // Reservation windows double up to 1,027 blocks: 8,192 blocks need
    // at least 8 windows, and each new one lands past the small files
    // written meanwhile.
    assert!(ext3 >= 8, "the ext3 allocator interleaves: {ext3} extents");
}

/// An open file's window may hold most of the free space; another file
/// that needs it gets it (the window goes before ENOSPC), and no space is
/// lost once the files are closed.
#[test]
fn kept_space_is_given_up_before_enospc() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let fs = open(&img, true);
    let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR).unwrap().ino;
    fs.open_file(a).unwrap();
    fs.write(a, 0, &vec![1u8; 128 << 10]).unwrap();
    let free = fs.statfs().blocks_free;
    let b = fs.create(ROOT_INO, b"b", NodeKind::Regular, ATTR).unwrap().ino;
    let fill = (free - fs.resv_blocks() - 64) * 4096;
    fs.write(b, 0, &vec![2u8; fill as usize]).unwrap();
    fs.write(a, 128 << 10, &vec![1u8; 128 << 10]).unwrap();
    fs.release_file(a).unwrap();
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.sync().unwrap();
    assert!(fs.statfs().blocks_free + 64 >= free, "space was lost");
    fs.unmount().unwrap();
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}

/// FUSE write-back sends a stream's pieces out of order: here each pair of
/// 256 KiB pieces comes second first, with a small file written between
/// every piece. The hole the later piece leaves is kept with the window,
/// so the earlier one still lands in place.
#[test]
fn pieces_written_out_of_order_still_land_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "256M") else {
        return;
    };
    let fs = open(&img, true);
    let big = fs.create(ROOT_INO, b"big", NodeKind::Regular, ATTR).unwrap().ino;
    fs.open_file(big).unwrap();
    let piece = 256u64 << 10;
    let mut small = 0;
    for pair in 0..64u64 {
        for k in [2 * pair + 1, 2 * pair] {
            fs.write(big, k * piece, &vec![k as u8; piece as usize]).unwrap();
            small_file(&fs, small);
            small += 1;
        }
    }
    fs.release_file(big).unwrap();
    let inode = fs.inode(big).unwrap();
    let extents = fs.file_frag(&inode).unwrap().extents;
    assert!(extents <= 2, "32 MiB written in swapped pairs: {extents} extents");
    let data = fs.read_all(&inode, 1 << 30).unwrap();
    assert!((0..128u64).all(|k| data[(k * piece) as usize] == k as u8));
    fs.unmount().unwrap();
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}
