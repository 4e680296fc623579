//! In-place edits of itree nodes for the common cases — a name added to a
//! leaf with room, a name removed, a child's fullness class recorded, the
//! child an index node routes a key to — without decoding every entry into
//! owned values. A leaf of a 4 KiB block holds about a hundred names, and
//! decoding them all on every create costed more than the rest of the
//! itree's work. Each function verifies the node's header and checksum
//! first and bounds-checks every entry it steps over, so a corrupt block
//! is an error here as in [`Node::parse`].

use super::node::{
    HEADER_SIZE, INDEX_BLOCK_AT, INDEX_CLASS_AT, INDEX_ENTRY_SIZE, LEAF_FIXED, LeafEntry, MAX_LEVELS, NODE_MAGIC,
    NODE_VERSION, NodeContext, capacity, fullness_class, le64, node_checksum,
};
use crate::error::{FormatError, Result};
use crate::util::{le16, le32, slice};

const NODE: &str = "itree_node";
const LEAF: &str = "itree_leaf_entry";
const INDEX: &str = "itree_index_entry";

/// The header fields of a verified node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Height above the leaves.
    pub level: u8,
    /// Entries.
    pub count: usize,
    /// Bytes of entries in use.
    pub used: usize,
}

/// Checks magic, checksum, level, byte count and owner of the node at the
/// start of `buf`.
///
/// # Errors
/// As [`super::Node::parse`] for the header fields.
pub fn verify(buf: &[u8], ctx: &NodeContext) -> Result<Header> {
    let bs = usize::try_from(ctx.block_size).unwrap_or(usize::MAX);
    let block = slice(buf, 0, bs, NODE)?;
    let magic = le32(block, 0, NODE)?;
    if magic != NODE_MAGIC {
        return Err(FormatError::bad_magic(NODE, "magic", 0, magic.into()));
    }
    let version = block[20];
    if version != NODE_VERSION {
        return Err(FormatError::invalid(NODE, "version", 20, version.into()));
    }
    let stored = le32(block, 4, NODE)?;
    let computed = node_checksum(block, ctx)?;
    if stored != computed {
        return Err(FormatError::checksum(NODE, "checksum", 4, stored, computed));
    }
    let level = block[8];
    if level > MAX_LEVELS {
        return Err(FormatError::invalid(NODE, "level", 8, level.into()));
    }
    let count = usize::from(le16(block, 10, NODE)?);
    let used = usize::try_from(le32(block, 12, NODE)?).unwrap_or(usize::MAX);
    if used > capacity(ctx.block_size) || (level > 0 && used != count * INDEX_ENTRY_SIZE) {
        return Err(FormatError::invalid(NODE, "used", 12, used as u64));
    }
    let owner = le32(block, 16, NODE)?;
    if owner != ctx.dir_ino {
        return Err(FormatError::invalid(NODE, "dir_ino", 16, owner.into()));
    }
    Ok(Header { level, count, used })
}

/// In the verified index node at `level`: the position and block of the
/// child that covers `key` (the last entry whose key is at most `key`, or
/// the first), and that child's recorded fullness class.
///
/// # Errors
/// [`verify`]'s; `Invalid` `itree_node.level` for another level,
/// `itree_node.count` for an index without entries,
/// `itree_index_entry.block` for block 0.
pub fn index_child(buf: &[u8], ctx: &NodeContext, level: u8, key: u64) -> Result<(usize, u64, u8)> {
    let h = verify(buf, ctx)?;
    if h.level != level || level == 0 {
        return Err(FormatError::invalid(NODE, "level", 8, h.level.into()));
    }
    if h.count == 0 {
        return Err(FormatError::invalid(NODE, "count", 10, 0));
    }
    let key_at = |i: usize| le64(buf, HEADER_SIZE + i * INDEX_ENTRY_SIZE);
    let (mut lo, mut hi) = (0, h.count);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if key_at(mid)? <= key { lo = mid + 1 } else { hi = mid }
    }
    let at = lo.saturating_sub(1);
    let off = HEADER_SIZE + at * INDEX_ENTRY_SIZE;
    let block = le64(buf, off + INDEX_BLOCK_AT)?;
    if block == 0 {
        return Err(FormatError::invalid(INDEX, "block", off + INDEX_BLOCK_AT, 0));
    }
    Ok((at, block, buf[off + INDEX_CLASS_AT]))
}

/// Records `class` as the fullness of child `at` of the index node in
/// `buf` and reseals it.
///
/// # Errors
/// [`verify`]'s; `Invalid` `itree_node.count` when `at` is past the end.
pub fn set_child_class(buf: &mut [u8], ctx: &NodeContext, at: usize, class: u8) -> Result<()> {
    let h = verify(buf, ctx)?;
    if h.level == 0 || at >= h.count {
        return Err(FormatError::invalid(NODE, "count", 10, h.count as u64));
    }
    buf[HEADER_SIZE + at * INDEX_ENTRY_SIZE + INDEX_CLASS_AT] = class.min(3);
    reseal(buf, ctx)
}

