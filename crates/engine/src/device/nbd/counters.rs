//! What an [`super::NbdDevice`] sent: requests and bytes by command, and
//! the widest batch, so a test or benchmark can see whether large
//! accesses reach the server as large requests with many in flight
//! without parsing a server's log.

use std::sync::atomic::{AtomicU64, Ordering};

use super::wire::Cmd;

/// Requests sent since the device was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NbdStats {
    /// `NBD_CMD_READ` requests.
    pub reads: u64,
    /// Bytes they asked for.
    pub read_bytes: u64,
    /// `NBD_CMD_WRITE` requests.
    pub writes: u64,
    /// Bytes they carried.
    pub write_bytes: u64,
    /// `NBD_CMD_FLUSH` requests.
    pub flushes: u64,
    /// `NBD_CMD_TRIM`, `NBD_CMD_WRITE_ZEROES` and `NBD_CMD_BLOCK_STATUS`.
    pub others: u64,
    /// Most requests one access sent before awaiting the first reply,
    /// capped at `NbdOptions::max_in_flight`: the most it let be on the
    /// wire at once.
    pub widest_batch: u64,
}

impl NbdStats {
    /// The counts of `self` minus those of an earlier reading;
    /// `widest_batch` is kept as it is now.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            reads: self.reads - earlier.reads,
            read_bytes: self.read_bytes - earlier.read_bytes,
            writes: self.writes - earlier.writes,
            write_bytes: self.write_bytes - earlier.write_bytes,
            flushes: self.flushes - earlier.flushes,
            others: self.others - earlier.others,
            widest_batch: self.widest_batch,
        }
    }
}

/// The live counts behind [`NbdStats`].
#[derive(Debug, Default)]
pub(super) struct Counters {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
    others: AtomicU64,
    widest_batch: AtomicU64,
}

impl Counters {
    /// One request of `cmd` for `len` bytes, sent.
    pub(super) fn note(&self, cmd: Cmd, len: u32) {
        let (n, bytes) = match cmd {
            Cmd::Read => (&self.reads, Some(&self.read_bytes)),
            Cmd::Write => (&self.writes, Some(&self.write_bytes)),
            Cmd::Flush => (&self.flushes, None),
            _ => (&self.others, None),
        };
        n.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = bytes {
            b.fetch_add(u64::from(len), Ordering::Relaxed);
        }
    }

    /// A batch of `n` requests let onto the wire before the first wait.
    pub(super) fn note_batch(&self, n: usize) {
        self.widest_batch.fetch_max(n as u64, Ordering::Relaxed);
    }

    pub(super) fn read(&self) -> NbdStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        NbdStats {
            reads: get(&self.reads),
            read_bytes: get(&self.read_bytes),
            writes: get(&self.writes),
            write_bytes: get(&self.write_bytes),
            flushes: get(&self.flushes),
            others: get(&self.others),
            widest_batch: get(&self.widest_batch),
        }
    }
}
