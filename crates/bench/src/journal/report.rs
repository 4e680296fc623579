//! The journal benchmark's results: every sample, medians per workload and
//! mode, the markdown table and JSON.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Config, Mode, Sizes, Step};
use crate::report::{FsckOutcome, fmt_num};

/// What the journal writer did during one timed workload
/// (`Filesystem::journal_stats` after minus before): deterministic for one
/// thread, scheduling-dependent with several.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Counts {
    /// Write-backs: `Filesystem::sync` calls and internal ones (the
    /// write-back limit).
    pub sync_calls: u64,
    /// Transactions committed to the log.
    pub commits: u64,
    /// Blocks logged (descriptor, revoke and commit blocks not counted).
    pub blocks_logged: u64,
    /// Revoke records written.
    pub revoke_records: u64,
    /// Times the log was checkpointed and emptied.
    pub checkpoints: u64,
}

impl Counts {
    /// Sync calls per commit: above 1 when commits batch.
    pub fn syncs_per_commit(&self) -> Option<f64> {
        (self.commits > 0).then(|| self.sync_calls as f64 / self.commits as f64)
    }

    /// Blocks logged per commit.
    pub fn blocks_per_commit(&self) -> Option<f64> {
        (self.commits > 0).then(|| self.blocks_logged as f64 / self.commits as f64)
    }
}

/// One timed run of one workload in one mode on its own image.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// The workload.
    pub step: Step,
    /// With or without a journal.
    pub mode: Mode,
    /// Which repeat (from 0).
    pub repeat: usize,
    /// Files created.
    pub files: usize,
    /// Wall time of the workload, final sync included.
    pub seconds: f64,
    /// The journal writer's counts (`None` without a journal).
    pub counts: Option<Counts>,
    /// `e2fsck -fn` after unmounting.
    pub fsck: FsckOutcome,
    /// Where the image was kept when e2fsck did not find it clean.
    pub kept_image: Option<PathBuf>,
}

impl Sample {
    /// One line for the progress log.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} {} #{}: {} files in {:.3} s",
            self.step.name(),
            self.mode.name(),
            self.repeat,
            self.files,
            self.seconds
        );
        if let Some(c) = &self.counts {
            let _ = write!(s, ", {} syncs, {} commits", c.sync_calls, c.commits);
        }
        if !self.fsck.clean {
            let _ = write!(s, ", e2fsck DIRTY, image kept at {:?}", self.kept_image);
        }
        s
    }
}

/// Medians of one workload in one mode over the repeats.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The workload.
    pub step: Step,
    /// With or without a journal.
    pub mode: Mode,
    /// Median wall time.
    pub seconds: f64,
    /// Files per second at the median time.
    pub files_per_s: f64,
    /// Median commits (journal only).
    pub commits: Option<f64>,
    /// Median sync calls per commit, and the least and most seen.
    pub syncs_per_commit: Option<(f64, f64, f64)>,
    /// Median blocks logged per commit.
    pub blocks_per_commit: Option<f64>,
    /// Most checkpoints in one repeat.
    pub checkpoints: Option<u64>,
    /// Every repeat's image was e2fsck-clean.
    pub clean: bool,
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct JournalReport {
    /// `--quick` sizes.
    pub quick: bool,
    /// The sizes used.
    pub sizes: Sizes,
    /// `uname -r`.
    pub kernel: String,
    /// CPUs available to this process.
    pub cpus: usize,
    /// The `mkfs.ext4` options of every image (`-O ^has_journal` added
    /// without a journal).
    pub mkfs_options: Vec<String>,
    /// Where the images were, and the file system holding them.
    pub dir: PathBuf,
    /// `fstype device` of the file system holding the images.
    pub host_fs: Option<String>,
    /// 1-minute load average at the start and at the end.
    pub load: (Option<f64>, Option<f64>),
    /// Every sample, in the order they ran.
    pub samples: Vec<Sample>,
    /// Medians per workload and mode.
    pub summaries: Vec<Summary>,
}

impl JournalReport {
    /// An empty report.
    pub(super) fn new(cfg: &Config, dir: &Path) -> Self {
        JournalReport {
            quick: cfg.quick,
            sizes: cfg.sizes,
            kernel: crate::system::kernel_release(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mkfs_options: crate::system::MKFS_OPTIONS.iter().map(|s| s.to_string()).collect(),
            dir: dir.to_path_buf(),
            host_fs: crate::system::mount_of(dir),
            load: (crate::system::load_average(), None),
            samples: Vec::new(),
            summaries: Vec::new(),
        }
    }

    /// Records the end load and computes the medians.
    pub(super) fn finish(&mut self) {
        self.load.1 = crate::system::load_average();
        self.summaries = Step::ALL
            .into_iter()
            .flat_map(|step| Mode::ALL.map(|mode| (step, mode)))
            .filter_map(|(step, mode)| self.summarize(step, mode))
            .collect();
    }

    fn summarize(&self, step: Step, mode: Mode) -> Option<Summary> {
        let runs: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.step == step && s.mode == mode)
            .collect();
        let seconds = median(runs.iter().map(|s| s.seconds))?;
        let counts: Vec<Counts> = runs.iter().filter_map(|s| s.counts).collect();
        let per_commit: Vec<f64> = counts.iter().filter_map(Counts::syncs_per_commit).collect();
        let spread = median(per_commit.iter().copied()).map(|m| {
            let lo = per_commit.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = per_commit.iter().copied().fold(0.0, f64::max);
            (m, lo, hi)
        });
        Some(Summary {
            step,
            mode,
            seconds,
            files_per_s: runs[0].files as f64 / seconds,
            commits: median(counts.iter().map(|c| c.commits as f64)),
            syncs_per_commit: spread,
            blocks_per_commit: median(counts.iter().filter_map(Counts::blocks_per_commit)),
            checkpoints: counts.iter().map(|c| c.checkpoints).max(),
            clean: runs.iter().all(|s| s.fsck.clean),
        })
    }

