//! The `create` workload's bookkeeping: one create per file, every name in
//! the directory afterwards, the image clean, and two new images see the
//! same modeled figures.

mod common;

use ext4kit_bench::suite::{self, Params, SuiteReport, TargetSpec};

fn run_on(spec: &TargetSpec, params: &Params) -> anyhow::Result<SuiteReport> {
    suite::run_quietly("create", spec, &common::options(), params)
}

fn tiny() -> Params {
    Params {
        n: Some(300),
        ..Params::default()
    }
}

fn modeled(r: &SuiteReport) -> Vec<(String, u64, String)> {
    let phases = r.outcome.phases.iter();
    phases
        .map(|p| {
            (
                p.name.clone(),
                p.ops,
                format!("{:?}", p.span.modeled.as_ref().expect("modeled")),
            )
        })
        .collect()
}

fn check(r: &SuiteReport) {
    let create = &r.outcome.phases[0];
    assert_eq!(
        (create.name.as_str(), create.ops),
        ("create", 300),
        "{}",
        r.to_markdown()
    );
    assert_eq!(r.outcome.phases[1].name, "sync");
    let v = |k: &str| r.outcome.values[k].as_f64().unwrap();
    assert!(v("median_us_first_5pct") >= 0.0 && v("median_us_last_5pct") >= 0.0);
    assert_eq!(r.outcome.params["files"], 300);
}

#[test]
fn a_tiny_run_on_new_images_counts_every_create_and_repeats_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let a = run_on(&TargetSpec::Image(dir.path().join("a.img")), &tiny()).unwrap();
    assert!(a.modeled && !a.failed(), "{}", a.to_markdown());
    check(&a);
    let sync = a.outcome.phases[1].span.modeled.as_ref().unwrap();
    assert!(sync.writes > 0, "the sync writes the new directory: {sync:?}");
    let b = run_on(&TargetSpec::Image(dir.path().join("b.img")), &tiny()).unwrap();
    assert_eq!(modeled(&a), modeled(&b));
    let unmodeled = |r: &SuiteReport| {
        let mut v = r.outcome.values.clone();
        v.retain(|k, _| !k.starts_with("wall_"));
        v
    };
    assert_eq!(unmodeled(&a), unmodeled(&b));
    assert!(a.outcome.values["wall_median_us_last_5pct"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_directory_target_runs_the_same_creates_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &tiny()).unwrap();
    assert!(!r.modeled);
    check(&r);
    assert!(r.outcome.phases[0].span.wall_ns > 0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
