//! The `cached` workload's bookkeeping: the passes count every file, the
//! image stays clean, and two new images see the same modeled figures.

mod common;

use ext4kit_bench::suite::{self, Params, SuiteReport, TargetSpec};

fn run_on(spec: &TargetSpec, params: &Params) -> anyhow::Result<SuiteReport> {
    suite::run_quietly("cached", spec, &common::options(), params)
}

fn tiny() -> Params {
    Params {
        n: Some(120),
        ..Params::default()
    }
}

fn counts(r: &SuiteReport) -> Vec<(String, u64)> {
    r.outcome.phases.iter().map(|p| (p.name.clone(), p.ops)).collect()
}

fn check(r: &SuiteReport) {
    let want = [
        ("create", 120),
        ("stat (warm)", 5 * 120),
        ("readdir (warm, entries)", 20 * 120),
        ("open+close", 120),
    ];
    let want: Vec<(String, u64)> = want.iter().map(|&(n, o)| (n.to_string(), o)).collect();
    assert_eq!(counts(r), want, "{}", r.to_markdown());
    assert_eq!(r.outcome.params["readdir_passes"], 20);
}

#[test]
fn a_tiny_run_on_new_images_is_warm_counted_and_repeats_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let a = run_on(&TargetSpec::Image(dir.path().join("a.img")), &tiny()).unwrap();
    assert!(a.modeled && !a.failed(), "{}", a.to_markdown());
    check(&a);
    for p in &a.outcome.phases[1..] {
        let m = p.span.modeled.as_ref().unwrap();
        assert_eq!(m.reads, 0, "{} is served from the page cache: {m:?}", p.name);
    }
    let b = run_on(&TargetSpec::Image(dir.path().join("b.img")), &tiny()).unwrap();
    let modeled = |r: &SuiteReport| -> Vec<String> {
        let phases = r.outcome.phases.iter();
        phases.map(|p| format!("{:?}", p.span.modeled)).collect()
    };
    assert_eq!(modeled(&a), modeled(&b));
}

#[test]
fn a_directory_target_runs_the_same_passes_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &tiny()).unwrap();
    assert!(!r.modeled);
    check(&r);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
