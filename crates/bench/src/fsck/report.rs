//! What a `bench fsck` run found: per layout and checker, the median wall
//! time over the runs, its spread, peak RSS and exit statuses; the ratios a
//! reader wants (e2fsck over ext4kit, flags cleared over flags kept).

use std::fmt::Write as _;

use super::image::Built;
use super::{Checker, Config};

/// One checker on one layout.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measured {
    /// Which checker.
    pub checker: Checker,
    /// Wall seconds of every run, in order.
    pub seconds: Vec<f64>,
    /// Their median.
    pub median_seconds: f64,
    /// Largest peak RSS over the runs (GNU `time`), when measured.
    pub peak_rss_kib: Option<u64>,
    /// Exit status of every run (0: clean).
    pub exit_codes: Vec<Option<i32>>,
}

impl Measured {
    /// From `(seconds, peak RSS, exit code)` per run.
    pub(super) fn from_runs(checker: Checker, runs: &[(f64, Option<u64>, Option<i32>)]) -> Self {
        let seconds: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let median_seconds = crate::journal::report::median(seconds.iter().copied()).unwrap_or(0.0);
        Self {
            checker,
            seconds,
            median_seconds,
            peak_rss_kib: runs.iter().filter_map(|r| r.1).max(),
            exit_codes: runs.iter().map(|r| r.2).collect(),
        }
    }

    /// Every run exited 0.
    pub fn all_clean(&self) -> bool {
        self.exit_codes.iter().all(|c| *c == Some(0))
    }
}

/// Every checker on one layout of the image.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Layout {
    /// "uninit_bg flags" or "flags cleared".
    pub name: String,
    /// Each checker's runs on it.
    pub checkers: Vec<Measured>,
}

impl Layout {
    fn median(&self, c: Checker) -> Option<f64> {
        self.checkers.iter().find(|m| m.checker == c).map(|m| m.median_seconds)
    }
}

/// The whole run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FsckBenchReport {
    /// Size of the sparse image.
    pub image_gib: u64,
    /// Runs of each checker on each layout.
    pub runs: usize,
    /// What the image holds.
    pub built: Built,
    /// Groups whose flags were cleared for the second layout.
    pub groups_cleared: Option<u64>,
    /// The machine's kernel.
    pub kernel: String,
    /// The image as built, then (unless skipped) with its flags cleared.
    pub layouts: Vec<Layout>,
}

impl FsckBenchReport {
    pub(super) fn new(cfg: &Config, built: Built) -> Self {
        Self {
            image_gib: cfg.image_bytes >> 30,
            runs: cfg.runs,
            built,
            groups_cleared: None,
            kernel: crate::system::kernel_release(),
            layouts: Vec::new(),
        }
    }

    /// Some run did not find the image clean.
    pub fn failed(&self) -> bool {
        self.layouts.iter().flat_map(|l| &l.checkers).any(|m| !m.all_clean())
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The report as Markdown tables.
    pub fn to_markdown(&self) -> String {
        let b = &self.built;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "## fsck -fn, cold cache: {} files, {} symlinks, {} directories, {} hard links, {:.1} GiB of data in a {} GiB image of {} inodes (kernel {})\n",
            b.files,
            b.symlinks,
            b.dirs,
            b.hard_links,
            b.data_bytes as f64 / f64::from(1u32 << 30),
            self.image_gib,
            b.inodes_count,
            self.kernel
        );
        let _ = writeln!(s, "| layout | checker | median s | runs s | peak RSS MiB | exit |");
        let _ = writeln!(s, "|---|---|---:|---|---:|---|");
        for l in &self.layouts {
            for m in &l.checkers {
                let runs: Vec<String> = m.seconds.iter().map(|x| format!("{x:.2}")).collect();
                let exits: Vec<String> = m
                    .exit_codes
                    .iter()
                    .map(|c| c.map_or("signal".into(), |c| c.to_string()))
                    .collect();
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.2} | {} | {} | {} |",
                    l.name,
                    m.checker.name(),
                    m.median_seconds,
                    runs.join(" "),
                    m.peak_rss_kib
                        .map_or("–".into(), |k| format!("{:.0}", k as f64 / 1024.0)),
                    exits.join(" ")
                );
            }
        }
        self.ratios(&mut s);
        s
    }

    fn ratios(&self, s: &mut String) {
        let _ = writeln!(s);
        for l in &self.layouts {
            for c in [Checker::Ext4kit, Checker::Ext4kitSerial] {
                if let (Some(k), Some(e)) = (l.median(c), l.median(Checker::E2fsck)) {
                    let _ = writeln!(s, "- {}: e2fsck ÷ {} = {:.2}", l.name, c.name(), e / k);
                }
            }
            if let (Some(par), Some(ser)) = (l.median(Checker::Ext4kit), l.median(Checker::Ext4kitSerial)) {
                let _ = writeln!(s, "- {}: ext4kit-serial ÷ ext4kit = {:.2}", l.name, ser / par);
            }
        }
        if let [with, without] = &self.layouts[..] {
            for c in Checker::ALL {
                if let (Some(a), Some(b)) = (with.median(c), without.median(c)) {
                    let _ = writeln!(
                        s,
                        "- {}: flags cleared ÷ flags kept = {:.2} ({} groups cleared)",
                        c.name(),
                        b / a,
                        self.groups_cleared.unwrap_or(0)
                    );
                }
            }
        }
    }
}
