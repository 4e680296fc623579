//! `ext4kit defrag` through an ext4kit mount: the two interleaved files
//! are defragmented by the mount's server while `/b` is open, has dirty
//! pages in the kernel's cache and is being overwritten by another
//! thread; what reads back through the mount (cached, then after dropping
//! the kernel's caches) is what was written, and after unmounting each
//! file is one extent and the image is `e2fsck -fn` clean. Paths that are
//! not on an ext4kit mount, and read-only mounts, are refused. Needs root
//! and /dev/fuse: skips loudly without them, fails under CI=1.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::tools::skip_unless;

use super::{BLOCKS, BS, assert_clean, ext4kit, extents, interleaved, ok};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ready() -> bool {
    if skip_unless(can_fuse_mount()).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root with /dev/fuse");
        return false;
    }
    true
}

/// Writes `data` at block `block` of both the open file and `model`.
fn write_block(f: &File, model: &mut Vec<u8>, block: usize, data: &[u8]) {
    let at = block * BS;
    if model.len() < at + data.len() {
        model.resize(at + data.len(), 0);
    }
    model[at..at + data.len()].copy_from_slice(data);
    f.write_all_at(data, at as u64).unwrap();
}

/// Overwrites blocks of `/b` from another thread, syncing every tenth so
/// the writes reach the server while the defrag may be running; returns
/// the expected contents.
fn overwrite(f: File, mut model: Vec<u8>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut rng = Rng::new(23);
        for i in 0..200 {
            write_block(&f, &mut model, (i * 7 + 3) % BLOCKS, &rng.bytes(BS));
            if i % 10 == 9 {
                f.sync_data().unwrap();
            }
        }
        model
    })
}

fn drop_caches() {
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches (root)");
}

#[test]
fn a_mounted_image_is_defragmented_while_a_file_is_written() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, da, mut db) = interleaved(dir.path());
    let i = img.to_str().unwrap();
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let (a, b) = (m.path().join("a"), m.path().join("b"));
    assert!(std::fs::read(&a).unwrap() == da && std::fs::read(&b).unwrap() == db);
    // Dirty pages in the kernel: an overwrite and a block past the end.
    let f = OpenOptions::new().read(true).write(true).open(&b).unwrap();
    write_block(&f, &mut db, 5, &[0xa5; BS]);
    write_block(&f, &mut db, BLOCKS, &[0x5a; BS]);
    let writer = overwrite(f, db);
    let out = ok(&["defrag", m.path().to_str().unwrap(), "--chunk-blocks", "256"]);
    let db = writer.join().unwrap();
    eprintln!("{out}");
    assert!(out.contains("2 files looked at, 2 defragmented; extents "), "{out}");
    assert!(out.contains(" → 2; 1201 blocks moved"), "{out}");
    assert!(std::fs::read(&a).unwrap() == da, "/a through the cache");
    assert!(std::fs::read(&b).unwrap() == db, "/b through the cache");
    drop_caches();
    assert!(std::fs::read(&a).unwrap() == da, "/a after dropping caches");
    assert!(std::fs::read(&b).unwrap() == db, "/b after dropping caches");

    let again: serde_json::Value =
        serde_json::from_str(&ok(&["defrag", "--mounted", "-n", "--json", a.to_str().unwrap()])).unwrap();
    assert_eq!(again["dry_run"], true);
    assert_eq!(again["summary"]["files"], 1);
    assert_eq!(again["summary"]["defragmented"], 0);
    assert_eq!(again["files"][0]["extents_after"], 1);
    assert!(m.unmount().unwrap().success());
    assert_eq!(extents(i), vec![1, 1]);
    assert!(ext4kit(&["cat", i, "/a"]).stdout == da);
    assert!(ext4kit(&["cat", i, "/b"]).stdout == db);
    assert_clean(&img);
}

fn refused(args: &[&str], why: &str) {
    let out = ext4kit(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(why), "{args:?}: {err}");
}

#[test]
fn paths_off_ext4kit_mounts_and_read_only_mounts_are_refused() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, _, _) = interleaved(dir.path());
    let tmp = dir.path().to_str().unwrap();
    refused(&["defrag", tmp], "not on an ext4kit mount");
    refused(
        &["defrag", "--mounted", img.to_str().unwrap()],
        "not on an ext4kit mount",
    );
    let bytes = std::fs::read(&img).unwrap();
    let m = FuseMount::start(exe(), &img, "ro").unwrap();
    refused(&["defrag", m.path().to_str().unwrap()], "read-only");
    refused(&["defrag", "-n", m.path().join("a").to_str().unwrap()], "read-only");
    assert!(m.unmount().unwrap().success());
    assert!(
        std::fs::read(&img).unwrap() == bytes,
        "a refused defrag changed the image"
    );
    assert_clean(&img);
}
