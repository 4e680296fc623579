//! Results: per target, per workload, per metric; rendered as markdown
//! tables (one per workload, one column per target, plus ext4kit's ratios)
//! and serialised as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::config::{Config, Sizes, Target, TargetRun, Workload};
use crate::fuse_trace::Profile;

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Metric {
    /// What was measured, e.g. `files/s`.
    pub name: String,
    /// The value, in `unit`.
    pub value: f64,
    /// The unit, e.g. `ops/s`, `s`, `MB/s`.
    pub unit: String,
    /// Whether a larger value is better (throughputs) or worse (times).
    pub higher_is_better: bool,
}

impl Metric {
    /// A throughput or other larger-is-better figure.
    pub fn higher(name: &str, value: f64, unit: &str) -> Metric {
        Metric {
            name: name.into(),
            value,
            unit: unit.into(),
            higher_is_better: true,
        }
    }

    /// A time or other smaller-is-better figure.
    pub fn lower(name: &str, value: f64, unit: &str) -> Metric {
        Metric {
            higher_is_better: false,
            ..Metric::higher(name, value, unit)
        }
    }
}

/// One workload on one target.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResult {
    /// Which workload.
    pub workload: Workload,
    /// Its figures (empty when it failed).
    pub metrics: Vec<Metric>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Its FUSE requests (`--profile`, FUSE targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
}

impl WorkloadResult {
    /// Records a workload's outcome.
    pub fn from_result(workload: Workload, r: anyhow::Result<(Vec<Metric>, Option<Profile>)>) -> Self {
        match r {
            Ok((metrics, profile)) => WorkloadResult {
                workload,
                metrics,
                error: None,
                profile,
            },
            Err(e) => WorkloadResult {
                workload,
                metrics: Vec::new(),
                error: Some(format!("{e:#}")),
                profile: None,
            },
        }
    }

    /// One line for the progress log.
    pub fn summary(&self) -> String {
        match &self.error {
            Some(e) => format!("{} FAILED: {e}", self.workload),
            None => {
                let parts: Vec<String> = self
                    .metrics
                    .iter()
                    .map(|m| format!("{} {} {}", m.name, fmt_num(m.value), m.unit))
                    .collect();
                format!("{}: {}", self.workload, parts.join(", "))
            }
        }
    }
}

/// The result of `e2fsck -fn` on a target's image after unmounting.
#[derive(Debug, Clone, Serialize)]
pub struct FsckOutcome {
    /// Exit status 0: nothing to fix.
    pub clean: bool,
    /// e2fsck's exit code (`None`: killed by a signal).
    pub exit_code: Option<i32>,
    /// What e2fsck printed.
    pub output: String,
}

/// One target's run.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    /// Which target.
    pub target: Target,
    /// Its name in the tables: the target, or for one of several ext4kit
    /// configurations `ext4kit[OPTIONS]`.
    pub label: String,
    /// The ext4kit mount's extra `-o` options, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<String>,
    /// Why it did not run (missing tool, not root), when it did not.
    pub skipped: Option<String>,
    /// A failure outside the workloads (mkfs, mount, unmount, e2fsck).
    pub error: Option<String>,
    /// Seconds from starting the mount until it was usable.
    pub mount_s: f64,
    /// Seconds to unmount, including the server writing the image.
    pub umount_s: f64,
    /// `e2fsck -fn` after unmounting.
    pub fsck: Option<FsckOutcome>,
    /// Where a dirty image was kept for examination.
    pub kept_image: Option<std::path::PathBuf>,
    /// Every workload that ran, in order.
    pub workloads: Vec<WorkloadResult>,
}

impl TargetReport {
    /// An empty report for `run`.
    pub fn new(run: &TargetRun) -> Self {
        TargetReport {
            target: run.target,
            label: run.label.clone(),
            options: run.options.clone(),
            skipped: None,
            error: None,
            mount_s: 0.0,
            umount_s: 0.0,
            fsck: None,
            kept_image: None,
            workloads: Vec::new(),
        }
    }

    /// True when the target ran and something went wrong: an error, a
    /// failed workload, or an image e2fsck did not find clean.
    pub fn failed(&self) -> bool {
        self.skipped.is_none()
            && (self.error.is_some()
                || self.workloads.iter().any(|w| w.error.is_some())
                || !self.fsck.as_ref().is_some_and(|f| f.clean))
    }

    fn metric(&self, w: Workload, name: &str) -> Option<&Metric> {
        self.workloads
            .iter()
            .find(|r| r.workload == w)?
            .metrics
            .iter()
            .find(|m| m.name == name)
    }

