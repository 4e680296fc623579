//! Seed 001's layout figures, counted rather than plotted (the plots are
//! `ext4kit layout --plot`): figures 3 and 7, small files written one
//! after another by one thread, and figures 4 and 8, a large file
//! streamed while small files are written between its pieces — each
//! under ext4's allocation (mballoc with delayed allocation) and under
//! ext3's (its allocator, which allocated at every write). Every image
//! ends e2fsck-clean.

mod common;

use common::mkfs;
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{AllocOptions, Attr, BlockAllocator, Filesystem, NodeKind, OpenOptions, ROOT_INO, Run};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn open(img: &std::path::Path, blocks: BlockAllocator) -> Filesystem {
    let dev = FileDevice::open(img, true).unwrap();
    let alloc = AllocOptions {
        blocks,
        delalloc: blocks == BlockAllocator::Mballoc,
        ..AllocOptions::default()
    };
    let opts = OpenOptions {
        alloc,
        ..OpenOptions::default()
    };
    Filesystem::open(Box::new(dev), opts).unwrap()
}

/// `ino`'s mapped runs once held data is written back.
fn runs(fs: &Filesystem, ino: u32) -> Vec<Run> {
    fs.sync().unwrap();
    let inode = fs.inode(ino).unwrap();
    fs.all_runs(&inode).unwrap()
}

fn clean(fs: Filesystem, img: &std::path::Path) {
    fs.unmount().unwrap();
    let fsck = e2fsck_fn(img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}

/// Figures 3 and 7: one thread creates 20 files of 12 KiB, each written
/// while the ones before are still open (closed at the end, as a program
/// holding its output files does); returns the gaps, in blocks, between
/// each file's end and the next file's start.
fn twenty_small_files(blocks: BlockAllocator) -> Option<Vec<i64>> {
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path(), None, &["-b", "4096"], "256M")?;
    let fs = open(&img, blocks);
    let mut files = Vec::new();
    for k in 0..20 {
        let name = format!("f{k:02}");
        let ino = fs
            .create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR)
            .unwrap()
            .ino;
        fs.open_file(ino).unwrap();
        fs.write(ino, 0, &[k as u8 + 1; 12 << 10]).unwrap();
        files.push(ino);
    }
    let placed: Vec<Vec<Run>> = files.iter().map(|&i| runs(&fs, i)).collect();
    for &ino in &files {
        fs.release_file(ino).unwrap();
    }
    assert!(
        placed.iter().all(|r| r.len() == 1),
        "each small file is one extent: {placed:?}"
    );
    let gaps = placed
        .windows(2)
        .map(|w| w[1][0].physical as i64 - (w[0][0].physical + w[0][0].len) as i64)
        .collect();
    clean(fs, &img);
    Some(gaps)
}

#[test]
fn small_files_pack_under_mballoc_and_keep_ext3_windows_between_them() {
    let Some(mballoc) = twenty_small_files(BlockAllocator::Mballoc) else {
        return;
    };
    let ext3 = twenty_small_files(BlockAllocator::Ext3).unwrap();
    eprintln!("gaps between 20 small files: mballoc {mballoc:?}, ext3 {ext3:?}");
    assert!(mballoc.iter().all(|&g| g == 0), "mballoc packs them: {mballoc:?}");
    // Each open file keeps its 8-block reservation window; 3 blocks are
    // used, so the next file starts 5 blocks further on.
    assert!(
        ext3.iter().all(|&g| g == 5),
        "ext3 leaves its windows between them: {ext3:?}"
    );
}

/// Figures 4 and 8: a 256 MiB file written in 1 MiB pieces by one open
/// file while 200 files of 16 KiB are written between its pieces;
/// returns the large file's extents and the span of its blocks.
fn stream_with_small_files(blocks: BlockAllocator) -> Option<(usize, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path(), None, &["-b", "4096"], "1G")?;
    let fs = open(&img, blocks);
    let small = fs.create(ROOT_INO, b"small", NodeKind::Directory, ATTR).unwrap().ino;
    let big = fs.create(ROOT_INO, b"big", NodeKind::Regular, ATTR).unwrap().ino;
    fs.open_file(big).unwrap();
    let piece = vec![0xa5u8; 1 << 20];
    for k in 0..256u64 {
        fs.write(big, k << 20, &piece).unwrap();
        if k % 5 == 0 && k / 5 < 200 {
            for j in 0..4 {
                let name = format!("s{k}-{j}");
                let s = fs.create(small, name.as_bytes(), NodeKind::Regular, ATTR).unwrap().ino;
                fs.open_file(s).unwrap();
                fs.write(s, 0, &[7u8; 16 << 10]).unwrap();
                fs.release_file(s).unwrap();
            }
        }
    }
    fs.release_file(big).unwrap();
    let r = runs(&fs, big);
    let lo = r.iter().map(|x| x.physical).min().unwrap();
    let hi = r.iter().map(|x| x.physical + x.len).max().unwrap();
    clean(fs, &img);
    Some((r.len(), hi - lo))
}

#[test]
fn a_large_file_stays_whole_under_mballoc_and_interleaves_under_ext3() {
    let Some((mb_extents, mb_span)) = stream_with_small_files(BlockAllocator::Mballoc) else {
        return;
    };
    let (ext3_extents, ext3_span) = stream_with_small_files(BlockAllocator::Ext3).unwrap();
    eprintln!(
        "256 MiB between small files: mballoc {mb_extents} extents over {mb_span} blocks, ext3 {ext3_extents} over {ext3_span}"
    );
    // The fewest 256 MiB allows is 2 (an initialized extent holds 128
    // MiB); the issue asks for at most 4.
    assert!(mb_extents <= 4, "mballoc: {mb_extents} extents");
    assert!(mb_span < 65536 + 32768, "mballoc keeps it compact: {mb_span} blocks");
    assert!(
        ext3_extents >= 4 * mb_extents,
        "ext3 interleaves: {ext3_extents} extents"
    );
}
