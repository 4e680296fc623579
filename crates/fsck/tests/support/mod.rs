//! What the repair tests share: running a repair on an image held in
//! memory, e2fsck as the judge, and a temporary file for the tools that
//! need one.

#![allow(dead_code)] // each test binary uses part of it

use std::io::Write;
use std::process::Command;
use std::sync::Arc;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, BlockDevice, Filesystem, OpenOptions};
use ext4kit_fsck::repair::{Outcome, repair};
use ext4kit_fsck::{Mode, Options};

/// Owner and mode of the files the tests create.
pub const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// `fsck -fy` on a copy of `bytes`: the outcome and the repaired image.
pub fn repair_yes(bytes: &[u8]) -> (Outcome, Vec<u8>) {
    let mem = Arc::new(MemDevice::new(bytes.to_vec()));
    let dev: Arc<dyn BlockDevice> = mem.clone();
    let opts = Options {
        force: true,
        mode: Mode::Yes,
        ..Options::default()
    };
    let out = repair(&dev, &opts, &mut |_| {}).expect("repair runs");
    (out, mem.snapshot())
}

/// `bytes` in a temporary file, for debugfs and e2fsck.
pub fn temp_image(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    f
}

/// `e2fsck -fn` on `bytes`: its exit status and what it printed.
pub fn e2fsck_fn(bytes: &[u8]) -> (Option<i32>, String) {
    let f = temp_image(bytes);
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg(f.path())
        .output()
        .expect("e2fsck is installed (apt-get install e2fsprogs)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// Asserts `e2fsck -fn` finds `bytes` clean.
pub fn assert_e2fsck_clean(bytes: &[u8], what: &str) {
    let (code, text) = e2fsck_fn(bytes);
    assert_eq!(code, Some(0), "{what}: e2fsck -fn\n{text}");
}

/// Asserts `e2fsck -fn` finds the repaired `bytes` clean.
pub fn e2fsck_clean(bytes: &[u8]) {
    assert_e2fsck_clean(bytes, "after the repair");
}

/// [`repair_yes`] taking and giving the image first: the repaired image
/// and the outcome.
pub fn fix(bytes: Vec<u8>) -> (Vec<u8>, Outcome) {
    let (out, after) = repair_yes(&bytes);
    (after, out)
}

/// A fresh file system of `size` bytes in memory, made with 1 KiB blocks,
/// UUID bytes all `uuid` and a fixed time (so the layout, and the
/// repairs' cases, stay put), with `tweak` applied to the mkfs options;
/// open in the engine to be filled. Unmount it, then take the device's
/// snapshot.
pub fn engine_fs(size: usize, uuid: u8, tweak: impl FnOnce(&mut MkfsOptions)) -> (Arc<MemDevice>, Filesystem) {
    let dev = Arc::new(MemDevice::new(vec![0; size]));
    let mut opts = MkfsOptions {
        uuid: Some([uuid; 16]),
        timestamp: Some(1_700_000_000),
        device_zeroed: true,
        block_size: Some(1024),
        ..MkfsOptions::default()
    };
    tweak(&mut opts);
    mkfs(dev.as_ref(), &opts).expect("mkfs");
    let fs = Filesystem::open(Box::new(dev.clone() as Arc<dyn BlockDevice>), OpenOptions::default()).expect("open");
    (dev, fs)
}

/// The codes of the findings the repair runs repaired.
pub fn fixed_codes(out: &Outcome) -> Vec<&'static str> {
    out.runs
        .iter()
        .flat_map(|r| r.findings.iter())
        .filter(|f| f.fixed)
        .map(|f| f.code.name)
        .collect()
}

/// The codes of every finding of the repair runs.
pub fn codes(out: &Outcome) -> Vec<&'static str> {
    out.runs
        .iter()
        .flat_map(|r| r.findings.iter().map(|f| f.code.name))
        .collect()
}

/// The verdict is clean, and file `ino` of the repaired image still reads
/// as `len` bytes of `byte`.
pub fn assert_clean_and_file_intact(out: &Outcome, after: &[u8], ino: u32, len: usize, byte: u8) {
    assert_eq!(
        out.verdict.unfixed_errors(),
        0,
        "left: {:?}",
        out.verdict.findings.iter().map(|f| f.code.name).collect::<Vec<_>>()
    );
    let dev = Arc::new(MemDevice::new(after.to_vec()));
    let fs = Filesystem::open(Box::new(dev as Arc<dyn BlockDevice>), OpenOptions::default()).expect("opens");
    let mut buf = vec![0u8; len];
    assert_eq!(fs.read_file_at(ino, 0, &mut buf).expect("reads"), len);
    assert!(buf.iter().all(|&b| b == byte), "the file's data survives");
}

/// `debugfs -R request` (read-only) on a copy of `bytes`: what it printed.
pub fn debugfs_out(bytes: &[u8], request: &str) -> String {
    let f = temp_image(bytes);
    let out = Command::new("debugfs")
        .args(["-R", request])
        .arg(f.path())
        .output()
        .expect("debugfs is installed (apt-get install e2fsprogs)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Physical block of inode `ino`'s logical block `lblk` (debugfs `bmap`).
pub fn bmap(bytes: &[u8], ino: u32, lblk: u32) -> usize {
    debugfs_out(bytes, &format!("bmap <{ino}> {lblk}"))
        .trim()
        .parse()
        .expect("bmap")
}
