//! Writing one transaction into the log (`jbd2_journal_commit_transaction`):
//! the journal superblock first when the log was empty (so recovery knows
//! where to start), then descriptor blocks each followed by the blocks its
//! tags name, then revoke blocks, a flush, the commit block, and a flush.
//! With `journal_async_commit` the first flush is skipped: the per-block
//! checksums let recovery reject a transaction whose blocks did not all
//! land. See `journal.rst`, "Descriptor Block", "Revocation Block",
//! "Commit Block".

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use ext4kit_format::journal::descriptor::{self, FLAG_ESCAPE, Tag};
use ext4kit_format::journal::{JBD2_MAGIC, commit, revoke};

use super::writer::Log;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::txn::write_runs_on;

/// Journal blocks of one transaction, in log order, with where they go.
struct Pieces<'a> {
    writes: Vec<(u64, Cow<'a, [u8]>)>,
}

impl Log {
    /// Logs `blocks` (file-system block → contents) and revoke records for
    /// `revokes` as the next transaction and makes it durable. The caller
    /// has checked that it fits ([`Log::blocks_needed`] ≤ [`Log::free`]).
    pub(crate) fn commit(&mut self, fs: &Filesystem, blocks: &BTreeMap<u64, Arc<[u8]>>, revokes: &[u64]) -> Result<()> {
        let seq = self.sequence;
        if self.is_empty() {
            self.jsb.s_start.set(self.head);
            self.jsb.s_sequence.set(seq);
            self.write_superblock(fs)?;
        }
        if !revokes.is_empty() {
            self.enable_revoke();
        }
        let mut p = Pieces { writes: Vec::new() };
        let mut lblk = self.head;
        self.add_descriptors(blocks, seq, &mut lblk, &mut p)?;
        self.add_revokes(revokes, seq, &mut lblk, &mut p)?;
        write_runs_on(fs, self.device(fs), p.writes.iter().map(|(o, b)| (*o, &b[..])))?;
        if self.barrier_before_commit {
            flush(fs)?;
            self.flush_external(fs)?;
        }
        let now = crate::clock::now();
        let block = commit::encode(&self.params, seq, now.secs.max(0) as u64, now.nsecs);
        let at = self.device_block(lblk)? << fs.geo.block_size_log2;
        self.device(fs)
            .write_at(at, &block)
            .map_err(|source| fs.write_failed(at, source))?;
        match self.ext {
            Some(_) => self.flush_external(fs)?,
            None => flush(fs)?,
        }
        self.stats.log_blocks += u64::from(lblk + 1 - self.head);
        // A full commit carries everything the fast commits since the last
        // one did: the area starts over.
        self.retire_fast_commits(fs)?;
        self.head = lblk + 1;
        self.sequence = seq.wrapping_add(1);
        self.stats.commits += 1;
        self.stats.blocks_logged += blocks.len() as u64;
        self.stats.revoke_records += revokes.len() as u64;
        Ok(())
    }

    /// Descriptor blocks, each followed by the (escaped) blocks it tags.
    fn add_descriptors<'a>(
        &self,
        blocks: &'a BTreeMap<u64, Arc<[u8]>>,
        seq: u32,
        lblk: &mut u32,
        p: &mut Pieces<'a>,
    ) -> Result<()> {
        let all: Vec<(&u64, &Arc<[u8]>)> = blocks.iter().collect();
        for chunk in all.chunks(self.tags_per_descriptor()) {
            let desc_at = *lblk;
            *lblk += 1;
            let mut tags = Vec::with_capacity(chunk.len());
            for (i, &(&home, data)) in chunk.iter().enumerate() {
                let (stored, escaped) = escape(data);
                let checksum = if self.params.has_csum_v2or3() {
                    descriptor::data_checksum(&self.params, seq, &stored)
                } else {
                    0
                };
                tags.push(Tag {
                    offset: 0,
                    blocknr: home,
                    flags: if escaped { FLAG_ESCAPE } else { 0 },
                    checksum,
                    uuid: (i == 0).then_some(self.jsb.s_uuid),
                });
                p.writes.push((self.byte_offset(*lblk)?, stored));
                *lblk += 1;
            }
            let block = descriptor::encode(&self.params, seq, &tags)
                .map_err(|e| Error::format(Location::Journal { block: desc_at.into() }, e))?;
            p.writes.push((self.byte_offset(desc_at)?, Cow::Owned(block)));
        }
        p.writes.sort_by_key(|(o, _)| *o);
        Ok(())
    }

    /// Revoke blocks listing `revokes`.
    fn add_revokes(&self, revokes: &[u64], seq: u32, lblk: &mut u32, p: &mut Pieces) -> Result<()> {
        for chunk in revokes.chunks(self.revokes_per_block()) {
            let block = revoke::encode(&self.params, seq, chunk)
                .map_err(|e| Error::format(Location::Journal { block: (*lblk).into() }, e))?;
            p.writes.push((self.byte_offset(*lblk)?, Cow::Owned(block)));
            *lblk += 1;
        }
        Ok(())
    }

    /// Device byte offset of journal block `lblk` (journal and file
    /// system share the block size).
    fn byte_offset(&self, lblk: u32) -> Result<u64> {
        Ok(self.device_block(lblk)? << self.params.block_size.trailing_zeros())
    }

    /// Writes the journal superblock (journal block 0) with a fresh checksum.
    pub(crate) fn write_superblock(&mut self, fs: &Filesystem) -> Result<()> {
        self.jsb.set_checksum();
        let at = self.device_block(0)? << fs.geo.block_size_log2;
        self.device(fs)
            .write_at(at, &self.jsb.encode())
            .map_err(|source| fs.write_failed(at, source))
    }

    /// Flushes the external journal device, if the journal is on one.
    pub(crate) fn flush_external(&self, fs: &Filesystem) -> Result<()> {
        match &self.ext {
            Some(dev) => dev.0.flush().map_err(|source| fs.write_failed(0, source)),
            None => Ok(()),
        }
    }
}

/// The block as stored in the log: a block starting with the jbd2 magic has
/// those 4 bytes zeroed and its tag marked `ESCAPE`, or replay would take it
/// for a journal block. Only such a block is copied.
fn escape(data: &[u8]) -> (Cow<'_, [u8]>, bool) {
    if data.len() < 4 || data[..4] != JBD2_MAGIC.to_be_bytes() {
        return (Cow::Borrowed(data), false);
    }
    let mut v = data.to_vec();
    v[..4].fill(0);
    (Cow::Owned(v), true)
}

pub(crate) fn flush(fs: &Filesystem) -> Result<()> {
    fs.dev.flush().map_err(|source| fs.write_failed(0, source))
}
