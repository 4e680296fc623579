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

/// Links and renames through the mount as `ext4_link`/`ext4_rename` allow
/// them: into a PROJINHERIT directory of another project both are EXDEV,
/// so `mv` falls back to copy and unlink and the usage moves to the
/// project; a rename over a file releases that file's charge. e2fsck -fn
/// clean, with the usage debugfs lists.
#[test]
fn links_and_renames_into_another_project_through_the_mount() {
    for check in [can_fuse_mount(), require_tools(&["chattr", "lsattr", "e2fsck", "mv"])] {
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
    let (w, f) = (m.path().join("w"), m.path().join("f"));
    std::fs::create_dir(&w).unwrap();
    let st = Command::new("chattr").args(["-p", "7", "+P"]).arg(&w).status().unwrap();
    assert!(st.success(), "chattr -p 7 +P");
    std::fs::write(&f, vec![5u8; 100 << 10]).unwrap();
    let e = std::fs::hard_link(&f, w.join("f")).expect_err("link into project 7");
    assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{e}");
    let e = std::fs::rename(&f, w.join("f")).expect_err("rename into project 7");
    assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{e}");
    let out = Command::new("mv").arg(&f).arg(&w).output().unwrap();
    assert!(out.status.success(), "mv: {}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new("lsattr").arg("-p").arg(w.join("f")).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(shown.split_whitespace().next(), Some("7"), "copied into 7: {shown}");
    let (g, h) = (m.path().join("g"), m.path().join("h"));
    std::fs::write(&g, vec![6u8; 8 << 10]).unwrap();
    std::fs::write(&h, vec![7u8; 50 << 10]).unwrap();
    std::os::unix::fs::chown(&h, Some(1001), Some(1001)).unwrap();
    std::fs::rename(&g, &h).expect("rename over h");
    m.unmount().expect("unmount");
    assert_fsck_clean(&img).expect("e2fsck -fn clean");
    let row = |t: &str, id: &str| {
        let list = debugfs(&img, &format!("list_quota {t}")).expect("debugfs");
        list.lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
    };
    let seven = row("project", "7").expect("project 7 listed");
    assert_eq!(seven[4], "2", "w and f: {seven:?}");
    assert!(seven[1].parse::<u64>().unwrap() >= 100 << 10, "f's blocks: {seven:?}");
    let gone = row("user", "1001");
    assert!(
        gone.as_ref().is_none_or(|r| r[1] == "0" && r[4] == "0"),
        "h released: {gone:?}"
    );
}

/// A link or rename that grows a directory charges the block to the
/// directory's owner and holds the caller to that limit, as the kernel's
/// `ext4_link`/`ext4_rename` do through `dquot_alloc_block`: user 1000,
/// at its hard limit, cannot add a sixth long name to its full one-block
/// directory by `ln` or `mv` ("Disk quota exceeded"); root can.
#[test]
fn links_and_renames_that_grow_a_directory_meet_the_limit() {
    for check in [can_fuse_mount(), require_tools(&["setpriv", "ln", "mv", "e2fsck"])] {
        if let Err(why) = check {
            ext4kit_testkit::skipped!("{why}");
            assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let p = img.to_str().unwrap();
    ext4kit(&["mkfs", "-q", p, "16M", "-b", "1024", "-O", "quota"]);
    // 200-byte names take 208-byte entries: four fill what a 1 KiB block
    // keeps beside `.`, `..` and the checksum tail.
    let long = |i: u32| format!("{}{i}", "n".repeat(199));
    let m = FuseMount::start(exe(), &img, "allow_other").expect("mounted");
    let (d, e) = (m.path().join("d"), m.path().join("e"));
    std::fs::create_dir(&d).unwrap();
    std::fs::create_dir(&e).unwrap();
    for i in 0..4 {
        std::fs::write(d.join(long(i)), b"").unwrap();
    }
    std::fs::write(m.path().join("src"), b"").unwrap();
    std::fs::write(e.join("g"), b"").unwrap();
    for f in [&d, &m.path().join("src"), &e.join("g")] {
        std::os::unix::fs::chown(f, Some(1000), Some(1000)).unwrap();
    }
    std::fs::set_permissions(&e, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    m.unmount().expect("unmount");
    ext4kit(&["quota", p, "--set", "user", "1000", "--blocks-hard", "1"]);
    let m = FuseMount::start(exe(), &img, "allow_other").expect("mounted");
    let (d, e) = (m.path().join("d"), m.path().join("e"));
    let as_user = |cmd: &str, from: &Path, to: &Path| {
        let out = Command::new("setpriv")
            .args(["--reuid=1000", "--regid=1000", "--clear-groups", cmd])
            .arg(from)
            .arg(to)
            .output()
            .expect("setpriv");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = as_user("ln", &m.path().join("src"), &d.join(long(4)));
    assert!(!ok && err.contains("Disk quota exceeded"), "ln: {err}");
    let (ok, err) = as_user("mv", &e.join("g"), &d.join(long(5)));
    assert!(!ok && err.contains("Disk quota exceeded"), "mv: {err}");
    assert!(e.join("g").exists(), "g stays where it was");
    std::fs::hard_link(m.path().join("src"), d.join(long(4))).expect("root is not held to limits");
    m.unmount().expect("unmount");
    assert_fsck_clean(&img).expect("e2fsck -fn clean");
}
