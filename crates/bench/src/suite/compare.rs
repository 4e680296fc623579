//! `--compare`: one workload over several variants (option sets or
//! targets) in one run. Rounds alternate the variants, so a slow stretch
//! of the machine does not land on one of them; each phase's time is the
//! median of its rounds, and every variant is set against the first.
//!
//! A variant is the command line's own settings changed by a list of
//! `key=value` pairs: `type=ext3`, `features=^dir_index`, `disk=ssd`, `cache=8M`,
//! `alloc=ext3`, `inode_alloc=flexbg`, `mb_flex_aware=1`, `flex=64` or
//! `flex=auto` (mkfs `-G`), `flex_meta=middle` (mkfs `-E`), `target=PATH`
//! or `kernel=ext3`. An image target gets a new image per
//! variant and round (`PATH.v<k>.r<r>`), removed once checked, so every
//! variant starts from the same fresh layout.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_engine::AllocOptions;
use serde::Serialize;

use super::report::SuiteReport;
use super::target::{TargetOptions, TargetSpec};
use super::{Params, Progress, Workload};
use crate::report::fmt_num;

/// One option set or target.
#[derive(Debug, Clone)]
pub struct Variant {
    /// As given on the command line (`base` for the first).
    pub label: String,
    /// Where it runs.
    pub spec: TargetSpec,
    /// How its target is opened or made.
    pub opts: TargetOptions,
}

impl Variant {
    /// The base settings changed by `pairs` (`key=value,key=value`).
    ///
    /// A key given twice is refused: one `--compare` is one variant, so
    /// `alloc=mballoc,alloc=ext3` would silently be `alloc=ext3` alone.
    /// `alloc=` and `inode_alloc=` are refused on a directory or kernel
    /// target, which allocates as its own file system does.
    pub fn derive(base: &Variant, pairs: &str) -> Result<Variant> {
        let mut v = Variant {
            label: pairs.to_string(),
            ..base.clone()
        };
        let mut seen: Vec<&str> = Vec::new();
        for pair in pairs.split(',').filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                bail!("--compare {pairs}: {pair:?} is not key=value");
            };
            if seen.contains(&key) {
                bail!(
                    "--compare {pairs}: {key} is given twice; each --compare is one variant (repeat --compare for another)"
                );
            }
            seen.push(key);
            v.set(key, value).with_context(|| format!("--compare {pair}"))?;
        }
        let what = if seen.iter().any(|k| ALLOC_KEYS.contains(k)) {
            Some("alloc= or inode_alloc=")
        } else {
            (v.opts.alloc != AllocOptions::default()).then_some("the --alloc or --inode-alloc this variant keeps")
        };
        if let Some(what) = what {
            v.spec.engine_only(what).with_context(|| format!("--compare {pairs}"))?;
        }
        Ok(v)
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let o = &mut self.opts;
        match key {
            "type" => o.fs_type = Some(value.to_string()),
            "features" => o.features = value.split('+').map(str::to_string).collect(),
            "disk" => o.disk = value.parse()?,
            "cache" => o.cache_bytes = ext4kit_engine::mkfs::parse_size(value)?,
            "alloc" => o.alloc.blocks = value.parse().map_err(anyhow::Error::msg)?,
            "inode_alloc" => o.alloc.inodes = value.parse().map_err(anyhow::Error::msg)?,
            "mb_flex_aware" => o.alloc.flex_aware = parse_switch(value)?,
            "delalloc" => o.alloc.delalloc = parse_switch(value)?,
            "readdir" => o.readdir.order = value.parse().map_err(anyhow::Error::msg)?,
            "readdir_snapshot" => o.readdir.snapshot_limit = value.parse()?,
            "flex" => o.flex = Some(value.to_string()),
            "flex_meta" => o.extended.push(format!("flex_meta={value}")),
            "target" => self.spec = TargetSpec::from_path(&PathBuf::from(value))?,
            "kernel" => self.spec = TargetSpec::kernel(value)?,
            _ => bail!(
                "the keys are type, features, disk, cache, alloc, inode_alloc, mb_flex_aware, delalloc, readdir, readdir_snapshot, flex, flex_meta, target and kernel"
            ),
        }
        Ok(())
    }
}

/// The keys that choose the engine's allocators.
const ALLOC_KEYS: [&str; 4] = ["alloc", "inode_alloc", "mb_flex_aware", "delalloc"];

/// `0` or `1`, as the mount option.
fn parse_switch(value: &str) -> Result<bool> {
    match value {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => bail!("{value:?}: expected 0 or 1"),
    }
}

/// Every variant's rounds.
#[derive(Debug, Serialize)]
pub struct CompareReport {
    /// The workload's name.
    pub workload: String,
    /// Runs of each variant.
    pub rounds: usize,
    /// Per variant, its label and the reports of its rounds.
    pub variants: Vec<(String, Vec<SuiteReport>)>,
}

