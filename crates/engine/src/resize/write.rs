//! Writing a staged resize so that a crash leaves the old file system or
//! the new one.
//!
//! With a journal, each step flushed before the next:
//! 1. `copy` and `before`: blocks a shrink moves, the new groups' metadata
//!    and the zeroed inode tables, in
//!    blocks the old file system does not use. A crash here leaves the
//!    old file system with garbage in its free space (or past its end).
//! 2. `txn`, the blocks the old file system reads, as **one jbd2
//!    transaction** through the image's journal (`tune::commit`, the same
//!    path as `tune`): the commit block is the switch; after it, the
//!    kernel, e2fsck and ext4kit replay the new primary superblock,
//!    descriptors, bitmaps and resize inode. Going home, the superblock
//!    goes last when groups are added (a longer descriptor table under the
//!    old superblock still opens) and first when groups are dropped (the
//!    old, longer table under the new superblock opens; a shorter one
//!    under the old superblock would not); checksums wait for the replay.
//! 3. `after`: the superblock and descriptor backups of old groups, then
//!    the primary superblock without `needs_recovery`. A crash before they
//!    are down leaves stale backups, which nothing reads while the primary
//!    is sound.
//!
//! Without a journal no transaction is possible: the old primary
//! superblock is first marked not clean, then everything is written, the
//! new primary superblock last. A crash in between is detected (the file
//! system is "not clean") and e2fsck repairs it — resize2fs's own
//! guarantee; the journaled path is the atomic one.

use std::collections::BTreeMap;
use std::sync::Arc;

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::superblock::{RawSuperblock, STATE_VALID};

use super::plan::Plan;
use super::stage::Stage;
use crate::error::Result;
use crate::fs::Filesystem;

/// Zeroes are written in runs of at most this many bytes.
const ZERO_CHUNK: u64 = 1 << 20;

/// Writes `st`; returns true when the journal carried the switch.
pub(crate) fn write(fs: &Filesystem, p: &Plan, mut st: Stage, progress: &mut dyn FnMut(u64, u64)) -> Result<bool> {
    let copied = st.copy.iter().map(|c| c.2).sum::<u64>();
    let total = copied + st.zero.iter().map(|z| z.1).sum::<u64>() + st.before.len() as u64 + 2;
    let mut done = 0u64;
    copy_runs(fs, p, &st.copy, &mut |n| {
        done += n;
        progress(done, total);
    })?;
    zero_runs(fs, p, &st.zero, &mut |n| {
        done += n;
        progress(done, total);
    })?;
    for (b, data) in &st.before {
        put(fs, p, *b, data)?;
        done += 1;
        progress(done, total);
    }
    crate::journal::commit::flush(fs)?;
    let sb_block = 1024 / u64::from(p.new.block_size);
    let at = if sb_block == 1 { 0 } else { 1024 };
    let mut block = vec![0u8; p.new.block_size as usize];
    fs.read_bytes(sb_block << p.new.block_size_log2, &mut block)?;
    let journaled = match fs.log.lock().as_ref() {
        // A shrink that moved blocks and outgrew the journal falls back to
        // the unjournaled order rather than being refused: resize2fs's own
        // guarantee (a crash is seen, e2fsck repairs it).
        Some(log) => {
            !st.skip_journal && (st.copy.is_empty() || log.blocks_needed(st.txn.len() + 1, 0) <= log.capacity())
        }
        None => false,
    };
    let mut primary = st.sb;
    if journaled {
        let v = primary.s_feature_incompat.get() | IncompatFeatures::RECOVER.0;
        primary.s_feature_incompat.set(v);
    }
    primary.set_checksum();
    block[at..at + 1024].copy_from_slice(&primary.encode());
    st.txn.insert(sb_block, block);
    if journaled {
        let txn: BTreeMap<u64, Arc<[u8]>> = st.txn.into_iter().map(|(b, d)| (b, Arc::from(d))).collect();
        // Dropping groups: the shorter descriptor table must not reach home
        // before the superblock that counts fewer groups.
        let sb_first = p.new.group_count < p.old.group_count && !st.sb_last;
        crate::tune::commit::commit_ordered(fs, txn, &[], &st.sb, sb_first)?;
        progress(total - 1, total);
        for (b, data) in &st.after {
            put(fs, p, *b, data)?;
        }
        crate::journal::commit::flush(fs)?;
    } else {
        unjournaled(fs, p, &st)?;
    }
    progress(total, total);
    Ok(journaled)
}

fn unjournaled(fs: &Filesystem, p: &Plan, st: &Stage) -> Result<()> {
    let mut dirty: RawSuperblock = p.old_sb;
    dirty.s_state.set(dirty.s_state.get() & !STATE_VALID);
    dirty.set_checksum();
    fs.write_superblock(&dirty)?;
    crate::journal::commit::flush(fs)?;
    let sb_block = 1024 / u64::from(p.new.block_size);
    for (b, data) in st.txn.iter().chain(st.after.iter()).filter(|(b, _)| **b != sb_block) {
        put(fs, p, *b, data)?;
    }
    crate::journal::commit::flush(fs)?;
    let mut sb = st.sb;
    sb.set_checksum();
    fs.write_superblock(&sb)?;
    crate::journal::commit::flush(fs)
}

fn put(fs: &Filesystem, p: &Plan, b: u64, data: &[u8]) -> Result<()> {
    let at = b << p.new.block_size_log2;
    fs.dev.write_at(at, data).map_err(|source| fs.write_failed(at, source))
}

/// Copies the `(from, to, length)` runs of moved blocks, a chunk at a time.
fn copy_runs(fs: &Filesystem, p: &Plan, runs: &[(u64, u64, u64)], tick: &mut dyn FnMut(u64)) -> Result<()> {
    let log2 = p.new.block_size_log2;
    let per = (ZERO_CHUNK >> log2).max(1);
    let mut buf = vec![0u8; ZERO_CHUNK.max(1 << log2) as usize];
    for &(from, to, len) in runs {
        let mut i = 0;
        while i < len {
            let n = (len - i).min(per);
            let bytes = &mut buf[..(n << log2) as usize];
            fs.read_bytes((from + i) << log2, bytes)?;
            let at = (to + i) << log2;
            fs.dev
                .write_at(at, bytes)
                .map_err(|source| fs.write_failed(at, source))?;
            i += n;
            tick(n);
        }
    }
    Ok(())
}

fn zero_runs(fs: &Filesystem, p: &Plan, runs: &[(u64, u64)], tick: &mut dyn FnMut(u64)) -> Result<()> {
    let log2 = p.new.block_size_log2;
    let zeros = vec![0u8; ZERO_CHUNK as usize];
    for &(start, len) in runs {
        let (mut at, end) = (start << log2, (start + len) << log2);
        while at < end {
            let n = (end - at).min(ZERO_CHUNK);
            fs.dev
                .write_at(at, &zeros[..n as usize])
                .map_err(|source| fs.write_failed(at, source))?;
            at += n;
        }
        tick(len);
    }
    Ok(())
}
