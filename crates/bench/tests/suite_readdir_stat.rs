//! readdir-stat's bookkeeping on tiny runs: each pass counts the entries,
//! the copies move the bytes, the image is clean, the modeled figures
//! repeat, and an htree directory's readdir order is not inode order.

mod common;

use ext4kit_bench::suite::{self, Params, SuiteReport, TargetSpec};

fn run_on(spec: &TargetSpec, params: &Params) -> anyhow::Result<SuiteReport> {
    suite::run_quietly("readdir-stat", spec, &common::options(), params)
}

fn tiny(size: u64) -> Params {
    Params {
        n: Some(400),
        size: Some(size),
        ..Params::default()
    }
}

const PASSES: [&str; 6] = [
    "readdir+stat, readdir order",
    "readdir+stat, inode order",
    "copy, readdir order",
    "copy, inode order",
    "delete, readdir order",
    "delete, inode order",
];

#[test]
fn every_pass_counts_the_entries_and_the_copies_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::Image(dir.path().join("a.img")), &tiny(3000)).unwrap();
    assert!(!r.failed(), "{}", r.to_markdown());
    let names: Vec<&str> = r.outcome.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names[0], "create");
    assert_eq!(names[1..], PASSES);
    for p in &r.outcome.phases {
        assert_eq!(p.ops, 400, "{}", p.name);
        let bytes = if p.name == "create" || p.name.starts_with("copy") {
            400 * 3000
        } else {
            0
        };
        assert_eq!(p.bytes, bytes, "{}", p.name);
        let m = p.span.modeled.as_ref().unwrap();
        assert!(m.modeled_ns > 0, "{}", p.name);
    }
    // Cold passes read the disk.
    assert!(r.outcome.phases[1].span.modeled.as_ref().unwrap().reads > 0);
    let v = &r.outcome.values;
    let share = v["readdir_ascending_share"].as_f64().unwrap();
    assert!(
        share > 0.2 && share < 0.8,
        "htree order should look random against inode order: {share}"
    );
    for what in ["readdir+stat", "copy", "delete"] {
        assert!(v["readdir_over_inode_time"][what].as_f64().unwrap() > 0.0, "{what}");
    }
    let seeks = &v["seeks"]["readdir+stat, readdir order"];
    assert!(seeks["positionings"].as_u64().unwrap() >= seeks["seeks"].as_u64().unwrap());
}

#[test]
fn two_new_images_give_the_same_modeled_figures() {
    let dir = tempfile::tempdir().unwrap();
    let p = Params {
        preset: Some("aged".into()),
        ..tiny(0)
    };
    let a = run_on(&TargetSpec::Image(dir.path().join("a.img")), &p).unwrap();
    let b = run_on(&TargetSpec::Image(dir.path().join("b.img")), &p).unwrap();
    assert!(!a.failed(), "{}", a.to_markdown());
    assert_eq!(common::modeled(&a), common::modeled(&b));
    assert_eq!(a.outcome.values, b.outcome.values);
    // Aging makes more files than are left, and the deletes count as ops.
    assert!(a.outcome.values["created"].as_u64().unwrap() > 400);
    assert!(a.outcome.phases[0].ops > a.outcome.values["created"].as_u64().unwrap());
}

#[test]
fn a_directory_runs_it_too_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &tiny(100)).unwrap();
    assert!(!r.modeled);
    assert!(r.outcome.phases.iter().all(|p| p.ops == 400));
    assert!(!r.outcome.values.contains_key("seeks"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
