//! `ext4kit project` and `ext4kit quota` on an image made by mkfs.ext4
//! -O quota,project: set, read back, e2fsck -fn clean, debugfs agrees.

use std::process::Command;

fn ext4kit(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(args)
        .output()
        .expect("run ext4kit");
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn project_and_limits_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-O", "quota,project", "-I", "256"])
        .arg(&img)
        .arg("32M")
        .status();
    if !made.is_ok_and(|s| s.success()) {
        ext4kit_testkit::skipped!("mkfs.ext4 with quota support is not installed");
        assert!(std::env::var_os("CI").is_none(), "CI must have mkfs.ext4");
        return;
    }
    let p = img.to_str().unwrap();
    ext4kit(&["mkdir", p, "/w"]);
    ext4kit(&["project", p, "/w", "7", "--inherit"]);
    ext4kit(&["mkdir", p, "/w/sub"]);
    assert_eq!(ext4kit(&["project", p, "/w/sub"]).trim(), "7 inherit");
    ext4kit(&[
        "quota",
        p,
        "--set",
        "user",
        "1000",
        "--blocks-hard",
        "100",
        "--inodes-hard",
        "5",
    ]);
    let report = ext4kit(&["quota", p]);
    assert!(report.contains("project quotas"), "{report}");
    let row = report
        .lines()
        .find(|l| l.split_whitespace().next() == Some("1000"))
        .expect("user 1000");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["1000", "0", "0", "100", "0", "0", "5"]
    );
    ext4kit_testkit::tools::assert_fsck_clean(&img).expect("e2fsck -fn clean");
    let dbg = ext4kit_testkit::tools::debugfs(&img, "list_quota project").expect("debugfs");
    let seven = dbg
        .lines()
        .find(|l| l.split_whitespace().next() == Some("7"))
        .expect("project 7");
    assert_eq!(seven.split_whitespace().nth(4), Some("2"), "w and sub: {dbg}");
}
