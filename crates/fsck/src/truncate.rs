//! Cutting an inode's mapping back to its `i_size`, for an orphan that was
//! being truncated when the system stopped (e2fsck's
//! `release_inode_blocks` with a link count). The blocks past the end are
//! dropped from the mapping, not from the bitmaps: this runs before pass
//! 1, which then leaves them unclaimed, and pass 5 frees them.
//!
//! Extent trees (`ifork.rst`): leaves lose the extents past the end, the
//! one across it is shortened; index nodes lose the children past it and
//! the one across it is cut the same way. Block maps: the slots past the
//! end are zeroed, and indirect blocks left empty are dropped.

use ext4kit_format::extent::{NodeEntries, encode_node, parse_node, set_block_checksum};
use ext4kit_format::inode::{RawInode, flags};

use crate::fs::RawFs;
use crate::walk::{Event, Walker};

/// Extent-tree levels followed at most.
const MAX_DEPTH: u32 = 5;

/// Cuts `raw`'s mapping at logical block `keep` (blocks `keep..` go) and
/// sets `i_blocks` to what is left (plus `extra` blocks, the xattr block).
///
/// # Errors
/// A node that cannot be read, parsed or written.
pub fn truncate(fs: &RawFs, ino: u32, raw: &mut RawInode, keep: u64, extra: u64) -> Result<(), String> {
    if raw.has_flag(flags::INLINE_DATA) {
        return Ok(());
    }
    let keep32 = u32::try_from(keep).unwrap_or(u32::MAX);
    if raw.has_flag(flags::EXTENTS) {
        let seed = raw.csum_seed(fs.seed, ino);
        let mut root = raw.i_block;
        cut_node(fs, &mut root, true, keep32, seed, MAX_DEPTH)?;
        raw.i_block = root;
    } else {
        cut_blockmap(fs, raw, keep)?;
    }
    let mut blocks = extra;
    let mut count = |e: Event| match e {
        Event::Data { len, .. } => blocks += u64::from(len),
        Event::Meta { .. } => blocks += 1,
    };
    let inode = *raw;
    Walker::new(fs, ino, &inode, &mut count).walk(&inode, inode.has_flag(flags::EXTENTS));
    set_blocks(fs, raw, blocks);
    Ok(())
}

/// Sets `i_blocks` to `blocks` file-system blocks, in the inode's unit.
fn set_blocks(fs: &RawFs, raw: &mut RawInode, blocks: u64) {
    let n = if raw.has_flag(flags::HUGE_FILE) {
        blocks
    } else {
        blocks * u64::from(fs.geo.block_size / 512)
    };
    raw.i_blocks_lo.set(n as u32);
    raw.i_blocks_high.set((n >> 32) as u16);
}

/// Cuts one extent node (the inode's root, or a tree block) at `keep`.
fn cut_node(fs: &RawFs, buf: &mut [u8], is_root: bool, keep: u32, seed: u32, depth: u32) -> Result<(), String> {
    let mut node = parse_node(buf, is_root).map_err(|e| e.to_string())?;
    match &mut node.entries {
        NodeEntries::Leaf(v) => {
            v.retain(|e| e.logical < keep);
            if let Some(e) = v.last_mut() {
                let end = u64::from(e.logical) + u64::from(e.len);
                if end > u64::from(keep) {
                    e.len = (keep - e.logical) as u16;
                }
            }
        }
        NodeEntries::Index(v) => {
            v.retain(|i| i.logical < keep || keep == 0);
            if keep == 0 {
                v.clear();
            }
            if let Some(last) = v.last().copied() {
                if depth == 0 || !fs.valid_block(last.child) {
                    return Err("extent tree too deep or corrupt".into());
                }
                let mut child = fs.read_block(last.child).map_err(|e| e.to_string())?;
                cut_node(fs, &mut child, false, keep, seed, depth - 1)?;
                fs.write_block(last.child, &child).map_err(|e| e.to_string())?;
            }
        }
    }
    if is_root && keep == 0 {
        node.depth = 0;
        node.entries = NodeEntries::Leaf(Vec::new());
    }
    encode_node(&node, buf);
    if !is_root && fs.geo.features.metadata_csum() {
        set_block_checksum(buf, seed).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn ptr(buf: &[u8], i: usize) -> u64 {
    buf.get(i * 4..i * 4 + 4)
        .map_or(0, |b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
}

/// Zeroes the block map's slots past `keep`.
fn cut_blockmap(fs: &RawFs, raw: &mut RawInode, keep: u64) -> Result<(), String> {
    let per = u64::from(fs.geo.block_size / 4);
    let mut base = 12u64;
    let mut span = 1u64;
    for i in 0..15usize {
        let (first, level) = if i < 12 { (i as u64, 0) } else { (base, i - 11) };
        if i >= 12 {
            span = span.saturating_mul(per);
        }
        let p = ptr(&raw.i_block, i);
        let whole = level > 0 && first.saturating_add(span) <= keep;
        let drop = first >= keep || (level > 0 && !whole && p != 0 && cut_indirect(fs, p, level, first, keep)?);
        if drop {
            raw.i_block[i * 4..i * 4 + 4].fill(0);
        }
        if i >= 12 {
            base = base.saturating_add(span);
        }
    }
    Ok(())
}

/// Cuts the indirect block `blk` (of `level`, mapping from `first`) at
/// `keep`; true when it is left empty and may go.
fn cut_indirect(fs: &RawFs, blk: u64, level: usize, first: u64, keep: u64) -> Result<bool, String> {
    if !fs.valid_block(blk) {
        return Ok(false);
    }
    let per = u64::from(fs.geo.block_size / 4);
    let span = per.saturating_pow(level as u32 - 1);
    let mut buf = fs.read_block(blk).map_err(|e| e.to_string())?;
    let mut changed = false;
    for j in 0..per as usize {
        let start = first.saturating_add(span.saturating_mul(j as u64));
        let p = ptr(&buf, j);
        if p == 0 || start.saturating_add(span) <= keep {
            continue;
        }
        let drop = start >= keep || (level > 1 && cut_indirect(fs, p, level - 1, start, keep)?);
        if drop {
            buf[j * 4..j * 4 + 4].fill(0);
            changed = true;
        }
    }
    let empty = buf.iter().all(|&b| b == 0);
    if changed && !empty {
        fs.write_block(blk, &buf).map_err(|e| e.to_string())?;
    }
    Ok(empty)
}
