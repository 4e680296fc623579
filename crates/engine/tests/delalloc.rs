//! Delayed allocation (issue 15, item 3): held writes allocate as one
//! request at write-back, a file deleted before write-back never touches
//! a block bitmap, ENOSPC comes from `write`, and what a crash leaves is
//! never a size covering data that was not written. Every image ends
//! e2fsck-clean.

mod common;

use std::sync::{Arc, Mutex};

use common::mkfs;
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{AllocOptions, Attr, BlockDevice, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// A file device that remembers the byte ranges written to it.
struct Counting {
    inner: FileDevice,
    writes: Mutex<Vec<(u64, u64)>>,
}

impl BlockDevice for Counting {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.writes.lock().unwrap().push((offset, offset + buf.len() as u64));
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
}

fn options(delalloc: bool) -> OpenOptions {
    OpenOptions {
        alloc: AllocOptions {
            delalloc,
            ..AllocOptions::default()
        },
        ..OpenOptions::default()
    }
}

fn open(img: &std::path::Path, delalloc: bool) -> Filesystem {
    let dev = FileDevice::open(img, true).unwrap();
    Filesystem::open(Box::new(dev), options(delalloc)).unwrap()
}

fn clean(fs: Filesystem, img: &std::path::Path) {
    fs.unmount().unwrap();
    let fsck = e2fsck_fn(img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}

/// 64 MiB in 4 KiB writes, then fsync: the extents of the file.
fn sixty_four_mib_in_small_writes(delalloc: bool) -> Option<u64> {
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path(), None, &["-b", "4096"], "512M")?;
    let fs = open(&img, delalloc);
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    // A second file written between the pieces, as a busy system would;
    // both open, as a program holds them.
    let g = fs.create(ROOT_INO, b"g", NodeKind::Regular, ATTR).unwrap().ino;
    fs.open_file(f).unwrap();
    fs.open_file(g).unwrap();
    for k in 0..16384u64 {
        fs.write(f, k * 4096, &[k as u8; 4096]).unwrap();
        if k % 64 == 0 {
            fs.write(g, k * 64, &[1; 64]).unwrap();
        }
    }
    fs.sync_inode(f).unwrap();
    fs.release_file(g).unwrap();
    fs.release_file(f).unwrap();
    let inode = fs.inode(f).unwrap();
    assert_eq!(inode.size(), 64 << 20);
    let extents = fs.file_frag(&inode).unwrap().extents;
    let mut buf = vec![0u8; 4096];
    for k in [0u64, 1, 8191, 16383] {
        fs.read_file_at(f, k * 4096, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == k as u8), "block {k}");
    }
    clean(fs, &img);
    Some(extents)
}

#[test]
fn a_file_written_in_small_pieces_gets_the_extents_of_its_size() {
    let Some(delayed) = sixty_four_mib_in_small_writes(true) else {
        return;
    };
    let direct = sixty_four_mib_in_small_writes(false).unwrap();
    eprintln!("64 MiB in 4 KiB writes: {delayed} extents delayed, {direct} allocating at each write");
    // 64 MiB = 16384 blocks, half a group: one extent.
    assert_eq!(delayed, 1);
    assert!(delayed <= direct);
}

/// Byte ranges of every group's block bitmap.
fn block_bitmaps(fs: &Filesystem) -> Vec<(u64, u64)> {
    let bs = fs.block_size() as u64;
    fs.group_descs()
        .iter()
        .map(|d| {
            let b = u64::from(d.bg_block_bitmap_lo.get()) | (u64::from(d.bg_block_bitmap_hi.get()) << 32);
            (b * bs, (b + 1) * bs)
        })
        .collect()
}

/// Creates, writes and deletes 50 files of 64 KiB, then syncs; returns
/// the writes that hit a block bitmap and the allocator's request count.
fn short_lived_files(delalloc: bool) -> Option<(usize, u64)> {
    let dir = tempfile::tempdir().unwrap();
    // No journal: metadata is written in place, where it can be counted.
    let img = mkfs(dir.path(), None, &["-b", "4096", "-O", "^has_journal"], "64M")?;
    let dev = Arc::new(Counting {
        inner: FileDevice::open(&img, true).unwrap(),
        writes: Mutex::default(),
    });
    let fs = Filesystem::open(Box::new(dev.clone()), options(delalloc)).unwrap();
    let bitmaps = block_bitmaps(&fs);
    let free = fs.statfs().blocks_free;
    fs.sync().unwrap();
    dev.writes.lock().unwrap().clear();
    for k in 0..50 {
        let name = format!("tmp{k}");
        let f = fs
            .create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR)
            .unwrap()
            .ino;
        fs.write(f, 0, &vec![k as u8; 64 << 10]).unwrap();
        let mut back = vec![0u8; 64 << 10];
        assert_eq!(fs.read_file_at(f, 0, &mut back).unwrap(), 64 << 10);
        assert!(back.iter().all(|&b| b == k as u8), "reads see the held data");
        fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, free, "space came back");
    let hits = dev
        .writes
        .lock()
        .unwrap()
        .iter()
        .filter(|(lo, hi)| bitmaps.iter().any(|(b0, b1)| lo < b1 && b0 < hi))
        .count();
    let requests = fs.mb_stats().requests;
    clean(fs, &img);
    Some((hits, requests))
}

