//! Collapse range and insert range against the kernel: the same steps run
//! through [`Filesystem::collapse_range`]/[`Filesystem::insert_range`] on
//! one image and through the kernel's `fallocate -c`/`-i` on a loop mount
//! of a twin; each step succeeds or fails with the same errno on both, and
//! at the end the kernel reads the same bytes and size from both files,
//! they hold the same number of data blocks (`i_blocks` less tree blocks), and both images pass
//! `e2fsck -fn`.

mod common;
#[path = "common/mem_image.rs"]
mod mem_image;

use std::path::Path;

use common::mkfs;
use std::sync::Arc;

use ext4kit_engine::device::{CrashDevice, MemDevice};
use ext4kit_engine::{Attr, FallocMode, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    Collapse(u64, u64),
    Insert(u64, u64),
    /// `fallocate -n` (set-up only).
    Keep(u64, u64),
    /// `fallocate -p` (set-up only).
    Punch(u64, u64),
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i / 512) as u8 ^ (i as u8).wrapping_mul(7) | 1)
        .collect()
}

fn errno_text(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    s.split(" (os error").next().unwrap().to_string()
}

/// The engine's answer to `step`: `None` on success, else the errno's text.
fn engine_step(fs: &Filesystem, ino: u32, step: Step) -> Option<String> {
    let r = match step {
        Step::Collapse(o, l) => fs.collapse_range(ino, o, l),
        Step::Insert(o, l) => fs.insert_range(ino, o, l),
        Step::Keep(o, l) => fs.fallocate(ino, o, l, FallocMode::Allocate { keep_size: true }),
        Step::Punch(o, l) => fs.fallocate(ino, o, l, FallocMode::PunchHole),
    };
    r.err().map(|e| errno_text(e.errno()))
}

/// The kernel's answer to `step` through fallocate(1).
fn kernel_step(path: &Path, step: Step) -> Option<String> {
    let (flag, o, l) = match step {
        Step::Collapse(o, l) => ("-c", o, l),
        Step::Insert(o, l) => ("-i", o, l),
        Step::Keep(o, l) => ("-n", o, l),
        Step::Punch(o, l) => ("-p", o, l),
    };
    let out = std::process::Command::new("fallocate")
        .args([flag, "-o", &o.to_string(), "-l", &l.to_string()])
        .arg(path)
        .output()
        .unwrap();
    if out.status.success() {
        return None;
    }
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Some(err.rsplit(": ").next().unwrap().to_string())
}

/// `i_blocks` (512-byte units) of `/f` less its extent-tree blocks (each
/// charged `unit` bytes), as debugfs reports them: the two trees may be
/// shaped differently (the engine packs rebuilt leaves), the data may not.
fn data_sectors(img: &Path, unit: u64) -> u64 {
    let out = common::run("debugfs", &["-R", "stat /f", img.to_str().unwrap()]);
    let sectors: u64 = out
        .split("Blockcount: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    sectors - out.matches("(ETB").count() as u64 * unit / 512
}

fn assert_clean(img: &Path, what: &str) {
    let r = e2fsck_fn(img).unwrap();
    assert!(r.is_clean(), "{what}: e2fsck -fn:\n{}", r.output);
}

/// Runs `setup` then `steps` on `/f` (first `data` bytes written) in a new
/// image made with `args` through the engine, and on a twin through the
/// kernel; compares as the file's doc says.
fn cross_check(args: &[&str], data: usize, setup: &[Step], steps: &[Step]) {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, args, "64M") else {
        return;
    };
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("kernel comparison ({why})");
        assert!(std::env::var_os("CI").is_none(), "shift_range skipped on CI");
        return;
    }
    let twin = dir.path().join("twin");
    std::fs::copy(&img, &twin).unwrap();
    let ours: Vec<Option<String>> = {
        let fs = common::open_rw(&img);
        let ino = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
        fs.write(ino, 0, &pattern(data)).unwrap();
        for &s in setup {
            assert_eq!(engine_step(&fs, ino, s), None, "engine set-up {s:?}");
        }
        let r = steps.iter().map(|&s| engine_step(&fs, ino, s)).collect();
        fs.unmount().unwrap();
        r
    };
    let theirs: Vec<Option<String>> = {
        let mnt = LoopMount::rw(&twin, &[]).unwrap();
        let p = mnt.path().join("f");
        std::fs::write(&p, pattern(data)).unwrap();
        for &s in setup {
            assert_eq!(kernel_step(&p, s), None, "kernel set-up {s:?}");
        }
        let r = steps.iter().map(|&s| kernel_step(&p, s)).collect();
        mnt.unmount().unwrap();
        r
    };
    assert_clean(&img, "engine image");
    assert_clean(&twin, "kernel twin");
    let named = |v: Vec<Option<String>>| steps.iter().copied().zip(v).collect::<Vec<_>>();
    assert_eq!(named(ours), named(theirs), "each step: engine vs kernel");
    let read = |i: &Path| {
        let m = LoopMount::ro(i).unwrap();
        let bytes = std::fs::read(m.path().join("f")).unwrap();
        m.unmount().unwrap();
        bytes
    };
    let (a, b) = (read(&img), read(&twin));
    assert_eq!(a.len(), b.len(), "sizes: engine vs kernel");
    assert!(a == b, "contents: engine vs kernel");
    let arg = |flag: &str| {
        args.iter()
            .position(|a| *a == flag)
            .map(|i| args[i + 1].parse::<u64>().unwrap())
    };
    let unit = arg("-C").or(arg("-b")).unwrap();
    assert_eq!(
        data_sectors(&img, unit),
        data_sectors(&twin, unit),
        "i_blocks less tree blocks: engine vs kernel"
    );
}

