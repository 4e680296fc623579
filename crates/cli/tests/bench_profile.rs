//! `ext4kit bench mount --profile` end to end on the ext4kit target at
//! `--quick` sizes: the kernel's FUSE tracepoints are captured around each
//! workload, and the request counts match what the workload did — a
//! CREATE for every file created, a LOOKUP for every name opened with
//! cold caches, a WRITE for every file extracted with data — in the JSON
//! and in the printed table. Also: two `--ext4kit-options` run as two
//! targets side by side. Root, FUSE and tracefs, else skipped loudly.

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::fuse::can_fuse_mount;
use ext4kit_testkit::tools::{require_tool, skip_unless};
use serde_json::Value;

/// `bench mount --quick`'s file counts (`Sizes::QUICK`).
const CREATE_FILES: f64 = 2_000.0;
const UNTAR_FILES: f64 = 1_000.0;

fn can_trace() -> Result<(), String> {
    if !nix_root() {
        return Err("not root: tracefs needs root".into());
    }
    let send = Path::new("/sys/kernel/tracing/events/fuse/fuse_request_send");
    if !send.is_dir() {
        return Err(format!(
            "no {} (tracefs or the FUSE tracepoints missing)",
            send.display()
        ));
    }
    Ok(())
}

fn nix_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        == Some("0")
}

fn bench(dir: &Path, args: &[&str]) -> (String, Value) {
    let json = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["bench", "mount", "--quick", "--targets", "ext4kit"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run ext4kit bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ext4kit bench failed:\n{stdout}\n{stderr}");
    let report = serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("JSON");
    (stdout, report)
}

fn workload<'a>(target: &'a Value, name: &str) -> &'a Value {
    target["workloads"]
        .as_array()
        .expect("workloads")
        .iter()
        .find(|w| w["workload"] == name)
        .unwrap_or_else(|| panic!("no {name} in {target}"))
}

fn count(profile: &Value, opcode: &str) -> f64 {
    profile["opcodes"]
        .as_array()
        .expect("opcodes")
        .iter()
        .find(|r| r["opcode"] == opcode)
        .map_or(0.0, |r| r["count"].as_f64().unwrap())
}

fn phase<'a>(profile: &'a Value, name: &str) -> &'a Value {
    profile["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name} in {profile}"))
}

fn per_op(phase: &Value, opcode: &str) -> f64 {
    phase["by_opcode"]
        .as_array()
        .expect("by_opcode")
        .iter()
        .find(|p| p[0] == opcode)
        .map_or(0.0, |p| p[1].as_f64().unwrap())
}

#[test]
fn profile_counts_the_requests_the_workloads_make() {
    let ready = skip_unless(can_fuse_mount()).is_some()
        && skip_unless(require_tool("mkfs.ext4")).is_some()
        && skip_unless(can_trace()).is_some();
    if !ready {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (stdout, report) = bench(dir.path(), &["--workloads", "create,untar", "--profile"]);
    let t = &report["targets"][0];
    assert!(t["error"].is_null(), "{}", t["error"]);
    assert_eq!(t["fsck"]["clean"], true, "{}", t["fsck"]["output"]);

    let create = &workload(t, "create")["profile"];
    assert_eq!(create["lost_events"], 0, "{create}");
    assert!(count(create, "CREATE") >= CREATE_FILES, "{create}");
    let creates = phase(create, "create");
    assert_eq!(creates["ops"].as_f64(), Some(CREATE_FILES));
    assert!(per_op(creates, "CREATE") >= 1.0, "{creates}");
    let cold = phase(create, "open (cold, random order)");
    assert!(
        per_op(cold, "LOOKUP") >= 1.0,
        "a cold open must look its name up: {cold}"
    );
    assert!(per_op(cold, "CREATE") == 0.0, "{cold}");
    let row = create["opcodes"][0].clone();
    assert!(row["median_us"].as_f64().unwrap() > 0.0, "{row}");
    assert!(row["p99_us"].as_f64() >= row["median_us"].as_f64(), "{row}");

    let untar = &workload(t, "untar")["profile"];
    assert!(count(untar, "CREATE") >= UNTAR_FILES, "{untar}");
    assert!(count(untar, "WRITE") >= UNTAR_FILES, "{untar}");
    assert!(count(untar, "MKDIR") >= 1.0, "{untar}");
    let rm = phase(untar, "rm -rf");
    assert!(per_op(rm, "UNLINK") > 0.5 && per_op(rm, "RMDIR") > 0.0, "{rm}");

    assert!(stdout.contains("#### ext4kit create: "), "{stdout}");
    assert!(stdout.contains("| CREATE | "), "{stdout}");
    assert!(stdout.contains("| open (cold, random order) | 2000 |"), "{stdout}");
}

#[test]
fn two_ext4kit_option_sets_run_as_two_targets() {
    if skip_unless(can_fuse_mount()).is_none() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (stdout, report) = bench(
        dir.path(),
        &[
            "--workloads",
            "cached",
            "--ext4kit-options",
            "transport=dev",
            "--ext4kit-options",
            "transport=fuser",
        ],
    );
    let labels: Vec<&str> = report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["ext4kit[transport=dev]", "ext4kit[transport=fuser]"]);
    for t in report["targets"].as_array().unwrap() {
        assert!(t["error"].is_null(), "{}", t["error"]);
        assert_eq!(t["fsck"]["clean"], true, "{}", t["fsck"]["output"]);
        assert!(workload(t, "cached")["profile"].is_null(), "no --profile, no profile");
    }
    assert!(
        stdout.contains("| ext4kit[transport=fuser]/ext4kit[transport=dev] |"),
        "no ratio of the second configuration to the first:\n{stdout}"
    );
}
