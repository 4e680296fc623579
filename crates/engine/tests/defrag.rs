//! `Filesystem::defrag_file` against its promises: a file fragmented on
//! purpose (written into the one-block holes of a punched filler on a
//! full image, with a hole and unwritten extents inside and past its end)
//! ends in the fewest extents its holes allow, reads back byte-identical
//! with the same holes and unwritten ranges; a crash at any device write
//! of a multi-chunk defrag recovers to a clean image with the file
//! intact; the kernel reads the result and `filefrag` counts the same
//! extents. Every image ends `e2fsck -fn` clean.

#[path = "common/crash_cases.rs"]
mod crash_cases;
#[path = "common/mem_image.rs"]
mod mem_image;

use std::sync::Arc;

use ext4kit_engine::device::{CrashDevice, MemDevice};
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{
    AllocOptions, Attr, BlockDevice, DefragOptions, DefragSkip, Error, FallocMode, Filesystem, NodeKind, OpenOptions,
    ROOT_INO,
};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::tools::{require_tool, run_ok, skip_unless};
use mem_image::assert_clean;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};
const BS: u64 = 4096;
const MAX_LOGICAL: u64 = 1 << 32;

/// A fresh 4 KiB-block ext4 image of `mib` MiB.
fn image(mib: usize) -> Vec<u8> {
    let dev = MemDevice::new(vec![0; mib << 20]);
    let opts = MkfsOptions {
        block_size: Some(4096),
        uuid: Some([7; 16]),
        hash_seed: Some([9; 16]),
        timestamp: Some(1_700_000_000),
        device_zeroed: true,
        ..MkfsOptions::default()
    };
    mkfs(&dev, &opts).expect("mkfs");
    dev.snapshot()
}

/// The engine's `BlockDevice for Arc<D>` lets the test keep a handle on
/// the device it opens.
fn open(dev: Arc<dyn BlockDevice>, opts: OpenOptions) -> Filesystem {
    Filesystem::open(Box::new(dev), opts).expect("open")
}

/// Writes to `ino` until the file system is full, in `piece`-byte writes
/// from `at`; returns where it stopped.
fn fill(fs: &Filesystem, ino: u32, mut at: u64, piece: usize) -> u64 {
    let data = vec![0xf1u8; piece];
    loop {
        match fs.write(ino, at, &data) {
            Ok(_) => at += piece as u64,
            Err(Error::NoSpace) => return at,
            Err(e) => panic!("filling: {e}"),
        }
    }
}

/// What the fragmented file holds, block by block: data at 0..d1, a hole
/// to h, data from h to d2, unwritten to the size `u`, and unwritten past
/// the size to `past`.
#[derive(Clone, Copy)]
struct Layout {
    d1: u64,
    h: u64,
    d2: u64,
    u: u64,
    past: u64,
}

/// Fills `fs`, punches every other block of the filler over enough blocks
/// for `l`, lays `/frag` out in those one-block holes, then removes the
/// filler and commits: `/frag` is in about one extent per block, with
/// plenty of free space around. Returns its inode and contents.
fn fragmented(fs: &Filesystem, l: Layout, seed: u64) -> (u32, Vec<u8>) {
    let filler = fs.create(ROOT_INO, b"filler", NodeKind::Regular, ATTR).unwrap().ino;
    let at = fill(fs, filler, 0, 1 << 20);
    let end = fill(fs, filler, at, BS as usize);
    let need = l.d1 + (l.d2 - l.h) + (l.past - l.d2);
    assert!(end / BS > 2 * need + 256, "the image is too small for {need} holes");
    for b in 0..need + 64 {
        fs.fallocate(filler, (2 * b + 1) * BS, BS, FallocMode::PunchHole)
            .unwrap();
    }
    fs.sync().unwrap();
    let ino = fs.create(ROOT_INO, b"frag", NodeKind::Regular, ATTR).unwrap().ino;
    let mut rng = Rng::new(seed);
    let (a, b) = (rng.bytes((l.d1 * BS) as usize), rng.bytes(((l.d2 - l.h) * BS) as usize));
    // One block per write, as a slow writer would: each lands in a hole.
    for (i, chunk) in a.chunks(BS as usize).enumerate() {
        fs.write(ino, i as u64 * BS, chunk).unwrap();
    }
    for (i, chunk) in b.chunks(BS as usize).enumerate() {
        fs.write(ino, (l.h + i as u64) * BS, chunk).unwrap();
    }
    let alloc = FallocMode::Allocate { keep_size: false };
    fs.fallocate(ino, l.d2 * BS, (l.u - l.d2) * BS, alloc).unwrap();
    let keep = FallocMode::Allocate { keep_size: true };
    fs.fallocate(ino, l.u * BS, (l.past - l.u) * BS, keep).unwrap();
    fs.unlink(ROOT_INO, b"filler").unwrap();
    fs.sync().unwrap();
    let mut want = a;
    want.resize((l.h * BS) as usize, 0);
    want.extend_from_slice(&b);
    want.resize((l.u * BS) as usize, 0);
    (ino, want)
}

