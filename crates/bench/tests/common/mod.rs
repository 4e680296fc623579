//! What the suite's test files share: how their targets are opened and
//! which figures a determinism check compares.

#![allow(dead_code)] // Each test binary uses its own part.

use ext4kit_bench::suite::{SuiteReport, TargetOptions};

/// A small page cache (4 MiB), so tiny runs still reach the disk model,
/// and scratch space in the test's temporary directory.
pub fn options() -> TargetOptions {
    TargetOptions {
        cache_bytes: 4 << 20,
        scratch: std::env::temp_dir(),
        ..TargetOptions::default()
    }
}

/// The modeled figures of an image run; panics on a wall-clock one.
pub fn modeled(r: &SuiteReport) -> Vec<(String, u64, u64, ext4kit_bench::modeled::PhaseStats)> {
    let figures = r.modeled_figures().into_iter();
    figures
        .map(|(name, ops, bytes, m)| (name, ops, bytes, m.expect("an image run is modeled")))
        .collect()
}