/// Adds `e` to the verified leaf in `buf`, after every entry whose key is
/// at most its own. Returns the leaf's new fullness class, or `None` (the
/// block unchanged) when the entry does not fit.
///
/// # Errors
/// [`verify`]'s; `Invalid` on an entry that runs past `used`, an empty
/// name, or keys out of order.
pub fn leaf_insert(buf: &mut [u8], ctx: &NodeContext, e: &LeafEntry) -> Result<Option<u8>> {
    let h = leaf_header(buf, ctx)?;
    let size = e.size();
    let cap = capacity(ctx.block_size);
    if h.used + size > cap || e.name.is_empty() || e.name.len() > 255 {
        return Ok(None);
    }
    let key = e.key();
    let mut at = h.used;
    for_each_entry(buf, h, |off, k, _| {
        if k > key {
            at = off;
            return false;
        }
        true
    })?;
    let (start, end) = (HEADER_SIZE + at, HEADER_SIZE + h.used);
    buf.copy_within(start..end, start + size);
    let slot = &mut buf[start..start + size];
    slot.fill(0);
    slot[..4].copy_from_slice(&e.ino.to_le_bytes());
    slot[4..8].copy_from_slice(&e.hash.to_le_bytes());
    slot[8] = e.name.len() as u8;
    slot[9] = e.file_type;
    slot[LEAF_FIXED..LEAF_FIXED + e.name.len()].copy_from_slice(&e.name);
    let class = set_counts(buf, h.count + 1, h.used + size, cap)?;
    reseal(buf, ctx)?;
    Ok(Some(class))
}

/// Removes the entry with `key` and `name` from the verified leaf in
/// `buf`. Returns the leaf's new fullness class and entry count, or `None`
/// (the block unchanged) when no such entry is there.
///
/// # Errors
/// As for [`leaf_insert`].
pub fn leaf_remove(buf: &mut [u8], ctx: &NodeContext, key: u64, name: &[u8]) -> Result<Option<(u8, usize)>> {
    let h = leaf_header(buf, ctx)?;
    let mut hit = None;
    for_each_entry(buf, h, |off, k, size| {
        let n = usize::from(buf[HEADER_SIZE + off + 8]);
        let at = HEADER_SIZE + off + LEAF_FIXED;
        if k == key && buf.get(at..at + n) == Some(name) {
            hit = Some((off, size));
        }
        k <= key && hit.is_none()
    })?;
    let Some((off, size)) = hit else {
        return Ok(None);
    };
    let (start, end) = (HEADER_SIZE + off, HEADER_SIZE + h.used);
    buf.copy_within(start + size..end, start);
    buf[end - size..end].fill(0);
    let cap = capacity(ctx.block_size);
    let class = set_counts(buf, h.count - 1, h.used - size, cap)?;
    reseal(buf, ctx)?;
    Ok(Some((class, h.count - 1)))
}

fn leaf_header(buf: &[u8], ctx: &NodeContext) -> Result<Header> {
    let h = verify(buf, ctx)?;
    if h.level != 0 {
        return Err(FormatError::invalid(NODE, "level", 8, h.level.into()));
    }
    Ok(h)
}

/// Calls `f(offset, key, size)` on each entry of the leaf in order (offsets
/// from the end of the header) until it returns false, checking bounds,
/// names and key order on the way.
fn for_each_entry(buf: &[u8], h: Header, mut f: impl FnMut(usize, u64, usize) -> bool) -> Result<()> {
    let area = slice(buf, HEADER_SIZE, h.used, NODE)?;
    let (mut off, mut last, mut seen) = (0, 0u64, 0);
    while off < area.len() {
        let key = u64::from(le32(area, off + 4, LEAF)?) | (u64::from(le32(area, off, LEAF)?) << 32);
        let n = usize::from(*slice(area, off + 8, 1, LEAF)?.first().unwrap_or(&0));
        let size = (LEAF_FIXED + n + 3) & !3;
        if n == 0 || key < last || off + size > area.len() {
            return Err(FormatError::invalid(LEAF, "name_len", HEADER_SIZE + off + 8, n as u64));
        }
        last = key;
        seen += 1;
        if !f(off, key, size) {
            return Ok(());
        }
        off += size;
    }
    if seen != h.count {
        return Err(FormatError::invalid(NODE, "count", 10, h.count as u64));
    }
    Ok(())
}

fn set_counts(buf: &mut [u8], count: usize, used: usize, cap: usize) -> Result<u8> {
    let count = u16::try_from(count).map_err(|_| FormatError::invalid(NODE, "count", 10, count as u64))?;
    let class = fullness_class(used, cap);
    buf[9] = class;
    buf[10..12].copy_from_slice(&count.to_le_bytes());
    buf[12..16].copy_from_slice(&(used as u32).to_le_bytes());
    Ok(class)
}

fn reseal(buf: &mut [u8], ctx: &NodeContext) -> Result<()> {
    let crc = node_checksum(buf, ctx)?;
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}
