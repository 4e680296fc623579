//! Directory blocks under a checksum change (`directory.rst`, "Checksums"):
//! a leaf block needs the 12-byte tail dirent that holds its checksum,
//! taken from the slack of its last entry; an htree index block (root or
//! node, found by walking the index from the root) needs a `dx_tail`,
//! one entry slot fewer in `limit`. Turning checksums off gives the space
//! back (the tail joins the entry before it; `limit` grows again).
//!
//! A leaf whose last entry has less than 12 bytes of slack, or an index
//! block that is full, cannot take a checksum without rebuilding the
//! directory; tune2fs then leaves the image for `e2fsck -fD`. Full interior
//! nodes (which `e2fsck -D` makes) are evened out over their level when
//! that leaves each a slot ([`rebalance_nodes`]); anything else is
//! reported and the whole tune is refused before any write.
//!
//! With `^dir_index` the index blocks are treated as leaves (as tune2fs
//! does): read linearly, a root holds "." and "..", a node one empty entry.

use std::collections::BTreeSet;

use ext4kit_format::dir_entry::{has_tail, rec_len_from_disk, rec_len_to_disk, set_block_checksum};
use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::htree::{DxNode, DxParams, DxRoot, set_dx_checksum};
use ext4kit_format::inode::flags;

use super::Plan;
use super::rewrite::Rewrite;
use crate::error::{Error, Location, Result};
use crate::inode::Inode;

const TAIL: usize = 12;
/// Offset of `dx_countlimit` in a root and in a node block.
const ROOT_COUNT: usize = 32;
const NODE_COUNT: usize = 8;
const DX_TAIL: usize = 8;

/// Rewrites every block of directory `dir` for the new checksum state.
pub(crate) fn rewrite_dir(
    rw: &mut Rewrite<'_>,
    p: &Plan,
    dir: &Inode,
    seed: u32,
    refusals: &mut Vec<String>,
) -> Result<()> {
    let fs = rw.fs;
    let bs = u64::from(fs.geo.block_size);
    let runs = fs.map_range(dir, 0, dir.size() / bs)?;
    let was_indexed = dir.raw.has_flag(flags::INDEX) && p.old.features().compat.contains(CompatFeatures::DIR_INDEX);
    let index = if was_indexed {
        index_blocks(rw, p, dir, &runs)?
    } else {
        BTreeSet::new()
    };
    let keep_index = !p.clear_index;
    let csum = p.new.features().metadata_csum();
    if was_indexed && keep_index && csum && !p.old.features().metadata_csum() {
        rebalance_nodes(rw, p, dir, &runs)?;
    }
    for r in runs.iter().filter(|r| !r.unwritten) {
        for i in 0..r.len {
            let (lblk, b) = (r.logical + i, r.physical + i);
            let at = Location::Block {
                block: b,
                inode: dir.ino,
            };
            let buf = rw.block(b)?;
            let dx = index.contains(&lblk) && keep_index;
            let ok = match (dx, csum) {
                (true, true) => dx_add_tail(buf, lblk == 0, fs.geo.block_size, seed, at)?,
                (true, false) => dx_drop_tail(buf, lblk == 0),
                (false, true) => leaf_add_tail(buf, seed, at)?,
                (false, false) => leaf_drop_tail(buf, at)?,
            };
            if !ok {
                let what = if dx { "full htree index block" } else { "leaf block" };
                refusals.push(format!("directory inode {} {what} {lblk} (block {b})", dir.ino));
            }
        }
    }
    Ok(())
}

/// Physical block of logical block `lblk`, from the directory's runs.
fn physical(runs: &[crate::Run], lblk: u64, dir: u32) -> Result<u64> {
    runs.iter()
        .find(|r| r.logical <= lblk && lblk < r.end() && !r.unwritten)
        .map(|r| r.physical + (lblk - r.logical))
        .ok_or_else(|| Error::inconsistent(Location::Inode(dir), format!("htree points at unmapped block {lblk}")))
}

