//! The `threads` workload's bookkeeping: both configurations create and
//! unlink every file, the image stays clean with several threads working
//! on the engine at once, and the same on a directory.

mod common;

use ext4kit_bench::suite::{self, Params, SuiteReport, TargetSpec};

fn run_on(spec: &TargetSpec, params: &Params) -> anyhow::Result<SuiteReport> {
    suite::run_quietly("threads", spec, &common::options(), params)
}

fn tiny(threads: usize) -> Params {
    Params {
        n: Some(101),
        threads: Some(threads),
        ..Params::default()
    }
}

fn check(r: &SuiteReport, threads: usize) {
    let got: Vec<(String, u64, u64)> = r
        .outcome
        .phases
        .iter()
        .map(|p| (p.name.clone(), p.ops, p.bytes))
        .collect();
    let many = format!("{threads} threads");
    let want = vec![("1 thread".to_string(), 202, 101 * 4096), (many, 202, 101 * 4096)];
    assert_eq!(got, want, "{}", r.to_markdown());
    assert!(r.outcome.values["scaling"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_tiny_run_on_new_images_churns_every_file_from_each_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::Image(dir.path().join("a.img")), &tiny(3)).unwrap();
    assert!(r.modeled && !r.failed(), "{}", r.to_markdown());
    check(&r, 3);
    assert!(r.outcome.notes.iter().any(|n| n.contains("not deterministic")));
    // One thread against one thread: the same operations, the same figures.
    let one = |name: &str| {
        let r = run_on(&TargetSpec::Image(dir.path().join(name)), &tiny(1)).unwrap();
        assert!(!r.failed(), "{}", r.to_markdown());
        let phases = r.outcome.phases.iter();
        phases.map(|p| format!("{:?}", p.span.modeled)).collect::<Vec<_>>()
    };
    assert_eq!(one("b.img"), one("c.img"));
}

#[test]
fn a_directory_target_runs_the_same_operations_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &tiny(2)).unwrap();
    assert!(!r.modeled);
    check(&r, 2);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
