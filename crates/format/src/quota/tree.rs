//! The radix tree of a v2 quota file: reading every used entry from
//! untrusted blocks, and laying out a whole file for a set of entries.

use std::collections::{BTreeMap, BTreeSet};

use super::{DEPTH, DQ_HDR, DQ_SIZE, Dquot, Info, PER_BLOCK, QBLK, le32};
use crate::error::{FormatError, Result};

/// Quota blocks a file may have (2^32 ids never need more than this for
/// the inodes one file system holds): bounds what a corrupt
/// `dqi_blocks` can make a reader visit.
pub const MAX_QBLOCKS: u32 = 1 << 22;

/// A used entry and where it is: quota block and slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    /// The data block holding it.
    pub block: u32,
    /// Its slot there (0..[`PER_BLOCK`]).
    pub slot: usize,
    /// The entry.
    pub dquot: Dquot,
}

/// Every used entry of a file whose info is `info`; `read(q)` gives quota
/// block `q` (`None`: not mapped). Each data block is read once however
/// many references reach it; a reference past `dqi_blocks` or a second one
/// to an index block is an error, so each block is read at most once.
pub fn read_entries(info: &Info, mut read: impl FnMut(u32) -> Option<Vec<u8>>) -> Result<Vec<Located>> {
    let limit = info.blocks.clamp(2, MAX_QBLOCKS);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut index_seen = BTreeSet::new();
    let mut stack = vec![(1u32, 0u32)];
    while let Some((q, depth)) = stack.pop() {
        // An index block has one parent: a second reference is a loop or
        // a shared subtree, either way corrupt (and unbounded to follow).
        if !index_seen.insert(q) {
            return Err(FormatError::invalid(
                "quota tree",
                "index block",
                q as usize * QBLK,
                q.into(),
            ));
        }
        let b = fetch(&mut read, q)?;
        for i in (0..QBLK / 4).rev() {
            let r = le32(&b, i * 4);
            if r == 0 {
                continue;
            }
            if r >= limit || r < 2 {
                return Err(FormatError::invalid(
                    "quota tree",
                    "block reference",
                    q as usize * QBLK + i * 4,
                    r.into(),
                ));
            }
            if depth + 1 < DEPTH {
                stack.push((r, depth + 1));
            } else if seen.insert(r) {
                data_block(&fetch(&mut read, r)?, r, &mut out)?;
            }
        }
    }
    Ok(out)
}

fn fetch(read: &mut impl FnMut(u32) -> Option<Vec<u8>>, q: u32) -> Result<Vec<u8>> {
    let b = read(q).ok_or(FormatError::invalid("quota file", "block", q as usize * QBLK, q.into()))?;
    if b.len() < QBLK {
        return Err(FormatError::truncated("quota block", QBLK, b.len()));
    }
    Ok(b)
}

fn data_block(b: &[u8], q: u32, out: &mut Vec<Located>) -> Result<()> {
    for slot in 0..PER_BLOCK {
        let at = DQ_HDR + slot * DQ_SIZE;
        let e = &b[at..at + DQ_SIZE];
        if e.iter().any(|&x| x != 0) {
            out.push(Located {
                block: q,
                slot,
                dquot: Dquot::parse(e)?,
            });
        }
    }
    Ok(())
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// The order in which e2fsprogs' quota code first writes the `blocks`
/// tree blocks of a new file ([`build`]'s numbering): the header, then
/// the blocks the first entry's insertion adds (`get_free_dqblk` writes
/// each as it hands it out: three index levels and a data block), then
/// the root, which `do_insert_tree` writes back once that insertion
/// returns, then the rest in the order they were handed out. Files are
/// allocated block by block in this order (mke2fs, tune2fs), so it fixes
/// where each block lands.
pub fn first_write_order(blocks: usize) -> Vec<usize> {
    let first = (DEPTH as usize + 2).min(blocks);
    let mut order = vec![0];
    order.extend(2..first);
    order.extend((1..blocks).filter(|&b| b == 1 || b >= first));
    order.truncate(blocks.max(1));
    order
}

/// The whole file for `entries` (by id), with `info`'s grace times and
/// flags; `dqi_blocks` and the free lists are recomputed (a partly full
/// last data block heads the free-entry list, as the kernel expects).
/// Entries are packed in id order; the tree is built fresh.
pub fn build(info: &Info, entries: &BTreeMap<u32, Dquot>) -> Vec<u8> {
    let mut blocks: Vec<Vec<u8>> = vec![vec![0; QBLK], vec![0; QBLK]];
    let mut data: Option<(usize, usize)> = None;
    for (&id, d) in entries {
        let mut at = 1;
        let mut blk = 0;
        let mut slot = 0;
        for depth in 0..DEPTH {
            let idx = ((id >> (8 * (DEPTH - 1 - depth))) & 0xff) as usize * 4;
            let r = le32(&blocks[at], idx) as usize;
            let next = if depth == DEPTH - 1 {
                // The data block is found (or added) once the path to the
                // leaf exists, as `do_insert_tree` calls
                // `find_free_dqentry` last: a new one follows the new
                // index blocks.
                (blk, slot) = match data {
                    Some((b, n)) if n < PER_BLOCK => (b, n),
                    _ => {
                        blocks.push(vec![0; QBLK]);
                        (blocks.len() - 1, 0)
                    }
                };
                data = Some((blk, slot + 1));
                blk
            } else if r == 0 {
                blocks.push(vec![0; QBLK]);
                blocks.len() - 1
            } else {
                r
            };
            put32(&mut blocks[at], idx, next as u32);
            at = next;
        }
        let b = &mut blocks[blk];
        let e = Dquot { id, ..*d };
        b[DQ_HDR + slot * DQ_SIZE..DQ_HDR + (slot + 1) * DQ_SIZE].copy_from_slice(&e.to_bytes());
        b[8..10].copy_from_slice(&((slot + 1) as u16).to_le_bytes());
    }
    let free_entry = data.filter(|&(_, n)| n < PER_BLOCK).map_or(0, |(b, _)| b as u32);
    let head = Info {
        blocks: blocks.len() as u32,
        free_blk: 0,
        free_entry,
        ..*info
    };
    blocks[0] = head.to_block().to_vec();
    blocks.concat()
}
