//! fallocate (preallocate, keep-size, punch hole, zero range), writes into
//! unwritten extents and SEEK_DATA/SEEK_HOLE against the oracles: every
//! image passes `e2fsck -fn`; the kernel (read-only loop mount) reads the
//! same bytes as a byte model of each file, its FIEMAP view (`filefrag -v`)
//! shows exactly the engine's mapping, unwritten flags included, and its
//! lseek(2) agrees with ours; a twin image run through the kernel's own
//! fallocate(2) ends with the same contents and block counts.

mod common;

use std::path::{Path, PathBuf};

use common::mkfs;
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, Error, FallocMode, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};
const KEEP: FallocMode = FallocMode::Allocate { keep_size: true };
const ALLOC: FallocMode = FallocMode::Allocate { keep_size: false };
const PUNCH: FallocMode = FallocMode::PunchHole;
const ZERO: FallocMode = FallocMode::ZeroRange { keep_size: false };
const ZERO_KEEP: FallocMode = FallocMode::ZeroRange { keep_size: true };

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

fn open_rw(img: &Path) -> Filesystem {
    let dev = FileDevice::open(img, true).expect("open rw");
    Filesystem::open(Box::new(dev), OpenOptions::default()).expect("open fs")
}

/// Writes file `fill` until the file system is full.
fn fill(fs: &Filesystem) {
    let f = fs.create(ROOT_INO, b"fill", NodeKind::Regular, ATTR).unwrap().ino;
    let mut at = 0u64;
    for chunk in [256u64 << 10, 1024] {
        while fs.write(f, at, &vec![9u8; chunk as usize]).is_ok() {
            at += chunk;
        }
    }
}

fn mount_ok() -> bool {
    match can_loop_mount() {
        Ok(()) => true,
        Err(why) => {
            ext4kit_testkit::skipped!("kernel checks ({why})");
            false
        }
    }
}

/// One step applied to a file: by the engine, to the byte model, or by the kernel.
#[derive(Debug, Clone)]
enum Op {
    Write(u64, Vec<u8>),
    Falloc(FallocMode, u64, u64),
}

fn model_apply(m: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write(off, d) => {
            let (off, end) = (*off as usize, *off as usize + d.len());
            if m.len() < end {
                m.resize(end, 0);
            }
            m[off..end].copy_from_slice(d);
        }
        Op::Falloc(mode, off, len) => {
            let (off, end) = (*off as usize, (*off + *len) as usize);
            let grows = matches!(
                mode,
                FallocMode::Allocate { keep_size: false } | FallocMode::ZeroRange { keep_size: false }
            );
            if grows && end > m.len() {
                m.resize(end, 0);
            }
            if matches!(mode, FallocMode::PunchHole | FallocMode::ZeroRange { .. }) {
                let end = end.min(m.len());
                if off < end {
                    m[off..end].fill(0);
                }
            }
        }
    }
}

fn engine_apply(fs: &Filesystem, ino: u32, op: &Op) {
    match op {
        Op::Write(off, d) => {
            fs.write(ino, *off, d).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        }
        Op::Falloc(mode, off, len) => fs
            .fallocate(ino, *off, *len, *mode)
            .unwrap_or_else(|e| panic!("{mode:?} {off} {len}: {e}")),
    }
}

