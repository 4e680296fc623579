//! What a `create-scale` run measured, as Markdown and JSON. Modeled
//! figures (image targets) are kept apart from wall-clock ones, so a
//! determinism check compares only the former.

use std::fmt::Write as _;

use serde::Serialize;

use crate::FsckOutcome;
pub use crate::modeled::PhaseStats;

/// One batch of creates and the batch of opens with the same index.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Batch {
    /// 1-based.
    pub batch: usize,
    /// Entries in the directory after this batch of creates.
    pub entries: usize,
    /// Files in this batch (the last may be short).
    pub files: usize,
    /// Modeled µs per create, the batch's closing sync included (image
    /// targets; `None` on a directory).
    pub create_us: Option<f64>,
    /// Modeled µs per open (lookup + open + release).
    pub open_us: Option<f64>,
    /// Wall-clock µs per create.
    pub create_wall_us: f64,
    /// Wall-clock µs per open.
    pub open_wall_us: f64,
    /// Requests the disk model served during the creates (reads + writes
    /// + flushes).
    pub create_requests: Option<u64>,
    /// Requests the disk model served during the opens.
    pub open_requests: Option<u64>,
}

/// A whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Always `create-scale`.
    pub workload: &'static str,
    /// The target as given.
    pub target: String,
    /// `image`, `directory` or `kernel`.
    pub target_kind: &'static str,
    /// Files created.
    pub n: usize,
    /// Files per batch.
    pub batch_size: usize,
    /// Whether the image or the kernel file system made for the run has
    /// `dir_index` (`None` on a directory).
    pub dir_index: Option<bool>,
    /// Whether the creates skipped the existence lookup
    /// (`Filesystem::create_new`, seed 000's S_CR736 mode).
    pub no_lookup: bool,
    /// Whether the image (or the kernel target's loop image) was made by
    /// this run.
    pub image_created: bool,
    /// Disk profile (images).
    pub disk: Option<String>,
    /// Page cache bytes (images).
    pub page_cache_bytes: Option<u64>,
    /// Seed of the open order.
    pub seed: u64,
    /// Whether the opens started cold: always on an image; on a
    /// directory only when the kernel's caches could be dropped (root).
    pub opens_cold: bool,
    /// Why the opens were warm, or a flag did not apply, if so.
    pub note: Option<String>,
    /// Per batch.
    pub batches: Vec<Batch>,
    /// Mean µs per create over the last 5 % of the files over that over
    /// the first 5 % (modeled on images, wall on directories); issue 14
    /// wants create cost flat: at most 1.3.
    pub create_last_first_ratio: Option<f64>,
    /// The same for opens.
    pub open_last_first_ratio: Option<f64>,
    /// Device statistics of the create phase (images).
    pub create_phase: Option<PhaseStats>,
    /// Device statistics of the open phase (images).
    pub open_phase: Option<PhaseStats>,
    /// Wall ns one timing sample pair costs on the target: the harness's
    /// share of each batch's wall figure.
    pub harness_ns_per_sample: f64,
    /// Wall seconds of the whole run, setup and e2fsck included.
    pub wall_seconds: f64,
    /// `e2fsck -fn` of the image at the end.
    pub fsck: Option<FsckOutcome>,
}

/// The fraction of the files each end of [`last_first_ratio`] averages.
const END_FRACTION: f64 = 0.05;

/// Mean of `value` over the batches holding the last 5 % of the files
/// over its mean over those holding the first 5 % (at least one batch
/// each), weighted by files per batch.
pub fn last_first_ratio(batches: &[Batch], value: impl Fn(&Batch) -> Option<f64>) -> Option<f64> {
    let total: usize = batches.iter().map(|b| b.files).sum();
    let want = ((total as f64 * END_FRACTION).ceil() as usize).max(1);
    let mean = |it: &mut dyn Iterator<Item = &Batch>| -> Option<f64> {
        let (mut files, mut sum) = (0usize, 0.0);
        for b in it {
            if files >= want {
                break;
            }
            sum += value(b)? * b.files as f64;
            files += b.files;
        }
        (files > 0).then(|| sum / files as f64)
    };
    let first = mean(&mut batches.iter())?;
    let last = mean(&mut batches.iter().rev())?;
    (first > 0.0).then(|| last / first)
}

