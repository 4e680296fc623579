//! Writing a tune's blocks so that a crash leaves the old image or the
//! new one, never a mix: the blocks go into the journal as one jbd2
//! transaction, the way the kernel logs metadata.
//!
//! Order, each step flushed before the next:
//! 1. `needs_recovery` is set in the (old) primary superblock, so that
//!    whoever opens the image next looks at the journal. The log is empty,
//!    so a crash here changes nothing: recovery finds no transaction.
//! 2. The transaction (descriptor blocks, the new blocks, the commit block)
//!    is written to the log. Until the commit block is down recovery
//!    ignores it; once it is, the kernel, e2fsck and ext4kit replay it:
//!    the commit block is the switch from old to new.
//! 3. Checkpoint: the blocks go home, the primary superblock last (first
//!    when `metadata_csum` goes: the journal inode, its checksum removed,
//!    must stay readable under the superblock at home), then the journal
//!    superblock says the log is empty. A crash meanwhile replays the log
//!    again. In that window the group descriptors at home
//!    may be checksummed under the new scheme while the home superblock
//!    still names the old one: e2fsck and ext4kit (which wait with
//!    checksums until the replay) recover it, but the kernel checks the
//!    descriptors before it replays and refuses the mount until one of
//!    them has run.
//! 4. The new primary superblock without `needs_recovery`.
//!
//! The whole change must fit the journal; a larger one is refused rather
//! than split, since no split of a checksum-scheme change leaves a
//! consistent image in between. Without a journal only superblock changes
//! are made: the backups first, then the primary, which is what the kernel
//! and e2fsck read (a torn primary makes e2fsck fall back to a backup,
//! which is already new).

use std::collections::BTreeMap;
use std::sync::Arc;

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::superblock::RawSuperblock;

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::journal::writer::Log;

/// Block number → new contents.
type Blocks = BTreeMap<u64, Arc<[u8]>>;

/// Writes `blocks` and ends with `new` as the primary superblock. Returns
/// true when the journal carried the change.
pub(crate) fn commit(
    fs: &Filesystem,
    blocks: BTreeMap<u64, Arc<[u8]>>,
    zero: &[u64],
    old: &RawSuperblock,
    new: &RawSuperblock,
) -> Result<bool> {
    // The journal inode must stay readable under the superblock at home:
    // while inode records lose their checksums, a home superblock with
    // metadata_csum would reject it (e2fsck then deletes the journal), so
    // that superblock goes first.
    let sb_first = old.features().metadata_csum() && !new.features().metadata_csum();
    commit_ordered(fs, blocks, zero, new, sb_first)
}

/// [`commit`], with the primary superblock checkpointed before the other
/// blocks when `sb_first` (a resize that drops groups: a home descriptor
/// table shorter than the home superblock's group count would not open).
pub(crate) fn commit_ordered(
    fs: &Filesystem,
    blocks: BTreeMap<u64, Arc<[u8]>>,
    zero: &[u64],
    new: &RawSuperblock,
    sb_first: bool,
) -> Result<bool> {
    let mut last = *new;
    let v = last.s_feature_incompat.get() & !IncompatFeatures::RECOVER.0;
    last.s_feature_incompat.set(v);
    last.set_checksum();
    let mut guard = fs.log.lock();
    match guard.as_mut() {
        Some(log) => {
            journaled(fs, log, &blocks, zero, sb_first)?;
            finish(fs, &last)?;
            Ok(true)
        }
        None => {
            in_place(fs, &blocks)?;
            finish(fs, &last)?;
            Ok(false)
        }
    }
}

fn journaled(fs: &Filesystem, log: &mut Log, blocks: &Blocks, zero: &[u64], sb_first: bool) -> Result<()> {
    if !log.is_empty() {
        return Err(Error::inconsistent(
            Location::Journal { block: 0 },
            "the journal is not empty after open",
        ));
    }
    let need = log.blocks_needed(blocks.len(), 0);
    if need > log.capacity() {
        return Err(Error::InvalidArgument(format!(
            "the change rewrites {} blocks, which take {need} journal blocks, but the journal holds {}: \
             it cannot be made atomic; refused (make the image with a larger journal, mkfs -J size=)",
            blocks.len(),
            log.capacity()
        )));
    }
    zero_in_place(fs, zero)?;
    fs.mark_recover_on_disk()?;
    log.commit(fs, blocks, &[])?;
    // Home in two steps, then the log is emptied (`checkpoint` writes the
    // second step's blocks again, harmlessly).
    let home = u64::from(fs.geo.block_size == 1024);
    let (sb, rest): (Blocks, Blocks) = blocks
        .iter()
        .map(|(b, d)| (*b, d.clone()))
        .partition(|(b, _)| *b == home);
    let (first, second) = if sb_first { (&sb, &rest) } else { (&rest, &sb) };
    let log2 = fs.geo.block_size_log2;
    crate::txn::write_runs(fs, first.iter().map(|(b, d)| (b << log2, &d[..])))?;
    crate::journal::commit::flush(fs)?;
    log.checkpoint(fs, second)
}

/// Zeroes unused inode-table blocks that are not zero yet (see `uninit`).
fn zero_in_place(fs: &Filesystem, zero: &[u64]) -> Result<()> {
    let log2 = fs.geo.block_size_log2;
    let mut buf = vec![0u8; fs.geo.block_size as usize];
    let zeros = vec![0u8; buf.len()];
    let mut wrote = false;
    for &b in zero {
        fs.read_bytes(b << log2, &mut buf)?;
        if buf != zeros {
            fs.dev
                .write_at(b << log2, &zeros)
                .map_err(|source| fs.write_failed(b << log2, source))?;
            wrote = true;
        }
    }
    if !wrote {
        return Ok(());
    }
    crate::journal::commit::flush(fs)
}

/// Without a journal: superblock blocks only, backups first.
fn in_place(fs: &Filesystem, blocks: &BTreeMap<u64, Arc<[u8]>>) -> Result<()> {
    let primary_home = u64::from(fs.geo.block_size == 1024);
    let backups = super_blocks(fs);
    if let Some(b) = blocks.keys().find(|b| **b != primary_home && !backups.contains(b)) {
        return Err(Error::InvalidArgument(format!(
            "the change rewrites {} blocks (block {b} is not a superblock): without a journal it cannot \
             be made crash-safe; refused",
            blocks.len()
        )));
    }
    let log2 = fs.geo.block_size_log2;
    for (b, bytes) in blocks.iter().filter(|(b, _)| **b != primary_home) {
        let at = b << log2;
        fs.dev
            .write_at(at, bytes)
            .map_err(|source| fs.write_failed(at, source))?;
    }
    crate::journal::commit::flush(fs)
}

/// Blocks holding backup superblocks.
fn super_blocks(fs: &Filesystem) -> Vec<u64> {
    (1..fs.geo.group_count)
        .filter(|&g| fs.group_has_super(g))
        .map(|g| fs.geo.group_first_block(g))
        .collect()
}

/// The last write: the primary superblock as asked, flushed.
fn finish(fs: &Filesystem, last: &RawSuperblock) -> Result<()> {
    fs.write_superblock(last)?;
    crate::journal::commit::flush(fs)
}
