//! The outcome of a check: findings, notes, and the figures e2fsck prints at
//! the end (files and blocks in use).

use serde::Serialize;

use crate::problem::{Finding, Severity};

/// At most this many findings are kept; the rest are only counted, so a
/// badly damaged image cannot make the report grow without bound.
pub const MAX_FINDINGS: usize = 20_000;

/// Everything a check found.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Report {
    /// Findings, in the order the passes met them.
    pub findings: Vec<Finding>,
    /// Findings beyond [`MAX_FINDINGS`], counted but not kept.
    pub dropped: u64,
    /// Things said along the way that are not problems (journal state,
    /// skipped recovery, "clean" shortcut).
    pub notes: Vec<String>,
    /// Inodes in use / total.
    pub inodes_used: u64,
    /// Inodes in the file system.
    pub inodes_total: u64,
    /// Blocks in use (as counted by the check) / total.
    pub blocks_used: u64,
    /// Blocks in the file system.
    pub blocks_total: u64,
    /// Passes that ran, in order ("0", "1", "1B", "2"…).
    pub passes: Vec<String>,
    /// The check stopped after the superblock: it says the image is clean.
    pub skipped_clean: bool,
    /// Preen met a problem it may not repair and stopped repairing.
    pub halted: bool,
}

impl Report {
    /// Records a finding (or counts it past the cap).
    pub fn add(&mut self, f: Finding) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(f);
        } else {
            self.dropped += 1;
        }
    }
    /// Records a note.
    pub fn note(&mut self, s: impl Into<String>) {
        self.notes.push(s.into());
    }
    /// Findings repaired.
    pub fn fixed(&self) -> u64 {
        self.findings.iter().filter(|f| f.fixed).count() as u64
    }
    /// Errors found and not repaired (warnings excluded), including dropped ones.
    pub fn unfixed_errors(&self) -> u64 {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error && !f.fixed)
            .count() as u64
            + self.dropped
    }
    /// Errors found (warnings excluded), including dropped ones.
    pub fn errors(&self) -> u64 {
        self.findings.iter().filter(|f| f.severity == Severity::Error).count() as u64 + self.dropped
    }
}
