//! Journal recovery, in the three passes of jbd2's `recovery.c`:
//!
//! - SCAN walks the log from `s_start`, expecting `s_sequence`, across
//!   descriptor, revoke and commit blocks (wrapping from `s_maxlen` to
//!   `s_first`) and ends at the first block that is not the next block of
//!   the expected transaction. A commit block whose checksum fails ends the
//!   log before its transaction (jbd2 records it as a failed commit); a
//!   descriptor or revoke block whose checksum fails makes the transaction
//!   an error if its commit block is newer than the last good one, and the
//!   end of the log (stale blocks) otherwise.
//! - REVOKE collects, per block, the newest committed transaction that
//!   revoked it.
//! - REPLAY (planned here, written by `replay`) sends each tagged block to
//!   its home unless a transaction at least as new revoked it; the newest
//!   copy of a block wins.
//!
//! jbd2 checks the data block checksums while writing and skips a bad
//! block, then fails the recovery; here every check runs before anything is
//! written, so a failure leaves the image untouched.

use std::collections::{BTreeMap, HashMap};

use ext4kit_format::journal::commit::{self, RawCommitHeader};
use ext4kit_format::journal::descriptor::{self, Tag};
use ext4kit_format::journal::{BlockType, RawJournalHeader, revoke};

use super::log::Log;
use crate::error::{Error, Location, Result};
use ext4kit_format::FormatError;

fn at(block: u32) -> Location {
    Location::Journal { block: block.into() }
}

/// `tid_geq`: sequence numbers compare modulo 2³².
fn tid_geq(x: u32, y: u32) -> bool {
    x.wrapping_sub(y) as i32 >= 0
}

/// One logged copy of a block.
#[derive(Debug, Clone, Copy)]
struct Logged {
    tag: Tag,
    /// Journal block holding the copy.
    data: u32,
    /// Journal block of the descriptor naming it.
    descriptor: u32,
}

/// A committed transaction.
#[derive(Debug, Default)]
struct Transaction {
    sequence: u32,
    blocks: Vec<Logged>,
    /// Journal blocks of its revoke blocks.
    revokes: Vec<u32>,
}

/// What the SCAN pass found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    committed: Vec<Transaction>,
    /// The first sequence not committed (`info->end_transaction`).
    pub(crate) end: u32,
    /// A commit block failed its checksum (`j_failed_commit`).
    pub(crate) failed_commit: Option<u32>,
}

/// The blocks to write: home block → (journal block, escaped).
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) writes: BTreeMap<u64, (u32, bool)>,
    /// Transactions replayed.
    pub(crate) transactions: u32,
    /// Logged copies written (later copies of a block included).
    pub(crate) replayed: u64,
    /// Logged copies skipped as revoked.
    pub(crate) revoked: u64,
    /// Revoke records read.
    pub(crate) revoke_records: u64,
}

/// State of the SCAN walk between blocks.
struct Walk {
    next: u32,
    sequence: u32,
    steps: u32,
    last_commit_time: u64,
    /// The first descriptor or revoke block of the transaction whose
    /// checksum failed, and how.
    bad_checksum: Option<(u32, FormatError)>,
    current: Transaction,
}

impl Walk {
    /// Takes the next journal block of the log; errors once the walk is
    /// longer than the log itself (a loop no valid journal makes).
    fn advance(&mut self, log: &Log<'_>) -> Result<u32> {
        if self.steps >= log.log_len() {
            return Err(Error::inconsistent(
                at(self.next),
                "the log runs longer than the journal",
            ));
        }
        self.steps += 1;
        let b = self.next;
        self.next = log.next(b);
        Ok(b)
    }
}

/// The SCAN pass.
pub(crate) fn scan(log: &Log<'_>) -> Result<Scan> {
    let sequence = log.sb.s_sequence.get();
    let mut out = Scan {
        end: sequence,
        ..Scan::default()
    };
    if log.sb.s_start.get() == 0 {
        return Ok(out);
    }
    let mut w = Walk {
        next: log.sb.s_start.get(),
        sequence,
        steps: 0,
        last_commit_time: 0,
        bad_checksum: None,
        current: Transaction {
            sequence,
            ..Transaction::default()
        },
    };
    loop {
        // A log that fills the whole journal ends where it began: the
        // block there belongs to its first transaction (jbd2 reads it and
        // stops at the sequence; no later block can be part of the log).
        if w.steps >= log.log_len() {
            break;
        }
        let here = w.advance(log)?;
        let block = log.read(here)?;
        let Ok(h) = RawJournalHeader::parse(&block) else { break };
        if h.h_sequence.get() != w.sequence {
            break;
        }
        match h.block_type() {
            Some(BlockType::Descriptor) => scan_descriptor(log, &mut w, here, &block)?,
            Some(BlockType::Revoke) => {
                if let Err(e) = revoke::verify_checksum(&block, &log.params) {
                    w.bad_checksum.get_or_insert((here, e));
                }
                w.current.revokes.push(here);
            }
            Some(BlockType::Commit) => {
                if !scan_commit(log, &mut w, &mut out, here, &block)? {
                    break;
                }
            }
            _ => break,
        }
    }
    out.end = w.sequence;
    Ok(out)
}

