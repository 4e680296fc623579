//! `aging` (issue 15): every round runs, the image ends near 70% full and
//! clean, the offline counts agree with each other (and with the run's
//! own bookkeeping and e2freefrag), and mballoc keeps files in no more
//! extents than the ext3 allocator on the same operations. A kernel ext4
//! loop mount runs the same sequence when root; its figures are reported,
//! not ranked.

mod common;

use ext4kit_bench::suite::{self, Params, SuiteReport, TargetOptions, TargetSpec};
use ext4kit_engine::{AllocOptions, BlockAllocator};

const ROUNDS: u64 = 4;

fn params() -> Params {
    Params {
        preset: Some("quick".into()),
        size: Some(96 << 20),
        n: Some(200),
        ..Params::default()
    }
}

fn options(blocks: BlockAllocator) -> TargetOptions {
    TargetOptions {
        block_size: Some(4096),
        alloc: AllocOptions {
            blocks,
            ..AllocOptions::default()
        },
        ..common::options()
    }
}

fn value(r: &SuiteReport, key: &str) -> f64 {
    let v = r.outcome.values.get(key);
    v.and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("no number {key} in {}", r.to_markdown()))
}

/// What every run must show, whoever allocated.
fn check_run(r: &SuiteReport) {
    let md = r.to_markdown();
    assert!(r.fsck.as_ref().is_some_and(|f| f.clean), "{md}");
    assert_eq!(value(r, "rounds_run"), ROUNDS as f64, "{md}");
    let (made, gone, left) = (
        value(r, "trees_created"),
        value(r, "trees_deleted"),
        value(r, "trees_left"),
    );
    assert_eq!(made - gone, left, "{md}");
    assert!(gone >= ROUNDS as f64, "{md}");
    let ops: Vec<u64> = r.outcome.phases.iter().map(|p| p.ops).collect();
    assert!(ops.iter().all(|&n| n > 0), "a phase did nothing: {md}");
    // Near the target: the plan's estimate and the bitmaps' count.
    for key in ["planned_fullness", "fullness"] {
        let f = value(r, key);
        assert!((0.62..=0.78).contains(&f), "{key} {f}: {md}");
    }
    // The walk found every file the run believes it left.
    assert_eq!(value(r, "files"), value(r, "files_planned"), "{md}");
    // The bitmaps, the superblock, the histogram and e2freefrag agree.
    let free = value(r, "free_blocks");
    assert_eq!(free, value(r, "free_blocks_superblock"), "{md}");
    let hist = r.outcome.values["free_extent_histogram"].as_array().unwrap();
    let sum = |k: &str| hist.iter().map(|b| b[k].as_f64().unwrap()).sum::<f64>();
    assert_eq!(sum("blocks"), free, "{md}");
    assert_eq!(sum("free_extents"), value(r, "free_extents"), "{md}");
    if let Some(n) = r.outcome.values.get("free_extents_e2freefrag") {
        assert_eq!(n.as_f64(), Some(value(r, "free_extents")), "{md}");
    }
    let avg = value(r, "avg_extents_per_file");
    assert!(avg >= 1.0 && avg <= value(r, "max_extents_per_file"), "{md}");
}

fn on_image(dir: &std::path::Path, name: &str, blocks: BlockAllocator) -> SuiteReport {
    let spec = TargetSpec::Image(dir.join(name));
    suite::run_quietly("aging", &spec, &options(blocks), &params()).unwrap()
}

#[test]
fn aging_runs_every_round_and_mballoc_fragments_no_more_than_ext3() {
    let dir = tempfile::tempdir().unwrap();
    let mb = on_image(dir.path(), "mb.img", BlockAllocator::Mballoc);
    let ext3 = on_image(dir.path(), "ext3.img", BlockAllocator::Ext3);
    check_run(&mb);
    check_run(&ext3);
    // One operation sequence: the same files are left under both.
    assert_eq!(value(&mb, "files_planned"), value(&ext3, "files_planned"));
    assert_eq!(mb.outcome.params, ext3.outcome.params);
    let (a, b) = (value(&mb, "avg_extents_per_file"), value(&ext3, "avg_extents_per_file"));
    assert!(a <= b, "mballoc {a} extents per file, ext3 {b}");
    // The counts are of the layout alone: a second image, the same counts.
    let again = on_image(dir.path(), "mb2.img", BlockAllocator::Mballoc);
    for key in [
        "avg_extents_per_file",
        "free_extents",
        "free_blocks",
        "files_in_several_extents",
    ] {
        assert_eq!(value(&mb, key), value(&again, key), "{key}");
    }
}

#[test]
fn a_kernel_ext4_runs_the_same_sequence() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root: the kernel peer of aging must run"
        );
        ext4kit_testkit::skipped!("a_kernel_ext4_runs_the_same_sequence: needs root for a loop mount");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = TargetOptions {
        scratch: dir.path().to_path_buf(),
        ..options(BlockAllocator::Mballoc)
    };
    let kernel = suite::run_quietly("aging", &TargetSpec::kernel("ext4").unwrap(), &opts, &params()).unwrap();
    check_run(&kernel);
    let mb = on_image(dir.path(), "mb.img", BlockAllocator::Mballoc);
    assert_eq!(value(&kernel, "files_planned"), value(&mb, "files_planned"));
    assert_eq!(value(&kernel, "files"), value(&mb, "files"));
    eprintln!(
        "aging quick: extents/file kernel {:.3}, mballoc {:.3}; free extents kernel {}, mballoc {}",
        value(&kernel, "avg_extents_per_file"),
        value(&mb, "avg_extents_per_file"),
        value(&kernel, "free_extents"),
        value(&mb, "free_extents")
    );
}
