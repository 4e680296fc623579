//! `ext4kit defrag` end to end: on an image with two files written
//! alternately block by block, it prints the summary and leaves each file
//! in one extent with the same bytes; `--dry-run` leaves every byte of the
//! image as it was; `--json` parses; a missing path and a mounted image
//! are errors (exit 1). Through an ext4kit mount (`mounted` below) it does
//! the same while a file is open and written. Every image ends
//! `e2fsck -fn` clean.

#[path = "defrag/mounted.rs"]
mod mounted;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{AllocOptions, Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::tools::{e2fsck_fn, skip_unless};

const BLOCKS: usize = 600;
const BS: usize = 4096;

fn ext4kit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(args)
        .output()
        .expect("spawn ext4kit")
}

fn ok(args: &[&str]) -> String {
    let out = ext4kit(args);
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A 64 MiB image holding `/a` and `/b`, written alternately 4 KiB at a
/// time with per-file windows and delayed allocation off, so they
/// interleave block by block;
/// returns the image and the files' contents.
fn interleaved(dir: &Path) -> (PathBuf, Vec<u8>, Vec<u8>) {
    let img = dir.join("frag.img");
    ok(&["mkfs", "-q", "-t", "ext4", "-b", "4096", img.to_str().unwrap(), "64M"]);
    let opts = OpenOptions {
        alloc: AllocOptions {
            inode_prealloc: false,
            delalloc: false,
            ..AllocOptions::default()
        },
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), opts).unwrap();
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, attr).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", NodeKind::Regular, attr).unwrap().ino;
    let mut rng = Rng::new(11);
    let (da, db) = (rng.bytes(BLOCKS * BS), rng.bytes(BLOCKS * BS));
    for i in 0..BLOCKS {
        let r = i * BS..(i + 1) * BS;
        fs.write(a, r.start as u64, &da[r.clone()]).unwrap();
        fs.write(b, r.start as u64, &db[r]).unwrap();
    }
    fs.unmount().unwrap();
    (img, da, db)
}

fn extents(img: &str) -> Vec<u64> {
    let report: serde_json::Value = serde_json::from_str(&ok(&["frag", img, "--json"])).unwrap();
    report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["extents"].as_u64().unwrap())
        .collect()
}

fn assert_clean(img: &Path) {
    let fsck = e2fsck_fn(img).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}

#[test]
fn defrag_prints_the_summary_and_leaves_one_extent_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let (img, da, db) = interleaved(dir.path());
    let i = img.to_str().unwrap();
    let before = extents(i);
    assert!(before.iter().all(|&e| e >= 300), "not interleaved: {before:?}");
    let out = ok(&["defrag", i, "--chunk-blocks", "256"]);
    eprintln!("{out}");
    let total: u64 = before.iter().sum();
    let summary = format!("2 files looked at, 2 defragmented; extents {total} → 2; 1200 blocks moved");
    assert!(out.contains(&summary), "{out}");
    assert!(out.contains("fragmentation score"), "{out}");
    assert!(
        out.contains("/a: ") && out.contains(" → 1 extents, 600 blocks moved in 3 transactions"),
        "{out}"
    );
    assert_eq!(extents(i), vec![1, 1]);
    assert!(ext4kit(&["cat", i, "/a"]).stdout == da);
    assert!(ext4kit(&["cat", i, "/b"]).stdout == db);
    assert_clean(&img);
    let again = ok(&["defrag", i, "/a"]);
    assert!(
        again.contains("1 file looked at, 0 defragmented; extents 1 → 1"),
        "{again}"
    );
    assert_clean(&img);
}

#[test]
fn dry_run_changes_no_byte_and_json_parses() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _, _) = interleaved(dir.path());
    let i = img.to_str().unwrap();
    let bytes = std::fs::read(&img).unwrap();
    let dry = ok(&["defrag", "-n", i]);
    assert!(dry.contains("2 files looked at, 2 to defragment"), "{dry}");
    assert!(dry.contains("blocks would move"), "{dry}");
    let json: serde_json::Value = serde_json::from_str(&ok(&["defrag", "--dry-run", "--json", i])).unwrap();
    assert!(std::fs::read(&img).unwrap() == bytes, "a dry run changed the image");
    assert_eq!(json["dry_run"], true);
    assert_eq!(json["summary"]["defragmented"], 2);
    assert_eq!(json["summary"]["extents_after"], 2);
    assert_eq!(json["summary"]["blocks_moved"], 1200);
    let files = json["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert!(
        files.iter().all(|f| f["skipped"].is_null() && f["extents_after"] == 1),
        "{files:?}"
    );

    let real: serde_json::Value = serde_json::from_str(&ok(&["defrag", "--json", i])).unwrap();
    assert_eq!(real["dry_run"], false);
    assert_eq!(real["summary"]["extents_after"], 2);
    assert_eq!(real["summary"]["score_after"], 0.0);
    assert!(real["summary"]["score_before"].as_f64().unwrap() > 40.0, "{real}");
    assert_clean(&img);
}

#[test]
fn a_missing_path_and_a_mounted_image_fail_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _, _) = interleaved(dir.path());
    let i = img.to_str().unwrap();
    let missing = ext4kit(&["defrag", i, "/nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nope"));
    if skip_unless(can_loop_mount()).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        return;
    }
    let bytes = std::fs::read(&img).unwrap();
    let mnt = LoopMount::ro(&img).unwrap();
    let refused = ext4kit(&["defrag", i]);
    mnt.unmount().unwrap();
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    eprintln!("{}", String::from_utf8_lossy(&refused.stderr));
    assert!(
        std::fs::read(&img).unwrap() == bytes,
        "a refused defrag changed the image"
    );
    assert_clean(&img);
}