/// The file's mapping without its physical places: (logical, length,
/// unwritten) of each stretch, neighbours of one kind merged.
fn shape(fs: &Filesystem, ino: u32) -> Vec<(u64, u64, bool)> {
    let inode = fs.inode(ino).unwrap();
    let mut out: Vec<(u64, u64, bool)> = Vec::new();
    for r in fs.map_range(&inode, 0, MAX_LOGICAL).unwrap() {
        match out.last_mut() {
            Some(p) if p.0 + p.1 == r.logical && p.2 == r.unwritten => p.1 += r.len,
            _ => out.push((r.logical, r.len, r.unwritten)),
        }
    }
    out
}

fn contents(fs: &Filesystem, ino: u32) -> Vec<u8> {
    fs.read_all(&fs.inode(ino).unwrap(), 1 << 30).unwrap()
}

const LAYOUT: Layout = Layout {
    d1: 600,
    h: 700,
    d2: 1200,
    u: 1400,
    past: 1450,
};

#[test]
fn a_fragmented_file_ends_in_the_fewest_extents_with_holes_and_unwritten_kept() {
    let dev = Arc::new(MemDevice::new(image(48)));
    let fs = open(dev.clone(), OpenOptions::default());
    let (ino, want) = fragmented(&fs, LAYOUT, 1);
    let before_shape = shape(&fs, ino);
    assert_eq!(
        before_shape,
        vec![(0, 600, false), (700, 500, false), (1200, 250, true)],
        "the test's own layout"
    );
    let frag_before = fs.file_frag(&fs.inode(ino).unwrap()).unwrap();
    assert!(frag_before.extents > 1000, "not fragmented: {frag_before:?}");

    // A dry run plans the same result and writes nothing.
    let bytes = dev.snapshot();
    let small = DefragOptions {
        chunk_blocks: 256,
        ..DefragOptions::default()
    };
    let dry = fs.defrag_file(ino, &DefragOptions { dry_run: true, ..small }).unwrap();
    assert!(dev.snapshot() == bytes, "a dry run changed the image");
    assert_eq!((dry.skipped, dry.after.extents, dry.blocks_moved), (None, 2, 1350));

    let out = fs.defrag_file(ino, &small).unwrap();
    eprintln!("defrag: {out:?}");
    assert_eq!(out.skipped, None);
    assert_eq!((out.fewest, out.after.extents), (2, 2), "{out:?}");
    assert_eq!((out.blocks_moved, out.transactions), (1350, 6));
    assert!(out.before.extents > 1000);
    let frag_after = fs.file_frag(&fs.inode(ino).unwrap()).unwrap();
    assert_eq!(frag_after.extents, 2, "{frag_after:?}");
    assert_eq!(
        shape(&fs, ino),
        before_shape,
        "holes and unwritten extents moved or changed"
    );
    assert!(contents(&fs, ino) == want, "contents differ after defrag");

    let again = fs.defrag_file(ino, &DefragOptions::default()).unwrap();
    assert_eq!(again.skipped, Some(DefragSkip::AlreadyBest));
    fs.unmount().unwrap();
    let fs = open(dev.clone(), OpenOptions::default());
    assert!(contents(&fs, ino) == want, "contents differ after reopening");
    fs.unmount().unwrap();
    assert_clean(&dev.snapshot(), "after defrag");
}

