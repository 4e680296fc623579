//! `--rounds N`: every target runs N times, the targets alternating within
//! each round, and each figure is reported as the median of its rounds.
//! On a shared or virtual machine one run of a workload can be off by
//! 10–20 %; alternating keeps a slow stretch of the machine from landing
//! on one target only.

use crate::report::{Metric, TargetReport, WorkloadResult};

/// One target's rounds folded into one report: medians of every figure,
/// and the worst of everything else — a skip, an error, a failed workload
/// or a dirty image in any round shows in the result.
pub fn median_of(rounds: Vec<TargetReport>) -> Option<TargetReport> {
    let first = rounds.first()?.clone();
    if let Some(skipped) = rounds.iter().find(|r| r.skipped.is_some()) {
        return Some(skipped.clone());
    }
    let mut out = TargetReport {
        error: rounds.iter().find_map(|r| r.error.clone()),
        mount_s: median(rounds.iter().map(|r| r.mount_s)),
        umount_s: median(rounds.iter().map(|r| r.umount_s)),
        fsck: rounds
            .iter()
            .find(|r| !r.fsck.as_ref().is_some_and(|f| f.clean))
            .unwrap_or(&first)
            .fsck
            .clone(),
        kept_image: rounds.iter().find_map(|r| r.kept_image.clone()),
        workloads: Vec::new(),
        ..first
    };
    for w in &out_workloads(&rounds) {
        out.workloads.push(fold_workload(&rounds, w));
    }
    Some(out)
}

/// The workloads any round ran, in first-seen order.
fn out_workloads(rounds: &[TargetReport]) -> Vec<crate::config::Workload> {
    let mut seen = Vec::new();
    for w in rounds.iter().flat_map(|r| r.workloads.iter().map(|w| w.workload)) {
        if !seen.contains(&w) {
            seen.push(w);
        }
    }
    seen
}

fn fold_workload(rounds: &[TargetReport], w: &crate::config::Workload) -> WorkloadResult {
    let runs: Vec<&WorkloadResult> = rounds
        .iter()
        .filter_map(|r| r.workloads.iter().find(|x| x.workload == *w))
        .collect();
    let mut metrics: Vec<Metric> = Vec::new();
    for m in runs.iter().flat_map(|r| &r.metrics) {
        if metrics.iter().any(|x| x.name == m.name) {
            continue;
        }
        let values = runs
            .iter()
            .flat_map(|r| r.metrics.iter().filter(|x| x.name == m.name).map(|x| x.value));
        metrics.push(Metric {
            value: median(values),
            ..m.clone()
        });
    }
    WorkloadResult {
        workload: *w,
        metrics,
        error: runs.iter().find_map(|r| r.error.clone()),
        // Request counts hardly move between rounds; the first is shown.
        profile: runs.iter().find_map(|r| r.profile.clone()),
    }
}

/// The median (the mean of the middle two for an even count); 0 for none.
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Target, TargetRun, Workload};
    use crate::report::FsckOutcome;

    fn round(tx: f64, pool: f64, clean: bool, error: Option<&str>) -> TargetReport {
        let mut r = TargetReport::new(&TargetRun {
            target: Target::Ext4kit,
            options: None,
            label: "ext4kit".into(),
        });
        r.mount_s = tx / 1000.0;
        r.fsck = Some(FsckOutcome {
            clean,
            exit_code: Some(if clean { 0 } else { 4 }),
            output: String::new(),
        });
        r.workloads.push(WorkloadResult {
            workload: Workload::Postmark,
            metrics: vec![
                Metric::higher("transactions/s", tx, "tx/s"),
                Metric::lower("initial pool", pool, "s"),
            ],
            error: error.map(str::to_string),
            profile: None,
        });
        r
    }

    fn value(r: &TargetReport, name: &str) -> f64 {
        r.workloads[0].metrics.iter().find(|m| m.name == name).unwrap().value
    }

    #[test]
    fn every_figure_is_the_median_of_its_rounds() {
        let r = median_of(vec![
            round(5000.0, 1.0, true, None),
            round(9000.0, 3.0, true, None),
            round(7000.0, 2.0, true, None),
        ])
        .unwrap();
        assert_eq!(value(&r, "transactions/s"), 7000.0);
        assert_eq!(value(&r, "initial pool"), 2.0);
        assert_eq!(r.mount_s, 7.0);
        assert!(!r.failed());
        let even = median_of(vec![round(4.0, 1.0, true, None), round(6.0, 1.0, true, None)]).unwrap();
        assert_eq!(value(&even, "transactions/s"), 5.0);
    }

    #[test]
    fn a_dirty_image_or_an_error_in_any_round_fails_the_target() {
        let dirty = median_of(vec![round(1.0, 1.0, true, None), round(1.0, 1.0, false, None)]).unwrap();
        assert!(dirty.failed(), "a dirty image in round 2 was folded away");
        let failed = median_of(vec![
            round(1.0, 1.0, true, Some("unlink: EIO")),
            round(1.0, 1.0, true, None),
        ])
        .unwrap();
        assert_eq!(failed.workloads[0].error.as_deref(), Some("unlink: EIO"));
        assert!(failed.failed());
        assert!(median_of(Vec::new()).is_none());
    }
}