impl Report {
    /// Fills the two ratios from the batches: modeled figures when there
    /// are any, else wall time.
    pub fn compute_ratios(&mut self) {
        let modeled = self.batches.iter().all(|b| b.create_us.is_some());
        self.create_last_first_ratio = if modeled {
            last_first_ratio(&self.batches, |b| b.create_us)
        } else {
            last_first_ratio(&self.batches, |b| Some(b.create_wall_us))
        };
        self.open_last_first_ratio = if modeled {
            last_first_ratio(&self.batches, |b| b.open_us)
        } else {
            last_first_ratio(&self.batches, |b| Some(b.open_wall_us))
        };
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Whether the run must fail: an image e2fsck did not find clean.
    pub fn failed(&self) -> bool {
        self.fsck.as_ref().is_some_and(|f| !f.clean)
    }

    /// A heading, the setup, the per-batch table and the ratios.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let modeled = self.target_kind == "image";
        let _ = writeln!(s, "## create-scale: {} ({})\n", self.target, self.target_kind);
        if modeled {
            let _ = writeln!(
                s,
                "{} files in one new directory{}, batches of {}; disk `{}`, page cache {} MiB, dir_index {}; \
                 µs are modeled (each create batch ends with a sync) and charge the disk only: the engine's \
                 CPU (a linear directory's scans) shows in the wall columns; opens after dropping every cache, \
                 in a random order (seed {:#x}).\n",
                self.n,
                if self.no_lookup {
                    " by create_new (no lookup)"
                } else {
                    ""
                },
                self.batch_size,
                self.disk.as_deref().unwrap_or("?"),
                self.page_cache_bytes.unwrap_or(0) >> 20,
                if self.dir_index == Some(true) { "on" } else { "off" },
                self.seed
            );
        } else {
            let index = match self.dir_index {
                Some(true) => ", dir_index on",
                Some(false) => ", dir_index off",
                None => "",
            };
            let _ = writeln!(
                s,
                "{} files in one new directory{index}, batches of {} (each ending with a sync); µs are wall time; \
                 opens {} in a random order (seed {:#x}).\n",
                self.n,
                self.batch_size,
                if self.opens_cold {
                    "after dropping the kernel's caches"
                } else {
                    "warm"
                },
                self.seed
            );
        }
        if let Some(note) = &self.note {
            let _ = writeln!(s, "Note: {note}\n");
        }
        s.push_str("| batch | entries so far | µs per create | µs per open | requests (create) | requests (open) | wall µs per create | wall µs per open |\n");
        s.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        let num = |v: Option<f64>| v.map_or_else(|| "—".into(), |v| format!("{v:.1}"));
        let cnt = |v: Option<u64>| v.map_or_else(|| "—".into(), |v| v.to_string());
        for b in &self.batches {
            let (c, o) = if modeled {
                (b.create_us, b.open_us)
            } else {
                (Some(b.create_wall_us), Some(b.open_wall_us))
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
                b.batch,
                b.entries,
                num(c),
                num(o),
                cnt(b.create_requests),
                cnt(b.open_requests),
                b.create_wall_us,
                b.open_wall_us
            );
        }
        let ratio = |r: Option<f64>| r.map_or_else(|| "—".into(), |r| format!("{r:.2}×"));
        let _ = writeln!(
            s,
            "\nLast 5 % over first 5 %: creates {} (issue 14: flat means at most 1.3×), opens {}.",
            ratio(self.create_last_first_ratio),
            ratio(self.open_last_first_ratio)
        );
        for (name, p) in [("creates", &self.create_phase), ("opens", &self.open_phase)] {
            if let Some(p) = p {
                let _ = writeln!(
                    s,
                    "Disk, {name}: {:.3} s modeled, {} reads ({} drive-cache hits), {} writes ({:.1} MiB), {} flushes, {} positionings; \
                     page cache {} hits, {} misses, {} evictions.",
                    p.modeled_ns as f64 / 1e9,
                    p.reads,
                    p.read_hits,
                    p.writes,
                    p.bytes_written as f64 / f64::from(1u32 << 20),
                    p.flushes,
                    p.positionings,
                    p.cache_hits,
                    p.cache_misses,
                    p.cache_evictions
                );
            }
        }
        if let Some(f) = &self.fsck {
            let _ = writeln!(s, "e2fsck -fn: {}.", if f.clean { "clean" } else { "NOT clean" });
        }
        let _ = writeln!(
            s,
            "Wall time of the run: {:.1} s; the harness costs {:.0} ns of wall time per batch.",
            self.wall_seconds, self.harness_ns_per_sample
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(files: usize, us: f64) -> Batch {
        Batch {
            files,
            create_us: Some(us),
            ..Batch::default()
        }
    }

    #[test]
    fn the_ratio_averages_the_batches_holding_each_five_percent() {
        // 20 batches of 5 %: the first and last batch alone.
        let b: Vec<Batch> = (0..20).map(|k| batch(10, 100.0 + k as f64 * 10.0)).collect();
        assert_eq!(last_first_ratio(&b, |b| b.create_us), Some(290.0 / 100.0));
        // 40 batches of 2.5 %: two at each end.
        let b: Vec<Batch> = (0..40).map(|k| batch(10, 100.0 + k as f64)).collect();
        assert_eq!(last_first_ratio(&b, |b| b.create_us), Some(138.5 / 100.5));
    }

    #[test]
    fn a_missing_or_zero_first_figure_gives_no_ratio() {
        assert_eq!(last_first_ratio(&[batch(1, 0.0), batch(1, 5.0)], |b| b.create_us), None);
        assert_eq!(last_first_ratio(&[], |b| b.create_us), None);
    }
}