/// Two files written alternately in 4 KiB pieces, with per-file windows
/// off (`mb_inode_prealloc=0`), interleave block by block; each
/// defragments into a single extent in four chunks.
#[test]
fn two_interleaved_files_each_end_in_one_extent() {
    let dev = Arc::new(MemDevice::new(image(32)));
    // Interleaved block by block: no window, no delayed allocation (which
    // would give each file its extent at write-back).
    let no_window = OpenOptions {
        alloc: AllocOptions {
            inode_prealloc: false,
            delalloc: false,
            ..AllocOptions::default()
        },
        ..OpenOptions::default()
    };
    let fs = open(dev.clone(), no_window);
    let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", NodeKind::Regular, ATTR).unwrap().ino;
    let mut rng = Rng::new(5);
    let (da, db) = (rng.bytes(1000 * BS as usize), rng.bytes(1000 * BS as usize));
    for i in 0..1000 {
        let r = i * BS as usize..(i + 1) * BS as usize;
        fs.write(a, r.start as u64, &da[r.clone()]).unwrap();
        fs.write(b, r.start as u64, &db[r]).unwrap();
    }
    fs.unmount().unwrap();
    let fs = open(dev.clone(), OpenOptions::default());
    let opts = DefragOptions {
        chunk_blocks: 256,
        ..DefragOptions::default()
    };
    for (ino, want) in [(a, &da), (b, &db)] {
        let out = fs.defrag_file(ino, &opts).unwrap();
        eprintln!("{out:?}");
        assert!(out.before.extents >= 500, "not interleaved: {out:?}");
        assert_eq!((out.after.extents, out.transactions), (1, 4), "{out:?}");
        assert!(&contents(&fs, ino) == want);
    }
    fs.unmount().unwrap();
    assert_clean(&dev.snapshot(), "after defragmenting two interleaved files");
}

/// A file open for writing keeps a window over the free run after its
/// last block until its last close; when that hides the space another
/// file's defrag needs, the windows go first (as every allocation does
/// on ENOSPC, and the kernel's `ext4_mb_discard_preallocations`). Seen
/// through `ext4kit defrag` on a mount while another file was written.
#[test]
fn windows_of_open_files_give_way_to_a_defrag() {
    let dev = Arc::new(MemDevice::new(image(32)));
    let no_window = OpenOptions {
        alloc: AllocOptions {
            inode_prealloc: false,
            delalloc: false,
            ..AllocOptions::default()
        },
        ..OpenOptions::default()
    };
    let fs = open(dev.clone(), no_window);
    let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", NodeKind::Regular, ATTR).unwrap().ino;
    let piece = vec![0x3cu8; BS as usize];
    for i in 0..1000 {
        fs.write(a, i * BS, &piece).unwrap();
        fs.write(b, i * BS, &piece).unwrap();
    }
    fs.unmount().unwrap();
    let fs = open(dev.clone(), OpenOptions::default());
    fs.open_file(b).unwrap();
    fs.write(b, 1000 * BS, &piece).unwrap();
    fs.sync().unwrap();
    let out = fs.defrag_file(a, &DefragOptions::default()).unwrap();
    eprintln!("{out:?}");
    assert_eq!((out.skipped, out.after.extents), (None, 1), "{out:?}");
    fs.release_file(b).unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev.snapshot(), "after a defrag beside an open file");
}

