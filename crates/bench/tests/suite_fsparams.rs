//! `fsparams` (seed 002): the four values inferred from modeled time are
//! the true ones on new engine images with 1 KiB and 4 KiB blocks and two
//! page cache sizes, on extent- and block-mapped files; the bookkeeping
//! of a run, its determinism, and a directory target.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ext4kit_bench::suite::{self, Params, Progress, SuiteReport, TargetOptions, TargetSpec};
use ext4kit_engine::device::{DiskModel, DiskProfile, MemDevice};

const PROFILE: &str = "hp-sas-10k";

fn options(block_size: u32, cache_bytes: u64) -> TargetOptions {
    TargetOptions {
        disk: PROFILE.parse().unwrap(),
        cache_bytes,
        image_bytes: 0,
        inodes: 0,
        fs_type: None,
        features: Vec::new(),
        block_size: Some(block_size),
        scratch: std::env::temp_dir(),
        ..TargetOptions::default()
    }
}

fn run_on(spec: &TargetSpec, opts: &TargetOptions, params: &Params) -> SuiteReport {
    let w = suite::workload("fsparams").unwrap();
    let mut show = |_: u64, _: u64| {};
    let mut p = Progress::new(&mut show, Arc::new(AtomicBool::new(false)));
    suite::run(w, spec, opts, params, &mut p).unwrap()
}

fn on_new_image(opts: &TargetOptions, params: &Params) -> SuiteReport {
    let dir = tempfile::tempdir().unwrap();
    let r = run_on(&TargetSpec::Image(dir.path().join("fsparams.img")), opts, params);
    assert!(r.image_made && r.modeled);
    assert!(!r.failed(), "{}", r.to_markdown());
    r
}

/// Working sets up to twice the larger cache.
fn params() -> Params {
    Params {
        size: Some(16 << 20),
        ..Params::default()
    }
}

/// (inferred, actual) of a result; `None` where the report has none.
fn value(r: &SuiteReport, key: &str) -> (Option<u64>, Option<u64>) {
    let v = &r.outcome.values[key];
    (v["inferred"].as_u64(), v.get("actual").and_then(|a| a.as_u64()))
}

/// One track of the profile's outermost zone, where a small image lies:
/// what its drive reads ahead of a sequential stream.
fn track_bytes() -> u64 {
    let profile: DiskProfile = PROFILE.parse().unwrap();
    let disk = DiskModel::new(MemDevice::new(vec![0; 4096]), &profile).unwrap();
    disk.geometry().unwrap().sectors_per_track[0] * 512
}

#[test]
fn the_true_values_are_recovered_on_extent_images() {
    for (bs, cache) in [(1024, 2u64 << 20), (1024, 8 << 20), (4096, 2 << 20), (4096, 8 << 20)] {
        let r = on_new_image(&options(bs, cache), &params());
        let what = format!("{bs}-byte blocks, {cache}-byte cache:\n{}", r.to_markdown());
        assert_eq!(value(&r, "block_size"), (Some(bs.into()), Some(bs.into())), "{what}");
        assert_eq!(value(&r, "cache_bytes"), (Some(cache), Some(cache)), "{what}");
        assert_eq!(value(&r, "direct_pointers"), (Some(4), Some(4)), "{what}");
        assert_eq!(value(&r, "readahead_bytes"), (Some(track_bytes()), None), "{what}");
    }
}

#[test]
fn block_mapped_files_show_twelve_direct_pointers() {
    let mut o = options(4096, 2 << 20);
    o.features = vec!["^extent".into(), "^64bit".into()];
    let r = on_new_image(&o, &params());
    assert_eq!(
        value(&r, "direct_pointers"),
        (Some(12), Some(12)),
        "{}",
        r.to_markdown()
    );
    assert_eq!(value(&r, "block_size"), (Some(4096), Some(4096)));
    assert_eq!(value(&r, "cache_bytes"), (Some(2 << 20), Some(2 << 20)));
}

#[test]
fn phases_count_their_probes_and_two_new_images_agree() {
    let p = Params {
        size: Some(1 << 20),
        io_size: Some(8192),
        ..Params::default()
    };
    let a = on_new_image(&options(1024, 256 << 10), &p);
    let b = on_new_image(&options(1024, 256 << 10), &p);
    let ops: Vec<(&str, u64)> = a.outcome.phases.iter().map(|p| (p.name.as_str(), p.ops)).collect();
    assert_eq!(ops[0], ("write the probe files, sync", 31));
    assert_eq!(ops[1].0, "block size: 1-byte reads, holes down to data");
    assert!([256, 512].contains(&ops[1].1), "one or two hole files: {}", ops[1].1);
    assert_eq!(
        ops[2],
        ("read-ahead: sequential reads (cold)", 128),
        "1 MiB in 8 KiB reads"
    );
    assert_eq!(ops[5], ("pointers: 1-byte hole reads (cold)", 17 + 11));
    let (fwd, back) = (&a.outcome.phases[3], &a.outcome.phases[4]);
    assert_eq!(fwd.ops, back.ops, "every trial reads its set forward and back");
    assert_eq!(value(&a, "cache_bytes"), (Some(256 << 10), Some(256 << 10)));
    let modeled = |r: &SuiteReport| -> Vec<String> {
        r.outcome
            .phases
            .iter()
            .map(|p| format!("{} {} {:?}", p.name, p.ops, p.span.modeled))
            .collect()
    };
    assert_eq!(modeled(&a), modeled(&b));
    assert_eq!(a.outcome.values, b.outcome.values);
    assert_eq!(a.outcome.params["io_size"], 8192);
}

#[test]
fn with_no_time_to_go_by_nothing_is_inferred() {
    let mut o = options(4096, 1 << 20);
    o.disk = "none".parse().unwrap();
    let r = on_new_image(
        &o,
        &Params {
            size: Some(1 << 20),
            ..Params::default()
        },
    );
    for key in ["block_size", "readahead_bytes", "cache_bytes", "direct_pointers"] {
        assert_eq!(value(&r, key).0, None, "{key}: {}", r.to_markdown());
    }
    assert_eq!(value(&r, "block_size").1, Some(4096));
    assert!(r.outcome.notes.iter().any(|n| n.contains("nothing could be inferred")));
}

#[test]
fn a_directory_target_reports_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = Params {
        size: Some(1 << 20),
        ..Params::default()
    };
    let r = run_on(&TargetSpec::from_path(dir.path()).unwrap(), &options(4096, 0), &p);
    assert!(!r.modeled && r.fsck.is_none());
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    for key in ["block_size", "readahead_bytes", "cache_bytes", "direct_pointers"] {
        assert!(json["values"][key].get("inferred").is_some(), "{key}: {}", r.to_json());
    }
    assert!(value(&r, "block_size").1.is_some_and(|b| b >= 512));
    assert_eq!(value(&r, "cache_bytes").1, None, "the host's cache is not known");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
