//! A failing disk: writes, flushes and reads that fail with `EIO` at many
//! points of a workload. The operation must return [`Error::Io`] (errno
//! `EIO`), the file system must then refuse writes (`errors=remount-ro`),
//! nothing may panic, and the image left behind must be one e2fsck accepts
//! whenever the engine could make it so.

#[path = "common/mem_image.rs"]
mod mem_image;
#[path = "common/workload.rs"]
mod workload;

use std::sync::Arc;

use ext4kit_engine::device::{FaultControl, FaultDevice, MemDevice};
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};
use mem_image::fresh_image;
use workload::{Workload, is_eio, read_tree};

const IMAGE_BYTES: usize = 8 << 20;
const STEPS: usize = 60;
const SEED: u64 = 0xe10;

/// Set to true once the journal writer lands: an image whose write-back
/// was cut by a dead disk must then be clean after the engine's recovery.
/// Until then it may legitimately need e2fsck, and is only checked to open
/// and read without a panic.
const JOURNALED: bool = true;

fn options() -> OpenOptions {
    OpenOptions {
        writeback_bytes: 64 << 10,
        ..OpenOptions::default()
    }
}

fn have_e2fsck() -> bool {
    skip_unless(require_tool("e2fsck")).is_some()
}

fn fsck(img: &[u8]) -> ext4kit_testkit::tools::FsckResult {
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), img).unwrap();
    e2fsck_fn(tmp.path()).unwrap()
}

fn assert_clean(img: &[u8], what: &str) {
    let r = fsck(img);
    assert!(r.is_clean(), "{what}: e2fsck -fn exited {}:\n{}", r.code, r.output);
}

/// The image a dead disk left, opened again on a healthy device: the
/// engine must open and read it without panicking; with the journal it
/// must also be clean after recovery (`JOURNALED`: the journal writer is in).
fn expect_clean_after_recovery(img: Vec<u8>, what: &str) {
    let mem = Arc::new(MemDevice::new(img));
    match Filesystem::open(Box::new(mem.clone()), OpenOptions::default()) {
        Ok(fs) => {
            let _ = read_tree(&fs);
            let _ = fs.unmount();
        }
        Err(e) => {
            if JOURNALED {
                panic!("{what}: reopening failed: {e}");
            }
        }
    }
    let r = fsck(&mem.snapshot());
    if JOURNALED {
        assert!(r.is_clean(), "{what}: e2fsck -fn exited {}:\n{}", r.code, r.output);
    } else {
        // It ran (4: errors left, 8: it gave up on them), no usage error or signal.
        assert!(
            (0..16).contains(&r.code),
            "{what}: e2fsck exited {}: {}",
            r.code,
            r.output
        );
    }
}

/// A file system over a fault-injecting device on a fresh image.
fn setup(image: Vec<u8>, opts: OpenOptions) -> (Filesystem, FaultControl, Arc<MemDevice>) {
    let mem = Arc::new(MemDevice::new(image));
    let (dev, ctl) = FaultDevice::new(mem.clone());
    let fs = Filesystem::open(Box::new(dev), opts).expect("open");
    (fs, ctl, mem)
}

/// Runs the workload until an operation fails; returns the step and error.
fn run_until_error(fs: &Filesystem) -> Option<(usize, &'static str, Error)> {
    let mut w = Workload::new(SEED);
    for i in 0..STEPS {
        if let Err(e) = w.step(fs) {
            return Some((i, "step", e));
        }
    }
    fs.sync().err().map(|e| (STEPS, "final sync", e))
}

/// After a failed write: later writes are refused, reads still work.
fn assert_read_only(fs: &Filesystem, what: &str) {
    assert!(fs.read_only_reason().is_some(), "{what}: not read-only");
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    match fs.create(ROOT_INO, b"after-error", NodeKind::Regular, attr) {
        Err(Error::ReadOnly) => {}
        other => panic!("{what}: a write after the error gave {other:?}"),
    }
    read_tree(fs).unwrap_or_else(|e| panic!("{what}: reads fail after a write error: {e}"));
}

