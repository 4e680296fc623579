//! `ext4kit bench fsck` end to end at a small size: the image is built, both
//! layouts are checked cold by `ext4kit fsck` (on every core and on one
//! thread) and `e2fsck`, every run finds
//! the image clean, and the copy really lost its uninit flags. No time is
//! asserted, only that the report carries the figures; the large run lives
//! in docs/RESULTS.md.

use std::process::Command;

use ext4kit_testkit::tools::{require_tool, skip_unless};
use serde_json::Value;

#[test]
fn a_small_run_checks_both_layouts_clean() {
    if skip_unless(require_tool("e2fsck")).is_none() || skip_unless(require_tool("debugfs")).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI needs e2fsprogs");
        return;
    }
    if !rustix::process::geteuid().is_root() {
        ext4kit_testkit::skipped!("bench fsck drops the page cache, which needs root");
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["bench", "fsck", "--files", "3000", "--size", "512M", "--runs", "1"])
        .arg("--scratch")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run ext4kit");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench fsck failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("flags cleared ÷ flags kept"), "no ratio:\n{stdout}");
    assert!(stdout.contains("e2fsck ÷ ext4kit"), "no comparison:\n{stdout}");
    assert!(
        stdout.contains("ext4kit-serial ÷ ext4kit"),
        "no threads comparison:\n{stdout}"
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["built"]["files"].as_u64(), Some(2970), "{r}");
    assert_eq!(r["built"]["symlinks"].as_u64(), Some(30), "{r}");
    assert_eq!(r["built"]["dirs"].as_u64(), Some(3), "{r}");
    assert!(r["groups_cleared"].as_u64().is_some_and(|g| g >= 2), "{r}");
    let layouts: Vec<&str> = r["layouts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(layouts, ["uninit_bg flags", "flags cleared"]);
    for l in r["layouts"].as_array().unwrap() {
        let checkers: Vec<&str> = l["checkers"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["checker"].as_str())
            .collect();
        assert_eq!(checkers, ["ext4kit", "ext4kit-serial", "e2fsck"], "{l}");
        for m in l["checkers"].as_array().unwrap() {
            assert_eq!(m["exit_codes"], serde_json::json!([0]), "{l}");
            assert!(m["median_seconds"].as_f64().unwrap() > 0.0, "{l}");
        }
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "only the report is left: {leftovers:?}");
}