#[test]
fn files_deleted_before_write_back_never_touch_a_block_bitmap() {
    let Some((hits, requests)) = short_lived_files(true) else {
        return;
    };
    let (direct_hits, direct_requests) = short_lived_files(false).unwrap();
    eprintln!("bitmap writes: {hits} delayed, {direct_hits} direct; requests {requests} / {direct_requests}");
    assert_eq!((hits, requests), (0, 0));
    assert!(
        direct_hits > 0 && direct_requests > 0,
        "the count can see bitmap writes"
    );
}

#[test]
fn stat_shows_held_data_and_truncate_drops_it_unallocated() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let fs = open(&img, true);
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    let free = fs.statfs().blocks_free;
    fs.write(f, 10_000, &[7u8; 20_000]).unwrap();
    let seen = fs.metadata(&fs.inode(f).unwrap()).unwrap();
    assert_eq!(seen.size, 30_000);
    assert_eq!(seen.blocks, 6 * 8, "blocks 2..=7 held, in 512-byte units");
    assert!(fs.statfs().blocks_free <= free - 6, "held blocks are reserved");
    let mut buf = vec![9u8; 30_000];
    assert_eq!(fs.read_file_at(f, 0, &mut buf).unwrap(), 30_000);
    assert!(buf[..10_000].iter().all(|&b| b == 0) && buf[10_000..].iter().all(|&b| b == 7));
    // Truncating into the held range cuts the page that holds the end.
    fs.truncate(f, 12_345).unwrap();
    fs.truncate(f, 20_000).unwrap();
    assert_eq!(fs.read_file_at(f, 0, &mut buf).unwrap(), 20_000);
    assert!(buf[10_000..12_345].iter().all(|&b| b == 7));
    assert!(buf[12_345..20_000].iter().all(|&b| b == 0));
    fs.truncate(f, 0).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, free, "nothing allocated, nothing reserved");
    clean(fs, &img);
}

/// Writes 1 MiB pieces to new files until `write` says ENOSPC; returns
/// each file's inode, the bytes it accepted and its fill byte.
fn fill(fs: &Filesystem) -> Vec<(u32, u64, u8)> {
    let mut files = Vec::new();
    'outer: for k in 0.. {
        let name = format!("f{k}");
        let Ok(f) = fs.create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR) else {
            break;
        };
        let mut n = 0u64;
        for _ in 0..8 {
            match fs.write(f.ino, n, &vec![k as u8; 1 << 20]) {
                Ok(w) => n += w as u64,
                Err(Error::NoSpace) => {
                    files.push((f.ino, n, k as u8));
                    break 'outer;
                }
                Err(e) => panic!("{e}"),
            }
        }
        files.push((f.ino, n, k as u8));
    }
    files
}

#[test]
fn enospc_comes_from_write_and_write_back_stores_everything_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let fs = open(&img, true);
    let files = fill(&fs);
    let accepted: u64 = files.iter().map(|f| f.1).sum();
    // Write-back of everything held finds the space it was promised.
    fs.sync().unwrap();
    for &(ino, n, _) in &files {
        assert_eq!(fs.inode(ino).unwrap().size(), n);
    }
    let free = fs.statfs().blocks_free;
    eprintln!("accepted {} MiB; {free} blocks left", accepted >> 20);
    assert!(accepted >= 40 << 20, "stopped early: {accepted}");
    // Data leaves ext4's own reserve (2% of the blocks: what a kernel
    // mount filled to ENOSPC leaves, test resv_clusters) and less than
    // one more 1 MiB piece.
    let resv = fs.geometry().blocks_count / 50;
    assert!(
        (resv..resv + 256).contains(&free),
        "1 MiB pieces leave the {resv}-block reserve and less than 1 MiB: {free} blocks"
    );
    clean(fs, &img);
    let fs = open(&img, true);
    for &(ino, n, k) in &files {
        let mut buf = vec![0u8; n as usize];
        assert_eq!(fs.read_file_at(ino, 0, &mut buf).unwrap() as u64, n);
        assert!(buf.iter().all(|&b| b == k), "inode {ino}");
    }
}

