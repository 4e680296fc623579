//! Send and end events paired by request id into requests, and requests
//! summed up per opcode and per phase of a workload: the table
//! `bench mount --profile` prints.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::parse::{Event, opcode_name};

/// One request seen by the tracepoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The FUSE opcode.
    pub opcode: u32,
    /// When it was queued, in ns of the trace clock.
    pub send_ns: u64,
    /// From queued to ended, when its end was seen.
    pub latency_ns: Option<u64>,
    /// The reply's error, when its end was seen.
    pub error: Option<i32>,
}

/// Pairs the events of one connection as they arrive.
#[derive(Debug, Default)]
pub struct Pairer {
    conn: u32,
    requests: Vec<Request>,
    /// Index in `requests` of each request not yet ended, by id.
    open: HashMap<u64, usize>,
    /// Ends whose send came before the capture began.
    unpaired_ends: u64,
    /// Events of other connections (other FUSE mounts), ignored.
    foreign: u64,
}

impl Pairer {
    /// Keeps the events of connection `conn` only.
    pub fn new(conn: u32) -> Self {
        Self {
            conn,
            ..Self::default()
        }
    }

    /// Takes one event in trace order.
    pub fn push(&mut self, e: Event) {
        if e.conn() != self.conn {
            self.foreign += 1;
            return;
        }
        match e {
            Event::Send {
                unique, opcode, ts_ns, ..
            } => {
                self.open.insert(unique, self.requests.len());
                self.requests.push(Request {
                    opcode,
                    send_ns: ts_ns,
                    latency_ns: None,
                    error: None,
                });
            }
            Event::End {
                unique, error, ts_ns, ..
            } => match self.open.remove(&unique) {
                Some(i) => {
                    let r = &mut self.requests[i];
                    r.latency_ns = Some(ts_ns.saturating_sub(r.send_ns));
                    r.error = Some(error);
                }
                None => self.unpaired_ends += 1,
            },
        }
    }

    /// Every request, in the order sent.
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// Events of other connections that were skipped.
    pub fn foreign(&self) -> u64 {
        self.foreign
    }

    /// The summary, with `phases` (name, operations, send-time window in
    /// ns of the trace clock) giving requests per operation.
    pub fn summarize(&self, phases: &[PhaseWindow], lost_events: u64) -> Profile {
        Profile {
            requests: self.requests.len() as u64,
            unanswered: self.requests.iter().filter(|r| r.latency_ns.is_none()).count() as u64,
            unpaired_ends: self.unpaired_ends,
            lost_events,
            opcodes: opcode_rows(&self.requests),
            phases: phases.iter().map(|p| phase_row(&self.requests, p)).collect(),
        }
    }
}

/// A timed phase of the workload, placed on the trace clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseWindow {
    /// The phase's name in the suite's outcome.
    pub name: String,
    /// Its operations.
    pub ops: u64,
    /// From its first timed piece's start to its last one's end.
    pub from_ns: u64,
    /// See `from_ns`.
    pub to_ns: u64,
}

/// The windows not nested in a longer one. A phase summed from pieces
/// spread over another phase (PostMark's reads and appends, each piece a
/// part of one transaction) spans nearly all of it, so the requests in
/// its window are not its own; only the enclosing phase is counted (of
/// two equal windows, the one listed first).
pub fn outermost(windows: Vec<PhaseWindow>) -> Vec<PhaseWindow> {
    let len = |w: &PhaseWindow| w.to_ns.saturating_sub(w.from_ns);
    let nested = |i: usize, w: &PhaseWindow| {
        windows.iter().enumerate().any(|(j, o)| {
            let inside = o.from_ns <= w.from_ns && w.to_ns <= o.to_ns;
            inside && (len(o) > len(w) || (len(o) == len(w) && j < i))
        })
    };
    let keep: Vec<bool> = windows.iter().enumerate().map(|(i, w)| !nested(i, w)).collect();
    windows
        .into_iter()
        .zip(keep)
        .filter_map(|(w, k)| k.then_some(w))
        .collect()
}

