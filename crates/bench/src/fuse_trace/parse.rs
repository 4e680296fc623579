//! Lines of the kernel's FUSE tracepoints as ftrace prints them (the
//! `print fmt` of `events/fuse/fuse_request_{send,end}/format`):
//!
//! ```text
//!   bash-24441 [000] ...1.  969.857362: fuse_request_send: connection 39 req 6 opcode 1 (FUSE_LOOKUP) len 42
//!   fuse2fs-24450 [001] .....  969.857446: fuse_request_end: connection 39 req 6 len 16 error -2
//! ```
//!
//! `connection` is the FUSE connection's device number (the mount's
//! `st_dev` in the kernel's encoding), `req` the request's `unique` id,
//! which the kernel never reuses within a connection. The timestamp is in
//! seconds with microsecond digits, on the instance's `trace_clock`.

/// One tracepoint hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `fuse_request_send`: the request was queued for the server.
    Send {
        /// The connection (its device number).
        conn: u32,
        /// The request's id.
        unique: u64,
        /// The FUSE opcode.
        opcode: u32,
        /// When, in ns of the trace clock.
        ts_ns: u64,
    },
    /// `fuse_request_end`: the reply (or an abort) ended the request.
    End {
        /// The connection (its device number).
        conn: u32,
        /// The request's id.
        unique: u64,
        /// The reply's error (0 or a negative errno).
        error: i32,
        /// When, in ns of the trace clock.
        ts_ns: u64,
    },
}

impl Event {
    /// The connection the event belongs to.
    pub fn conn(&self) -> u32 {
        match *self {
            Event::Send { conn, .. } | Event::End { conn, .. } => conn,
        }
    }
}

/// Parses one line of `trace` or `trace_pipe`. `Ok(None)` for what is not
/// a FUSE request event (comment headers, other events, blank lines);
/// `Err` names what was wrong with a FUSE line that does not parse.
pub fn parse_line(line: &str) -> Result<Option<Event>, String> {
    let (head, kind, rest) = if let Some((h, r)) = line.split_once(": fuse_request_send: ") {
        (h, "send", r)
    } else if let Some((h, r)) = line.split_once(": fuse_request_end: ") {
        (h, "end", r)
    } else {
        return Ok(None);
    };
    let bad = |what: &str| format!("fuse_request_{kind}: {what} in {line:?}");
    let ts = head.split_whitespace().last().ok_or_else(|| bad("no timestamp"))?;
    let ts_ns = parse_timestamp(ts).ok_or_else(|| bad("bad timestamp"))?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let field = |name: &str| -> Result<&str, String> {
        let at = words
            .iter()
            .position(|w| *w == name)
            .ok_or_else(|| bad(&format!("no {name}")))?;
        words
            .get(at + 1)
            .copied()
            .ok_or_else(|| bad(&format!("no value after {name}")))
    };
    let num = |name: &str| -> Result<u64, String> {
        field(name)?
            .parse()
            .map_err(|_| bad(&format!("{name} is not a number")))
    };
    let conn = u32::try_from(num("connection")?).map_err(|_| bad("connection out of range"))?;
    let unique = num("req")?;
    Ok(Some(if kind == "send" {
        let opcode = u32::try_from(num("opcode")?).map_err(|_| bad("opcode out of range"))?;
        Event::Send {
            conn,
            unique,
            opcode,
            ts_ns,
        }
    } else {
        let error = field("error")?.parse().map_err(|_| bad("error is not a number"))?;
        Event::End {
            conn,
            unique,
            error,
            ts_ns,
        }
    }))
}

/// The timestamp of a `trace_marker` line carrying exactly `text`
/// (`<...>-20225 [000] ...1.  2720.192259: tracing_mark_write: TEXT`);
/// `None` for any other line.
pub fn marker_time(line: &str, text: &str) -> Option<u64> {
    let (head, rest) = line.split_once(": tracing_mark_write: ")?;
    if rest.trim_end() != text {
        return None;
    }
    parse_timestamp(head.split_whitespace().last()?)
}

/// `969.857362:` (seconds, a dot, up to nine fraction digits) in ns.
fn parse_timestamp(ts: &str) -> Option<u64> {
    let ts = ts.strip_suffix(':').unwrap_or(ts);
    let (secs, frac) = ts.split_once('.')?;
    if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let scale = 10u64.pow(9 - frac.len() as u32);
    let secs: u64 = secs.parse().ok()?;
    secs.checked_mul(1_000_000_000)?
        .checked_add(frac.parse::<u64>().ok()? * scale)
}

