//! Quota limits through `ext4kit mount`: a non-root process (setpriv to
//! uid 1000) writing past its hard limit gets EDQUOT ("Disk quota
//! exceeded" from dd and from cp, which copies with copy_file_range),
//! with the write-back cache and without; root is
//! not held; the image is e2fsck -fn clean afterwards with the usage
//! debugfs lists.

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::tools::{assert_fsck_clean, debugfs, require_tools};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ext4kit(args: &[&str]) {
    let out = Command::new(exe()).args(args).output().expect("run ext4kit");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// dd as uid/gid 1000; returns (success, stderr).
fn dd_as_user(to: &Path, count: u32) -> (bool, String) {
    let out = Command::new("setpriv")
        .args([
            "--reuid=1000",
            "--regid=1000",
            "--clear-groups",
            "dd",
            "if=/dev/zero",
            "bs=64k",
        ])
        .arg(format!("of={}", to.display()))
        .arg(format!("count={count}"))
        .output()
        .expect("setpriv dd");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_user_past_the_hard_limit_gets_edquot_through_the_mount() {
    for check in [can_fuse_mount(), require_tools(&["setpriv", "debugfs", "e2fsck"])] {
        if let Err(why) = check {
            ext4kit_testkit::skipped!("{why}");
            assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
            return;
        }
    }
    for opts in ["allow_other", "allow_other,nowriteback_cache"] {
        let tmp = tempfile::tempdir().unwrap();
        let img = tmp.path().join("img");
        let p = img.to_str().unwrap();
        ext4kit(&["mkfs", "-q", p, "64M", "-O", "quota", "-E", "root_owner=1000:1000"]);
        ext4kit(&["quota", p, "--set", "user", "1000", "--blocks-hard", "200"]);
        let m = FuseMount::start(exe(), &img, opts).expect("mounted");
        let (ok, err) = dd_as_user(&m.path().join("f"), 10);
        assert!(!ok && err.contains("Disk quota exceeded"), "-o {opts}: {err}");
        let (ok, err) = dd_as_user(&m.path().join("g"), 1);
        assert!(
            !ok && err.contains("Disk quota exceeded"),
            "-o {opts}: at the limit: {err}"
        );
        std::fs::write(m.path().join("r"), vec![1u8; 640 << 10]).expect("root is not held to limits");
        let cp = Command::new("setpriv")
            .args(["--reuid=1000", "--regid=1000", "--clear-groups", "cp"])
            .arg(m.path().join("r"))
            .arg(m.path().join("c"))
            .output()
            .expect("setpriv cp");
        let err = String::from_utf8_lossy(&cp.stderr);
        assert!(
            !cp.status.success() && err.contains("Disk quota exceeded"),
            "-o {opts}: cp (copy_file_range): {err}"
        );
        m.unmount().expect("unmount");
        assert_fsck_clean(&img).expect("e2fsck -fn clean");
        let list = debugfs(&img, "list_quota user").expect("debugfs");
        let row: Vec<u64> = list
            .lines()
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect::<Vec<u64>>()
            })
            .find(|w| w.first() == Some(&1000))
            .expect("user 1000 listed");
        assert!(row[1] <= 200 << 10, "-o {opts}: usage {} within the limit", row[1]);
    }
}

/// `chattr -p ID +P` and `lsattr -p` through the mount
/// (`FS_IOC_FSSETXATTR`/`FSGETXATTR`'s `fsx_projid` and PROJINHERIT):
/// new files inherit the project; e2fsck -fn clean with the usage moved.
#[test]
fn project_ids_through_fsxattr_ioctls() {
    for check in [can_fuse_mount(), require_tools(&["chattr", "lsattr", "e2fsck"])] {
        if let Err(why) = check {
            ext4kit_testkit::skipped!("{why}");
            assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let p = img.to_str().unwrap();
    ext4kit(&["mkfs", "-q", p, "64M", "-O", "quota,project", "-I", "256"]);
    let m = FuseMount::start(exe(), &img, "").expect("mounted");
    let w = m.path().join("w");
    std::fs::create_dir(&w).unwrap();
    let st = Command::new("chattr").args(["-p", "7", "+P"]).arg(&w).status().unwrap();
    assert!(st.success(), "chattr -p 7 +P");
    std::fs::write(w.join("f"), b"hi").unwrap();
    let out = Command::new("lsattr").arg("-p").arg(w.join("f")).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(shown.split_whitespace().next(), Some("7"), "inherited: {shown}");
    m.unmount().expect("unmount");
    assert_fsck_clean(&img).expect("e2fsck -fn clean");
    let list = debugfs(&img, "list_quota project").expect("debugfs");
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().next() == Some("7") && l.split_whitespace().nth(4) == Some("2")),
        "project 7 holds w and f: {list}"
    );
}