fn kernel_apply(path: &Path, op: &Op) {
    use std::os::unix::fs::FileExt;
    match op {
        Op::Write(off, d) => {
            let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            f.write_all_at(d, *off).unwrap();
        }
        Op::Falloc(mode, off, len) => {
            let mut args: Vec<String> = match mode {
                FallocMode::Allocate { keep_size: false } => vec![],
                FallocMode::Allocate { keep_size: true } => vec!["-n".into()],
                FallocMode::PunchHole => vec!["-p".into()],
                FallocMode::ZeroRange { keep_size } => {
                    let mut v = vec!["-z".to_string()];
                    if *keep_size {
                        v.push("-n".into());
                    }
                    v
                }
            };
            args.extend(["-o".into(), off.to_string(), "-l".into(), len.to_string()]);
            args.push(path.to_str().unwrap().into());
            common::run("fallocate", &args.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
}

/// A mapped run: (logical, physical, length, unwritten).
type Span = (u64, u64, u64, bool);

/// Runs merged where logically and physically contiguous with the same flag,
/// so two views that cut extents differently compare equal.
fn merged(runs: impl IntoIterator<Item = Span>) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for r in runs {
        match out.last_mut() {
            Some(p) if p.0 + p.2 == r.0 && p.1 + p.2 == r.1 && p.3 == r.3 => p.2 += r.2,
            _ => out.push(r),
        }
    }
    out
}

fn engine_map(fs: &Filesystem, path: &str) -> Vec<Span> {
    let inode = fs.resolve(format!("/{path}").as_bytes()).unwrap();
    let runs = fs.map_range(&inode, 0, 1 << 32).unwrap();
    merged(runs.iter().map(|r| (r.logical, r.physical, r.len, r.unwritten)))
}

/// The kernel's FIEMAP view of `path` through `filefrag -v`.
fn filefrag_map(path: &Path) -> Vec<Span> {
    let out = common::run("filefrag", &["-v", path.to_str().unwrap()]);
    let mut runs = Vec::new();
    for line in out.lines() {
        let parts: Vec<&str> = line.split(':').collect();
        if parts.len() < 5 || parts[0].trim().parse::<u64>().is_err() {
            continue;
        }
        let first = |s: &str| s.split("..").next().unwrap().trim().parse::<u64>().unwrap();
        let len = parts[3].trim().parse::<u64>().unwrap();
        runs.push((first(parts[1]), first(parts[2]), len, line.contains("unwritten")));
    }
    merged(runs)
}

/// `(SEEK_DATA, SEEK_HOLE)` at each offset, -1 for ENXIO, from the kernel
/// (python's os.lseek: the workspace forbids the unsafe libc call).
fn kernel_seeks(path: &Path, offsets: &[u64]) -> Option<Vec<(i64, i64)>> {
    let script = "import os,sys\nfd=os.open(sys.argv[1],os.O_RDONLY)\nfor a in sys.argv[2:]:\n r=[]\n for w in (os.SEEK_DATA,os.SEEK_HOLE):\n  try: r.append(os.lseek(fd,int(a),w))\n  except OSError: r.append(-1)\n print(r[0],r[1])";
    let mut args = vec!["-c".to_string(), script.into(), path.to_str().unwrap().into()];
    args.extend(offsets.iter().map(u64::to_string));
    let out = std::process::Command::new("python3").args(&args).output().ok()?;
    if !out.status.success() {
        ext4kit_testkit::skipped!("kernel lseek via python3");
        return None;
    }
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        text.lines()
            .map(|l| {
                let mut it = l.split(' ').map(|x| x.parse::<i64>().unwrap());
                (it.next().unwrap(), it.next().unwrap())
            })
            .collect(),
    )
}

fn engine_seeks(fs: &Filesystem, ino: u32, offsets: &[u64]) -> Vec<(i64, i64)> {
    let one = |r: ext4kit_engine::Result<u64>| match r {
        Ok(v) => v as i64,
        Err(e) => {
            assert_eq!(e.errno(), libc::ENXIO, "{e}");
            -1
        }
    };
    offsets
        .iter()
        .map(|&o| (one(fs.seek_data(ino, o)), one(fs.seek_hole(ino, o))))
        .collect()
}

/// e2fsck clean; the engine reads `files`' models; the kernel reads the same
/// bytes, shows the same mapping (unwritten flags included) and seeks the
/// same. Returns each file's mapping as the engine sees it.
fn check(img: &Path, files: &[(&str, &[u8])]) -> Vec<Vec<Span>> {
    let fsck = e2fsck_fn(img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
    let fs = common::open(img, OpenOptions::default()).unwrap();
    let bs = fs.block_size() as u64;
    let mut maps = Vec::new();
    for (path, want) in files {
        let inode = fs.resolve(format!("/{path}").as_bytes()).unwrap();
        assert_eq!(inode.size(), want.len() as u64, "{path}: size");
        assert!(
            fs.read_all(&inode, 1 << 30).unwrap() == *want,
            "{path}: engine contents"
        );
        maps.push(engine_map(&fs, path));
    }
    if !mount_ok() {
        return maps;
    }
    let mnt = LoopMount::ro(img).expect("kernel mount");
    for ((path, want), map) in files.iter().zip(&maps) {
        let p = mnt.path().join(path);
        let ino = fs.resolve(format!("/{path}").as_bytes()).unwrap().ino;
        let offsets: Vec<u64> = (0..=want.len() as u64 / (bs / 2) + 2)
            .map(|i| i * (bs / 2) + i % 3)
            .take(400)
            .collect();
        if let Some(k) = kernel_seeks(&p, &offsets) {
            assert_eq!(engine_seeks(&fs, ino, &offsets), k, "{path}: SEEK_DATA/SEEK_HOLE");
        }
        assert_eq!(filefrag_map(&p), *map, "{path}: kernel FIEMAP vs engine mapping");
        assert!(std::fs::read(&p).unwrap() == *want, "{path}: kernel contents");
    }
    mnt.unmount().unwrap();
    maps
}

fn unwritten_blocks(map: &[Span]) -> Vec<(u64, u64)> {
    map.iter().filter(|r| r.3).map(|r| (r.0, r.2)).collect()
}

fn new_image(args: &[&str], size: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path(), None, args, size)?;
    Some((dir, img))
}

/// Runs `ops` on a new file `name` and its model; returns the model.
fn run_ops(fs: &Filesystem, name: &str, ops: &[Op]) -> Vec<u8> {
    let ino = fs
        .create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR)
        .unwrap()
        .ino;
    let mut model = Vec::new();
    for op in ops {
        engine_apply(fs, ino, op);
        model_apply(&mut model, op);
    }
    model
}

