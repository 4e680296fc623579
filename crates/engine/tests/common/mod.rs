//! Helpers for the engine's integration tests: images made by the real
//! mke2fs, opened through the engine.

#![allow(dead_code)]

pub mod crash_cases;

use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Filesystem, OpenOptions};

/// Runs `mkfs.ext4 -q -F ARGS -d SRC IMG SIZE`; `None` (after a loud
/// message) when mke2fs is not installed.
pub fn mkfs(dir: &Path, src: Option<&Path>, args: &[&str], size: &str) -> Option<PathBuf> {
    if Command::new("mkfs.ext4").arg("-V").output().is_err() {
        ext4kit_testkit::skipped!("mkfs.ext4 is not installed (apt-get install e2fsprogs)");
        return None;
    }
    let img = dir.join("img");
    let mut c = Command::new("mkfs.ext4");
    c.args(["-q", "-F"]).args(args);
    if let Some(s) = src {
        c.arg("-d").arg(s);
    }
    let out = c
        .arg(&img)
        .arg(size)
        .env("MKE2FS_CONFIG", "/etc/mke2fs.conf")
        .output()
        .expect("run mkfs.ext4");
    assert!(
        out.status.success(),
        "mkfs.ext4 {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(img)
}

/// Runs a program and asserts it succeeded.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Opens `img` read-only with `opts`.
pub fn open(img: &Path, opts: OpenOptions) -> ext4kit_engine::Result<Filesystem> {
    Filesystem::open(Box::new(FileDevice::open(img, false).expect("open image")), opts)
}

/// Opens `img` for writing with the default options.
pub fn open_rw(img: &Path) -> Filesystem {
    let dev = FileDevice::open(img, true).expect("open rw");
    Filesystem::open(Box::new(dev), OpenOptions::default()).expect("open fs")
}

/// Reads the 1024-byte primary superblock of `img`.
pub fn read_sb(img: &Path) -> Vec<u8> {
    let data = std::fs::read(img).expect("read image");
    data[1024..2048].to_vec()
}

/// Rewrites the primary superblock of `img` after `edit`, fixing its checksum.
pub fn patch_sb(img: &Path, edit: impl FnOnce(&mut ext4kit_format::superblock::RawSuperblock)) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
    let mut buf = [0u8; 1024];
    f.read_exact_at(&mut buf, 1024).unwrap();
    let mut sb = ext4kit_format::superblock::RawSuperblock::parse(&buf).unwrap();
    edit(&mut sb);
    sb.set_checksum();
    f.write_all_at(&sb.encode(), 1024).unwrap();
}
