//! `ext4kit bench hugedir` end to end at a small size: every target this
//! machine can run creates, looks up, lists and deletes every name, the
//! report is complete (rates, flatness, htree levels, the emptied
//! directory back to one block) and every image is e2fsck-clean. Never
//! checks how fast anything was; the large runs live in docs/RESULTS.md.

use std::process::Command;

use ext4kit_testkit::fuse::can_fuse_mount;
use ext4kit_testkit::mount::can_loop_mount;
use ext4kit_testkit::tools::{require_tool, skip_unless};
use serde_json::Value;

const ENTRIES: u64 = 3000;

/// The targets this machine can run; a missing one fails under CI.
fn targets() -> Vec<&'static str> {
    let mut t = vec!["library"];
    for (name, ok) in [("mount", can_fuse_mount()), ("kernel", can_loop_mount())] {
        match ok {
            Ok(()) => t.push(name),
            Err(why) => {
                ext4kit_testkit::skipped!("target {name}: {why}");
                assert!(std::env::var_os("CI").is_none(), "CI needs target {name}: {why}");
            }
        }
    }
    t
}

fn check_run(r: &Value, block_size: u64) {
    let name = r["target"].as_str().expect("target");
    assert_eq!(r["entries"].as_u64(), Some(ENTRIES), "{name}");
    assert_eq!(r["fsck_clean"], Value::Bool(true), "{name}: image not clean: {r}");
    let phases: Vec<&str> = r["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        phases,
        ["create", "lookup", "readdir", "delete", "readdir_empty"],
        "{name}"
    );
    assert!(r["create_first_5pct_us"].as_f64().unwrap() > 0.0, "{name}: {r}");
    assert!(r["create_last_5pct_us"].as_f64().unwrap() > 0.0, "{name}: {r}");
    assert_eq!(r["create_us_by_twentieth"].as_array().map(Vec::len), Some(20), "{name}");
    assert!(
        r["index_levels"].as_u64().is_some_and(|l| l >= 1),
        "{name}: an htree: {r}"
    );
    assert!(r["dir_bytes"].as_u64().unwrap() > 8 * block_size, "{name}: {r}");
    if name != "kernel" {
        // The engine shrinks an emptied directory; the kernel does not.
        assert_eq!(r["dir_bytes_after_delete"].as_u64(), Some(block_size), "{name}: {r}");
    }
}

#[test]
fn a_small_run_on_every_target_is_complete_and_clean() {
    if skip_unless(require_tool("e2fsck")).is_none() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI needs e2fsprogs");
        return;
    }
    let targets = targets();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let n = ENTRIES.to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["bench", "hugedir", "--entries", &n, "--lookups", "500", "--stat"])
        .args(["--block-size", "1024", "--targets", &targets.join(",")])
        .arg("--scratch")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run ext4kit");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench hugedir failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("| target | entries | create/s |"),
        "no table:\n{stdout}"
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = r["runs"].as_array().expect("runs");
    let names: Vec<&str> = runs.iter().filter_map(|t| t["target"].as_str()).collect();
    assert_eq!(names, targets);
    for run in runs {
        check_run(run, 1024);
    }
}