/// Writes `new` as f.tmp, renames it over `f`, commits the running
/// transaction through an fsync of another file, and crashes (the
/// session ends with no write-back). Returns what `f` holds after the
/// journal is replayed.
fn replace_by_rename_then_crash(auto_da_alloc: bool) -> Option<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path(), None, &["-b", "4096"], "64M")?;
    let mut opts = options(true);
    opts.alloc.auto_da_alloc = auto_da_alloc;
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), opts.clone()).unwrap();
    let old = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(old, 0, b"old contents").unwrap();
    fs.sync().unwrap();
    let tmp = fs.create(ROOT_INO, b"f.tmp", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(tmp, 0, b"new contents").unwrap();
    fs.rename(ROOT_INO, b"f.tmp", ROOT_INO, b"f", Default::default())
        .unwrap();
    let other = fs.create(ROOT_INO, b"other", NodeKind::Regular, ATTR).unwrap().ino;
    fs.sync_inode(other).unwrap();
    // The crashed session still holds the image's lock: read a copy.
    let crash = dir.path().join("crash.img");
    std::fs::copy(&img, &crash).unwrap();
    std::mem::forget(fs);
    let fs = Filesystem::open(Box::new(FileDevice::open(&crash, true).unwrap()), opts).unwrap();
    let body = fs.read_all(&fs.resolve(b"/f").unwrap(), 1 << 20).unwrap();
    clean(fs, &crash);
    Some(body)
}

#[test]
fn a_file_renamed_over_another_is_written_back_first() {
    let Some(with) = replace_by_rename_then_crash(true) else {
        return;
    };
    assert_eq!(with, b"new contents");
    // Without it the rename is durable and the data is not: an empty
    // file, never twelve zeros.
    assert_eq!(replace_by_rename_then_crash(false).unwrap(), b"");
}

#[test]
fn delalloc_off_allocates_at_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let fs = open(&img, false);
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    let free = fs.statfs().blocks_free;
    fs.write(f, 0, &[1u8; 8192]).unwrap();
    assert_eq!(fs.map_range(&fs.inode(f).unwrap(), 0, 2).unwrap().len(), 1);
    assert!(fs.statfs().blocks_free < free);
    clean(fs, &img);
}

#[test]
fn unaligned_appends_after_a_write_back_stay_delayed() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let fs = open(&img, true);
    let f = fs.create(ROOT_INO, b"log", NodeKind::Regular, ATTR).unwrap().ino;
    let line = |k: u64| format!("{k:099}\n").into_bytes();
    let mut size = 0u64;
    for k in 0..500 {
        size += fs.write(f, size, &line(k)).unwrap() as u64;
    }
    // Write-back maps the last, partial block: every later append starts
    // in it.
    fs.sync().unwrap();
    let requests = fs.mb_stats().requests;
    for k in 500..10_000 {
        size += fs.write(f, size, &line(k)).unwrap() as u64;
    }
    assert_eq!(
        fs.mb_stats().requests,
        requests,
        "an append allocated before write-back"
    );
    fs.sync().unwrap();
    let inode = fs.inode(f).unwrap();
    assert_eq!(inode.size(), 10_000 * 100);
    assert!(fs.file_frag(&inode).unwrap().extents <= 2);
    let body = fs.read_all(&inode, 1 << 24).unwrap();
    assert!((0..10_000u64).all(|k| body[(k * 100) as usize..(k * 100 + 100) as usize] == line(k)[..]));
    clean(fs, &img);
}

/// One thread writes and deletes files it never opens (so an unlink frees
/// the inode at once, without the inode lock) while another writes
/// everything back over and over: a write-back that took a file's pages
/// must not map them after the file was freed, or into the next file to
/// get its inode number. Blocks so mapped leak (e2fsck: "block bitmap
/// differences").
#[test]
fn write_back_racing_unlinks_leaks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let fs = open(&img, true);
    let free = fs.statfs().blocks_free;
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                fs.sync().unwrap();
            }
        });
        for k in 0..3000u32 {
            let name = format!("f{}", k % 7);
            let f = match fs.create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR) {
                Ok(f) => f.ino,
                Err(Error::Exists(_)) => {
                    fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            fs.write(f, 0, &vec![k as u8; 40_000]).unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    for k in 0..7 {
        let _ = fs.unlink(ROOT_INO, format!("f{k}").as_bytes());
    }
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, free, "blocks leaked");
    clean(fs, &img);
}
