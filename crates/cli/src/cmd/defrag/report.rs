//! What `defrag` prints, offline or through a mount: a line per file
//! that moved (or could not), then the totals; or all of it as JSON.

use std::time::{Duration, Instant};

use anyhow::Result;
use ext4kit_engine::{DefragOutcome, DefragSkip};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

/// A bar over the files, shown once the work has taken a second.
pub(super) struct Progress {
    started: Instant,
    total: u64,
    bar: Option<ProgressBar>,
}

impl Progress {
    pub(super) fn new(total: u64) -> Self {
        Self {
            started: Instant::now(),
            total,
            bar: None,
        }
    }

    pub(super) fn show(&mut self, done: u64, what: &str) {
        if self.bar.is_none() && self.started.elapsed() > Duration::from_secs(1) {
            let b = ProgressBar::new(self.total);
            if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} files {msg} {elapsed}") {
                b.set_style(style);
            }
            self.bar = Some(b);
        }
        if let Some(b) = &self.bar {
            b.set_position(done);
            b.set_message(what.to_string());
        }
    }

    pub(super) fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// Prints the report on `done` as text or, with `json`, as JSON.
pub(super) fn print(done: &[(&str, DefragOutcome)], dry: bool, json: bool) -> Result<()> {
    let summary = Summary::of(done);
    if json {
        outln!("{}", serde_json::to_string_pretty(&to_json(done, &summary, dry))?);
        Ok(())
    } else {
        print_text(done, &summary, dry)
    }
}

/// Totals over the files looked at.
#[derive(Debug, Default)]
struct Summary {
    files: u64,
    moved_files: u64,
    blocks_moved: u64,
    extents_before: u64,
    extents_after: u64,
    /// Mean `frag` score of the files holding blocks, before and after.
    score_before: f64,
    score_after: f64,
}

impl Summary {
    fn of(done: &[(&str, DefragOutcome)]) -> Self {
        let mut s = Self {
            files: done.len() as u64,
            ..Self::default()
        };
        let with_blocks: Vec<&DefragOutcome> = done.iter().map(|d| &d.1).filter(|o| o.before.blocks > 0).collect();
        for (_, o) in done {
            s.moved_files += u64::from(o.skipped.is_none());
            s.blocks_moved += o.blocks_moved;
            s.extents_before += o.before.extents;
            s.extents_after += o.after.extents;
        }
        let n = with_blocks.len().max(1) as f64;
        s.score_before = with_blocks.iter().map(|o| o.before.score as f64).sum::<f64>() / n;
        s.score_after = with_blocks.iter().map(|o| o.after.score as f64).sum::<f64>() / n;
        s
    }
}

/// Skips worth a line even when every file was asked for: the file could
/// use a defrag but did not get one.
fn worth_reporting(s: DefragSkip) -> bool {
    !matches!(s, DefragSkip::AlreadyBest | DefragSkip::NotRegular)
}

fn print_text(done: &[(&str, DefragOutcome)], s: &Summary, dry: bool) -> Result<()> {
    let verb = if dry { "would move" } else { "moved" };
    for (path, o) in done {
        match o.skipped {
            None => outln!(
                "{path}: {} → {} extents, {} blocks {verb} in {} transactions",
                o.before.extents,
                o.after.extents,
                o.blocks_moved,
                o.transactions
            ),
            Some(k) if worth_reporting(k) => outln!("{path}: skipped: {}", k.reason()),
            Some(_) => {}
        }
    }
    let what = if dry { "to defragment" } else { "defragmented" };
    outln!(
        "{} looked at, {} {what}; extents {} → {}; {} blocks {verb}; fragmentation score {:.1} → {:.1}",
        crate::cmd::util::count(s.files, "file", "files"),
        s.moved_files,
        s.extents_before,
        s.extents_after,
        s.blocks_moved,
        s.score_before,
        s.score_after
    );
    Ok(())
}

fn to_json(done: &[(&str, DefragOutcome)], s: &Summary, dry: bool) -> serde_json::Value {
    let files: Vec<_> = done
        .iter()
        .map(|(p, o)| {
            json!({
                "path": p,
                "ino": o.ino,
                "blocks": o.before.blocks,
                "extents_before": o.before.extents,
                "extents_after": o.after.extents,
                "fewest": o.fewest,
                "score_before": o.before.score,
                "score_after": o.after.score,
                "blocks_moved": o.blocks_moved,
                "transactions": o.transactions,
                "skipped": o.skipped.map(DefragSkip::reason),
            })
        })
        .collect();
    json!({
        "dry_run": dry,
        "files": files,
        "summary": {
            "files": s.files,
            "defragmented": s.moved_files,
            "extents_before": s.extents_before,
            "extents_after": s.extents_after,
            "blocks_moved": s.blocks_moved,
            "score_before": s.score_before,
            "score_after": s.score_after,
        },
    })
}