/// Preallocation with and without keep-size, over holes, data and EOF, with
/// unaligned edges; then writes into the middle of unwritten extents.
fn allocate_case(bs: u64) {
    let Some((_d, img)) = new_image(&["-b", &bs.to_string()], "64M") else {
        return;
    };
    let head = pattern(3 * bs as usize + 100, 1);
    let ops = [
        Op::Write(0, head.clone()),
        Op::Falloc(ALLOC, 2 * bs + 7, 10 * bs),
        Op::Falloc(KEEP, 20 * bs + 1, 5 * bs),
        Op::Write(4 * bs + 10, pattern(100, 2)),
        Op::Write(7 * bs - 50, pattern(bs as usize + 100, 3)),
        Op::Falloc(KEEP, 0, 30 * bs),
    ];
    let model = {
        let fs = open_rw(&img);
        let model = run_ops(&fs, "f", &ops);
        // Mode 0 with a range inside the file: size unchanged.
        let ino = fs.resolve(b"/f").unwrap().ino;
        fs.fallocate(ino, 0, 100, ALLOC).unwrap();
        model
    };
    assert_eq!(model.len() as u64, 12 * bs + 7);
    let maps = check(&img, &[("f", &model)]);
    // Blocks 0..=3 initialized (data), 4 and 6..=8 written into, the rest unwritten to 30.
    assert_eq!(
        unwritten_blocks(&maps[0]).iter().map(|r| r.1).sum::<u64>(),
        30 - 4 - 1 - 3,
        "{:?}",
        maps[0]
    );
    assert!(maps[0].iter().all(|r| r.0 + r.2 <= 30));
}

#[test]
fn allocate_4k() {
    allocate_case(4096);
}

#[test]
fn allocate_1k() {
    allocate_case(1024);
}

/// A write into the middle of one unwritten extent splits it into three;
/// partial blocks read zeros around the written bytes.
#[test]
fn write_into_middle_of_unwritten_extent() {
    let Some((_d, img)) = new_image(&["-b", "4096"], "64M") else {
        return;
    };
    let model = {
        let fs = open_rw(&img);
        run_ops(
            &fs,
            "f",
            &[
                Op::Falloc(ALLOC, 0, 64 << 12),
                Op::Write((20 << 12) + 300, pattern(9000, 5)),
            ],
        )
    };
    let maps = check(&img, &[("f", &model)]);
    assert_eq!(unwritten_blocks(&maps[0]), vec![(0, 20), (23, 41)], "{:?}", maps[0]);
    assert_eq!(maps[0].len(), 3, "{:?}", maps[0]);
    assert!(
        maps[0].windows(2).all(|w| w[0].1 + w[0].2 == w[1].1),
        "one physical run: {:?}",
        maps[0]
    );
}