/// Logical blocks of the index: the root and every interior node.
fn index_blocks(rw: &mut Rewrite<'_>, p: &Plan, dir: &Inode, runs: &[crate::Run]) -> Result<BTreeSet<u64>> {
    let f = p.old.features();
    let params = DxParams {
        block_size: rw.fs.geo.block_size,
        metadata_csum: f.metadata_csum(),
        large_dir: f.incompat.contains(IncompatFeatures::LARGEDIR),
    };
    let root_b = physical(runs, 0, dir.ino)?;
    let at = |b| Location::Block {
        block: b,
        inode: dir.ino,
    };
    let root = DxRoot::parse(&rw.original(root_b)?, &params).map_err(|e| Error::format(at(root_b), e))?;
    let mut out = BTreeSet::from([0u64]);
    let mut level: Vec<u64> = root.entries.iter().map(|e| u64::from(e.block)).collect();
    for _ in 0..root.indirect_levels() {
        let mut next = Vec::new();
        for lblk in level {
            if !out.insert(lblk) {
                continue;
            }
            let b = physical(runs, lblk, dir.ino)?;
            let node = DxNode::parse(&rw.original(b)?, &params).map_err(|e| Error::format(at(b), e))?;
            next.extend(node.entries.iter().map(|e| u64::from(e.block)));
        }
        level = next;
    }
    Ok(out)
}

/// `e2fsck -D` packs interior index nodes full, leaving no slot for the
/// `dx_tail`. For a tree with one level of nodes, the leaf pointers are
/// spread evenly over the same nodes, in hash order, and the root's
/// entries follow (each node's first hash moves up to the root, as the
/// kernel's node split does). No block is added, so a tree whose nodes
/// are all full, or whose root points at leaves and is full, is left for
/// the refusal.
fn rebalance_nodes(rw: &mut Rewrite<'_>, p: &Plan, dir: &Inode, runs: &[crate::Run]) -> Result<()> {
    let bs = rw.fs.geo.block_size as usize;
    let params = DxParams {
        block_size: rw.fs.geo.block_size,
        metadata_csum: false,
        large_dir: p.old.features().incompat.contains(IncompatFeatures::LARGEDIR),
    };
    let at = |b| Location::Block {
        block: b,
        inode: dir.ino,
    };
    let root_b = physical(runs, 0, dir.ino)?;
    let root = DxRoot::parse(&rw.original(root_b)?, &params).map_err(|e| Error::format(at(root_b), e))?;
    if root.indirect_levels() != 1 {
        return Ok(());
    }
    let limit = (bs - NODE_COUNT - DX_TAIL) / 8;
    let mut nodes = Vec::new();
    let mut flat: Vec<(u32, u32)> = Vec::new();
    let mut full = false;
    for r in &root.entries {
        let b = physical(runs, u64::from(r.block), dir.ino)?;
        let node = DxNode::parse(&rw.original(b)?, &params).map_err(|e| Error::format(at(b), e))?;
        full |= node.entries.len() > limit;
        for (j, e) in node.entries.iter().enumerate() {
            flat.push((if j == 0 { r.hash } else { e.hash }, e.block));
        }
        nodes.push(b);
    }
    let n = nodes.len();
    if !full || flat.len() > n * limit {
        return Ok(());
    }
    let mut next = 0;
    for (i, &b) in nodes.iter().enumerate() {
        let take = flat.len() / n + usize::from(i < flat.len() % n);
        let chunk = &flat[next..next + take];
        next += take;
        let buf = rw.block(b)?;
        put16(buf, NODE_COUNT + 2, take as u16);
        buf[NODE_COUNT + 4..NODE_COUNT + 8].copy_from_slice(&chunk[0].1.to_le_bytes());
        for (j, &(hash, block)) in chunk.iter().enumerate().skip(1) {
            let off = NODE_COUNT + 8 * j;
            buf[off..off + 4].copy_from_slice(&hash.to_le_bytes());
            buf[off + 4..off + 8].copy_from_slice(&block.to_le_bytes());
        }
        if i > 0 {
            let off = ROOT_COUNT + 8 * i;
            rw.block(root_b)?[off..off + 4].copy_from_slice(&chunk[0].0.to_le_bytes());
        }
    }
    Ok(())
}

