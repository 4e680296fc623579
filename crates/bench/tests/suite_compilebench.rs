//! compilebench's bookkeeping on tiny runs: every phase of the seed's
//! tables ran and counted its files and bytes, the image is clean, and
//! two new images give the same modeled figures.

mod common;

use ext4kit_bench::suite::{self, Params, SuiteReport, TargetSpec};

fn run_on(spec: &TargetSpec, params: &Params) -> anyhow::Result<SuiteReport> {
    suite::run_quietly("compilebench", spec, &common::options(), params)
}

fn tiny() -> Params {
    Params {
        n: Some(60),
        ..Params::default()
    }
}

fn phase<'r>(r: &'r SuiteReport, name: &str) -> &'r suite::Phase {
    r.outcome
        .phases
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no phase {name}"))
}

fn runs(r: &SuiteReport, name: &str) -> u64 {
    r.outcome.values["runs"][name].as_u64().unwrap()
}

#[test]
fn every_phase_runs_and_counts_what_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::Image(dir.path().join("a.img")), &tiny()).unwrap();
    assert!(!r.failed(), "{}", r.to_markdown());
    assert_eq!(r.outcome.phases.len(), 11);
    let tree_bytes = r.outcome.params["tree_bytes"].as_u64().unwrap();
    let dirs = r.outcome.params["dirs_per_tree"].as_u64().unwrap();
    assert_eq!(dirs, 6);
    let initial = phase(&r, "initial create");
    assert_eq!((initial.ops, initial.bytes), (10 * 60, 10 * tree_bytes));
    assert_eq!(runs(&r, "initial create"), 10);
    for p in &r.outcome.phases {
        assert!(runs(&r, &p.name) >= 1, "{} never ran", p.name);
        assert!(p.ops > 0, "{} counted no files", p.name);
        assert!(
            p.span.modeled.as_ref().unwrap().modeled_ns > 0,
            "{} took no time",
            p.name
        );
    }
    // A plain tree's stat sees every file and directory once.
    let stat = phase(&r, "stat tree total");
    assert!(
        stat.ops >= runs(&r, "stat tree total") * (60 + dirs - 2),
        "{}",
        stat.ops
    );
    assert_eq!(stat.bytes, 0);
    // Reads are cold: the disk is read for them.
    assert!(phase(&r, "read tree total").span.modeled.as_ref().unwrap().reads > 0);
    let compile = phase(&r, "compile total");
    let clean = phase(&r, "clean total");
    assert!(clean.ops <= compile.ops && clean.bytes <= compile.bytes);
    let created = runs(&r, "initial create") + runs(&r, "create total");
    let deleted = runs(&r, "delete tree total") + runs(&r, "delete compiled tree total");
    assert_eq!(r.outcome.values["trees_left"].as_u64().unwrap(), created - deleted);
}

#[test]
fn two_new_images_give_the_same_modeled_figures() {
    let dir = tempfile::tempdir().unwrap();
    let a = run_on(&TargetSpec::Image(dir.path().join("a.img")), &tiny()).unwrap();
    let b = run_on(&TargetSpec::Image(dir.path().join("b.img")), &tiny()).unwrap();
    assert_eq!(common::modeled(&a), common::modeled(&b));
    assert_eq!(a.outcome.values, b.outcome.values);
    let other = Params { seed: 7, ..tiny() };
    let c = run_on(&TargetSpec::Image(dir.path().join("c.img")), &other).unwrap();
    assert_ne!(a.outcome.params["tree_bytes"], c.outcome.params["tree_bytes"]);
}

#[test]
fn a_directory_runs_it_too_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let quick = Params {
        preset: Some("quick".into()),
        ..tiny()
    };
    let r = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &quick).unwrap();
    assert!(!r.modeled);
    assert_eq!(r.outcome.phases.len(), 11);
    assert_eq!(phase(&r, "initial create").ops, 4 * 60);
    assert_eq!(runs(&r, "create total"), 2);
    assert!(r.outcome.phases.iter().all(|p| p.ops > 0));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn an_unknown_preset_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = Params {
        preset: Some("huge".into()),
        ..tiny()
    };
    let e = run_on(&TargetSpec::Image(dir.path().join("a.img")), &p).unwrap_err();
    assert!(format!("{e:#}").contains("default and quick"), "{e:#}");
}