fn punch_case(bs: u64) {
    let Some((_d, img)) = new_image(&["-b", &bs.to_string()], "64M") else {
        return;
    };
    let n = 40 * bs as usize;
    let (a, b) = {
        let fs = open_rw(&img);
        // Four extents: data, hole, data in two fragments, unwritten tail past EOF.
        let a = run_ops(
            &fs,
            "a",
            &[
                Op::Write(0, pattern(10 * bs as usize, 1)),
                Op::Write(20 * bs, pattern(5 * bs as usize, 2)),
                Op::Write(30 * bs, pattern(n - 30 * bs as usize - 123, 3)),
                Op::Falloc(KEEP, 0, 50 * bs),
                // Across the data/unwritten and unwritten/data boundaries, unaligned.
                Op::Falloc(PUNCH, 8 * bs + 5, 14 * bs),
                // Inside one block.
                Op::Falloc(PUNCH, 31 * bs + 10, 20),
                // From inside the file to far past EOF: stops at the page holding EOF.
                Op::Falloc(PUNCH, 36 * bs + 1, 100 * bs),
                // At EOF: nothing.
                Op::Falloc(PUNCH, n as u64, bs),
            ],
        );
        let b = run_ops(
            &fs,
            "b",
            &[
                Op::Falloc(ALLOC, 0, 16 * bs),
                Op::Write(3 * bs, pattern(2 * bs as usize, 4)),
                // Partial blocks inside unwritten extents need nothing.
                Op::Falloc(PUNCH, bs / 2, 2 * bs),
                Op::Falloc(PUNCH, 4 * bs + 3, 4 * bs),
            ],
        );
        (a, b)
    };
    let maps = check(&img, &[("a", &a), ("b", &b)]);
    let covered = |m: &[Span], l: u64| m.iter().any(|r| r.0 <= l && l < r.0 + r.2);
    assert!(!covered(&maps[0], 9) && covered(&maps[0], 8) && covered(&maps[0], 22));
    // The punch past EOF stops at the end of the page holding EOF.
    let page_end = (n as u64 - 123).next_multiple_of(4096.max(bs)) / bs;
    assert!(
        covered(&maps[0], page_end) && !covered(&maps[0], page_end - 1),
        "{:?}",
        maps[0]
    );
    assert!(!covered(&maps[1], 1) && covered(&maps[1], 0) && covered(&maps[1], 2));
}

#[test]
fn punch_4k() {
    punch_case(4096);
}

#[test]
fn punch_1k() {
    punch_case(1024);
}

fn zero_case(bs: u64) {
    let Some((_d, img)) = new_image(&["-b", &bs.to_string()], "64M") else {
        return;
    };
    let model = {
        let fs = open_rw(&img);
        run_ops(
            &fs,
            "f",
            &[
                Op::Write(0, pattern(20 * bs as usize, 9)),
                // Written whole blocks become unwritten; the edges are zeroed.
                Op::Falloc(ZERO, bs + 500, 9 * bs),
                // Past EOF over a hole: allocated unwritten, size grows.
                Op::Falloc(ZERO, 29 * bs + 500, 10 * bs),
                // Keep size past EOF.
                Op::Falloc(ZERO_KEEP, 45 * bs, 3 * bs),
                // Inside one written block.
                Op::Falloc(ZERO, 15 * bs + 1, 10),
            ],
        )
    };
    assert_eq!(model.len() as u64, 39 * bs + 500);
    let maps = check(&img, &[("f", &model)]);
    assert_eq!(
        unwritten_blocks(&maps[0]),
        vec![(2, 8), (29, 11), (45, 3)],
        "{:?}",
        maps[0]
    );
}

#[test]
fn zero_range_4k() {
    zero_case(4096);
}

#[test]
fn zero_range_1k() {
    zero_case(1024);
}

