//! The `ffsb-meta` workload's bookkeeping: every operation of the mix is
//! counted once, single-threaded runs repeat exactly, threads share the
//! file system and together do every operation, and the image stays
//! clean.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ext4kit_bench::suite::{self, Params, Progress, SuiteReport, TargetSpec};

const OPS: [&str; 5] = ["read", "write", "create", "append", "delete"];

fn run_on(spec: &TargetSpec, params: &Params) -> anyhow::Result<SuiteReport> {
    interrupted_on(spec, params, u64::MAX)
}

/// Runs, with an interrupt arriving at the `at`-th progress report.
fn interrupted_on(spec: &TargetSpec, params: &Params, at: u64) -> anyhow::Result<SuiteReport> {
    let w = suite::workload("ffsb-meta")?;
    let flag = Arc::new(AtomicBool::new(false));
    let (set, mut reports) = (flag.clone(), 0);
    let mut show = |_: u64, _: u64| {
        reports += 1;
        if reports >= at {
            set.store(true, Ordering::Relaxed);
        }
    };
    let mut p = Progress::new(&mut show, flag);
    suite::run(w, spec, &common::options(), params, &mut p)
}

fn tiny(preset: &str, threads: Option<usize>) -> Params {
    Params {
        n: Some(120),
        size: Some(16 << 10),
        preset: Some(preset.into()),
        threads,
        ..Params::default()
    }
}

fn phase<'r>(r: &'r SuiteReport, name: &str) -> &'r suite::Phase {
    let found = r.outcome.phases.iter().find(|p| p.name == name);
    found.unwrap_or_else(|| panic!("no phase {name}: {}", r.to_markdown()))
}

/// The five operations add up to the run's, each is a whole operation
/// with its FFSB calls beside it.
fn check_counts(r: &SuiteReport, ops: u64) {
    assert_eq!(phase(r, "create pool (setup)").ops, 120);
    let sum: u64 = OPS.iter().map(|n| phase(r, n).ops).sum();
    assert_eq!(sum, ops, "{}", r.to_markdown());
    assert_eq!(phase(r, "all operations (run)").ops, ops);
    for n in OPS {
        let calls = r.outcome.values[&format!("{n}_ffsb_calls")].as_u64().unwrap();
        assert!(calls >= phase(r, n).ops, "{n}: {calls} calls");
    }
    assert!(r.outcome.values["ops_per_sec"].as_f64().unwrap() > 0.0);
}

fn modeled(r: &SuiteReport) -> Vec<(String, u64, u64, String)> {
    r.outcome
        .phases
        .iter()
        .map(|p| {
            let m = p.span.modeled.as_ref().expect("an image run is modeled");
            (p.name.clone(), p.ops, p.bytes, format!("{m:?}"))
        })
        .collect()
}

#[test]
fn a_single_threaded_mix_counts_every_operation_and_repeats_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let a = run_on(&TargetSpec::Image(dir.path().join("a.img")), &tiny("table2", None)).unwrap();
    assert!(a.modeled && !a.failed(), "{}", a.to_markdown());
    check_counts(&a, 120);
    // Table 2's mix: creates and deletes dominate, reads are rare.
    assert!(
        phase(&a, "create").ops > 20 && phase(&a, "delete").ops > 20,
        "{}",
        a.to_markdown()
    );
    assert_eq!(a.outcome.params["threads"], 1);
    assert!(a.outcome.notes.is_empty(), "{:?}", a.outcome.notes);
    let b = run_on(&TargetSpec::Image(dir.path().join("b.img")), &tiny("table2", None)).unwrap();
    assert_eq!(modeled(&a), modeled(&b));
    assert_eq!(a.outcome.values, b.outcome.values);
}

#[test]
fn four_threads_share_the_image_and_do_every_operation() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::Image(dir.path().join("t.img")), &tiny("table2", Some(4))).unwrap();
    assert!(!r.failed(), "{}", r.to_markdown());
    check_counts(&r, 120);
    assert_eq!(r.outcome.params["threads"], 4);
    assert!(r.outcome.notes.iter().any(|n| n.contains("4 threads")));
    let t3 = run_on(&TargetSpec::Image(dir.path().join("t3.img")), &tiny("table3", None)).unwrap();
    assert_eq!(t3.outcome.params["threads"], 16);
    assert!(!t3.failed(), "{}", t3.to_markdown());
    check_counts(&t3, 120);
}

#[test]
fn a_row_preset_runs_that_operation_alone() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::Image(dir.path().join("d.img")), &tiny("delete", None)).unwrap();
    assert!(!r.failed(), "{}", r.to_markdown());
    assert_eq!(phase(&r, "delete").ops, 120, "{}", r.to_markdown());
    let read = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &tiny("read", None)).unwrap();
    assert_eq!(phase(&read, "read").ops, 120);
    assert!(phase(&read, "read").bytes >= 120 << 10);
    let calls = read.outcome.values["read_ffsb_calls"].as_u64().unwrap();
    assert!(
        (120..=120 * 4).contains(&calls),
        "4 KiB calls of 1-16 KiB files: {calls}"
    );
    let bad = Params {
        preset: Some("table9".into()),
        ..tiny("table2", None)
    };
    let e = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &bad).unwrap_err();
    assert!(format!("{e:#}").contains("table2, table3, read"), "{e:#}");
}

#[test]
fn threads_on_a_directory_count_every_operation_and_an_interrupt_stops_them() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &tiny("table2", Some(4))).unwrap();
    assert!(!r.modeled);
    check_counts(&r, 120);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // set_total and 120 setup steps come first: the interrupt reaches
    // the threads' first progress report.
    let spec = TargetSpec::from_path(dir.path()).unwrap();
    let e = interrupted_on(&spec, &tiny("table2", Some(4)), 122).unwrap_err();
    assert!(format!("{e:#}").contains("interrupted"), "{e:#}");
}
