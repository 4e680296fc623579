//! `ext4kit bench mount --quick` end to end: every target this machine
//! can run (kernel loop mount, fuse2fs, ext4kit's FUSE mount) runs every
//! workload on its own fresh image, and every image is e2fsck-clean
//! afterwards. The only test that runs the benchmark; it checks that the
//! report is complete, never how fast anything was.

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::fuse::can_fuse_mount;
use ext4kit_testkit::mount::can_loop_mount;
use ext4kit_testkit::tools::{require_tool, skip_unless};
use serde_json::Value;

const TARGETS: [&str; 3] = ["kernel", "fuse2fs", "ext4kit"];
const WORKLOADS: [&str; 7] = [
    "create", "postmark", "seqwrite", "seqread", "untar", "cached", "threads",
];

/// Whether the benchmark must run `target` here (else it must say why
/// not). Under CI (`CI` set) fuse2fs is installed by .ci/run, so a
/// missing one fails the test.
fn expected_to_run(target: &str) -> bool {
    match target {
        "kernel" => can_loop_mount().is_ok(),
        "fuse2fs" => require_tool("fuse2fs").is_ok() || std::env::var_os("CI").is_some(),
        _ => true,
    }
}

fn check_target(t: &Value) {
    let name = t["target"].as_str().expect("target name");
    if !expected_to_run(name) {
        ext4kit_testkit::skipped!("target {name}: {}", t["skipped"]);
        assert!(t["skipped"].is_string(), "{name} neither ran nor said why: {t}");
        return;
    }
    assert!(t["skipped"].is_null(), "{name} was skipped: {}", t["skipped"]);
    assert!(t["error"].is_null(), "{name} failed: {}", t["error"]);
    let fsck = &t["fsck"];
    assert_eq!(
        fsck["clean"],
        Value::Bool(true),
        "{name}: e2fsck -fn: {}",
        fsck["output"]
    );
    let runs = t["workloads"].as_array().expect("workloads");
    let names: Vec<&str> = runs.iter().filter_map(|w| w["workload"].as_str()).collect();
    assert_eq!(names, WORKLOADS, "{name}: workloads run");
    for w in runs {
        assert!(w["error"].is_null(), "{name} {}: {}", w["workload"], w["error"]);
        let metrics = w["metrics"].as_array().expect("metrics");
        assert!(!metrics.is_empty(), "{name} {}: no figures", w["workload"]);
        for m in metrics {
            let v = m["value"].as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v >= 0.0, "{name} {}: {m}", w["workload"]);
        }
    }
}

#[test]
fn quick_bench_runs_every_available_target_and_leaves_clean_images() {
    if skip_unless(can_fuse_mount()).is_none() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (stdout, _, report) = quick_bench(dir.path(), &["--targets", "kernel,fuse2fs,ext4kit"]);
    let targets = report["targets"].as_array().expect("targets");
    let names: Vec<&str> = targets.iter().filter_map(|t| t["target"].as_str()).collect();
    assert_eq!(names, TARGETS);
    targets.iter().for_each(check_target);
    for w in WORKLOADS {
        assert!(stdout.contains(&format!("### {w}\n")), "no table for {w}:\n{stdout}");
    }
    assert!(stdout.contains("| ext4kit/kernel |"), "no ratio column:\n{stdout}");
    assert_no_leftovers(dir.path());
}

/// `--rounds 3` mounts the target three times on fresh images, checks each
/// with e2fsck, and reports one median figure per metric.
#[test]
fn rounds_run_every_target_again_and_report_medians() {
    if skip_unless(can_fuse_mount()).is_none() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let args = [
        "--targets",
        "ext4kit",
        "--workloads",
        "postmark,cached",
        "--rounds",
        "3",
    ];
    let (stdout, stderr, report) = quick_bench(dir.path(), &args);
    assert!(stdout.contains("medians of 3 rounds"), "{stdout}");
    let checks = stderr
        .lines()
        .filter(|l| l.starts_with("bench: ext4kit: unmounted"))
        .count();
    assert_eq!(checks, 3, "three mounts, each unmounted and checked:\n{stderr}");
    assert_eq!(report["rounds"], 3);
    let targets = report["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 1, "one folded report per target");
    assert_eq!(targets[0]["fsck"]["clean"], Value::Bool(true));
    let postmark = &targets[0]["workloads"][0]["metrics"];
    assert!(postmark.as_array().is_some_and(|m| !m.is_empty()), "{postmark}");
    assert_no_leftovers(dir.path());
}

/// Runs `ext4kit bench mount --quick ARGS` with its images in `dir`;
/// asserts it succeeded and returns its stdout, stderr and JSON report.
fn quick_bench(dir: &Path, args: &[&str]) -> (String, String, Value) {
    let json = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["bench", "mount", "--quick"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run ext4kit bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "ext4kit bench failed:\n{stdout}\n{stderr}");
    let report = serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("JSON");
    (stdout, stderr, report)
}

/// Clean images are removed and nothing stays mounted.
fn assert_no_leftovers(dir: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let dir = std::fs::canonicalize(dir).expect("canonical dir");
    assert!(
        !mounts.contains(&*dir.to_string_lossy()),
        "a mount under {} is left:\n{mounts}",
        dir.display()
    );
    let images: Vec<_> = walk(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "ext4"))
        .collect();
    assert!(images.is_empty(), "images left behind: {images:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `ext4kit bench journal --quick`: every workload runs with and without a
/// journal, every image is e2fsck-clean, and the journaled samples carry
/// the journal writer's counts (a commit per fsync at most).
#[test]
fn journal_bench_quick_runs_every_workload_in_both_modes() {
    if skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("journal.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["bench", "journal", "--quick", "--dir"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for row in ["| create |", "| fsync |", "| fsync4 |"] {
        assert!(stdout.contains(row), "no {row} row:\n{stdout}");
    }
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let samples = report["samples"].as_array().expect("samples");
    assert_eq!(samples.len(), 6, "3 workloads x 2 modes");
    for s in samples {
        assert_eq!(s["fsck"]["clean"], Value::Bool(true), "{s}");
        let journaled = s["mode"] == "journal";
        assert_eq!(s["counts"].is_object(), journaled, "{s}");
        if journaled && s["step"] != "create" {
            let commits = s["counts"]["commits"].as_u64().unwrap();
            let syncs = s["counts"]["sync_calls"].as_u64().unwrap();
            assert!(commits >= 1 && commits <= syncs, "{s}");
        }
    }
}
