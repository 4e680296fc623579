//! The suite's harness: targets, determinism, interrupts. Each workload's
//! own bookkeeping is tested in a `tests/suite_*.rs` file of its own.

mod common;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ext4kit_bench::suite::{self, Params, Progress, SuiteReport, TargetSpec};

fn run_on(name: &str, spec: &TargetSpec, params: &Params, interrupted: bool) -> anyhow::Result<SuiteReport> {
    let w = suite::workload(name)?;
    let mut show = |_: u64, _: u64| {};
    let mut p = Progress::new(&mut show, Arc::new(AtomicBool::new(interrupted)));
    suite::run(w, spec, &common::options(), params, &mut p)
}

fn small() -> Params {
    Params {
        size: Some(3 << 20),
        io_size: Some(100_000),
        ..Params::default()
    }
}

#[test]
fn the_same_run_on_two_new_images_gives_the_same_modeled_figures() {
    let dir = tempfile::tempdir().unwrap();
    let a = run_on("seqio", &TargetSpec::Image(dir.path().join("a.img")), &small(), false).unwrap();
    let b = run_on("seqio", &TargetSpec::Image(dir.path().join("b.img")), &small(), false).unwrap();
    assert!(a.image_made && a.modeled);
    assert!(!a.failed(), "{}", a.to_markdown());
    assert_eq!(common::modeled(&a), common::modeled(&b));
    assert_eq!(a.outcome.values, b.outcome.values);
    let write = &a.outcome.phases[0];
    assert_eq!((write.name.as_str(), write.ops, write.bytes), ("write", 32, 3 << 20));
    // The writes stay in the page cache; the fsync pays for them.
    let fsync = a.outcome.phases[1].span.modeled.as_ref().unwrap();
    assert!(fsync.modeled_ns > 0 && fsync.bytes_written >= 3 << 20, "{fsync:?}");
    let (name, map) = &a.outcome.layouts[0];
    let blocks: u64 = map.iter().map(|e| e.len).sum();
    assert_eq!(name, "file");
    let extents = a.outcome.values["extents"].as_u64().unwrap();
    assert!(
        extents >= 1 && map.len() as u64 >= extents,
        "{extents} extents: {map:?}"
    );
    assert!(blocks * 1024 >= 3 << 20, "{map:?}");
    let plots = dir.path().join("p.svg");
    let written = suite::plots::plot_report(&a, &plots).unwrap();
    let names: Vec<_> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap())
        .collect();
    assert_eq!(names, ["p.svg", "p-layout.svg", "p-seeks.svg"]);
    let json: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
    assert_eq!(json["workload"], "seqio");
    assert_eq!(json["fsck"]["clean"], true);
}

#[test]
fn a_second_run_on_an_image_works_in_a_directory_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TargetSpec::from_path(&dir.path().join("x.img")).unwrap();
    run_on("seqio", &spec, &small(), false).unwrap();
    let spec = TargetSpec::from_path(&dir.path().join("x.img")).unwrap();
    assert_eq!(spec, TargetSpec::Image(dir.path().join("x.img")));
    let r = run_on("seqio", &spec, &small(), false).unwrap();
    assert!(!r.image_made && !r.failed());
    let out = std::process::Command::new("debugfs")
        .args(["-R", "ls /"])
        .arg(dir.path().join("x.img"))
        .output()
        .unwrap();
    let ls = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = ls.split_whitespace().collect();
    assert!(names.contains(&"seqio") && names.contains(&"seqio.2"), "{ls}");
}

#[test]
fn a_directory_target_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on("seqio", &TargetSpec::from_path(dir.path()).unwrap(), &small(), false).unwrap();
    assert_eq!(r.target_kind, "directory");
    assert!(!r.modeled && r.fsck.is_none());
    assert!(r.outcome.phases.iter().all(|p| p.span.modeled.is_none()));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn an_interrupted_run_fails_and_leaves_the_image_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("i.img");
    let e = run_on("seqio", &TargetSpec::Image(img.clone()), &small(), true).unwrap_err();
    assert!(format!("{e:#}").contains("interrupted"), "{e:#}");
    let out = std::process::Command::new("e2fsck")
        .arg("-fn")
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn wrong_targets_and_workloads_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, vec![0u8; 4096]).unwrap();
    let e = TargetSpec::from_path(&plain).unwrap_err().to_string();
    assert!(e.contains("without an ext2/3/4 superblock"), "{e}");
    let e = TargetSpec::from_path(&dir.path().join("no/such/img"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("parent"), "{e}");
    assert!(TargetSpec::kernel("xfs").is_err());
    let e = suite::workload("nosuch").err().unwrap().to_string();
    assert!(e.contains("seqio"), "{e}");
}