/// How many device writes the workload issues on a healthy disk.
fn healthy_writes(image: &[u8]) -> u64 {
    let (fs, ctl, mem) = setup(image.to_vec(), options());
    assert!(run_until_error(&fs).is_none());
    fs.unmount().unwrap();
    assert_clean(&mem.snapshot(), "healthy run");
    ctl.writes()
}

/// The write points tried: every one of the first few, then a spread.
fn points(total: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..total.min(12)).collect();
    v.extend((12..total).step_by((total as usize / 25).max(1)));
    v
}

#[test]
fn one_failed_write_gives_eio_then_read_only_and_a_clean_image() {
    if !have_e2fsck() {
        return;
    }
    let image = fresh_image(IMAGE_BYTES);
    let total = healthy_writes(&image);
    for n in points(total) {
        let what = format!("write {n} of {total} fails once");
        let (fs, ctl, mem) = setup(image.clone(), options());
        ctl.fail_one_write(n);
        match run_until_error(&fs) {
            Some((step, op, e)) => {
                assert!(is_eio(&e), "{what}: {op} {step} gave {e:?}");
                assert_eq!(e.errno(), libc::EIO);
                assert_read_only(&fs, &what);
                // Unmount writes back what was committed (the disk works
                // again) but cannot mark the image clean: it is read-only.
                assert!(matches!(fs.unmount(), Err(Error::ReadOnly)), "{what}");
            }
            // The failed write is one of the unmount's own.
            None => assert!(fs.unmount().is_err_and(|e| is_eio(&e)), "{what}"),
        }
        // What the journal committed before the failure is replayed; the
        // transaction the failed write belonged to never committed.
        expect_clean_after_recovery(mem.snapshot(), &what);
    }
}

#[test]
fn dead_disk_gives_eio_then_read_only() {
    if !have_e2fsck() {
        return;
    }
    let image = fresh_image(IMAGE_BYTES);
    let total = healthy_writes(&image);
    for n in points(total) {
        let what = format!("writes fail from {n} of {total}");
        let (fs, ctl, mem) = setup(image.clone(), options());
        ctl.fail_writes_from(n);
        if let Some((step, op, e)) = run_until_error(&fs) {
            assert!(is_eio(&e), "{what}: {op} {step} gave {e:?}");
            assert_read_only(&fs, &what);
        }
        let err = fs.unmount().expect_err("unmount on a dead disk");
        assert!(
            is_eio(&err) || matches!(err, Error::ReadOnly),
            "{what}: unmount gave {err:?}"
        );
        expect_clean_after_recovery(mem.snapshot(), &what);
    }
}

#[test]
fn failed_flush_fails_sync_and_goes_read_only() {
    if !have_e2fsck() {
        return;
    }
    let (fs, ctl, mem) = setup(fresh_image(IMAGE_BYTES), options());
    let mut w = Workload::new(SEED);
    for _ in 0..20 {
        w.step(&fs).unwrap();
    }
    ctl.fail_flushes(true);
    let e = fs.sync().expect_err("sync with a failing flush");
    assert!(is_eio(&e), "{e:?}");
    assert_read_only(&fs, "failed flush");
    ctl.clear();
    assert!(matches!(fs.unmount(), Err(Error::ReadOnly)));
    assert_clean(&mem.snapshot(), "failed flush");
}

/// A populated image, written and unmounted on a healthy disk, and the
/// workload that made it (to go on with).
fn populated() -> (Vec<u8>, Workload) {
    let (fs, _, mem) = setup(fresh_image(IMAGE_BYTES), options());
    let mut w = Workload::new(SEED);
    for _ in 0..STEPS {
        w.step(&fs).unwrap();
    }
    fs.unmount().unwrap();
    (mem.snapshot(), w)
}

/// Reads every file, then goes on with the workload on the files it made.
fn read_then_step(fs: &Filesystem, w: &mut Workload) -> ext4kit_engine::Result<()> {
    read_tree(fs)?;
    for _ in 0..20 {
        w.step(fs)?;
    }
    Ok(())
}

