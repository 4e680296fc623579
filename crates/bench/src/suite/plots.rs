//! What a suite report plots: the phases' times as bars (one group per
//! variant when comparing); on a modeled run, the seek distances of each
//! phase by power-of-two bucket — the layout's cost made visible; and the
//! layout itself where the workload records one (logical against physical
//! block of each extent).

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::compare::CompareReport;
use super::fs::Extent;
use super::report::SuiteReport;
use crate::plot::{Bars, Segments, bars, segments};

/// Writes `path` (phase times); for a modeled run `path` with `-seeks`
/// before its extension (seek distances); where the workload recorded
/// layouts, `-layout` (each file's extents). Returns the files written.
pub fn plot_report(r: &SuiteReport, path: &Path) -> Result<Vec<PathBuf>> {
    let clock = if r.modeled { "modeled ms" } else { "wall ms" };
    let b = Bars {
        categories: r.outcome.phases.iter().map(|p| p.name.clone()).collect(),
        groups: vec![(
            r.target.clone(),
            r.outcome.phases.iter().map(|p| p.span.ns() as f64 / 1e6).collect(),
        )],
    };
    bars(path, &format!("{}: time per phase", r.workload), clock, &b)?;
    let mut written = vec![path.to_path_buf()];
    if !r.outcome.layouts.is_empty() {
        let p = beside(path, "layout");
        let groups: Vec<Segments> = r.outcome.layouts.iter().map(|(name, map)| layout(name, map)).collect();
        let title = format!("{}: where the blocks lie", r.workload);
        segments(&p, &title, "logical block", "physical block", &groups)?;
        written.push(p);
    }
    if let Some(seeks) = seek_bars(r) {
        let p = beside(path, "seeks");
        bars(
            &p,
            &format!("{}: seeks by distance (cylinders)", r.workload),
            "seeks",
            &seeks,
        )?;
        written.push(p);
    }
    Ok(written)
}

/// Writes `path`: each phase's median time, one bar per variant.
pub fn plot_compare(r: &CompareReport, path: &Path) -> Result<Vec<PathBuf>> {
    let phases: Vec<String> = r.variants[0].1.first().map_or(Vec::new(), |x| {
        x.outcome.phases.iter().map(|p| p.name.clone()).collect()
    });
    let groups = (0..r.variants.len())
        .map(|k| {
            let v = phases.iter().map(|p| r.median_ms(k, p).unwrap_or(0.0)).collect();
            (r.variants[k].0.clone(), v)
        })
        .collect();
    let b = Bars {
        categories: phases,
        groups,
    };
    let modeled = r.variants.iter().flat_map(|v| &v.1).all(|x| x.modeled);
    let unit = if modeled {
        "modeled ms (median)"
    } else {
        "wall ms (median)"
    };
    bars(path, &format!("{}: variants side by side", r.workload), unit, &b)?;
    Ok(vec![path.to_path_buf()])
}

/// Seek counts per distance bucket, one group per phase; `None` when the
/// run was not modeled or made no seek.
fn seek_bars(r: &SuiteReport) -> Option<Bars> {
    let modeled: Vec<_> = r
        .outcome
        .phases
        .iter()
        .filter_map(|p| Some((p.name.clone(), p.span.modeled.as_ref()?)))
        .collect();
    let mut buckets: Vec<[u64; 2]> = modeled
        .iter()
        .flat_map(|(_, m)| m.seek_histogram.iter().map(|b| [b[0], b[1]]))
        .collect();
    buckets.sort_unstable();
    buckets.dedup();
    if buckets.is_empty() {
        return None;
    }
    let groups = modeled
        .iter()
        .map(|(name, m)| {
            let count = |lo: u64| m.seek_histogram.iter().find(|b| b[0] == lo).map_or(0, |b| b[2]);
            (name.clone(), buckets.iter().map(|b| count(b[0]) as f64).collect())
        })
        .collect();
    Some(Bars {
        categories: buckets
            .iter()
            .map(|[lo, hi]| {
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}–{hi}")
                }
            })
            .collect(),
        groups,
    })
}

/// A file's extents as segments from (logical, physical) of their first
/// block to one past their last.
fn layout(name: &str, map: &[Extent]) -> Segments {
    let point = |l: u64, p: u64| (l as f64, p as f64);
    Segments {
        name: name.to_string(),
        segments: map
            .iter()
            .map(|e| {
                (
                    point(e.logical, e.physical),
                    point(e.logical + e.len, e.physical + e.len),
                )
            })
            .collect(),
    }
}

/// `dir/name-tag.ext` for `dir/name.ext`.
fn beside(path: &Path, tag: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{stem}-{tag}.{ext}"))
}