/// Runs `w` on each variant `rounds` times, alternating.
pub fn compare(
    w: &Workload,
    variants: &[Variant],
    params: &Params,
    rounds: usize,
    progress: &mut Progress,
) -> Result<CompareReport> {
    let mut runs: Vec<Vec<SuiteReport>> = vec![Vec::new(); variants.len()];
    for r in 1..=rounds {
        for (k, v) in variants.iter().enumerate() {
            let (spec, fresh) = match &v.spec {
                TargetSpec::Image(p) => {
                    let mut name = p.as_os_str().to_owned();
                    name.push(format!(".v{k}.r{r}"));
                    let path = PathBuf::from(name);
                    if path.exists() {
                        bail!("{} exists; --compare makes a new image there", path.display());
                    }
                    (TargetSpec::Image(path.clone()), Some(path))
                }
                other => (other.clone(), None),
            };
            let report = super::run(w, &spec, &v.opts, params, progress);
            if let Some(path) = &fresh
                && report.as_ref().is_ok_and(|r| !r.failed())
            {
                let _ = std::fs::remove_file(path);
            }
            let mut report = report.with_context(|| format!("variant {} round {r}", v.label))?;
            report.target = format!("{} ({})", v.label, report.target);
            runs[k].push(report);
        }
    }
    Ok(CompareReport {
        workload: w.name.to_string(),
        rounds,
        variants: variants.iter().map(|v| v.label.clone()).zip(runs).collect(),
    })
}

/// The median of `v` (sorted in place); 0 when empty.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

impl CompareReport {
    /// A variant's median time of phase `name`, in ms (modeled on images).
    pub fn median_ms(&self, variant: usize, name: &str) -> Option<f64> {
        let mut t: Vec<f64> = self.variants[variant]
            .1
            .iter()
            .filter_map(|r| r.outcome.phases.iter().find(|p| p.name == name))
            .map(|p| p.span.ns() as f64 / 1e6)
            .collect();
        (!t.is_empty()).then(|| median(&mut t))
    }

    /// Any round left an image e2fsck does not find clean.
    pub fn failed(&self) -> bool {
        self.variants.iter().flat_map(|v| &v.1).any(SuiteReport::failed)
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Which allocators each variant's engine ran with, as a table row:
    /// the labels name only what changed, `base` nothing. Empty when no
    /// variant ran on an image.
    fn allocator_row(&self) -> String {
        let cells: Vec<Option<String>> = self
            .variants
            .iter()
            .map(|(_, rounds)| rounds.first().and_then(SuiteReport::allocators))
            .collect();
        if cells.iter().all(Option::is_none) {
            return String::new();
        }
        let cells: Vec<String> = cells.into_iter().map(|c| c.unwrap_or_else(|| "–".into())).collect();
        format!("| allocators | {} |\n", cells.join(" | "))
    }

    /// One row per phase: each variant's median and its ratio to the first.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "## {}: {} variants, {} rounds, medians\n",
            self.workload,
            self.variants.len(),
            self.rounds
        );
        let modeled = self.variants.iter().flat_map(|v| &v.1).all(|r| r.modeled);
        let clock = if modeled { "modeled" } else { "wall" };
        let _ = write!(s, "| phase ({clock} ms) |");
        for (label, _) in &self.variants {
            let _ = write!(s, " {label} |");
        }
        let _ = writeln!(s, "\n|---|{}", "---:|".repeat(self.variants.len()));
        let phases: Vec<String> = self.variants[0].1.first().map_or(Vec::new(), |r| {
            r.outcome.phases.iter().map(|p| p.name.clone()).collect()
        });
        for name in &phases {
            let base = self.median_ms(0, name);
            let _ = write!(s, "| {name} |");
            for k in 0..self.variants.len() {
                match (self.median_ms(k, name), base) {
                    (Some(t), Some(b)) if k > 0 && b > 0.0 => {
                        let _ = write!(s, " {} ({}×) |", fmt_num(t), fmt_num(t / b));
                    }
                    (Some(t), _) => {
                        let _ = write!(s, " {} |", fmt_num(t));
                    }
                    (None, _) => s.push_str(" – |"),
                }
            }
            s.push('\n');
        }
        let keys: Vec<String> = self.variants[0].1.first().map_or(Vec::new(), |r| {
            r.outcome
                .values
                .iter()
                .filter(|(_, v)| v.is_number())
                .map(|(k, _)| k.clone())
                .collect()
        });
        for key in &keys {
            let _ = write!(s, "| {key} (value) |");
            for (_, rounds) in &self.variants {
                let mut v: Vec<f64> = rounds
                    .iter()
                    .filter_map(|r| r.outcome.values.get(key)?.as_f64())
                    .collect();
                let _ = write!(
                    s,
                    " {} |",
                    if v.is_empty() {
                        "–".into()
                    } else {
                        fmt_num(median(&mut v))
                    }
                );
            }
            s.push('\n');
        }
        s.push_str(&self.allocator_row());
        for (label, rounds) in &self.variants {
            for (r, rep) in rounds.iter().enumerate() {
                if let Some(f) = rep.fsck.as_ref().filter(|f| !f.clean) {
                    let _ = writeln!(
                        s,
                        "\n{label} round {}: e2fsck -fn NOT CLEAN\n```\n{}\n```",
                        r + 1,
                        f.output.trim()
                    );
                }
            }
        }
        s
    }
}