/// The name of a FUSE opcode (`include/uapi/linux/fuse.h`), without the
/// `FUSE_` prefix; `OP<n>` for one this table lacks.
pub fn opcode_name(op: u32) -> String {
    const NAMES: [(u32, &str); 51] = [
        (1, "LOOKUP"),
        (2, "FORGET"),
        (3, "GETATTR"),
        (4, "SETATTR"),
        (5, "READLINK"),
        (6, "SYMLINK"),
        (8, "MKNOD"),
        (9, "MKDIR"),
        (10, "UNLINK"),
        (11, "RMDIR"),
        (12, "RENAME"),
        (13, "LINK"),
        (14, "OPEN"),
        (15, "READ"),
        (16, "WRITE"),
        (17, "STATFS"),
        (18, "RELEASE"),
        (20, "FSYNC"),
        (21, "SETXATTR"),
        (22, "GETXATTR"),
        (23, "LISTXATTR"),
        (24, "REMOVEXATTR"),
        (25, "FLUSH"),
        (26, "INIT"),
        (27, "OPENDIR"),
        (28, "READDIR"),
        (29, "RELEASEDIR"),
        (30, "FSYNCDIR"),
        (31, "GETLK"),
        (32, "SETLK"),
        (33, "SETLKW"),
        (34, "ACCESS"),
        (35, "CREATE"),
        (36, "INTERRUPT"),
        (37, "BMAP"),
        (38, "DESTROY"),
        (39, "IOCTL"),
        (40, "POLL"),
        (41, "NOTIFY_REPLY"),
        (42, "BATCH_FORGET"),
        (43, "FALLOCATE"),
        (44, "READDIRPLUS"),
        (45, "RENAME2"),
        (46, "LSEEK"),
        (47, "COPY_FILE_RANGE"),
        (48, "SETUPMAPPING"),
        (49, "REMOVEMAPPING"),
        (50, "SYNCFS"),
        (51, "TMPFILE"),
        (52, "STATX"),
        (4096, "CUSE_INIT"),
    ];
    NAMES
        .iter()
        .find(|(n, _)| *n == op)
        .map_or_else(|| format!("OP{op}"), |(_, name)| (*name).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines captured on this machine (kernel 6.18) from a fuse2fs mount:
    /// `echo hi > a; cat a; ls -l; rm a`, tracefs `trace` with its header.
    const CAPTURED: &str = include_str!("../../testdata/fuse_trace_fuse2fs.txt");

    #[test]
    fn captured_lines_parse_into_sends_and_ends() {
        let events: Vec<Event> = CAPTURED.lines().filter_map(|l| parse_line(l).unwrap()).collect();
        assert_eq!(events.len(), 62, "the capture's entries-in-buffer count");
        assert_eq!(
            events[0],
            Event::Send {
                conn: 39,
                unique: 6,
                opcode: 1,
                ts_ns: 969_857_362_000,
            }
        );
        assert_eq!(
            events[1],
            Event::End {
                conn: 39,
                unique: 6,
                error: -2,
                ts_ns: 969_857_446_000,
            }
        );
        let sends = events.iter().filter(|e| matches!(e, Event::Send { .. })).count();
        assert_eq!(sends, 31);
        assert!(events.iter().all(|e| e.conn() == 39));
    }

    #[test]
    fn headers_and_other_events_are_skipped_and_damaged_lines_refused() {
        assert_eq!(parse_line("# tracer: nop").unwrap(), None);
        assert_eq!(parse_line("").unwrap(), None);
        let other = "  bash-1 [000] .....  5.000001: sched_switch: prev_comm=bash";
        assert_eq!(parse_line(other).unwrap(), None);
        let cut = "  bash-1 [000] ...1.  969.857362: fuse_request_send: connection 39 req";
        assert!(parse_line(cut).unwrap_err().contains("no value after req"));
        let ts = "  bash-1 [000] ...1.  969.85x: fuse_request_end: connection 39 req 6 len 16 error 0";
        assert!(parse_line(ts).unwrap_err().contains("timestamp"));
        let big = "  b-1 [000] ...1.  1.5: fuse_request_send: connection 99999999999 req 1 opcode 1 (X) len 1";
        assert!(parse_line(big).unwrap_err().contains("connection"));
    }

    #[test]
    fn a_marker_line_gives_its_time_only_for_its_own_text() {
        let line = "           <...>-20225   [000] ...1.  2720.192259: tracing_mark_write: ext4kit-bench clock";
        assert_eq!(marker_time(line, "ext4kit-bench clock"), Some(2_720_192_259_000));
        assert_eq!(marker_time(line, "other"), None);
        assert_eq!(parse_line(line).unwrap(), None);
        assert_eq!(marker_time(CAPTURED.lines().nth(13).unwrap(), "x"), None);
    }

    #[test]
    fn timestamps_keep_their_fraction_digits() {
        assert_eq!(parse_timestamp("1.5:"), Some(1_500_000_000));
        assert_eq!(parse_timestamp("0.000001"), Some(1_000));
        assert_eq!(parse_timestamp("2.123456789"), Some(2_123_456_789));
        assert_eq!(parse_timestamp("2.1234567891"), None);
        assert_eq!(parse_timestamp("2"), None);
        assert_eq!(opcode_name(35), "CREATE");
        assert_eq!(opcode_name(7), "OP7");
    }
}
