//! The `postmark` workload's bookkeeping: every transaction is one read or
//! append plus one create or delete, every file made is deleted, the
//! image stays clean, and two new images see the same modeled figures.

mod common;

use ext4kit_bench::suite::{self, Params, SuiteReport, TargetSpec};

fn run_on(spec: &TargetSpec, params: &Params) -> anyhow::Result<SuiteReport> {
    suite::run_quietly("postmark", spec, &common::options(), params)
}

fn tiny(preset: &str) -> Params {
    Params {
        n: Some(40),
        scale: 0.004,
        preset: Some(preset.into()),
        io_size: Some(4096),
        ..Params::default()
    }
}

fn phase<'r>(r: &'r SuiteReport, name: &str) -> &'r suite::Phase {
    let found = r.outcome.phases.iter().find(|p| p.name == name);
    found.unwrap_or_else(|| panic!("no phase {name}: {}", r.to_markdown()))
}

/// Each transaction reads or appends (an append to a file at the largest
/// size does nothing and is not counted), and creates or deletes; the
/// initial pool plus the creates, less the deletes, is what delete (all)
/// removes.
fn check_bookkeeping(r: &SuiteReport, files: u64, transactions: u64) {
    let ops = |n: &str| phase(r, n).ops;
    assert_eq!(ops("create (initial pool)"), files);
    assert_eq!(ops("transactions"), transactions);
    assert!(ops("read") + ops("append") <= transactions);
    assert!(
        ops("read") + ops("append") > transactions * 9 / 10,
        "{}",
        r.to_markdown()
    );
    assert_eq!(
        ops("create (transactions)") + ops("delete (transactions)"),
        transactions
    );
    assert_eq!(
        ops("delete (all)"),
        files + ops("create (transactions)") - ops("delete (transactions)")
    );
    let initial = phase(r, "create (initial pool)");
    assert!(initial.bytes >= files * 1_000 && initial.bytes <= files * 100_000);
    assert!(r.outcome.values["transactions_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(r.outcome.params["transactions"], transactions);
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
fn a_tiny_run_on_new_images_counts_every_operation_and_repeats_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let a = run_on(&TargetSpec::Image(dir.path().join("a.img")), &tiny("test1")).unwrap();
    assert!(a.modeled && !a.failed(), "{}", a.to_markdown());
    check_bookkeeping(&a, 40, 200);
    // A pool this small is still held for delayed allocation when it is
    // read (as in a page cache): the disk is met by the write-back that
    // ends the transactions.
    assert!(phase(&a, "read").bytes > 0);
    assert!(phase(&a, "transactions").span.modeled.as_ref().unwrap().modeled_ns > 0);
    let b = run_on(&TargetSpec::Image(dir.path().join("b.img")), &tiny("test1")).unwrap();
    assert_eq!(modeled(&a), modeled(&b));
    assert_eq!(a.outcome.values, b.outcome.values);
    let other = Params {
        seed: 7,
        ..tiny("test1")
    };
    let c = run_on(&TargetSpec::Image(dir.path().join("c.img")), &other).unwrap();
    assert_ne!(modeled(&a), modeled(&c), "the seed chooses the operations");
}

#[test]
fn the_ultra_small_preset_keeps_files_under_a_kilobyte() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::Image(dir.path().join("t2.img")), &tiny("test2")).unwrap();
    assert!(!r.failed(), "{}", r.to_markdown());
    assert_eq!(r.outcome.params["size_high"], 1_000);
    let create = phase(&r, "create (initial pool)");
    assert!(create.bytes <= 40 * 1_000);
    let bad = Params {
        preset: Some("test9".into()),
        ..tiny("test1")
    };
    let e = run_on(&TargetSpec::Image(dir.path().join("x.img")), &bad).unwrap_err();
    assert!(format!("{e:#}").contains("test1, test2, test3"), "{e:#}");
}

#[test]
fn a_directory_target_runs_the_same_operations_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &tiny("test1")).unwrap();
    assert!(!r.modeled);
    check_bookkeeping(&r, 40, 200);
    let img = tempfile::tempdir().unwrap();
    let i = run_on(&TargetSpec::Image(img.path().join("i.img")), &tiny("test1")).unwrap();
    let counts = |r: &SuiteReport| -> Vec<(String, u64, u64)> {
        r.outcome
            .phases
            .iter()
            .map(|p| (p.name.clone(), p.ops, p.bytes))
            .collect()
    };
    assert_eq!(counts(&r), counts(&i), "the seed, not the target, picks the operations");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
