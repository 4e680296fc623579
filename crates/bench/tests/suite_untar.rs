//! The `untar` workload's bookkeeping: every file of the tarball is
//! extracted with its bytes, the image stays clean, two new images see
//! the same modeled figures, and a directory target gets the same tree.

mod common;

use ext4kit_bench::suite::{self, Params, SuiteReport, TargetSpec};

fn run_on(spec: &TargetSpec, params: &Params) -> anyhow::Result<SuiteReport> {
    suite::run_quietly("untar", spec, &common::options(), params)
}

fn tiny() -> Params {
    Params {
        n: Some(60),
        ..Params::default()
    }
}

/// What GNU-tar-independent generation says the tree holds.
fn tree(files: usize, seed: u64) -> ext4kit_bench::tarball::TreeStats {
    let mut sink = std::io::sink();
    ext4kit_bench::tarball::source_tree(&mut sink, files, seed).unwrap()
}

fn check(r: &SuiteReport) {
    let want = tree(60, Params::default().seed);
    let extract = &r.outcome.phases[0];
    assert_eq!(extract.name, "extract");
    assert_eq!(
        (extract.ops, extract.bytes),
        (want.files as u64, want.bytes),
        "{}",
        r.to_markdown()
    );
    assert_eq!(r.outcome.values["directories"], want.dirs);
    assert_eq!(r.outcome.phases[1].name, "sync");
}

#[test]
fn a_tiny_run_on_new_images_extracts_every_file_and_repeats_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let a = run_on(&TargetSpec::Image(dir.path().join("a.img")), &tiny()).unwrap();
    assert!(a.modeled && !a.failed(), "{}", a.to_markdown());
    check(&a);
    let sync = a.outcome.phases[1].span.modeled.as_ref().unwrap();
    assert!(sync.bytes_written >= a.outcome.phases[0].bytes, "{sync:?}");
    let b = run_on(&TargetSpec::Image(dir.path().join("b.img")), &tiny()).unwrap();
    let modeled = |r: &SuiteReport| -> Vec<String> {
        let phases = r.outcome.phases.iter();
        phases.map(|p| format!("{:?}", p.span.modeled)).collect()
    };
    assert_eq!(modeled(&a), modeled(&b));
}

#[test]
fn a_directory_target_gets_the_same_tree_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &tiny()).unwrap();
    assert!(!r.modeled);
    check(&r);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
