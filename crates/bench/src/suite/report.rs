//! A suite run's report: the workload's phases with their times (modeled
//! on an image, wall on a directory), its own result values, and the
//! target's `e2fsck -fn`; as Markdown and JSON.

use std::fmt::Write as _;

use serde::Serialize;

use super::fs::Span;
use crate::FsckOutcome;
use crate::report::fmt_num;

/// One measured phase of a workload.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// What the phase does.
    pub name: String,
    /// Operations done (files, calls, transactions: the workload says).
    pub ops: u64,
    /// Bytes read or written by the workload, for MB/s.
    pub bytes: u64,
    /// Its time and, on an image, the disk model's figures.
    pub span: Span,
}

impl Phase {
    /// A phase of `ops` operations moving `bytes` bytes in `span`.
    pub fn new(name: impl Into<String>, ops: u64, bytes: u64, span: Span) -> Self {
        Self {
            name: name.into(),
            ops,
            bytes,
            span,
        }
    }

    /// Microseconds per operation, by the ranking time.
    pub fn us_per_op(&self) -> Option<f64> {
        (self.ops > 0).then(|| self.span.ns() as f64 / 1e3 / self.ops as f64)
    }

    /// Operations per second, by the ranking time.
    pub fn ops_per_sec(&self) -> Option<f64> {
        (self.span.ns() > 0).then(|| self.ops as f64 * 1e9 / self.span.ns() as f64)
    }

    /// MB/s (10^6 bytes) by the ranking time.
    pub fn mb_per_sec(&self) -> Option<f64> {
        (self.bytes > 0 && self.span.ns() > 0).then(|| self.bytes as f64 * 1e3 / self.span.ns() as f64)
    }
}

/// What a workload hands back.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    /// The parameters it ran with, after presets and scaling.
    pub params: serde_json::Map<String, serde_json::Value>,
    /// The measured phases, in the order run.
    pub phases: Vec<Phase>,
    /// Results that are not phases (fsparams' inferences, extent counts).
    pub values: serde_json::Map<String, serde_json::Value>,
    /// What the reader must know (a warm read that should have been cold).
    pub notes: Vec<String>,
    /// Where chosen files' blocks lie, by file name (layout plots).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layouts: Vec<(String, Vec<super::fs::Extent>)>,
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    /// The workload's name.
    pub workload: String,
    /// The target as given.
    pub target: String,
    /// `image`, `directory` or `kernel`.
    pub target_kind: &'static str,
    /// Disk model profile and page cache bytes (image targets).
    pub disk: Option<String>,
    /// Page cache in front of the disk model (image targets).
    pub page_cache_bytes: Option<u64>,
    /// Block allocator the engine opened the image with (image targets).
    pub block_alloc: Option<String>,
    /// Inode allocator the engine opened the image with (image targets).
    pub inode_alloc: Option<String>,
    /// The run made the image.
    pub image_made: bool,
    /// Whether the figures are modeled (deterministic) or wall time.
    pub modeled: bool,
    #[serde(flatten)]
    /// The workload's results.
    pub outcome: Outcome,
    /// What one timing sample pair costs the harness, in wall ns: the
    /// empty workload's cost, to weigh small per-operation figures.
    pub harness_ns_per_sample: f64,
    /// `e2fsck -fn` after the run (image and kernel targets).
    pub fsck: Option<FsckOutcome>,
    /// Wall time of the whole run.
    pub wall_seconds: f64,
}

impl SuiteReport {
    /// The figures that depend only on the request sequence, phase by
    /// phase: name, operations, bytes and the disk model's figures (`None`
    /// on a wall-clock target). Two runs of one workload on images made
    /// alike give equal lists; wall times never do.
    pub fn modeled_figures(&self) -> Vec<(String, u64, u64, Option<crate::modeled::PhaseStats>)> {
        let phases = self.outcome.phases.iter();
        phases
            .map(|p| (p.name.clone(), p.ops, p.bytes, p.span.modeled.clone()))
            .collect()
    }

    /// `blocks mballoc, inodes orlov` on an image target.
    pub fn allocators(&self) -> Option<String> {
        let (b, i) = (self.block_alloc.as_ref()?, self.inode_alloc.as_ref()?);
        Some(format!("blocks {b}, inodes {i}"))
    }

    /// The image was not left clean.
    pub fn failed(&self) -> bool {
        self.fsck.as_ref().is_some_and(|f| !f.clean)
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report as Markdown tables.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let clock = if self.modeled { "modeled" } else { "wall" };
        let _ = writeln!(s, "## {} on {} ({})\n", self.workload, self.target, self.target_kind);
        if let (Some(d), Some(c)) = (&self.disk, self.page_cache_bytes) {
            let _ = writeln!(s, "Disk model `{d}`, page cache {} MiB; times are modeled.\n", c >> 20);
        }
        if let Some(a) = self.allocators() {
            let _ = writeln!(s, "Allocators: {a}.\n");
        }
        if !self.outcome.params.is_empty() {
            let p: Vec<String> = self.outcome.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(s, "Parameters: {}\n", p.join(", "));
        }
        let _ = writeln!(
            s,
            "| phase | ops | {clock} ms | µs/op | ops/s | MB/s | disk reads | disk writes | flushes | wall ms |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        let opt = |v: Option<f64>| v.map_or("–".to_string(), fmt_num);
        for p in &self.outcome.phases {
            let m = p.span.modeled.as_ref();
            let io = |f: fn(&crate::modeled::PhaseStats) -> u64| m.map_or("–".into(), |m| f(m).to_string());
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.name,
                p.ops,
                fmt_num(p.span.ns() as f64 / 1e6),
                opt(p.us_per_op()),
                opt(p.ops_per_sec()),
                opt(p.mb_per_sec()),
                io(|m| m.reads),
                io(|m| m.writes),
                io(|m| m.flushes),
                fmt_num(p.span.wall_ns as f64 / 1e6),
            );
        }
        if !self.outcome.values.is_empty() {
            let _ = writeln!(s, "\n| result | value |\n|---|---|");
            for (k, v) in &self.outcome.values {
                let _ = writeln!(s, "| {k} | {v} |");
            }
        }
        for n in &self.outcome.notes {
            let _ = writeln!(s, "\nNote: {n}");
        }
        let _ = writeln!(
            s,
            "\nHarness: {} ns of wall time per timing sample pair; run took {:.1} s of wall time.",
            fmt_num(self.harness_ns_per_sample),
            self.wall_seconds
        );
        if let Some(f) = &self.fsck {
            let verdict = if f.clean { "clean" } else { "NOT CLEAN" };
            let _ = writeln!(s, "e2fsck -fn after the run: {verdict}.");
            if !f.clean {
                let _ = writeln!(s, "\n```\n{}\n```", f.output.trim());
            }
        }
        s
    }
}
