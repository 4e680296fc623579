//! Journal recreation (e2fsck's "Recreate journal"): mke2fs images whose
//! journal inode `debugfs` cleared get a new journal of the default size,
//! which e2fsck accepts, dumpe2fs describes as mke2fs's, and the kernel
//! mounts and uses.

mod support;

use support::*;

use std::process::Command;

use ext4kit_testkit::mount::{LoopMount, can_loop_mount};

/// A `size`-byte image made by `mkfs.ext<n>` with `args`.
fn mke2fs(kind: &str, args: &[&str], size: &str) -> Vec<u8> {
    let f = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new(format!("mkfs.{kind}"))
        .args([
            "-q",
            "-F",
            "-E",
            "root_owner=0:0",
            "-U",
            "6b33f586-a183-4383-921d-30da3fef2e1c",
        ])
        .args(args)
        .arg(f.path())
        .arg(size)
        .output()
        .expect("mkfs.ext4 is installed (apt-get install e2fsprogs)");
    assert!(out.status.success(), "mkfs: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::read(f.path()).unwrap()
}

fn debugfs_w(bytes: &[u8], request: &str) -> Vec<u8> {
    let f = temp_image(bytes);
    let out = Command::new("debugfs")
        .args(["-w", "-R", request])
        .arg(f.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "debugfs {request}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(f.path()).unwrap()
}

/// dumpe2fs -h's journal lines (size, length, backup) and features.
fn journal_facts(bytes: &[u8]) -> Vec<String> {
    let f = temp_image(bytes);
    let out = Command::new("dumpe2fs").arg("-h").arg(f.path()).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.starts_with("Journal size")
                || l.starts_with("Journal length")
                || l.starts_with("Journal backup")
                || l.starts_with("Journal inode")
                || l.starts_with("Filesystem features")
        })
        .map(str::to_string)
        .collect()
}

/// Clears the journal inode of `img`, repairs, and checks the new journal.
fn recreated(img: Vec<u8>) -> Vec<u8> {
    let before = journal_facts(&img);
    assert!(before.iter().any(|l| l.contains("has_journal")), "{before:?}");
    let broken = debugfs_w(&img, "clri <8>");
    let (out, after) = repair_yes(&broken);
    let fixed = fixed_codes(&out);
    assert!(fixed.contains(&"P0_JOURNAL_BAD_INODE"), "{fixed:?}");
    assert!(fixed.contains(&"P6_RECREATE_JOURNAL"), "{fixed:?}");
    assert_eq!(out.verdict.unfixed_errors(), 0, "{:?}", out.verdict.findings);
    e2fsck_clean(&after);
    assert_eq!(journal_facts(&after), before, "the new journal is mke2fs's");
    after
}

/// Mounts the image read-write, writes a file through the journal,
/// unmounts, and has e2fsck check it.
fn kernel_uses(bytes: &[u8]) {
    if let Err(why) = can_loop_mount() {
        assert!(std::env::var_os("CI").is_none(), "CI must run the mount check: {why}");
        eprintln!("SKIPPED: kernel mount of the recreated journal: {why}");
        return;
    }
    let f = temp_image(bytes);
    let m = LoopMount::rw(f.path(), &[]).expect("the kernel mounts the repaired image");
    std::fs::write(m.path().join("after"), vec![7u8; 100_000]).unwrap();
    m.unmount().expect("unmount");
    let img = std::fs::read(f.path()).unwrap();
    assert_e2fsck_clean(&img, "after a kernel mount");
}

#[test]
fn extent_journal_is_recreated_with_checksums_and_flex_bg() {
    let img = mke2fs("ext4", &["-b", "4096", "-O", "metadata_csum,^resize_inode"], "160M");
    let after = recreated(img);
    kernel_uses(&after);
}

#[test]
fn block_mapped_journal_is_recreated_on_ext3() {
    let img = mke2fs("ext3", &["-b", "1024"], "24M");
    let after = recreated(img);
    kernel_uses(&after);
}

#[test]
fn check_only_run_reports_and_leaves_the_journal_deleted() {
    let img = mke2fs("ext4", &["-b", "1024"], "16M");
    let broken = debugfs_w(&img, "clri <8>");
    let (code, _) = e2fsck_fn(&broken);
    assert_ne!(code, Some(0), "e2fsck sees the damage");
    let f = temp_image(&broken);
    let dev = ext4kit_engine::device::FileDevice::open(f.path(), false).unwrap();
    let opts = ext4kit_fsck::Options {
        force: true,
        ..Default::default()
    };
    let rep = ext4kit_fsck::check(&dev, &opts, &mut |_| {}).unwrap();
    let codes: Vec<_> = rep.findings.iter().map(|f| f.code.name).collect();
    assert!(codes.contains(&"P0_JOURNAL_BAD_INODE"), "{codes:?}");
    assert!(!codes.contains(&"P6_RECREATE_JOURNAL"), "{codes:?}");
    assert_eq!(std::fs::read(f.path()).unwrap(), broken, "a check writes nothing");
}