#[test]
fn files_that_cannot_or_need_not_move_are_skipped() {
    let dev = Arc::new(MemDevice::new(image(16)));
    let fs = open(dev.clone(), OpenOptions::default());
    let one = fs.create(ROOT_INO, b"one", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(one, 0, &vec![1u8; 1 << 20]).unwrap();
    let empty = fs.create(ROOT_INO, b"empty", NodeKind::Regular, ATTR).unwrap().ino;
    let frozen = fs.create(ROOT_INO, b"frozen", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(frozen, 0, &[2u8; 8192]).unwrap();
    let ext = ext4kit_format::inode::flags::EXTENTS;
    fs.set_flags(frozen, ext | ext4kit_format::inode::flags::IMMUTABLE, true)
        .unwrap();
    let log = fs.create(ROOT_INO, b"log", NodeKind::Regular, ATTR).unwrap().ino;
    fs.set_flags(log, ext | ext4kit_format::inode::flags::APPEND, true)
        .unwrap();
    let dir = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap().ino;
    let opts = DefragOptions::default();
    let skip = |ino| fs.defrag_file(ino, &opts).unwrap().skipped;
    assert_eq!(skip(one), Some(DefragSkip::AlreadyBest));
    assert_eq!(skip(empty), Some(DefragSkip::AlreadyBest));
    assert_eq!(skip(frozen), Some(DefragSkip::Immutable));
    assert_eq!(skip(log), Some(DefragSkip::AppendOnly));
    assert_eq!(skip(dir), Some(DefragSkip::NotRegular));
    assert_eq!(skip(8), Some(DefragSkip::Special), "the journal");
    fs.unmount().unwrap();
    assert_clean(&dev.snapshot(), "after skips");
}

#[test]
fn block_mapped_files_are_skipped() {
    let dev = MemDevice::new(vec![0; 16 << 20]);
    let opts = MkfsOptions {
        fs_type: ext4kit_engine::mkfs::FsType::Ext3,
        device_zeroed: true,
        ..MkfsOptions::default()
    };
    mkfs(&dev, &opts).unwrap();
    let dev = Arc::new(MemDevice::new(dev.snapshot()));
    let fs = open(dev.clone(), OpenOptions::default());
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(f, 0, &[3u8; 20000]).unwrap();
    let out = fs.defrag_file(f, &DefragOptions::default()).unwrap();
    assert_eq!(out.skipped, Some(DefragSkip::BlockMapped));
    fs.unmount().unwrap();
    assert_clean(&dev.snapshot(), "ext3 image");
}

const SMALL: Layout = Layout {
    d1: 150,
    h: 170,
    d2: 300,
    u: 330,
    past: 340,
};

/// Power cut at every device write of a four-chunk defrag (nothing after
/// the cut survives, everything survives, or a random torn and reordered
/// subset): the engine recovers the journal, e2fsck finds the image clean,
/// and the file reads back as it was with its holes and unwritten ranges.
#[test]
fn a_crash_at_any_write_of_a_defrag_leaves_the_file_intact() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        assert!(std::env::var_os("CI").is_none(), "e2fsck is missing under CI");
        return;
    }
    let base = Arc::new(MemDevice::new(image(16)));
    let fs = open(base.clone(), OpenOptions::default());
    let (ino, want) = fragmented(&fs, SMALL, 2);
    let want_shape = shape(&fs, ino);
    fs.unmount().unwrap();
    let dev = Arc::new(CrashDevice::with_atomic_unit(base.snapshot(), 4096));
    // Every commit flushed: each chunk is a journal transaction of its
    // own, so cuts fall between chunks as well as inside them.
    let opts = OpenOptions {
        sync_writes: true,
        ..OpenOptions::default()
    };
    let fs = open(dev.clone(), opts);
    let start = dev.writes();
    let out = fs
        .defrag_file(
            ino,
            &DefragOptions {
                chunk_blocks: 80,
                ..DefragOptions::default()
            },
        )
        .unwrap();
    assert_eq!((out.transactions, out.after.extents), (4, 2), "{out:?}");
    fs.unmount().unwrap();
    let end = dev.writes();
    eprintln!("defrag of {} blocks: writes {start}..{end}", out.blocks_moved);
    let (mut checked, mut layouts) = (0, std::collections::BTreeSet::new());
    for (point, s) in crash_cases::at_points(&dev, start..=end) {
        let img = dev.crash_image(point, s);
        let mem = Arc::new(MemDevice::new(img));
        let fs = open(mem.clone(), OpenOptions::default());
        assert!(contents(&fs, ino) == want, "point {point} ({s:?}): contents differ");
        assert_eq!(shape(&fs, ino), want_shape, "point {point} ({s:?}): mapping shape");
        layouts.insert(fs.file_frag(&fs.inode(ino).unwrap()).unwrap().extents);
        fs.unmount().unwrap();
        assert_clean(&mem.snapshot(), &format!("crash at write {point} ({s:?})"));
        checked += 1;
    }
    eprintln!("{checked} crash images checked; extent counts seen: {layouts:?}");
    // The old layout, the new one and chunks in between were all cut.
    assert!(layouts.len() >= 4, "{layouts:?}");
}