/// Requests and server time of one workload on one target.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// Requests sent while the workload ran.
    pub requests: u64,
    /// Requests whose end was not seen (no reply expected, or still in
    /// flight when the capture stopped).
    pub unanswered: u64,
    /// Ends whose send came before the capture began.
    pub unpaired_ends: u64,
    /// Events the kernel dropped because the trace buffer was full; the
    /// counts are short by as many.
    pub lost_events: u64,
    /// Per opcode, most frequent first.
    pub opcodes: Vec<OpcodeRow>,
    /// Per timed phase: requests per operation.
    pub phases: Vec<PhaseRow>,
}

/// One opcode's requests.
#[derive(Debug, Clone, Serialize)]
pub struct OpcodeRow {
    /// Name without `FUSE_`.
    pub opcode: String,
    /// Requests sent.
    pub count: u64,
    /// Replies with an error.
    pub errors: u64,
    /// Median µs from send to end.
    pub median_us: f64,
    /// 99th percentile µs from send to end.
    pub p99_us: f64,
    /// Sum of send-to-end times, ms.
    pub total_ms: f64,
}

/// Requests per operation of one phase.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseRow {
    /// The phase.
    pub name: String,
    /// Its operations.
    pub ops: u64,
    /// Requests sent within its window.
    pub requests: u64,
    /// `requests / ops`.
    pub per_op: f64,
    /// Per opcode, requests per operation, most frequent first.
    pub by_opcode: Vec<(String, f64)>,
}

fn opcode_rows(requests: &[Request]) -> Vec<OpcodeRow> {
    let mut by_op: BTreeMap<u32, (u64, u64, Vec<u64>)> = BTreeMap::new();
    for r in requests {
        let e = by_op.entry(r.opcode).or_default();
        e.0 += 1;
        e.1 += u64::from(r.error.is_some_and(|e| e != 0));
        e.2.extend(r.latency_ns);
    }
    let mut rows: Vec<OpcodeRow> = by_op
        .into_iter()
        .map(|(op, (count, errors, mut lat))| {
            lat.sort_unstable();
            OpcodeRow {
                opcode: opcode_name(op),
                count,
                errors,
                median_us: percentile(&lat, 50) as f64 / 1e3,
                p99_us: percentile(&lat, 99) as f64 / 1e3,
                total_ms: lat.iter().sum::<u64>() as f64 / 1e6,
            }
        })
        .collect();
    rows.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.opcode.cmp(&b.opcode)));
    rows
}

fn phase_row(requests: &[Request], p: &PhaseWindow) -> PhaseRow {
    let mut by_op: BTreeMap<u32, u64> = BTreeMap::new();
    let inside = requests.iter().filter(|r| (p.from_ns..=p.to_ns).contains(&r.send_ns));
    for r in inside {
        *by_op.entry(r.opcode).or_default() += 1;
    }
    let per = |n: u64| n as f64 / p.ops.max(1) as f64;
    let mut ops: Vec<(String, u64)> = by_op.into_iter().map(|(op, n)| (opcode_name(op), n)).collect();
    ops.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let requests = ops.iter().map(|(_, n)| n).sum();
    PhaseRow {
        name: p.name.clone(),
        ops: p.ops,
        requests,
        per_op: per(requests),
        by_opcode: ops.into_iter().map(|(op, n)| (op, per(n))).collect(),
    }
}