/// Collapses and inserts across data, a punched hole, an unwritten range
/// and preallocation past EOF, in units of `unit` (the cluster size); then
/// the ranges ext4 refuses.
fn steps_in(unit: u64) -> (Vec<Step>, Vec<Step>) {
    let u = unit;
    let setup = vec![
        Step::Keep(64 * u, 16 * u),
        Step::Punch(10 * u, 4 * u),
        Step::Punch(30 * u, 3 * u),
        Step::Keep(30 * u, 2 * u),
    ];
    let steps = vec![
        Step::Collapse(8 * u, 4 * u),
        Step::Insert(2 * u, 3 * u),
        Step::Collapse(0, u),
        Step::Insert(20 * u, 10 * u),
        Step::Collapse(28 * u, 5 * u),
        Step::Insert(0, 40 * u),
        // Refused: unaligned, reaching EOF, at EOF.
        Step::Collapse(u + 512, u),
        Step::Insert(u, u / 2),
        Step::Collapse(90 * u, 100 * u),
        Step::Insert(200 * u, u),
    ];
    (setup, steps)
}

#[test]
fn collapse_and_insert_like_the_kernel_4k() {
    let (setup, steps) = steps_in(4096);
    cross_check(&["-b", "4096"], 64 * 4096 + 100, &setup, &steps);
}

#[test]
fn collapse_and_insert_like_the_kernel_1k() {
    let (setup, steps) = steps_in(1024);
    cross_check(&["-b", "1024"], 64 * 1024 + 100, &setup, &steps);
}

#[test]
fn collapse_and_insert_like_the_kernel_bigalloc() {
    let (setup, mut steps) = steps_in(16384);
    // Block-aligned but not cluster-aligned: EINVAL.
    steps.push(Step::Collapse(4096, 16384));
    cross_check(
        &["-b", "4096", "-O", "bigalloc", "-C", "16384"],
        64 * 16384 + 100,
        &setup,
        &steps,
    );
}

/// A block-mapped file (ext3) is refused with EOPNOTSUPP, as ext4 does.
#[test]
fn block_mapped_files_are_refused() {
    let steps = [Step::Collapse(4096, 4096), Step::Insert(0, 4096)];
    cross_check(&["-t", "ext3", "-b", "4096"], 16 * 4096, &[], &steps);
}

/// A file of 1,000 one-block extents (every other block punched; a tree
/// of a dozen leaves with 1 KiB blocks): collapses and inserts split,
/// shift and merge across leaves as the kernel's do.
#[test]
fn collapse_and_insert_through_a_fragmented_tree() {
    let u = 1024;
    let setup: Vec<Step> = (0..1000).map(|i| Step::Punch(2 * i * u, u)).collect();
    let steps = [
        Step::Collapse(101 * u, 50 * u),
        Step::Insert(7 * u, 33 * u),
        Step::Collapse(0, 999 * u),
        Step::Insert(500 * u, u),
        Step::Collapse(u, u),
        Step::Insert(0, 3000 * u),
        Step::Collapse(2000 * u, 1500 * u),
    ];
    cross_check(&["-b", "1024"], 2000 * 1024, &setup, &steps);
}

