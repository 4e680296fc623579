//! `randwrite`'s bookkeeping: every chunk written once into each file, the
//! data read back right (the workload checks), the image clean, and two new
//! images give the same modeled figures.

mod common;

use ext4kit_bench::suite::{self, Params, SuiteReport, TargetSpec};

fn tiny() -> Params {
    Params {
        size: Some(256 << 10),
        io_size: Some(4096),
        ..Params::default()
    }
}

fn run_on(spec: &TargetSpec) -> anyhow::Result<SuiteReport> {
    suite::run_quietly("randwrite", spec, &common::options(), &tiny())
}

#[test]
fn both_files_take_every_chunk_and_the_image_stays_clean() {
    let dir = tempfile::tempdir().unwrap();
    let a = run_on(&TargetSpec::Image(dir.path().join("a.img"))).unwrap();
    let b = run_on(&TargetSpec::Image(dir.path().join("b.img"))).unwrap();
    assert!(!a.failed(), "{}", a.to_markdown());
    let ops: Vec<(&str, u64)> = a.outcome.phases.iter().map(|p| (p.name.as_str(), p.ops)).collect();
    assert_eq!(
        ops,
        [
            ("new file: random writes", 64),
            ("new file: fsync", 1),
            ("fallocate", 1),
            ("preallocated: random writes", 64),
            ("preallocated: fsync", 1)
        ]
    );
    assert_eq!(a.outcome.values["extents_preallocated"], 1, "{:?}", a.outcome.values);
    assert_eq!(common::modeled(&a), common::modeled(&b));
}

#[test]
fn a_directory_target_runs_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::Dir(dir.path().to_path_buf())).unwrap();
    assert_eq!(r.outcome.phases.len(), 5);
    assert!(r.outcome.values["wall_us_per_write_preallocated"].as_f64().unwrap() > 0.0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