/// The nearest-rank `pct`th percentile of sorted `v`; 0 for none.
fn percentile(v: &[u64], pct: usize) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = (v.len() * pct).div_ceil(100).max(1);
    v[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuse_trace::parse::parse_line;

    const CAPTURED: &str = include_str!("../../testdata/fuse_trace_fuse2fs.txt");

    fn send(unique: u64, opcode: u32, ts_ns: u64) -> Event {
        Event::Send {
            conn: 7,
            unique,
            opcode,
            ts_ns,
        }
    }

    fn end(unique: u64, error: i32, ts_ns: u64) -> Event {
        Event::End {
            conn: 7,
            unique,
            error,
            ts_ns,
        }
    }

    /// The captured `echo hi > a; cat a; ls -l; rm a` on fuse2fs: every
    /// request paired, counted per opcode with its errors (the failed
    /// LOOKUP of the new name, fuse2fs's ENOSYS flush and its ENODATA
    /// xattr replies), and its send-to-end times; ties by name.
    #[test]
    fn the_captured_requests_pair_and_count_by_opcode() {
        let mut p = Pairer::new(39);
        for e in CAPTURED.lines().filter_map(|l| parse_line(l).unwrap()) {
            p.push(e);
        }
        let prof = p.summarize(&[], 0);
        assert_eq!((prof.requests, prof.unanswered, prof.unpaired_ends), (31, 0, 0));
        let row = |name: &str| prof.opcodes.iter().find(|r| r.opcode == name).unwrap();
        assert_eq!(prof.opcodes[0].opcode, "GETXATTR");
        assert_eq!((row("GETATTR").count, row("GETATTR").errors), (8, 0));
        assert_eq!((row("GETXATTR").count, row("GETXATTR").errors), (9, 9));
        assert_eq!((row("LOOKUP").count, row("LOOKUP").errors), (2, 1));
        assert_eq!(
            (row("CREATE").count, row("WRITE").count, row("RELEASE").count),
            (1, 1, 2)
        );
        // CREATE req 8: sent at .860075, ended at .860184.
        assert_eq!(row("CREATE").median_us, 109.0);
        assert_eq!(row("CREATE").p99_us, 109.0);
        assert!((row("LOOKUP").total_ms - (0.084 + 0.031)).abs() < 1e-9);
        assert_eq!(prof.opcodes.iter().map(|r| r.count).sum::<u64>(), 31);
    }

    /// Other connections are skipped, an end without its send (sent before
    /// the capture) is counted apart, a send without an end is unanswered
    /// and has no time.
    #[test]
    fn foreign_unpaired_and_unanswered_events_are_told_apart() {
        let mut p = Pairer::new(7);
        p.push(end(1, 0, 5));
        p.push(send(2, 3, 10));
        p.push(Event::Send {
            conn: 8,
            unique: 2,
            opcode: 3,
            ts_ns: 11,
        });
        p.push(send(4, 2, 12));
        p.push(end(2, 0, 40));
        let prof = p.summarize(&[], 3);
        assert_eq!((prof.requests, prof.unanswered, prof.unpaired_ends), (2, 1, 1));
        assert_eq!((p.foreign(), prof.lost_events), (1, 3));
        let forget = prof.opcodes.iter().find(|r| r.opcode == "FORGET").unwrap();
        assert_eq!((forget.count, forget.median_us), (1, 0.0));
        assert_eq!(p.requests()[0].latency_ns, Some(30));
    }

    /// A phase counts the requests sent inside its window, per operation.
    #[test]
    fn phases_count_requests_sent_in_their_window() {
        let mut p = Pairer::new(7);
        for (i, (op, t)) in [(1, 100), (35, 110), (1, 200), (35, 210), (16, 220), (3, 500)]
            .into_iter()
            .enumerate()
        {
            p.push(send(i as u64, op, t));
            p.push(end(i as u64, 0, t + 5));
        }
        let window = |name: &str, ops, from_ns, to_ns| PhaseWindow {
            name: name.into(),
            ops,
            from_ns,
            to_ns,
        };
        let prof = p.summarize(&[window("create", 2, 100, 220), window("stat", 1, 400, 600)], 0);
        let create = &prof.phases[0];
        assert_eq!((create.requests, create.per_op), (5, 2.5));
        assert_eq!(
            create.by_opcode,
            [
                ("CREATE".to_string(), 1.0),
                ("LOOKUP".into(), 1.0),
                ("WRITE".into(), 0.5)
            ]
        );
        assert_eq!((prof.phases[1].requests, prof.phases[1].per_op), (1, 1.0));
    }

    /// PostMark's read phase is summed from pieces inside its transactions
    /// phase: it is left out, the transactions and the disjoint phases
    /// kept.
    #[test]
    fn phases_nested_in_a_longer_one_are_left_out() {
        let w = |name: &str, from_ns, to_ns| PhaseWindow {
            name: name.into(),
            ops: 1,
            from_ns,
            to_ns,
        };
        let kept = outermost(vec![
            w("pool", 0, 10),
            w("transactions", 20, 100),
            w("read", 21, 99),
            w("append", 20, 100),
            w("delete", 110, 120),
        ]);
        let names: Vec<&str> = kept.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["pool", "transactions", "delete"]);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=200).collect();
        assert_eq!((percentile(&v, 50), percentile(&v, 99)), (100, 198));
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }
}