    fn status(&self) -> String {
        if let Some(why) = &self.skipped {
            return format!("skipped: {why}");
        }
        if let Some(e) = &self.error {
            return format!("FAILED: {e}");
        }
        match &self.fsck {
            Some(f) if f.clean => "e2fsck clean".into(),
            Some(f) => format!("e2fsck DIRTY (exit {:?})", f.exit_code),
            None => "no e2fsck".into(),
        }
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `--quick` sizes.
    pub quick: bool,
    /// The sizes used.
    pub sizes: Sizes,
    /// Workloads selected, in order.
    pub workloads: Vec<Workload>,
    /// `uname -r`.
    pub kernel: String,
    /// CPUs available to this process.
    pub cpus: usize,
    /// Rounds every target ran; each figure is the median of its rounds.
    pub rounds: usize,
    /// The options every image was made with.
    pub mkfs_options: Vec<String>,
    /// One entry per selected target, in order.
    pub targets: Vec<TargetReport>,
}

impl Report {
    /// An empty report for `cfg`.
    pub fn new(cfg: &Config) -> Self {
        Report {
            quick: cfg.quick,
            sizes: cfg.sizes(),
            workloads: cfg.workloads.clone(),
            kernel: crate::system::kernel_release(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            rounds: cfg.rounds.max(1),
            mkfs_options: crate::system::MKFS_OPTIONS.iter().map(|s| s.to_string()).collect(),
            targets: Vec::new(),
        }
    }

    /// True when any target that ran failed (see [`TargetReport::failed`]).
    pub fn failed(&self) -> bool {
        self.targets.iter().any(TargetReport::failed)
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report as markdown: a summary table of targets, then one table
    /// per workload with a column per target and ext4kit's ratios.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "## ext4kit bench mount{}\n\nkernel {}, {} CPUs, `mkfs.ext4 {}`, image {} MiB{}\n",
            if self.quick { " (quick)" } else { "" },
            self.kernel,
            self.cpus,
            self.mkfs_options.join(" "),
            self.sizes.image_bytes >> 20,
            if self.rounds > 1 {
                format!("; medians of {} rounds, the targets alternating", self.rounds)
            } else {
                String::new()
            }
        );
        let _ = writeln!(s, "| target | status | mount s | umount s |\n|---|---|---|---|");
        for t in &self.targets {
            let _ = writeln!(
                s,
                "| {} | {} | {:.2} | {:.2} |",
                t.label,
                t.status().replace('\n', " "),
                t.mount_s,
                t.umount_s
            );
        }
        for &w in &self.workloads {
            self.workload_table(&mut s, w);
        }
        s
    }

    fn workload_table(&self, s: &mut String, w: Workload) {
        let _ = writeln!(s, "\n### {w}\n");
        let mut head = String::from("| metric |");
        let mut rule = String::from("|---|");
        for t in &self.targets {
            let _ = write!(head, " {} |", t.label);
            rule.push_str("---:|");
        }
        let ratios = self.ratio_columns();
        for (_, label) in &ratios {
            let _ = write!(head, " {label} |");
            rule.push_str("---:|");
        }
        let _ = writeln!(s, "{head}\n{rule}");
        for (name, unit, higher) in self.metric_names(w) {
            let arrow = if higher { "↑" } else { "↓" };
            let _ = write!(s, "| {name} ({unit}, {arrow}) |");
            for t in &self.targets {
                let cell = match (t.metric(w, &name), &t.skipped) {
                    (Some(m), _) => fmt_num(m.value),
                    (None, Some(_)) => "skipped".into(),
                    (None, None) => "–".into(),
                };
                let _ = write!(s, " {cell} |");
            }
            for (other, _) in &ratios {
                let cell = self.ratio(w, &name, other).map_or("–".into(), |r| format!("{r:.2}"));
                let _ = write!(s, " {cell} |");
            }
            s.push('\n');
        }
        for t in &self.targets {
            if let Some(e) = t
                .workloads
                .iter()
                .find(|r| r.workload == w)
                .and_then(|r| r.error.as_ref())
            {
                let _ = writeln!(s, "\n**{} failed:** {}", t.label, e.replace('\n', " "));
            }
        }
        for t in &self.targets {
            if let Some(p) = t
                .workloads
                .iter()
                .find(|r| r.workload == w)
                .and_then(|r| r.profile.as_ref())
            {
                s.push_str(&p.to_markdown(&format!("{} {w}", t.label)));
            }
        }
    }

    /// The ratio columns shown, as (numerator, denominator) labels: each
    /// ext4kit run over fuse2fs and over kernel, then every further ext4kit
    /// configuration over the first.
    fn ratio_columns(&self) -> Vec<((String, String), String)> {
        let labels = |t: Target| -> Vec<String> {
            self.targets
                .iter()
                .filter(|r| r.target == t)
                .map(|r| r.label.clone())
                .collect()
        };
        let ours = labels(Target::Ext4kit);
        let mut out = Vec::new();
        for a in &ours {
            for other in [Target::Fuse2fs, Target::Kernel] {
                for b in labels(other) {
                    out.push(((a.clone(), b.clone()), format!("{a}/{b}")));
                }
            }
        }
        for a in ours.iter().skip(1) {
            out.push(((a.clone(), ours[0].clone()), format!("{a}/{}", ours[0])));
        }
        out
    }

    fn ratio(&self, w: Workload, name: &str, (a, b): &(String, String)) -> Option<f64> {
        let get = |label: &String| {
            self.targets
                .iter()
                .find(|r| r.label == *label)?
                .metric(w, name)
                .map(|m| m.value)
        };
        let (a, b) = (get(a)?, get(b)?);
        (b != 0.0).then(|| a / b)
    }

    /// Every metric name of workload `w` over all targets, in first-seen order.
    fn metric_names(&self, w: Workload) -> Vec<(String, String, bool)> {
        let mut out: Vec<(String, String, bool)> = Vec::new();
        for t in &self.targets {
            for r in t.workloads.iter().filter(|r| r.workload == w) {
                for m in &r.metrics {
                    if !out.iter().any(|(n, _, _)| *n == m.name) {
                        out.push((m.name.clone(), m.unit.clone(), m.higher_is_better));
                    }
                }
            }
        }
        out
    }
}

/// About four significant digits, without exponent notation.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}
