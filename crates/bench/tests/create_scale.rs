//! `create_scale` through the suite's targets: the bookkeeping of a tiny
//! run, the same modeled figures on two new images, clean images after a
//! finished or interrupted run, and flags refused where the target cannot
//! honour them. Never checks how fast anything was.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ext4kit_bench::create_scale::{self, Config, PhaseStats, Report};
use ext4kit_bench::suite::{Progress, TargetSpec};

fn config(target: TargetSpec) -> Config {
    Config {
        target,
        n: 300,
        batch: 64,
        disk: "hp-sas-10k".parse().unwrap(),
        cache_bytes: 4 << 20,
        no_dir_index: false,
        no_lookup: false,
        seed: create_scale::DEFAULT_SEED,
        scratch: std::env::temp_dir(),
    }
}

fn run(cfg: &Config, interrupted: bool) -> anyhow::Result<Report> {
    let mut show = |_: u64, _: u64| {};
    let mut p = Progress::new(&mut show, Arc::new(AtomicBool::new(interrupted)));
    create_scale::run(cfg, &mut p)
}

/// The batches cover 1..=n once, in order, entries counting up.
fn check_bookkeeping(r: &Report, n: usize, batch: usize) {
    assert_eq!(r.batches.len(), n.div_ceil(batch));
    let mut entries = 0;
    for (k, b) in r.batches.iter().enumerate() {
        assert_eq!(b.batch, k + 1);
        entries += b.files;
        assert_eq!(b.entries, entries);
        assert!(b.create_wall_us > 0.0 && b.open_wall_us > 0.0, "{b:?}");
    }
    assert_eq!(entries, n);
}

fn requests(p: &PhaseStats) -> u64 {
    p.reads + p.writes + p.flushes
}

/// Everything modeled in a report, as text: wall times differ run to run.
fn modeled(r: &Report) -> String {
    let rows: Vec<_> = r
        .batches
        .iter()
        .map(|b| (b.create_us, b.open_us, b.create_requests, b.open_requests))
        .collect();
    format!("{rows:?} {:?} {:?}", r.create_phase, r.open_phase)
}

fn e2fsck_clean(img: &Path) -> bool {
    let out = std::process::Command::new("e2fsck")
        .arg("-fn")
        .arg(img)
        .output()
        .unwrap();
    out.status.success()
}

#[test]
fn two_runs_on_new_images_give_the_same_modeled_figures() {
    let dir = tempfile::tempdir().unwrap();
    let a = run(&config(TargetSpec::Image(dir.path().join("a.img"))), false).unwrap();
    let b = run(&config(TargetSpec::Image(dir.path().join("b.img"))), false).unwrap();
    for r in [&a, &b] {
        check_bookkeeping(r, 300, 64);
        assert!(!r.failed(), "{}", r.to_markdown());
        assert!(r.image_created && r.opens_cold && r.note.is_none());
        assert_eq!((r.target_kind, r.dir_index), ("image", Some(true)));
        // The batches add up to their phase: nothing untimed in between.
        let create = r.create_phase.as_ref().expect("modeled creates");
        let sum: u64 = r.batches.iter().map(|b| b.create_requests.unwrap()).sum();
        assert_eq!(sum, requests(create));
        let open = r.open_phase.as_ref().expect("modeled opens");
        let sum: u64 = r.batches.iter().map(|b| b.open_requests.unwrap()).sum();
        assert_eq!(sum, requests(open));
        // Each batch's sync reaches the disk, and the opens start cold.
        assert!(r.batches.iter().all(|b| b.create_requests.unwrap() > 0));
        assert!(r.batches[0].open_requests.unwrap() > 0);
        assert!(r.create_last_first_ratio.unwrap() > 0.0);
    }
    assert_eq!(modeled(&a), modeled(&b));
}

#[test]
fn no_lookup_in_a_linear_directory_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("nl.img");
    let mut cfg = config(TargetSpec::Image(img.clone()));
    cfg.no_dir_index = true;
    cfg.no_lookup = true;
    let r = run(&cfg, false).unwrap();
    check_bookkeeping(&r, 300, 64);
    assert_eq!((r.dir_index, r.no_lookup), (Some(false), true));
    assert!(!r.failed(), "{}", r.to_markdown());
    // A second run in the same image: --no-dir-index no longer applies.
    let again = run(&cfg, false).unwrap();
    assert!(!again.image_created);
    assert!(
        again.note.as_deref().unwrap().contains("--no-dir-index"),
        "{:?}",
        again.note
    );
    assert!(e2fsck_clean(&img));
}

#[test]
fn an_interrupted_run_fails_and_leaves_the_image_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("i.img");
    let e = run(&config(TargetSpec::Image(img.clone())), true).unwrap_err();
    assert!(format!("{e:#}").contains("interrupted"), "{e:#}");
    assert!(e2fsck_clean(&img));
}

#[test]
fn a_directory_run_is_wall_time_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(&config(TargetSpec::Dir(dir.path().to_path_buf())), false).unwrap();
    check_bookkeeping(&r, 300, 64);
    assert_eq!((r.target_kind, r.dir_index), ("directory", None));
    assert!(
        r.batches
            .iter()
            .all(|b| b.create_us.is_none() && b.open_requests.is_none())
    );
    assert!(r.create_phase.is_none() && r.fsck.is_none());
    assert_eq!(r.opens_cold, r.note.is_none());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "files left behind");
}

#[test]
fn image_only_flags_are_refused_elsewhere_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, set) in [("--no-lookup", (false, true)), ("--no-dir-index", (true, false))] {
        let mut cfg = config(TargetSpec::Dir(dir.path().to_path_buf()));
        (cfg.no_dir_index, cfg.no_lookup) = set;
        let e = run(&cfg, false).unwrap_err().to_string();
        assert!(e.contains(flag), "{e}");
    }
    let mut cfg = config(TargetSpec::Kernel("ext2".into()));
    cfg.no_lookup = true;
    let e = run(&cfg, false).unwrap_err().to_string();
    assert!(e.contains("--no-lookup"), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
