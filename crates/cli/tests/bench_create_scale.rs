//! `ext4kit bench create-scale` end to end (seed 000's workload): the
//! bookkeeping of a small run on an image and on a directory, identical
//! modeled figures from two identical runs, clean images, and clear errors
//! for targets of the wrong kind. Never checks how fast anything was.

use std::path::Path;
use std::process::{Command, Output};

use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};
use serde_json::Value;

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["bench", "create-scale"])
        .args(args)
        .output()
        .expect("run ext4kit")
}

/// Runs the benchmark on `target` with `-n n` and returns its JSON report.
fn run_json(target: &Path, n: usize, extra: &[&str]) -> Value {
    let json = target.with_extension("json");
    let (t, j, ns) = (target.to_str().unwrap(), json.to_str().unwrap(), n.to_string());
    let mut args = vec!["--target", t, "-n", &ns, "--json", j];
    args.extend_from_slice(extra);
    let out = bench(&args);
    assert!(
        out.status.success(),
        "create-scale failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("| batch | entries so far |"), "no table:\n{stdout}");
    assert!(stdout.contains("Last 5 % over first 5 %"), "no ratio:\n{stdout}");
    serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("valid json")
}

fn batches(r: &Value) -> &Vec<Value> {
    r["batches"].as_array().expect("batches")
}

/// The batches cover 1..=n once, in order, entries counting up.
fn check_bookkeeping(r: &Value, n: u64, batch: u64) {
    let b = batches(r);
    assert_eq!(b.len() as u64, n.div_ceil(batch), "{r}");
    let mut entries = 0;
    for (k, row) in b.iter().enumerate() {
        assert_eq!(row["batch"], k as u64 + 1);
        entries += row["files"].as_u64().unwrap();
        assert_eq!(row["entries"].as_u64(), Some(entries), "{row}");
    }
    assert_eq!(entries, n);
}

/// Everything modeled in a report: per-batch figures and both phases.
fn modeled(r: &Value) -> Value {
    let rows: Vec<Value> = batches(r)
        .iter()
        .map(|b| serde_json::json!([b["create_us"], b["open_us"], b["create_requests"], b["open_requests"]]))
        .collect();
    serde_json::json!({"rows": rows, "create": r["create_phase"], "open": r["open_phase"]})
}

#[test]
fn an_image_run_is_complete_deterministic_and_clean() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.img"), dir.path().join("b.img"));
    let ra = run_json(&a, 2000, &[]);
    let rb = run_json(&b, 2000, &[]);
    for (r, img) in [(&ra, &a), (&rb, &b)] {
        check_bookkeeping(r, 2000, 100);
        assert_eq!(r["target_kind"], "image");
        assert_eq!(r["image_created"], true);
        assert_eq!(r["dir_index"], true);
        assert_eq!(r["disk"], "hp-sas-10k");
        assert_eq!(r["fsck"]["clean"], true, "{}", r["fsck"]["output"]);
        for row in batches(r) {
            let us = row["create_us"].as_f64().unwrap();
            assert!(us > 0.0 && us.is_finite(), "{row}");
            assert!(
                row["create_requests"].as_u64().unwrap() > 0,
                "a synced batch reached the disk: {row}"
            );
        }
        // The opens start cold: the first batch reads from the disk.
        assert!(batches(r)[0]["open_requests"].as_u64().unwrap() > 0, "{r}");
        assert!(r["create_last_first_ratio"].as_f64().unwrap() > 0.0);
        let fsck = e2fsck_fn(img).unwrap();
        assert!(fsck.is_clean(), "{}", fsck.output);
    }
    assert_eq!(modeled(&ra), modeled(&rb), "two identical runs differ");
    // The files are there, in the new directory.
    let ls = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["ls", a.to_str().unwrap(), "/create-scale"])
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&ls.stdout);
    assert_eq!(names.lines().filter(|l| l.starts_with('f')).count(), 2000, "{names}");
}

#[test]
fn no_dir_index_makes_a_linear_image_and_an_existing_image_is_reused() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("lin.img");
    let r = run_json(&img, 300, &["--no-dir-index", "--batch", "64"]);
    check_bookkeeping(&r, 300, 64);
    assert_eq!(r["dir_index"], false);
    assert_eq!(r["fsck"]["clean"], true, "{}", r["fsck"]["output"]);
    let again = run_json(&img, 50, &["--disk", "ssd", "--cache", "0"]);
    assert_eq!(again["image_created"], false);
    assert_eq!(again["dir_index"], false);
    assert_eq!(again["disk"], "ssd");
    assert_eq!(again["fsck"]["clean"], true, "{}", again["fsck"]["output"]);
    let ls = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["ls", img.to_str().unwrap(), "/create-scale.2"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&ls.stdout).lines().count(), 50);
}

/// `--no-lookup` (the engine's `create_new`) in a linear directory: every
/// name once, the image clean; refused on a directory target.
#[test]
fn no_lookup_creates_every_name_once_and_only_on_images() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("nl.img");
    let r = run_json(&img, 2000, &["--no-lookup", "--no-dir-index"]);
    check_bookkeeping(&r, 2000, 100);
    assert_eq!(
        (&r["no_lookup"], &r["dir_index"]),
        (&Value::Bool(true), &Value::Bool(false))
    );
    assert_eq!(r["fsck"]["clean"], true, "{}", r["fsck"]["output"]);
    let ls = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["ls", img.to_str().unwrap(), "/create-scale"])
        .output()
        .unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&ls.stdout).lines().map(str::to_owned).collect();
    names.sort();
    let want: Vec<String> = (0..2000).map(|i| format!("f{i:07}")).collect();
    assert_eq!(names, want);
    let out = bench(&["--target", dir.path().to_str().unwrap(), "-n", "10", "--no-lookup"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-lookup"));
}

#[test]
fn a_directory_target_reports_wall_time_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("mnt");
    std::fs::create_dir(&target).unwrap();
    let json = dir.path().join("dir.json");
    let out = bench(&[
        "--target",
        target.to_str().unwrap(),
        "-n",
        "400",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    check_bookkeeping(&r, 400, 20);
    assert_eq!(r["target_kind"], "directory");
    for row in batches(&r) {
        assert!(row["create_us"].is_null() && row["create_requests"].is_null(), "{row}");
        assert!(row["create_wall_us"].as_f64().unwrap() > 0.0, "{row}");
    }
    assert!(r["fsck"].is_null());
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "files left behind");
}

#[test]
fn targets_of_the_wrong_kind_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("notes.txt");
    std::fs::write(&plain, vec![b'x'; 8192]).unwrap();
    let missing = dir.path().join("no/such/dir/x.img");
    for (target, says) in [
        (&plain, "without an ext2/3/4 superblock"),
        (&missing, "is not a directory"),
    ] {
        let out = bench(&["--target", target.to_str().unwrap(), "-n", "10"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{} was accepted", target.display());
        assert!(
            err.contains(says) && err.contains("expected an ext2/3/4 image file"),
            "{}: {err}",
            target.display()
        );
    }
    assert_eq!(std::fs::read(&plain).unwrap(), vec![b'x'; 8192], "the file was changed");
    assert!(!missing.exists());
}