/// `filefrag -v`'s rows as (logical, physical, length, unwritten) and its
/// count, which joins runs contiguous on disk even across a hole.
fn filefrag(path: &std::path::Path) -> (Vec<(u64, u64, u64, bool)>, u64) {
    let out = run_ok("filefrag", &["-v", path.to_str().unwrap()]).unwrap().stdout;
    let rows = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let num = |s: &str| s.trim_end_matches([':', '.']).parse::<u64>().ok();
            (f.len() >= 6 && f[0].ends_with(':') && num(f[0]).is_some()).then(|| {
                let unwritten = l.contains("unwritten");
                (num(f[1]).unwrap(), num(f[3]).unwrap(), num(f[5]).unwrap(), unwritten)
            })
        })
        .collect();
    let count = out
        .lines()
        .find_map(|l| {
            let tail = l.rsplit(": ").next()?;
            tail.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no count in:\n{out}"));
    (rows, count)
}

/// The kernel mounts the result read-only, reads the same bytes, and
/// `filefrag -v` (FIEMAP, the kernel's own walk of the tree) lists the
/// extents the engine sees, row for row.
#[test]
fn the_kernel_reads_a_defragmented_file() {
    if skip_unless(can_loop_mount()).is_none() || skip_unless(require_tool("filefrag")).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root with e2fsprogs");
        return;
    }
    let dev = Arc::new(MemDevice::new(image(48)));
    let fs = open(dev.clone(), OpenOptions::default());
    let (ino, want) = fragmented(&fs, LAYOUT, 4);
    let out = fs.defrag_file(ino, &DefragOptions::default()).unwrap();
    let ours: Vec<(u64, u64, u64, bool)> = fs
        .map_range(&fs.inode(ino).unwrap(), 0, MAX_LOGICAL)
        .unwrap()
        .iter()
        .map(|r| (r.logical, r.physical, r.len, r.unwritten))
        .collect();
    fs.unmount().unwrap();
    assert_eq!(out.after.extents, 2, "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("defrag.img");
    std::fs::write(&img, dev.snapshot()).unwrap();
    assert_clean(&dev.snapshot(), "before the kernel mount");
    let mnt = LoopMount::ro(&img).unwrap();
    let path = mnt.path().join("frag");
    assert!(std::fs::read(&path).unwrap() == want, "the kernel reads other bytes");
    let (rows, count) = filefrag(&path);
    mnt.unmount().unwrap();
    assert_eq!(rows, ours, "filefrag -v rows against the engine's runs");
    // One run on disk: filefrag counts 1 where `frag` counts the hole.
    let on_disk = 1 + ours.windows(2).filter(|w| w[0].1 + w[0].2 != w[1].1).count() as u64;
    assert_eq!((count, on_disk), (1, 1), "{rows:?}");
}