#[test]
fn failed_reads_give_eio_and_leave_metadata_alone() {
    if !have_e2fsck() {
        return;
    }
    let (image, work) = populated();
    // A tiny cache, so that operations keep reading the device.
    let opts = OpenOptions {
        cache_bytes: 0,
        ..options()
    };
    // The reads a healthy run makes.
    let reads = {
        let (fs, ctl, _) = setup(image.clone(), opts.clone());
        let start = ctl.reads();
        read_then_step(&fs, &mut work.clone()).unwrap();
        ctl.reads() - start
    };
    assert!(reads > 20, "{reads} reads");
    let mut failed = 0;
    for n in 0..reads {
        let what = format!("reads fail from {n} of {reads}");
        let (fs, ctl, mem) = setup(image.clone(), opts.clone());
        ctl.fail_reads_from(n);
        // Each operation checks on its own; the helper stops at the first error.
        let mut w = work.clone();
        let r = read_tree(&fs).map(|_| ());
        let r = r.and_then(|()| {
            for _ in 0..20 {
                let before = ctl.writes();
                if let Err(e) = w.step(&fs) {
                    // A commit writes file data before it reads the bitmaps
                    // it checksums (`Txn::write_out`), so a failed read
                    // there can follow the data write; the metadata is
                    // untouched (e2fsck below), as with a kernel write
                    // that returns EIO having written part of the data.
                    if ctl.writes() != before {
                        eprintln!("{what}: the failed step had written file data ({e})");
                    }
                    return Err(e);
                }
            }
            Ok(())
        });
        if let Err(e) = r {
            assert!(is_eio(&e), "{what}: {e:?}");
            failed += 1;
        }
        assert!(
            fs.read_only_reason().is_none(),
            "{what}: a read error is not a write error"
        );
        ctl.clear();
        fs.unmount().unwrap_or_else(|e| panic!("{what}, then unmount: {e}"));
        assert_clean(&mem.snapshot(), &what);
    }
    // Every run does a read past the point its reads start failing.
    assert_eq!(failed, reads, "runs that met a read error");
}

#[test]
fn failed_reads_at_open_give_eio() {
    let (image, _) = populated();
    for n in 0..6 {
        let mem = Arc::new(MemDevice::new(image.clone()));
        let (dev, ctl) = FaultDevice::new(mem);
        ctl.fail_one_read(n);
        match Filesystem::open(Box::new(dev), OpenOptions::default()) {
            Err(e) => assert!(is_eio(&e), "read {n} fails at open: {e:?}"),
            Ok(fs) => drop(fs),
        }
    }
}

/// `write_announcing` announces the write once it is published, before the
/// data goes to the device: a device failure after that is still returned
/// (for the server to report on the next fsync), and a write refused
/// before publication announces nothing.
#[test]
fn a_data_write_failing_after_the_announcement_is_still_an_error() {
    if !have_e2fsck() {
        return;
    }
    // The direct path: under delayed allocation no data goes out at write.
    let mut opts = options();
    opts.alloc.delalloc = false;
    let (fs, ctl, mem) = setup(fresh_image(IMAGE_BYTES), opts);
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, attr).unwrap();
    fs.sync().unwrap();
    let data = vec![0x5a; 10_000];
    let mut announced = None;
    ctl.fail_one_write(0);
    let r = fs.write_announcing(f.ino, 0, &data, |n| announced = Some(n));
    assert_eq!(
        announced,
        Some(data.len()),
        "the write was not announced before its data"
    );
    let e = r.expect_err("the failed data write was not returned");
    assert!(is_eio(&e), "{e:?}");
    let mut announced = None;
    let r = fs.write_announcing(f.ino, 0, &data, |n| announced = Some(n));
    assert!(matches!(r, Err(Error::ReadOnly)), "{r:?}");
    assert_eq!(announced, None, "a refused write was announced");
    let _ = fs.unmount();
    expect_clean_after_recovery(mem.snapshot(), "a data write failed after its announcement");
}