/// Free space cut into single blocks makes a preallocated file a multi-level
/// tree of one-block unwritten extents; writes, zeroing and punching work
/// through it, and punching everything empties it back to an inode root.
/// The single blocks are every other block of a file punched on a full
/// file system, so no allocator can find longer runs.
#[test]
fn fragmented_multi_level_trees() {
    let bs = 1024u64;
    let Some((_d, img)) = new_image(&["-b", "1024", "-O", "^has_journal"], "32M") else {
        return;
    };
    let (a, c) = {
        let fs = open_rw(&img);
        let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR).unwrap().ino;
        let t = fs.create(ROOT_INO, b"t", NodeKind::Regular, ATTR).unwrap().ino;
        let mut am = Vec::new();
        for i in 0..1200u64 {
            let d = pattern(bs as usize, i as u8);
            fs.write(a, i * bs, &d).unwrap();
            am.extend_from_slice(&d);
        }
        fs.write(t, 0, &pattern(2000 * bs as usize, 3)).unwrap();
        // No run may stay whole: the kernel's reserve goes to data too
        // (root's `reserved_clusters` knob at 0).
        fs.set_reserved_clusters(0).unwrap();
        fill(&fs);
        for i in (0..2000u64).step_by(2) {
            fs.fallocate(t, i * bs, bs, PUNCH).unwrap();
        }
        let ops = [
            Op::Falloc(ALLOC, 0, 900 * bs),
            Op::Write(400 * bs + 10, pattern(3 * bs as usize, 7)),
            Op::Falloc(PUNCH, 100 * bs + 1, 200 * bs),
            Op::Falloc(ZERO, 700 * bs, 400 * bs),
        ];
        let cm = run_ops(&fs, "c", &ops);
        for op in [Op::Falloc(ZERO, 300 * bs + 3, 500 * bs), Op::Write(50 * bs, vec![1; 2])] {
            engine_apply(&fs, a, &op);
            model_apply(&mut am, &op);
        }
        (am, cm)
    };
    let depth = |p: &str| {
        let out = common::run("debugfs", &["-R", &format!("ex /{p}"), img.to_str().unwrap()]);
        out.lines().nth(1).map(|l| l.trim().to_string()).unwrap_or_default()
    };
    assert!(
        depth("c").starts_with("0/ 2") || depth("c").starts_with("0/ 1"),
        "{}",
        depth("c")
    );
    let maps = check(&img, &[("a", &a), ("c", &c)]);
    assert!(maps[1].len() > 300, "c is fragmented: {} runs", maps[1].len());
    {
        let fs = open_rw(&img);
        let c = fs.resolve(b"/c").unwrap().ino;
        for start in (0..1100u64).step_by(137) {
            fs.fallocate(c, start * bs, 137 * bs, PUNCH).unwrap();
        }
        let inode = fs.resolve(b"/c").unwrap();
        assert_eq!(fs.metadata(&inode).unwrap().blocks, 0, "every block freed");
        assert_eq!(fs.extent_tree(&inode).unwrap().len(), 1, "root only");
    }
    let zeros = vec![0u8; c.len()];
    check(&img, &[("a", &a), ("c", &zeros)]);
}

/// A depth-1 tree (one leaf of 300 extents) punched front to back until empty.
#[test]
fn punch_depth_one_tree_until_empty() {
    let bs = 4096u64;
    let Some((_d, img)) = new_image(&["-b", "4096"], "64M") else {
        return;
    };
    let mut model = Vec::new();
    {
        let fs = open_rw(&img);
        let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
        for i in (0..600u64).step_by(2) {
            let op = Op::Write(i * bs, pattern(bs as usize, i as u8));
            engine_apply(&fs, f, &op);
            model_apply(&mut model, &op);
        }
        fs.sync().unwrap();
        let inode = fs.resolve(b"/f").unwrap();
        assert_eq!(fs.extent_tree(&inode).unwrap()[0].1.depth, 1);
    }
    check(&img, &[("f", &model)]);
    for chunk in 0..6u64 {
        {
            let fs = open_rw(&img);
            let f = fs.resolve(b"/f").unwrap().ino;
            let op = match chunk {
                0 => Op::Falloc(PUNCH, 1, 100 * bs - 1),
                _ => Op::Falloc(PUNCH, chunk * 100 * bs, 100 * bs),
            };
            engine_apply(&fs, f, &op);
            model_apply(&mut model, &op);
        }
        let fsck = e2fsck_fn(&img).unwrap();
        assert!(fsck.is_clean(), "after punch {chunk}:\n{}", fsck.output);
    }
    let fs = common::open(&img, OpenOptions::default()).unwrap();
    let inode = fs.resolve(b"/f").unwrap();
    assert_eq!(fs.extent_tree(&inode).unwrap().len(), 1, "back to an inode root");
    assert_eq!(fs.metadata(&inode).unwrap().blocks, 8, "block 0 keeps its first byte");
    drop(fs);
    check(&img, &[("f", &model)]);
}

