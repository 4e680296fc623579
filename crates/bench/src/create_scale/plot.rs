//! Seed 000's figure: time per create and per open against the entries
//! already in the directory. A linear directory's creates climb with its
//! size; an htree's stay flat.

use std::path::Path;

use anyhow::Result;

use super::report::Report;
use crate::plot::{Series, lines};

/// Plots `r` at `path` (.svg or .png): wall µs, and modeled µs on an
/// image.
pub fn plot(r: &Report, path: &Path) -> Result<()> {
    let modeled = r.batches.iter().all(|b| b.create_us.is_some());
    let series = |name: &str, f: &dyn Fn(&super::Batch) -> Option<f64>| Series {
        name: name.to_string(),
        points: r
            .batches
            .iter()
            .filter_map(|b| Some((b.entries as f64, f(b)?)))
            .collect(),
    };
    // The model charges the disk only; the wall clock shows the CPU's
    // share too (a linear directory's scan per create is CPU work once
    // its blocks are cached), so a modeled run plots both.
    let mut all = vec![
        series("create (wall)", &|b| Some(b.create_wall_us)),
        series("open (wall)", &|b| Some(b.open_wall_us)),
    ];
    if modeled {
        all.push(series("create (modeled disk)", &|b| b.create_us));
        all.push(series("open, cold (modeled disk)", &|b| b.open_us));
    }
    let unit = "µs per file";
    let index = match r.dir_index {
        Some(false) => "linear directory",
        Some(true) => "htree directory",
        None => "directory",
    };
    let title = format!("{} creates in one {index}: {}", r.n, r.target);
    lines(path, &title, "entries in the directory", unit, &all)
}
