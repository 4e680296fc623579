//! `bench mount --profile` (issue 22): where a FUSE mount's time goes, from
//! the kernel's own tracepoints `fuse/fuse_request_send` and
//! `fuse/fuse_request_end` — requests per operation by opcode, and the
//! time from queuing a request to its end (the server's work plus the
//! round trip's wake-ups). [`parse`] reads trace lines and [`profile`]
//! pairs and sums them (both pure); [`capture`] runs a workload with the
//! events on.

pub mod capture;
pub mod parse;
pub mod profile;

use std::fmt::Write as _;

pub use capture::{Capture, Tracer};
pub use profile::{PhaseWindow, Profile};

use crate::report::fmt_num;
use crate::suite::Phase;

/// The profile of a capture, with requests per operation for each of the
/// workload's timed `phases` that is not nested in another
/// ([`profile::outermost`]).
pub fn profile_of(cap: &Capture, phases: &[Phase]) -> Profile {
    let windows: Vec<PhaseWindow> = phases
        .iter()
        .filter_map(|p| {
            let (from, to) = p.span.window?;
            Some(PhaseWindow {
                name: p.name.clone(),
                ops: p.ops,
                from_ns: capture::on_trace_clock(cap.clock, from),
                to_ns: capture::on_trace_clock(cap.clock, to),
            })
        })
        .collect();
    cap.pairer.summarize(&profile::outermost(windows), cap.lost_events)
}

impl Profile {
    /// Markdown: the opcode table, then requests per operation by phase.
    pub fn to_markdown(&self, title: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "\n#### {title}: {} FUSE requests{}\n", self.requests, self.caveats());
        let _ = writeln!(
            s,
            "| opcode | count | errors | median µs | p99 µs | total ms |\n|---|---:|---:|---:|---:|---:|"
        );
        for r in &self.opcodes {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                r.opcode,
                r.count,
                r.errors,
                fmt_num(r.median_us),
                fmt_num(r.p99_us),
                fmt_num(r.total_ms)
            );
        }
        if !self.phases.is_empty() {
            let _ = writeln!(
                s,
                "\n| phase | ops | requests | per op | by opcode, per op |\n|---|---:|---:|---:|---|"
            );
        }
        for p in &self.phases {
            let split: Vec<String> = p
                .by_opcode
                .iter()
                .map(|(op, n)| format!("{op} {}", fmt_num(*n)))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                p.name,
                p.ops,
                p.requests,
                fmt_num(p.per_op),
                split.join(", ")
            );
        }
        s
    }

    fn caveats(&self) -> String {
        let mut notes = Vec::new();
        if self.lost_events > 0 {
            notes.push(format!(
                "**{} events lost (buffer full): counts are short**",
                self.lost_events
            ));
        }
        if self.unanswered > 0 {
            notes.push(format!("{} without a reply", self.unanswered));
        }
        if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join("; "))
        }
    }
}