/// SEEK_DATA/SEEK_HOLE over data, holes, unwritten extents and the implicit
/// hole at EOF (compared with the kernel in `check`), plus fixed answers.
#[test]
fn seek_data_and_hole() {
    let bs = 4096u64;
    let Some((_d, img)) = new_image(&["-b", "4096"], "64M") else {
        return;
    };
    let model = {
        let fs = open_rw(&img);
        let model = run_ops(
            &fs,
            "f",
            &[
                Op::Write(0, pattern(2 * bs as usize, 1)),
                Op::Falloc(KEEP, 4 * bs, 4 * bs),
                Op::Write(8 * bs, pattern(bs as usize, 2)),
                Op::Falloc(ALLOC, 9 * bs, 3 * bs + 5),
            ],
        );
        let f = fs.resolve(b"/f").unwrap().ino;
        assert_eq!(fs.seek_data(f, 100).unwrap(), 100);
        assert_eq!(fs.seek_hole(f, 100).unwrap(), 2 * bs);
        assert_eq!(fs.seek_data(f, 2 * bs).unwrap(), 8 * bs, "unwritten counts as a hole");
        assert_eq!(fs.seek_hole(f, 8 * bs + 1).unwrap(), 9 * bs);
        let e = fs.seek_data(f, 9 * bs).unwrap_err();
        assert_eq!(e.errno(), libc::ENXIO);
        assert_eq!(fs.seek_hole(f, 12 * bs + 4).unwrap(), 12 * bs + 4);
        assert_eq!(fs.seek_hole(f, 12 * bs + 5).unwrap_err().errno(), libc::ENXIO);
        model
    };
    check(&img, &[("f", &model)]);
}

/// ENOSPC half-way through a large preallocation or zeroing leaves every
/// byte of the image as it was.
#[test]
fn enospc_changes_nothing() {
    let Some((_d, img)) = new_image(&["-b", "1024", "-O", "^has_journal"], "8M") else {
        return;
    };
    let fs = open_rw(&img);
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(f, 0, &pattern(100 << 10, 3)).unwrap();
    fs.sync().unwrap();
    let before = std::fs::read(&img).unwrap();
    for (mode, off) in [(ALLOC, 0), (KEEP, 1 << 20), (ZERO, 50 << 10)] {
        let e = fs.fallocate(f, off, 64 << 20, mode).unwrap_err();
        assert!(matches!(e, Error::NoSpace), "{mode:?}: {e}");
        fs.sync().unwrap();
        assert!(std::fs::read(&img).unwrap() == before, "{mode:?} changed the image");
    }
    let e = fs.fallocate(f, 0, 0, ALLOC).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    drop(fs);
    check(&img, &[("f", &pattern(100 << 10, 3))]);
}

/// ext3 (block maps): preallocation and zeroing are EOPNOTSUPP, as in the
/// kernel; punching frees data and emptied indirect blocks.
#[test]
fn ext3_block_maps() {
    let bs = 1024u64;
    let Some((_d, img)) = new_image(&["-t", "ext3", "-b", "1024"], "64M") else {
        return;
    };
    let model = {
        let fs = open_rw(&img);
        let ops = [
            Op::Write(0, pattern(700 * bs as usize + 77, 8)),
            // Direct and single indirect, unaligned.
            Op::Falloc(PUNCH, 5 * bs + 9, 20 * bs),
            // All of the first double-indirect child (blocks 268..524).
            Op::Falloc(PUNCH, 268 * bs, 256 * bs),
            Op::Falloc(PUNCH, 600 * bs, 10),
        ];
        let model = run_ops(&fs, "f", &ops);
        let f = fs.resolve(b"/f").unwrap().ino;
        for mode in [ALLOC, KEEP, ZERO, ZERO_KEEP] {
            let e = fs.fallocate(f, 0, bs, mode).unwrap_err();
            assert_eq!(e.errno(), libc::EOPNOTSUPP, "{mode:?}: {e}");
        }
        model
    };
    check(&img, &[("f", &model)]);
}

