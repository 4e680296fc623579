//! Repairs of extended attribute blocks and quota usage on images
//! `mke2fs` writes: a wrong `h_refcount` is set to the inodes naming the
//! block, and quota files whose usage differs from what the inodes use are
//! rewritten; afterwards neither `ext4kit` nor `e2fsck -fn` finds anything,
//! and the files are intact.

mod support;

use support::*;

use std::process::Command;
use std::sync::Arc;

use ext4kit_engine::BlockDevice;
use ext4kit_engine::device::MemDevice;
use ext4kit_fsck::Options;
use ext4kit_fsck::repair::Outcome;

/// An 8 MiB, 1 KiB-block image made by `mke2fs` with `extra` options and
/// the files `f1`..`f3` (5000 bytes each) copied in with `-d`.
fn mke2fs(extra: &[&str]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    for i in 1..=3 {
        std::fs::write(dir.path().join(format!("f{i}")), vec![i as u8; 5000]).unwrap();
    }
    let img = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-b", "1024", "-E", "root_owner=0:0"])
        .args(extra)
        .arg("-d")
        .arg(dir.path())
        .arg(img.path())
        .arg("8M")
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::read(img.path()).unwrap()
}

fn debugfs(bytes: &[u8], write: bool, request: &str) -> (Vec<u8>, String) {
    let f = temp_image(bytes);
    let mut c = Command::new("debugfs");
    if write {
        c.arg("-w");
    }
    let out = c.args(["-R", request]).arg(f.path()).output().unwrap();
    assert!(out.status.success(), "debugfs {request}");
    (
        std::fs::read(f.path()).unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn assert_clean(out: &Outcome, bytes: &[u8]) {
    assert_eq!(out.verdict.unfixed_errors(), 0, "left: {:?}", out.verdict.findings);
    let (code, text) = e2fsck_fn(bytes);
    assert_eq!(code, Some(0), "e2fsck -fn: {text}");
}

fn assert_files_intact(bytes: &[u8]) {
    for i in 1..=3u8 {
        let (_, cat) = debugfs(bytes, false, &format!("stat /f{i}"));
        assert!(cat.contains("Size: 5000"), "{cat}");
    }
}

#[test]
fn stale_quota_usage_is_rewritten() {
    // mke2fs -d copies files in without charging them to quota.
    let bytes = mke2fs(&[
        "-O",
        "quota,project",
        "-E",
        "quotatype=usrquota:grpquota:prjquota",
        "-I",
        "256",
    ]);
    let (code, text) = e2fsck_fn(&bytes);
    assert_eq!(code, Some(4), "the image should start with stale quota: {text}");
    let (out, fixed) = repair_yes(&bytes);
    let c = codes(&out);
    assert_eq!(c.iter().filter(|&&n| n == "P6_UPDATE_QUOTAS").count(), 3, "{c:?}");
    assert_clean(&out, &fixed);
    assert_files_intact(&fixed);
}

#[test]
fn a_wrong_xattr_block_refcount_is_set() {
    // 128-byte inodes keep every xattr in a block.
    let bytes = mke2fs(&["-I", "128", "-O", "^metadata_csum"]);
    let (bytes, _) = debugfs(&bytes, true, "ea_set /f1 user.note hello");
    let (_, stat) = debugfs(&bytes, false, "stat /f1");
    let acl: usize = stat
        .split("File ACL: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("f1 has an xattr block");
    let mut bad = bytes.clone();
    bad[acl * 1024 + 4..acl * 1024 + 8].copy_from_slice(&5u32.to_le_bytes());
    let (out, fixed) = repair_yes(&bad);
    assert!(codes(&out).contains(&"P1_EXTATTR_REFCOUNT"), "{:?}", codes(&out));
    assert_clean(&out, &fixed);
    assert_eq!(&fixed[acl * 1024 + 4..acl * 1024 + 8], &1u32.to_le_bytes());
    let (_, ea) = debugfs(&fixed, false, "ea_get /f1 user.note");
    assert!(ea.contains("hello"), "{ea}");
    assert_files_intact(&fixed);
}

/// The checker and e2fsck agree that the value inodes the engine writes
/// (hash, reference count, the owner's block charge) are sound.
#[test]
fn ea_inode_values_the_engine_writes_check_clean() {
    use ext4kit_engine::{Filesystem, OpenOptions, XattrSet};
    let dev = Arc::new(MemDevice::new(mke2fs(&["-O", "ea_inode"])));
    let fs = Filesystem::open(Box::new(dev.clone() as Arc<dyn BlockDevice>), OpenOptions::default()).unwrap();
    let f1 = fs.resolve(b"/f1").unwrap().ino;
    fs.set_xattr(f1, b"user.big", &[7u8; 5000], XattrSet::Create).unwrap();
    fs.set_xattr(f1, b"user.two", &[8u8; 3000], XattrSet::Create).unwrap();
    let f2 = fs.resolve(b"/f2").unwrap().ino;
    fs.set_xattr(f2, b"user.big", &[9u8; 2000], XattrSet::Create).unwrap();
    fs.remove_xattr(f1, b"user.two").unwrap();
    fs.unmount().unwrap();
    let bytes = dev.snapshot();
    let opts = Options {
        force: true,
        ..Default::default()
    };
    let r = ext4kit_fsck::check(&MemDevice::read_only(bytes.clone()), &opts, &mut |_| {}).unwrap();
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    let (code, text) = e2fsck_fn(&bytes);
    assert_eq!(code, Some(0), "e2fsck -fn: {text}");
}
