//! The POSIX suite validated on reference file systems: on the kernel's own
//! ext4 and on tmpfs every check must pass, so a failure later on the FUSE
//! mount is the FUSE mount's fault, not the suite's.

mod common;

use std::ffi::OsStr;

use common::{Tmpfs, kernel_ext4, lines_starting, posix};

#[test]
fn suite_passes_on_kernel_ext4() {
    let work = tempfile::tempdir().unwrap();
    let Some((img, mnt)) = kernel_ext4(work.path(), 1 << 30) else {
        return;
    };
    let out = posix(&[OsStr::new("run"), mnt.path().as_os_str()]);
    let fails = lines_starting(&out, "FAIL");
    assert!(
        fails.is_empty() && out.status.success(),
        "the kernel's ext4 fails checks:\n{}",
        fails.join("\n")
    );
    // As root on ext4 nothing may be skipped except for a missing tool.
    let skips: Vec<_> = lines_starting(&out, "SKIP")
        .into_iter()
        .filter(|l| !l.contains("not installed"))
        .collect();
    assert!(skips.is_empty(), "checks skipped on kernel ext4:\n{}", skips.join("\n"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ok   perm_sticky") && stdout.contains("ok   dir_readdir_many_seekdir"),
        "checks missing"
    );
    mnt.unmount().unwrap();
    ext4kit_testkit::tools::assert_fsck_clean(&img.path).unwrap();
}

#[test]
fn suite_passes_on_tmpfs() {
    let Some(t) = Tmpfs::mount() else { return };
    let out = posix(&[OsStr::new("run"), t.path().as_os_str()]);
    let fails = lines_starting(&out, "FAIL");
    assert!(
        fails.is_empty() && out.status.success(),
        "tmpfs fails checks:\n{}",
        fails.join("\n")
    );
    // tmpfs has no FALLOC_FL_ZERO_RANGE; anything else skipped is news.
    for skip in lines_starting(&out, "SKIP") {
        eprintln!("tmpfs: {skip}");
        assert!(
            skip.contains("ZERO_RANGE") || skip.contains("not installed"),
            "unexpected skip on tmpfs: {skip}"
        );
    }
}

#[test]
fn filter_and_list_select_checks() {
    let out = posix(&[
        OsStr::new("run"),
        OsStr::new("--list"),
        OsStr::new("--filter"),
        OsStr::new("rename_,lock_ofd"),
    ]);
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(
        names,
        [
            "rename_basic",
            "rename_noreplace",
            "rename_exchange",
            "rename_dir_errors",
            "lock_ofd"
        ]
    );
    // A filtered run in a plain temporary directory (any user, any FS).
    let dir = tempfile::tempdir().unwrap();
    let out = posix(&[
        OsStr::new("run"),
        dir.path().as_os_str(),
        OsStr::new("--filter"),
        OsStr::new("rename_basic"),
    ]);
    assert!(out.status.success());
    assert_eq!(lines_starting(&out, "ok"), ["ok   rename_basic"]);
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "work directory left behind"
    );
}