#[test]
fn linux_flags_map_like_the_kernel() {
    let ok = |f: u32| FallocMode::from_linux_flags(f).unwrap();
    let errno = |f: u32| FallocMode::from_linux_flags(f).unwrap_err().errno();
    assert_eq!(ok(0), ALLOC);
    assert_eq!(ok(1), KEEP);
    assert_eq!(ok(3), PUNCH);
    assert_eq!(ok(0x10), ZERO);
    assert_eq!(ok(0x11), ZERO_KEEP);
    for m in [ALLOC, KEEP, PUNCH, ZERO, ZERO_KEEP] {
        assert_eq!(ok(m.linux_flags()), m);
    }
    // Linux 6.18 answers EOPNOTSUPP to every combination it refuses.
    for bad in [
        2, 4, 5, 8, 9, 0x12, 0x13, 0x18, 0x20, 0x21, 0x28, 0x40, 0x41, 0x42, 0x80, 0x81, 0x100,
    ] {
        assert_eq!(errno(bad), libc::EOPNOTSUPP, "{bad:#x}");
    }
}

/// Data blocks of `path` in the image: `i_blocks` less the extent-tree or
/// indirect blocks debugfs lists (`(ETBn)`, `(IND)`, `(DIND)`, `(TIND)`).
fn data_blocks(img: &Path, path: &str, bs: u64) -> (u64, u64) {
    let out = common::run("debugfs", &["-R", &format!("stat /{path}"), img.to_str().unwrap()]);
    let sectors: u64 = out
        .split("Blockcount: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    let meta = ["(ETB", "(IND)", "(DIND)", "(TIND)"]
        .iter()
        .map(|t| out.matches(t).count() as u64)
        .sum::<u64>();
    (sectors, sectors / (bs / 512) - meta)
}

/// The same sequence through the engine and through the kernel's
/// fallocate(2) on twin images: same bytes, same data-block counts, same
/// logical blocks allocated.
fn cross_check(args: &[&str], bs: u64) {
    let Some((d, img)) = new_image(args, "64M") else {
        return;
    };
    if !mount_ok() || common::run("fallocate", &["-V"]).is_empty() {
        return;
    }
    let twin = d.path().join("twin");
    std::fs::copy(&img, &twin).unwrap();
    let extents = !args.contains(&"ext3");
    let mut ops = vec![Op::Write(0, pattern(40 * bs as usize + 33, 1))];
    if !extents {
        ops = vec![
            Op::Write(0, pattern(300 * bs as usize + 33, 1)),
            Op::Falloc(PUNCH, 12 * bs, 256 * bs),
            Op::Falloc(PUNCH, 280 * bs, 5 * bs),
        ];
    }
    if extents {
        ops.extend([
            Op::Falloc(KEEP, 40 * bs, 30 * bs),
            Op::Falloc(ALLOC, 100 * bs + 5, 20 * bs),
            Op::Write(50 * bs + 7, pattern(3 * bs as usize, 2)),
            Op::Falloc(ZERO, 5 * bs + 100, 10 * bs),
            Op::Falloc(ZERO_KEEP, 130 * bs, 4 * bs),
        ]);
    }
    ops.extend([
        Op::Falloc(PUNCH, 20 * bs + 9, 7 * bs),
        Op::Falloc(PUNCH, 60 * bs, 45 * bs),
        Op::Falloc(PUNCH, 2 * bs + 1, 10),
    ]);
    let model = {
        let fs = open_rw(&img);
        run_ops(&fs, "f", &ops)
    };
    {
        let mnt = LoopMount::rw(&twin, &[]).unwrap();
        let p = mnt.path().join("f");
        std::fs::File::create(&p).unwrap();
        for op in &ops {
            kernel_apply(&p, op);
        }
        mnt.unmount().unwrap();
    }
    let fsck = e2fsck_fn(&twin).unwrap();
    assert!(fsck.is_clean(), "kernel twin:\n{}", fsck.output);
    let ours = check(&img, &[("f", &model)]);
    let (ours_sectors, ours_data) = data_blocks(&img, "f", bs);
    let (kern_sectors, kern_data) = data_blocks(&twin, "f", bs);
    eprintln!("{args:?}: i_blocks engine {ours_sectors}, kernel {kern_sectors} (512-byte units)");
    assert_eq!(ours_data, kern_data, "data blocks: engine vs kernel");
    let mnt = LoopMount::ro(&twin).unwrap();
    let p = mnt.path().join("f");
    assert!(std::fs::read(&p).unwrap() == model, "kernel twin contents");
    let covered = |m: &[Span]| {
        let mut v: Vec<(u64, u64)> = Vec::new();
        for r in m {
            match v.last_mut() {
                Some(l) if l.0 + l.1 == r.0 => l.1 += r.2,
                _ => v.push((r.0, r.2)),
            }
        }
        v
    };
    assert_eq!(
        covered(&filefrag_map(&p)),
        covered(&ours[0]),
        "allocated logical blocks"
    );
    mnt.unmount().unwrap();
}

#[test]
fn cross_check_with_kernel_4k() {
    cross_check(&["-b", "4096"], 4096);
}

#[test]
fn cross_check_with_kernel_1k() {
    cross_check(&["-b", "1024"], 1024);
}

#[test]
fn cross_check_with_kernel_ext3_punch() {
    cross_check(&["-t", "ext3", "-b", "1024"], 1024);
}

/// An inline-data file is moved out of the inode first, as the kernel's
/// `ext4_convert_inline_data` does; then it preallocates like any other.
#[test]
fn inline_file_is_converted_first() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let body = pattern(50, 4);
    std::fs::write(src.join("s"), &body).unwrap();
    let Some(img) = mkfs(d.path(), Some(&src), &["-b", "4096", "-O", "inline_data"], "32M") else {
        return;
    };
    let mut model = body.clone();
    {
        let fs = open_rw(&img);
        let inode = fs.resolve(b"/s").unwrap();
        assert!(inode.has_inline_data(), "mke2fs -d stored it inline");
        let op = Op::Falloc(ALLOC, 10, 3 * 4096);
        engine_apply(&fs, inode.ino, &op);
        model_apply(&mut model, &op);
        assert!(!fs.resolve(b"/s").unwrap().has_inline_data());
    }
    let maps = check(&img, &[("s", &model)]);
    assert_eq!(unwritten_blocks(&maps[0]), vec![(1, 3)], "{:?}", maps[0]);
}

/// Writes into a preallocated file convert its unwritten extents in place
/// (issue 15): the cost of one converting write is the leaf it lands in,
/// whatever the file's extent count. Every other block of an 8 MiB file
/// with 1 KiB blocks is written, which leaves 8,192 extents in a tree of
/// depth 2 built by leaf splits; the contents match a byte model and
/// e2fsck finds the image clean. Then one more converting write logs as
/// blocks as in a file of one extent, plus the one leaf it lands in.
#[test]
fn converting_writes_touch_only_their_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "1024"], "64M") else {
        return;
    };
    let fs = open_rw(&img);
    let big = fs.create(ROOT_INO, b"big", NodeKind::Regular, ATTR).unwrap().ino;
    let small = fs.create(ROOT_INO, b"small", NodeKind::Regular, ATTR).unwrap().ino;
    let blocks = 8192u64;
    fs.fallocate(big, 0, blocks * 1024, ALLOC).unwrap();
    fs.fallocate(small, 0, 64 * 1024, ALLOC).unwrap();
    let mut model = vec![0u8; (blocks * 1024) as usize];
    // Every even block once, in a scattered order (2731 is odd, so
    // k * 2731 mod 4096 visits every k).
    for b in (0..blocks / 2).map(|k| (k * 2731) % (blocks / 2) * 2) {
        let data = pattern(1024, b as u8);
        fs.write(big, b * 1024, &data).unwrap();
        model[(b * 1024) as usize..((b + 1) * 1024) as usize].copy_from_slice(&data);
    }
    let inode = fs.inode(big).unwrap();
    assert_eq!(fs.all_runs(&inode).unwrap().len() as u64, blocks);
    let depth = fs.extent_tree(&inode).unwrap()[0].1.depth;
    assert_eq!(depth, 2, "8,192 extents in 84-entry leaves");
    assert!(fs.read_all(&inode, 1 << 30).unwrap() == model);

    let logged = |f: &dyn Fn()| {
        fs.sync().unwrap();
        let before = fs.journal_stats().unwrap().blocks_logged;
        f();
        fs.sync().unwrap();
        fs.journal_stats().unwrap().blocks_logged - before
    };
    let in_big = logged(&|| {
        fs.write(big, 4001 * 1024, b"x").unwrap();
    });
    let in_small = logged(&|| {
        fs.write(small, 31 * 1024, b"x").unwrap();
    });
    // The small file's tree is its inode; the big one adds its leaf alone.
    assert_eq!(
        in_big,
        in_small + 1,
        "a conversion in an 8,192-extent file logged {in_big} blocks"
    );
    fs.unmount().unwrap();
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}
