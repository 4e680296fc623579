//! What a `hugedir` run found, per target: phase rates, create-cost
//! flatness, peak RSS, the directory's size and htree depth full and
//! emptied, and whether e2fsck found the image clean. Markdown for the
//! terminal and `docs/RESULTS.md`, JSON for tools.

use std::fmt::Write as _;

use anyhow::Result;

use super::{Config, Kind};

/// One timed phase.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PhaseRate {
    /// `create`, `lookup`, `readdir`, `delete`, `readdir_empty`.
    pub name: &'static str,
    /// Operations (names for a listing).
    pub ops: u64,
    /// Wall seconds.
    pub seconds: f64,
}

impl PhaseRate {
    /// Operations per second.
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// One target's run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TargetRun {
    /// Which front end.
    pub target: Kind,
    /// Names created.
    pub entries: u64,
    /// Block size of the image.
    pub block_size: u32,
    /// The phases in order.
    pub phases: Vec<PhaseRate>,
    /// Mean µs per create over the first 5 % of the creates.
    pub create_first_5pct_us: f64,
    /// Mean µs per create over the last 5 %.
    pub create_last_5pct_us: f64,
    /// Mean µs per create over each successive 5 % of the creates.
    pub create_us_by_twentieth: Vec<f64>,
    /// RSS (KiB) of the serving process after the first 5 % of the creates.
    pub rss_first_5pct_kib: Option<u64>,
    /// RSS (KiB) of the serving process after all creates.
    pub rss_after_create_kib: Option<u64>,
    /// Peak RSS (KiB) of the serving process over the run.
    pub peak_rss_kib: Option<u64>,
    /// htree index levels of the full directory.
    pub index_levels: Option<u8>,
    /// Bytes of the full directory.
    pub dir_bytes: u64,
    /// Bytes of the directory once every name was deleted.
    pub dir_bytes_after_delete: u64,
    /// `e2fsck -fn` found the image clean.
    pub fsck_clean: bool,
    /// Where an image e2fsck did not find clean was kept.
    pub kept_image: Option<String>,
    /// Why the run stopped, when it did.
    pub error: Option<String>,
}

impl TargetRun {
    pub(super) fn new(target: Kind, entries: u64, block_size: u32) -> Self {
        Self {
            target,
            entries,
            block_size,
            phases: Vec::new(),
            create_first_5pct_us: 0.0,
            create_last_5pct_us: 0.0,
            create_us_by_twentieth: Vec::new(),
            rss_first_5pct_kib: None,
            rss_after_create_kib: None,
            peak_rss_kib: None,
            index_levels: None,
            dir_bytes: 0,
            dir_bytes_after_delete: 0,
            fsck_clean: false,
            kept_image: None,
            error: None,
        }
    }

    pub(super) fn record(&mut self, name: &'static str, ops: u64, seconds: f64) {
        self.phases.push(PhaseRate { name, ops, seconds });
    }

    /// Runs `f` as phase `name` of `ops` operations.
    pub(super) fn phase<T>(&mut self, name: &'static str, ops: u64, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let started = std::time::Instant::now();
        let v = f()?;
        self.record(name, ops, started.elapsed().as_secs_f64());
        Ok(v)
    }

    fn get(&self, name: &str) -> Option<&PhaseRate> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// Last 5 % over first 5 % of the time per create.
    pub fn flatness(&self) -> Option<f64> {
        (self.create_first_5pct_us > 0.0).then(|| self.create_last_5pct_us / self.create_first_5pct_us)
    }
}

/// A whole run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HugedirReport {
    /// Block size of the images.
    pub block_size: u32,
    /// Every entry was `lstat`ed while listing.
    pub stat: bool,
    /// Random lookups asked for (0: one per entry).
    pub lookups: u64,
    /// The machine's kernel.
    pub kernel: String,
    /// The library target's metadata cache in MiB, when not the default.
    pub library_cache_mib: Option<usize>,
    /// The targets in the order they ran.
    pub runs: Vec<TargetRun>,
}

impl HugedirReport {
    pub(super) fn new(cfg: &Config, runs: Vec<TargetRun>) -> Self {
        Self {
            block_size: cfg.block_size,
            stat: cfg.stat,
            lookups: cfg.lookups,
            kernel: crate::system::kernel_release(),
            library_cache_mib: cfg.cache_bytes.map(|b| b >> 20),
            runs,
        }
    }

    /// True when a target failed or left an image e2fsck does not find clean.
    pub fn failed(&self) -> bool {
        self.runs.iter().any(|r| !r.fsck_clean || r.error.is_some())
    }

    /// The tables.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let listing = if self.stat { "readdir+stat" } else { "readdir" };
        let _ = writeln!(
            s,
            "## hugedir: one directory, {} KiB blocks, large_dir{} (kernel {})\n",
            self.block_size / 1024,
            self.library_cache_mib
                .map_or(String::new(), |m| format!(", library cache {m} MiB")),
            self.kernel
        );
        let _ = writeln!(
            s,
            "| target | entries | create/s | lookup/s | {listing} entries/s | delete/s | µs/create first 5 % | last 5 % | last/first | peak RSS MiB | index levels | dir MiB | dir after delete KiB | readdir emptied ms | e2fsck |"
        );
        let _ = writeln!(
            s,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        );
        for r in &self.runs {
            self.row(&mut s, r);
        }
        let _ = writeln!(
            s,
            "\n| target | RSS after first 5 % MiB | RSS after create MiB | µs per create, each successive 5 % of the creates |"
        );
        let _ = writeln!(s, "|---|---:|---:|---|");
        for r in &self.runs {
            let mib = |k: Option<u64>| k.map_or("–".into(), |k| format!("{:.0}", k as f64 / 1024.0));
            let curve: Vec<String> = r.create_us_by_twentieth.iter().map(|u| format!("{u:.1}")).collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                r.target.name(),
                mib(r.rss_first_5pct_kib),
                mib(r.rss_after_create_kib),
                curve.join(" ")
            );
        }
        s
    }

    fn row(&self, s: &mut String, r: &TargetRun) {
        let rate = |name| r.get(name).map_or("–".into(), |p| format!("{:.0}", p.rate()));
        let mib = |k: Option<u64>| k.map_or("–".into(), |k| format!("{:.0}", k as f64 / 1024.0));
        let empty_ms = r
            .get("readdir_empty")
            .map_or("–".into(), |p| format!("{:.2}", p.seconds * 1e3));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} | {:.1} | {} | {} | {} |",
            r.target.name(),
            r.entries,
            rate("create"),
            rate("lookup"),
            rate("readdir"),
            rate("delete"),
            r.create_first_5pct_us,
            r.create_last_5pct_us,
            r.flatness().map_or("–".into(), |f| format!("{f:.2}")),
            mib(r.peak_rss_kib),
            r.index_levels.map_or("linear".into(), |l| l.to_string()),
            r.dir_bytes as f64 / (1 << 20) as f64,
            r.dir_bytes_after_delete / 1024,
            empty_ms,
            match (&r.error, r.fsck_clean) {
                (Some(e), _) => format!("FAILED: {e}"),
                (None, true) => "clean".into(),
                (None, false) => "NOT clean".into(),
            },
        );
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