#[test]
fn a_kernel_target_is_made_mounted_checked_and_removed() {
    if !nix::unistd::geteuid().is_root() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        ext4kit_testkit::skipped!("a_kernel_target_is_made_mounted_checked_and_removed: needs root for a loop mount");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let mut opts = common::options();
    opts.scratch = scratch.path().to_path_buf();
    let w = suite::workload("seqio").unwrap();
    let mut show = |_: u64, _: u64| {};
    let mut p = Progress::new(&mut show, Arc::new(AtomicBool::new(false)));
    let r = suite::run(w, &TargetSpec::kernel("ext3").unwrap(), &opts, &small(), &mut p).unwrap();
    assert_eq!(r.target_kind, "kernel");
    assert!(r.fsck.as_ref().is_some_and(|f| f.clean), "{}", r.to_markdown());
    assert_eq!(r.outcome.phases.len(), 3);
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(scratch.path().to_str().unwrap()), "{mounts}");
    assert_eq!(
        std::fs::read_dir(scratch.path()).unwrap().count(),
        0,
        "the scratch image stayed"
    );
    // An interrupted kernel run unmounts too.
    let mut p = Progress::new(&mut show, Arc::new(AtomicBool::new(true)));
    assert!(suite::run(w, &TargetSpec::kernel("ext4").unwrap(), &opts, &small(), &mut p).is_err());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(scratch.path().to_str().unwrap()), "{mounts}");
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}

#[test]
fn compare_alternates_variants_on_fresh_images_and_sets_them_against_the_first() {
    use ext4kit_bench::suite::compare::{Variant, compare};
    let dir = tempfile::tempdir().unwrap();
    let base = Variant {
        label: "base".into(),
        spec: TargetSpec::Image(dir.path().join("c.img")),
        opts: common::options(),
    };
    let ssd = Variant::derive(&base, "disk=ssd").unwrap();
    let linear = Variant::derive(&base, "features=^dir_index+^flex_bg").unwrap();
    assert_eq!(linear.opts.features, vec!["^dir_index", "^flex_bg"]);
    assert!(Variant::derive(&base, "colour=red").is_err());
    assert!(Variant::derive(&base, "disk").is_err());
    let w = suite::workload("seqio").unwrap();
    let mut show = |_: u64, _: u64| {};
    let mut p = Progress::new(&mut show, Arc::new(AtomicBool::new(false)));
    let r = compare(w, &[base, ssd, linear], &small(), 2, &mut p).unwrap();
    assert!(!r.failed());
    assert_eq!(r.variants.len(), 3);
    assert!(r.variants.iter().all(|v| v.1.len() == 2));
    let (hdd, ssd) = (
        r.median_ms(0, "read (cold)").unwrap(),
        r.median_ms(1, "read (cold)").unwrap(),
    );
    assert!(ssd < hdd / 2.0, "ssd {ssd} ms, hdd {hdd} ms");
    // Modeled: the two rounds of a variant agree exactly.
    assert_eq!(
        common::modeled(&r.variants[0].1[0]),
        common::modeled(&r.variants[0].1[1])
    );
    let md = r.to_markdown();
    assert!(md.contains("disk=ssd") && md.contains("×)"), "{md}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "compare images were kept"
    );
}

#[test]
fn compare_over_alloc_runs_each_allocator_on_fresh_clean_images() {
    use ext4kit_bench::suite::compare::{Variant, compare};
    use ext4kit_engine::{BlockAllocator, InodeAllocator};
    let dir = tempfile::tempdir().unwrap();
    let base = Variant {
        label: "base".into(),
        spec: TargetSpec::Image(dir.path().join("a.img")),
        opts: common::options(),
    };
    let ext3 = Variant::derive(&base, "alloc=ext3").unwrap();
    assert_eq!(ext3.opts.alloc.blocks, BlockAllocator::Ext3);
    assert_eq!(ext3.opts.alloc.inodes, InodeAllocator::Orlov);
    let flex = Variant::derive(&base, "alloc=mballoc,inode_alloc=flexbg").unwrap();
    assert_eq!(flex.opts.alloc.inodes, InodeAllocator::FlexBg);
    let w = suite::workload("seqio").unwrap();
    let mut show = |_: u64, _: u64| {};
    let mut p = Progress::new(&mut show, Arc::new(AtomicBool::new(false)));
    let r = compare(w, &[base, ext3, flex], &small(), 2, &mut p).unwrap();
    assert!(!r.failed());
    let labels: Vec<&str> = r.variants.iter().map(|v| v.0.as_str()).collect();
    assert_eq!(labels, ["base", "alloc=ext3", "alloc=mballoc,inode_alloc=flexbg"]);
    // What each round's engine was opened with, not what was asked for.
    let opened = [("mballoc", "orlov"), ("ext3", "orlov"), ("mballoc", "flexbg")];
    for ((label, rounds), (blocks, inodes)) in r.variants.iter().zip(opened) {
        assert_eq!(rounds.len(), 2);
        for rep in rounds {
            assert!(
                rep.fsck.as_ref().is_some_and(|f| f.clean),
                "{label}: {}",
                rep.to_markdown()
            );
            assert_eq!(rep.block_alloc.as_deref(), Some(blocks), "{label}");
            assert_eq!(rep.inode_alloc.as_deref(), Some(inodes), "{label}");
        }
    }
    let md = r.to_markdown();
    assert!(
        md.contains("| alloc=ext3 |") && md.contains("| blocks mballoc, inodes orlov | blocks ext3, inodes orlov |"),
        "{md}"
    );
    let one = &r.variants[1].1[0];
    assert!(one.to_markdown().contains("Allocators: blocks ext3, inodes orlov."));
    assert!(one.to_json().contains("\"block_alloc\": \"ext3\""));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "compare images were kept"
    );
}