/// Records a descriptor's tags and steps over its data blocks.
fn scan_descriptor(log: &Log<'_>, w: &mut Walk, here: u32, block: &[u8]) -> Result<()> {
    if let Err(e) = descriptor::verify_checksum(block, &log.params) {
        w.bad_checksum.get_or_insert((here, e));
    }
    let (_, tags) = descriptor::tags(block, &log.params).map_err(|e| Error::format(at(here), e))?;
    for tag in tags {
        let Ok(tag) = tag else { break };
        let data = w.advance(log)?;
        w.current.blocks.push(Logged {
            tag,
            data,
            descriptor: here,
        });
    }
    Ok(())
}

/// Handles a commit block; false when the log ends before it.
fn scan_commit(log: &Log<'_>, w: &mut Walk, out: &mut Scan, here: u32, block: &[u8]) -> Result<bool> {
    let header = RawCommitHeader::parse(block).map_err(|e| Error::format(at(here), e))?;
    let time = header.h_commit_sec.get();
    if let Some((bad, e)) = w.bad_checksum.take() {
        if time < w.last_commit_time {
            return Ok(false); // stale blocks of an older log
        }
        return Err(Error::format(at(bad), e));
    }
    if commit::verify_checksum(&log.params, block).is_err() && time >= w.last_commit_time {
        let async_commit = log.params.incompat & ext4kit_format::journal::INCOMPAT_ASYNC_COMMIT != 0;
        if !async_commit {
            out.failed_commit = Some(w.sequence);
        }
        return Ok(false);
    }
    w.last_commit_time = time;
    let next = w.sequence.wrapping_add(1);
    let done = std::mem::replace(
        &mut w.current,
        Transaction {
            sequence: next,
            ..Transaction::default()
        },
    );
    out.committed.push(done);
    w.sequence = next;
    Ok(true)
}

/// The REVOKE pass: block → newest revoking sequence.
fn revokes(log: &Log<'_>, scan: &Scan, plan: &mut Plan) -> Result<HashMap<u64, u32>> {
    let mut table = HashMap::new();
    for t in &scan.committed {
        for &b in &t.revokes {
            let block = log.read(b)?;
            let (_, records) = revoke::revoked(&block, &log.params).map_err(|e| Error::format(at(b), e))?;
            for r in records {
                plan.revoke_records += 1;
                let e = table.entry(r).or_insert(t.sequence);
                if tid_geq(t.sequence, *e) {
                    *e = t.sequence;
                }
            }
        }
    }
    Ok(table)
}

/// The REVOKE pass and the plan of the REPLAY pass: checks every block to
/// be written (home inside the file system, data checksum) first.
///
/// # Errors
/// A home block outside the file system (at the descriptor), a data
/// checksum mismatch (at the data block), a revoke block that does not
/// decode.
pub(crate) fn plan(log: &Log<'_>, scan: &Scan) -> Result<Plan> {
    let fs = log.fs();
    let mut plan = Plan::default();
    let table = revokes(log, scan, &mut plan)?;
    for t in &scan.committed {
        plan.transactions += 1;
        for l in &t.blocks {
            let home = l.tag.blocknr;
            if table.get(&home).is_some_and(|&r| tid_geq(r, t.sequence)) {
                plan.revoked += 1;
                continue;
            }
            fs.check_block(home, at(l.descriptor))?;
            let data = log.read(l.data)?;
            let r = descriptor::verify_data(&log.params, &l.tag, t.sequence, &data);
            fs.check_journal(at(l.data), r)?;
            plan.writes.insert(home, (l.data, l.tag.escaped()));
            plan.replayed += 1;
        }
    }
    Ok(plan)
}
