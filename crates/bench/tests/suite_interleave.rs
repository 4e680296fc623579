//! `interleave`'s bookkeeping: every chunk and small file written, the
//! layouts recorded, the image clean, the same modeled figures on two new
//! images.

mod common;

use ext4kit_bench::suite::{self, Params, SuiteReport, TargetSpec};

fn run_on(spec: &TargetSpec) -> anyhow::Result<SuiteReport> {
    let p = Params {
        size: Some(4 << 20),
        io_size: Some(256 << 10),
        n: Some(20),
        ..Params::default()
    };
    suite::run_quietly("interleave", spec, &common::options(), &p)
}

#[test]
fn every_write_is_counted_and_the_layouts_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let a = run_on(&TargetSpec::Image(dir.path().join("a.img"))).unwrap();
    let b = run_on(&TargetSpec::Image(dir.path().join("b.img"))).unwrap();
    assert!(!a.failed(), "{}", a.to_markdown());
    let ops: Vec<u64> = a.outcome.phases.iter().map(|p| p.ops).collect();
    assert_eq!(ops, [16, 20, 1, 1]);
    let v = &a.outcome.values;
    assert_eq!(v["small_file_extents"], 20);
    let big = v["large_file_extents"].as_u64().unwrap();
    assert!((1..=16).contains(&big), "{v:?}");
    let (name, map) = &a.outcome.layouts[0];
    assert_eq!(name, "large file");
    assert_eq!(map.iter().map(|e| e.len).sum::<u64>() * 1024, 4 << 20);
    assert_eq!(common::modeled(&a), common::modeled(&b));
    assert_eq!(a.outcome.values, b.outcome.values);
}