#[test]
fn allocators_are_refused_where_the_engine_does_not_allocate() {
    use ext4kit_bench::suite::compare::Variant;
    use ext4kit_engine::BlockAllocator;
    let dir = tempfile::tempdir().unwrap();
    let base = Variant {
        label: "base".into(),
        spec: TargetSpec::Image(dir.path().join("a.img")),
        opts: common::options(),
    };
    let refused = |base: &Variant, pairs: &str, why: &str| {
        let e = format!("{:#}", Variant::derive(base, pairs).unwrap_err());
        assert!(e.contains(pairs) && e.contains(why), "{pairs}: {e}");
    };
    refused(&base, "alloc=mballoc,alloc=ext3", "given twice");
    refused(&base, "alloc=buddy", "mballoc, ext3");
    refused(&base, "inode_alloc=spread", "orlov, flexbg, parent");
    refused(&base, "kernel=ext4,alloc=ext3", "kernel's");
    // Even the default, when asked for by name.
    refused(&base, "inode_alloc=orlov,kernel=ext3", "kernel's");
    let d = dir.path().display().to_string();
    refused(&base, &format!("target={d},alloc=ext3"), "directory");
    // A base that chose an allocator does not carry it to a kernel.
    let mut ext3 = base.clone();
    ext3.opts.alloc.blocks = BlockAllocator::Ext3;
    refused(&ext3, "kernel=ext4", "kernel's");
    assert!(Variant::derive(&base, "kernel=ext4").is_ok());

    let mut opts = common::options();
    opts.alloc.blocks = BlockAllocator::Ext3;
    let e = suite::run_quietly("seqio", &TargetSpec::Dir(dir.path().into()), &opts, &small()).unwrap_err();
    assert!(e.to_string().contains("directory"), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn compare_over_the_flex_options_runs_each_on_fresh_clean_images() {
    use ext4kit_bench::suite::compare::{Variant, compare};
    let dir = tempfile::tempdir().unwrap();
    let base = Variant {
        label: "base".into(),
        spec: TargetSpec::Image(dir.path().join("f.img")),
        opts: common::options(),
    };
    let aware = Variant::derive(&base, "mb_flex_aware=1").unwrap();
    assert!(aware.opts.alloc.flex_aware);
    let middle = Variant::derive(&base, "flex_meta=middle,flex=auto").unwrap();
    assert_eq!(middle.opts.extended, vec!["flex_meta=middle"]);
    assert_eq!(middle.opts.flex.as_deref(), Some("auto"));
    assert!(Variant::derive(&base, "mb_flex_aware=yes").is_err());
    let direct = Variant::derive(&base, "delalloc=0").unwrap();
    assert!(!direct.opts.alloc.delalloc);
    let w = suite::workload("seqio").unwrap();
    let mut show = |_: u64, _: u64| {};
    let mut p = Progress::new(&mut show, Arc::new(AtomicBool::new(false)));
    let r = compare(w, &[base, aware, middle, direct], &small(), 1, &mut p).unwrap();
    assert!(!r.failed(), "{}", r.to_markdown());
    let blocks: Vec<Option<&str>> = r.variants.iter().map(|v| v.1[0].block_alloc.as_deref()).collect();
    assert_eq!(
        blocks,
        [
            Some("mballoc"),
            Some("mballoc flex-aware"),
            Some("mballoc"),
            Some("mballoc nodelalloc")
        ]
    );
    let mut kernel = common::options();
    kernel.extended = vec!["flex_meta=middle".into()];
    let e = suite::run_quietly("seqio", &TargetSpec::kernel("ext4").unwrap(), &kernel, &small());
    assert!(e.is_err_and(|e| format!("{e:#}").contains("ext4kit's mkfs")));
}
