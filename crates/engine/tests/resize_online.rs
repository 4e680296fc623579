//! Growing an open, writable file system as the FUSE server does it:
//! [`Filesystem::plan_online_grow`] refuses a shrink as the kernel refuses
//! it, finds nothing to do at the same size and plans a grow (the offline
//! planner's refusals included); [`Filesystem::detach`] then
//! [`ext4kit_engine::resize::grow_detached`] grow the image while a file
//! unlinked while open stays alive, and the reopened file system carries
//! its open count, frees it at its last release and is e2fsck-clean. A
//! crash at every write of the detach and the grow leaves the old or the
//! new file system, with the named file intact.

mod common;

use std::sync::Arc;

use ext4kit_engine::device::{CrashDevice, FileDevice, MemDevice, Survivors};
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
    // Far past the reserved GDT blocks: the planner's own refusal.
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
        for s in [
            Survivors::None,
            Survivors::All,
            Survivors::Random {
                seed: point as u64,
                torn: true,
                reorder: true,
            },
        ] {
            if !matches!(s, Survivors::None) && flushes.contains(&point) {
                continue;
            }
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
