//! The data-integrity exerciser: clean on the kernel's ext4 (then
//! `e2fsck -fn`), and provably able to catch a corrupted byte.

mod common;

use std::ffi::OsStr;

use common::{kernel_ext4, posix};

fn args<'a>(dir: &'a std::path::Path, rest: &'a [&'a str]) -> Vec<&'a OsStr> {
    let mut v = vec![OsStr::new("exercise"), dir.as_os_str()];
    v.extend(rest.iter().map(OsStr::new));
    v
}

#[test]
fn exercise_20000_ops_on_kernel_ext4_then_fsck() {
    let work = tempfile::tempdir().unwrap();
    let Some((img, mnt)) = kernel_ext4(work.path(), 512 << 20) else {
        return;
    };
    let out = posix(&args(mnt.path(), &["--ops", "20000", "--seed", "42", "--files", "4"]));
    assert!(out.status.success(), "exerciser found a difference on kernel ext4");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("ok: 20000 ops") && !stdout.contains("NOT exercised"),
        "{stdout}"
    );
    mnt.unmount().unwrap();
    ext4kit_testkit::tools::assert_fsck_clean(&img.path).unwrap();
}

#[test]
fn exercise_is_clean_in_a_temp_dir() {
    let dir = tempfile::tempdir().unwrap();
    let out = posix(&args(
        dir.path(),
        &["--ops", "3000", "--seed", "5", "--files", "3", "--max-size", "8388608"],
    ));
    assert!(out.status.success(), "exerciser failed in {}", dir.path().display());
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "work directory left behind"
    );
}

#[test]
fn exercise_catches_a_flipped_byte() {
    let dir = tempfile::tempdir().unwrap();
    let out = posix(&args(
        dir.path(),
        &["--ops", "1500", "--seed", "9", "--self-test-corrupt"],
    ));
    assert_eq!(out.status.code(), Some(1), "a flipped byte went unnoticed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("MISMATCH seed=9 op=1500"), "{stdout}");
    assert!(stdout.contains("SELF-TEST: flipped byte at"), "{stdout}");
    assert!(
        stdout.contains("replay: ext4kit-posix exercise DIR --ops 1500 --seed 9"),
        "{stdout}"
    );
    // The reported offset is the flipped one.
    let flipped = stdout
        .split("flipped byte at ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap();
    assert!(stdout.contains(&format!("byte at offset {flipped} is")), "{stdout}");
}