    /// The summary of `step` in `mode`.
    pub fn summary(&self, step: Step, mode: Mode) -> Option<&Summary> {
        self.summaries.iter().find(|s| s.step == step && s.mode == mode)
    }

    /// Median time with the journal over median time without.
    pub fn ratio(&self, step: Step) -> Option<f64> {
        let j = self.summary(step, Mode::Journal)?.seconds;
        let n = self.summary(step, Mode::NoJournal)?.seconds;
        (n > 0.0).then(|| j / n)
    }

    /// True when an image was not e2fsck-clean.
    pub fn failed(&self) -> bool {
        self.samples.iter().any(|s| !s.fsck.clean)
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report as markdown: a header line, one row per workload, and
    /// the two targets of the issue.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        self.header(&mut s);
        let _ = writeln!(
            s,
            "| workload | files | journal s | no journal s | journal/no journal | journal files/s | \
             no journal files/s | commits | sync calls/commit | blocks logged/commit | checkpoints | e2fsck |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for step in Step::ALL {
            self.row(&mut s, step);
        }
        self.targets(&mut s);
        s
    }

    fn header(&self, s: &mut String) {
        let load = |l: Option<f64>| l.map_or("?".into(), |v| format!("{v:.2}"));
        let _ = writeln!(
            s,
            "## ext4kit bench journal{}\n\nkernel {}, {} CPUs, load average {} at start, {} at end; \
             images `mkfs.ext4 {} [-O ^has_journal]`, {} MiB, in {} ({}); engine defaults \
             (data=ordered); medians of {}\n",
            if self.quick { " (quick)" } else { "" },
            self.kernel,
            self.cpus,
            load(self.load.0),
            load(self.load.1),
            self.mkfs_options.join(" "),
            self.sizes.image_bytes >> 20,
            self.dir.display(),
            self.host_fs.as_deref().unwrap_or("unknown file system"),
            self.sizes.repeats
        );
    }

    fn row(&self, s: &mut String, step: Step) {
        let (Some(j), Some(n)) = (self.summary(step, Mode::Journal), self.summary(step, Mode::NoJournal)) else {
            return;
        };
        let files = self.samples.iter().find(|x| x.step == step).map_or(0, |x| x.files);
        let opt = |v: Option<f64>| v.map_or("–".into(), fmt_num);
        let per_commit = match j.syncs_per_commit {
            Some((m, lo, hi)) if self.sizes.repeats > 1 && step == Step::Fsync4 => {
                format!("{} ({}–{})", fmt_num(m), fmt_num(lo), fmt_num(hi))
            }
            other => opt(other.map(|t| t.0)),
        };
        let fsck = if j.clean && n.clean { "clean" } else { "DIRTY" };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            step.name(),
            files,
            fmt_num(j.seconds),
            fmt_num(n.seconds),
            opt(self.ratio(step)),
            fmt_num(j.files_per_s),
            fmt_num(n.files_per_s),
            opt(j.commits),
            per_commit,
            opt(j.blocks_per_commit),
            j.checkpoints.map_or("–".into(), |c| c.to_string()),
            fsck
        );
    }

    /// The two targets, each with its verdict.
    fn targets(&self, s: &mut String) {
        if let Some(r) = self.ratio(Step::Create) {
            let _ = writeln!(
                s,
                "\n- create (no fsync): the journal costs {:+.1} % time (target ≤ +10 %): {}",
                (r - 1.0) * 100.0,
                if r <= 1.10 { "met" } else { "NOT met" }
            );
        }
        if let Some((m, _, _)) = self
            .summary(Step::Fsync4, Mode::Journal)
            .and_then(|j| j.syncs_per_commit)
        {
            let _ = writeln!(
                s,
                "- fsync4: {} sync calls per journal commit with {} writer threads (target > 1): {}",
                fmt_num(m),
                self.sizes.threads,
                if m > 1.0 { "met" } else { "NOT met" }
            );
        }
    }
}

/// The median of `values` (the mean of the middle two for an even count).
pub(crate) fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), Some(2.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0].into_iter()), Some(2.5));
        assert_eq!(median(std::iter::empty()), None);
    }

    #[test]
    fn per_commit_figures_need_a_commit() {
        let c = Counts {
            sync_calls: 6,
            commits: 4,
            blocks_logged: 20,
            ..Counts::default()
        };
        assert_eq!(c.syncs_per_commit(), Some(1.5));
        assert_eq!(c.blocks_per_commit(), Some(5.0));
        assert_eq!(Counts::default().syncs_per_commit(), None);
    }
}
