//! What the repair tests share: running a repair on an image held in
//! memory, e2fsck as the judge, and a temporary file for the tools that
//! need one.

#![allow(dead_code)] // each test binary uses part of it

use std::io::Write;
use std::process::Command;
use std::sync::Arc;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::{Attr, BlockDevice};
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