fn le16(buf: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([buf[off], buf[off + 1]])
}

fn put16(buf: &mut [u8], off: usize, v: u16) {
    buf[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Offsets of the entries of a leaf block, each checked to lie inside it.
fn entries(buf: &[u8], at: Location) -> Result<Vec<usize>> {
    let bs = buf.len();
    let mut out = Vec::new();
    let mut off = 0;
    while off < bs {
        if off + 8 > bs {
            return Err(Error::inconsistent(
                at,
                format!("directory entry at offset {off} is truncated"),
            ));
        }
        let rec = rec_len_from_disk(le16(buf, off + 4), bs);
        if rec < 8 || !rec.is_multiple_of(4) || off + rec > bs || usize::from(buf[off + 6]) + 8 > rec {
            return Err(Error::inconsistent(
                at,
                format!("directory entry at offset {off} has a bad rec_len {rec}"),
            ));
        }
        out.push(off);
        off += rec;
    }
    Ok(out)
}

/// Makes room for the tail in the last entry's slack and sets the checksum;
/// false when the slack is too small.
fn leaf_add_tail(buf: &mut [u8], seed: u32, at: Location) -> Result<bool> {
    if has_tail(buf) {
        set_block_checksum(buf, seed);
        return Ok(true);
    }
    let bs = buf.len();
    let last = *entries(buf, at)?.last().expect("a block holds at least one entry");
    let rec = rec_len_from_disk(le16(buf, last + 4), bs);
    let used = 8 + usize::from(buf[last + 6]).next_multiple_of(4);
    if rec < used + TAIL {
        return Ok(false);
    }
    put16(buf, last + 4, rec_len_to_disk(rec - TAIL, bs));
    set_block_checksum(buf, seed);
    Ok(true)
}

/// Gives the tail's 12 bytes back to the entry before it.
fn leaf_drop_tail(buf: &mut [u8], at: Location) -> Result<bool> {
    if !has_tail(buf) {
        return Ok(true);
    }
    let bs = buf.len();
    let offs = entries(buf, at)?;
    let [.., prev, tail] = offs[..] else {
        return Ok(true);
    };
    debug_assert_eq!(tail, bs - TAIL);
    let rec = rec_len_from_disk(le16(buf, prev + 4), bs);
    put16(buf, prev + 4, rec_len_to_disk(rec + TAIL, bs));
    buf[tail..].fill(0);
    Ok(true)
}

/// Shrinks `limit` by one slot for the `dx_tail` and sets its checksum;
/// false when every slot is in use.
fn dx_add_tail(buf: &mut [u8], root: bool, block_size: u32, seed: u32, at: Location) -> Result<bool> {
    let cl = if root { ROOT_COUNT } else { NODE_COUNT };
    let bs = buf.len();
    let limit = (bs - cl - DX_TAIL) / 8;
    let count = usize::from(le16(buf, cl + 2));
    if count > limit {
        return Ok(false);
    }
    put16(buf, cl, limit as u16);
    buf[bs - DX_TAIL..].fill(0);
    set_dx_checksum(buf, block_size, seed).map_err(|e| Error::format(at, e))?;
    Ok(true)
}

/// Gives the `dx_tail` slot back to the index.
fn dx_drop_tail(buf: &mut [u8], root: bool) -> bool {
    let cl = if root { ROOT_COUNT } else { NODE_COUNT };
    let bs = buf.len();
    put16(buf, cl, ((bs - cl) / 8) as u16);
    buf[bs - DX_TAIL..].fill(0);
    true
}