/// `/f` of the image as the engine reads it after opening it (which
/// replays the journal); the image must then pass `e2fsck -fn`.
fn file_after_crash(img: Vec<u8>, what: &str) -> Vec<u8> {
    let dev = Arc::new(MemDevice::new(img));
    let fs = Filesystem::open(Box::new(dev.clone()), OpenOptions::default()).expect(what);
    let f = fs.resolve(b"/f").expect(what);
    let mut buf = vec![0u8; f.size() as usize];
    let n = fs.read_file_at(f.ino, 0, &mut buf).expect(what);
    buf.truncate(n);
    fs.unmount().expect(what);
    mem_image::assert_clean(&dev.snapshot(), what);
    buf
}

/// A collapse then an insert, each followed by a sync, with a power loss
/// at every write in between (volatile writes kept, dropped, torn and
/// reordered): the file is always whole before, after the collapse or
/// after the insert, never in between, never older than the last sync,
/// and the image passes `e2fsck -fn`.
#[test]
fn a_crash_leaves_the_file_before_or_after_each_shift() {
    if ext4kit_testkit::tools::skip_unless(ext4kit_testkit::tools::require_tool("e2fsck")).is_none() {
        assert!(std::env::var_os("CI").is_none(), "shift_range crash test skipped on CI");
        return;
    }
    let dev = Arc::new(CrashDevice::new(mem_image::fresh_image(8 << 20)));
    let fs = Filesystem::open(Box::new(dev.clone()), OpenOptions::default()).unwrap();
    let bs = u64::from(fs.geometry().block_size);
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    let mut states = vec![pattern(40 * bs as usize + 10)];
    fs.write(f, 0, &states[0]).unwrap();
    fs.fallocate(f, 20 * bs, 3 * bs, FallocMode::PunchHole).unwrap();
    states[0][20 * bs as usize..23 * bs as usize].fill(0);
    fs.sync().unwrap();
    let start = dev.writes();
    fs.collapse_range(f, 8 * bs, 4 * bs).unwrap();
    fs.sync().unwrap();
    let collapsed = dev.writes();
    let mut s1 = states[0].clone();
    s1.drain(8 * bs as usize..12 * bs as usize);
    fs.insert_range(f, 2 * bs, 3 * bs).unwrap();
    fs.sync().unwrap();
    let end = dev.writes();
    let mut s2 = s1.clone();
    s2.splice(2 * bs as usize..2 * bs as usize, vec![0u8; 3 * bs as usize]);
    states.extend([s1, s2]);
    drop(fs);
    let mut checked = 0;
    for (point, survivors) in common::crash_cases::at_points(&dev, start..=end) {
        let oldest = usize::from(point >= collapsed) + usize::from(point >= end);
        let what = format!("crash at write {point} of {start}..{end} ({survivors:?})");
        let got = file_after_crash(dev.crash_image(point, survivors), &what);
        let at = states.iter().position(|s| *s == got);
        assert!(
            at.is_some_and(|i| i >= oldest),
            "{what}: the file is in state {at:?}, wanted one from {oldest} on"
        );
        checked += 1;
    }
    assert!(checked >= 6, "{checked} crash images");
}

/// On a quota image the blocks a collapse frees leave the owner's usage
/// (e2fsck checks usage against the quota files; the kernel here cannot
/// mount quota images, so it is the oracle).
#[test]
fn collapse_updates_quota_usage() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096", "-O", "quota"], "64M") else {
        return;
    };
    let fs = common::open_rw(&img);
    let attr = Attr {
        uid: 1000,
        gid: 1000,
        ..ATTR
    };
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, attr).unwrap().ino;
    fs.write(f, 0, &pattern(64 * 4096)).unwrap();
    fs.collapse_range(f, 8 * 4096, 16 * 4096).unwrap();
    fs.insert_range(f, 0, 4096).unwrap();
    let blocks = fs.metadata(&fs.resolve(b"/f").unwrap()).unwrap().blocks;
    fs.unmount().unwrap();
    assert_eq!(blocks, 48 * 8, "i_blocks after collapsing 16 of 64 blocks");
    assert_clean(&img, "quota image");
}
