//! Growing an open, writable file system as the FUSE server does it:
//! [`Filesystem::plan_online_grow`] refuses a shrink as the kernel refuses
//! it, finds nothing to do at the same size and plans a grow (the offline
//! planner's refusals included); [`Filesystem::detach`] then
//! [`ext4kit_engine::resize::grow_detached`] grow the image while a file
//! unlinked while open stays alive, and the reopened file system carries
//! its open count, frees it at its last release and is e2fsck-clean. A
//! crash at every write of the detach and the grow leaves the old or the
//! new file system, with the named file intact. A grow past the reserved
//! GDT blocks moves what lies where the longer descriptor table goes,
//! the blocks of a file unlinked while open included; crashed at sampled
//! writes (each flush point among them), it too leaves the old or the new
//! file system.

mod common;

use std::sync::Arc;

use ext4kit_engine::device::{CrashDevice, FileDevice, MemDevice};
use ext4kit_engine::resize::{grow_detached, grow_detached_on};
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::tools::{assert_fsck_clean, e2fsck_fn};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

#[test]
fn plan_online_grow_refuses_shrinks_and_plans_grows() {
    let d = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(d.path(), None, &["-b", "1024"], "16M") else {
        return;
    };
    let fs = common::open_rw(&img);
    let before = fs.geometry().blocks_count;
    assert_eq!(before, 16384);

    let shrink = fs.plan_online_grow(8192).unwrap_err();
    assert!(
        matches!(&shrink, Error::InvalidArgument(m) if m.contains("shrinking a mounted")),
        "{shrink}"
    );
    let same = fs.plan_online_grow(before).unwrap();
    assert_eq!((same.old_blocks, same.new_blocks), (before, before));
    let grow = fs.plan_online_grow(32768).unwrap();
    assert_eq!((grow.new_blocks, grow.old_groups, grow.new_groups), (32768, 2, 4));
    // More descriptor blocks than a group holds: refused (the kernel would
    // switch to meta_bg).
    let far = fs.plan_online_grow(1 << 31).unwrap_err();
    assert!(matches!(&far, Error::Unsupported(m) if m.contains("meta_bg")), "{far}");

    assert_eq!(fs.geometry().blocks_count, before);
    assert_eq!(
        std::fs::metadata(&img).unwrap().len(),
        16 << 20,
        "planning extended the image"
    );
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn a_detached_grow_keeps_files_unlinked_while_open() {
    let d = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(d.path(), None, &["-b", "1024"], "16M") else {
        return;
    };
    let fs = common::open_rw(&img);
    let kept = fs.create(ROOT_INO, b"kept", NodeKind::Regular, ATTR).unwrap();
    let gone = fs.create(ROOT_INO, b"gone", NodeKind::Regular, ATTR).unwrap();
    fs.write(kept.ino, 0, b"named").unwrap();
    fs.write(gone.ino, 0, &vec![7u8; 200_000]).unwrap();
    fs.open_file(gone.ino).unwrap();
    fs.open_file(gone.ino).unwrap();
    fs.unlink(ROOT_INO, b"gone").unwrap();

    let plan = fs.plan_online_grow(40_000).unwrap();
    let open = fs.detach().unwrap();
    assert_eq!(open.get(&gone.ino), Some(&2));
    drop(fs);
    let r = grow_detached(&img, plan.new_blocks, &open).unwrap();
    assert_eq!((r.old_blocks, r.new_blocks), (16384, 40_000));
    assert!(std::fs::metadata(&img).unwrap().len() >= 40_000 * 1024);

    let dev = FileDevice::open(&img, true).unwrap();
    let opts = OpenOptions {
        keep_open: open,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(dev), opts).unwrap();
    assert_eq!(fs.geometry().blocks_count, 40_000);
    let mut buf = vec![0u8; 200_000];
    assert_eq!(fs.read_file_at(gone.ino, 0, &mut buf).unwrap(), 200_000);
    assert!(buf.iter().all(|&b| b == 7), "the unlinked open file lost its data");
    fs.write(gone.ino, 200_000, b"more").unwrap();
    fs.release_file(gone.ino).unwrap();
    fs.release_file(gone.ino).unwrap();
    assert!(
        fs.open_file(gone.ino).is_err(),
        "the last release did not free the unlinked file"
    );
    // The new groups take data.
    let big = fs.create(ROOT_INO, b"big", NodeKind::Regular, ATTR).unwrap();
    fs.write(big.ino, 0, &vec![1u8; 20 << 20]).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn a_crash_at_every_write_of_a_detached_grow_leaves_old_or_new() {
    let d = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(d.path(), None, &["-b", "1024", "-O", "metadata_csum"], "12M") else {
        return;
    };
    let mut bytes = std::fs::read(&img).unwrap();
    bytes.resize(40 << 20, 0);
    let dev = Arc::new(CrashDevice::with_atomic_unit(bytes, 1024));
    let fs = Filesystem::open(Box::new(dev.clone()), OpenOptions::default()).unwrap();
    let named = fs.create(ROOT_INO, b"named", NodeKind::Regular, ATTR).unwrap();
    fs.write(named.ino, 0, &vec![3u8; 50_000]).unwrap();
    let gone = fs.create(ROOT_INO, b"gone", NodeKind::Regular, ATTR).unwrap();
    fs.write(gone.ino, 0, &vec![7u8; 100_000]).unwrap();
    fs.open_file(gone.ino).unwrap();
    fs.unlink(ROOT_INO, b"gone").unwrap();
    fs.sync().unwrap();
    let start = dev.writes();
    let open = fs.detach().unwrap();
    drop(fs);
    let r = grow_detached_on(Box::new(dev.clone()), 40 << 10, &open, &mut |_| Ok(())).unwrap();
    assert!(r.journaled);
    let (writes, flushes) = (dev.writes(), dev.flush_points());
    let out = d.path().join("crash");
    let mut seen = (0, 0);
    for point in start..=writes {
        for s in common::crash_cases::survivors(point, &flushes) {
            // The next open after the crash: journal replayed, orphans freed.
            let mem = Arc::new(MemDevice::new(dev.crash_image(point, s)));
            let fs = Filesystem::open(Box::new(mem.clone()), OpenOptions::default())
                .unwrap_or_else(|e| panic!("crash at write {point} ({s:?}): open: {e}"));
            let blocks = fs.geometry().blocks_count;
            assert!(
                blocks == 12 << 10 || blocks == 40 << 10,
                "crash at write {point}: {blocks} blocks"
            );
            let mut buf = vec![0u8; 50_000];
            let n = fs.lookup(&fs.inode(ROOT_INO).unwrap(), b"named").unwrap();
            fs.read_file_at(n, 0, &mut buf).unwrap();
            assert!(
                buf.iter().all(|&b| b == 3),
                "crash at write {point}: the named file changed"
            );
            fs.unmount().unwrap();
            std::fs::write(&out, mem.snapshot()).unwrap();
            let f = e2fsck_fn(&out).unwrap();
            assert!(f.is_clean(), "crash at write {point} of {writes} ({s:?}): {}", f.output);
            if blocks == 40 << 10 { seen.1 += 1 } else { seen.0 += 1 }
        }
    }
    assert!(seen.0 > 0 && seen.1 > 0, "{seen:?}");
}

/// A detach that fails (the device refuses to flush) keeps the open
/// counts: the session goes on and the unlinked file is freed at its last
/// release, as without the attempt.
#[test]
fn a_failed_detach_keeps_the_session() {
    use ext4kit_engine::device::FaultDevice;
    let d = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(d.path(), None, &["-b", "1024"], "16M") else {
        return;
    };
    let mem = Arc::new(MemDevice::new(std::fs::read(&img).unwrap()));
    let (dev, faults) = FaultDevice::new(mem.clone());
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
    let gone = fs.create(ROOT_INO, b"gone", NodeKind::Regular, ATTR).unwrap();
    fs.write(gone.ino, 0, b"open").unwrap();
    fs.open_file(gone.ino).unwrap();
    fs.unlink(ROOT_INO, b"gone").unwrap();
    faults.fail_flushes(true);
    assert!(fs.detach().is_err());
    faults.clear();
    let mut buf = [0u8; 4];
    assert_eq!(fs.read_file_at(gone.ino, 0, &mut buf).unwrap(), 4);
    fs.release_file(gone.ino).unwrap();
    assert!(
        fs.open_file(gone.ino).is_err(),
        "the last release did not free the unlinked file"
    );
}

/// 512 blocks a group and no resize inode: growing from 12 MiB (24 groups,
/// 2 descriptor blocks) to 40 MiB (80 groups, 5 blocks) takes group 0's
/// bitmaps and the head of its inode table, whose new homes take the
/// data after it. The journal lies away from group 0 (a journal that
/// moves cannot carry the switch).
const PAST_RESERVE: [&str; 8] = [
    "-b",
    "1024",
    "-g",
    "512",
    "-O",
    "64bit,metadata_csum,^resize_inode,^flex_bg",
    "-J",
    "location=10M",
];

/// The bytes of test file `seed`.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// Named files and their contents.
type Named = Vec<(u32, Vec<u8>)>;

/// Writes, on `fs`, named files and a file unlinked while open; returns
/// (unlinked, named). `pad` fills group 0 after the root directory and
/// lost+found (blocks 51-512), so the unlinked file starts right after
/// group 1's old tables (550), where their new homes go. Then `pad` is
/// cut by `room` KiB, leaving that much free at the end of group 0.
fn fill_group_0(fs: &Filesystem, room: usize) -> (u32, Named) {
    let mut named = Vec::new();
    let file = |name: &str, data: Vec<u8>| {
        let n = fs.create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR).unwrap();
        fs.write(n.ino, 0, &data).unwrap();
        (n.ino, data)
    };
    let (pad, mut data) = file("pad", pattern(99, 462 << 10));
    let (gone, _) = file("gone", pattern(7, 120_000));
    for i in 0..8u8 {
        named.push(file(&format!("n{i}"), pattern(i, 20_000 + usize::from(i) * 3000)));
    }
    // Allocated (delayed allocation written) before the cut.
    fs.sync().unwrap();
    data.truncate(data.len() - (room << 10));
    fs.truncate(pad, data.len() as u64).unwrap();
    named.push((pad, data));
    fs.open_file(gone).unwrap();
    fs.unlink(ROOT_INO, b"gone").unwrap();
    fs.sync().unwrap();
    (gone, named)
}

fn check_named(fs: &Filesystem, named: &Named, when: &str) {
    for (ino, want) in named {
        let mut buf = vec![0u8; want.len()];
        assert_eq!(
            fs.read_file_at(*ino, 0, &mut buf).unwrap(),
            want.len(),
            "{when}: inode {ino}"
        );
        assert!(buf == *want, "{when}: inode {ino} read back wrong");
    }
}

#[test]
fn a_detached_grow_past_the_reserve_moves_open_files_blocks() {
    let d = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(d.path(), None, &PAST_RESERVE, "12M") else {
        return;
    };
    let fs = common::open_rw(&img);
    let (gone, named) = fill_group_0(&fs, 40);
    let plan = fs.plan_online_grow(40 << 10).unwrap();
    assert_eq!((plan.old_groups, plan.new_groups), (24, 80));
    let open = fs.detach().unwrap();
    drop(fs);
    let blocks = |img: &std::path::Path| ext4kit_testkit::tools::debugfs(img, &format!("blocks <{gone}>")).unwrap();
    let before = blocks(&img);
    let r = grow_detached(&img, plan.new_blocks, &open).unwrap();
    assert!(r.moved_blocks > 0, "{r:?}");
    assert_ne!(blocks(&img), before, "the unlinked open file's blocks did not move");

    let dev = FileDevice::open(&img, true).unwrap();
    let opts = OpenOptions {
        keep_open: open,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(dev), opts).unwrap();
    assert_eq!(fs.geometry().group_count, 80);
    let mut buf = vec![0u8; 120_000];
    assert_eq!(fs.read_file_at(gone, 0, &mut buf).unwrap(), 120_000);
    assert!(buf == pattern(7, 120_000), "the unlinked open file read back wrong");
    check_named(&fs, &named, "after the grow");
    fs.write(gone, 120_000, b"more").unwrap();
    fs.release_file(gone).unwrap();
    let big = fs.create(ROOT_INO, b"big", NodeKind::Regular, ATTR).unwrap();
    fs.write(big.ino, 0, &vec![1u8; 20 << 20]).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn a_crash_during_a_displacing_detached_grow_leaves_old_or_new() {
    let d = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(d.path(), None, &PAST_RESERVE, "12M") else {
        return;
    };
    let mut bytes = std::fs::read(&img).unwrap();
    bytes.resize(40 << 20, 0);
    let dev = Arc::new(CrashDevice::with_atomic_unit(bytes, 1024));
    let fs = Filesystem::open(Box::new(dev.clone()), OpenOptions::default()).unwrap();
    let (_, named) = fill_group_0(&fs, 40);
    let start = dev.writes();
    let open = fs.detach().unwrap();
    drop(fs);
    let r = grow_detached_on(Box::new(dev.clone()), 40 << 10, &open, &mut |_| Ok(())).unwrap();
    assert!(r.journaled && r.moved_blocks > 0, "{r:?}");
    let (writes, flushes) = (dev.writes(), dev.flush_points());
    let out = d.path().join("crash");
    let mut seen = (0, 0);
    // Sampled (every write takes minutes): 40 points spread over the
    // writes, and each flush point and the write after it.
    let step = ((writes - start) / 40).max(1);
    let mut points: std::collections::BTreeSet<usize> = (start..=writes).step_by(step).collect();
    points.extend(flushes.iter().filter(|&&f| f >= start).flat_map(|&f| [f, f + 1]));
    points.retain(|&p| p <= writes);
    points.insert(writes);
    for point in points {
        for s in common::crash_cases::survivors(point, &flushes) {
            let mem = Arc::new(MemDevice::new(dev.crash_image(point, s)));
            let fs = Filesystem::open(Box::new(mem.clone()), OpenOptions::default())
                .unwrap_or_else(|e| panic!("crash at write {point} ({s:?}): open: {e}"));
            let groups = fs.geometry().group_count;
            assert!(groups == 24 || groups == 80, "crash at write {point}: {groups} groups");
            check_named(&fs, &named, &format!("crash at write {point} ({s:?})"));
            fs.unmount().unwrap();
            std::fs::write(&out, mem.snapshot()).unwrap();
            let f = e2fsck_fn(&out).unwrap();
            assert!(f.is_clean(), "crash at write {point} of {writes} ({s:?}): {}", f.output);
            if groups == 80 { seen.1 += 1 } else { seen.0 += 1 }
        }
    }
    assert!(seen.0 > 0 && seen.1 > 0, "{seen:?}");
}

/// Group 0's inode table holds the journal inode, so it moves only where
/// the old file system keeps nothing, and without flex_bg only within
/// group 0: with group 0 full the grow is refused, before the image file
/// is extended, and the image opens again as it was.
#[test]
fn a_displacing_grow_with_no_room_for_the_journal_inodes_table_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(d.path(), None, &PAST_RESERVE, "12M") else {
        return;
    };
    let fs = common::open_rw(&img);
    let (gone, named) = fill_group_0(&fs, 0);
    let open = fs.detach().unwrap();
    drop(fs);
    let e = grow_detached(&img, 40 << 10, &open).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("journal inode")),
        "{e}"
    );
    assert_eq!(
        std::fs::metadata(&img).unwrap().len(),
        12 << 20,
        "a refused grow extended the image"
    );
    let dev = FileDevice::open(&img, true).unwrap();
    let opts = OpenOptions {
        keep_open: open,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(dev), opts).unwrap();
    check_named(&fs, &named, "after the refusal");
    fs.release_file(gone).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}
