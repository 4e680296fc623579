//! Encoding, validation and checksum of one itree node (see the table in
//! [`crate::itree`]).

use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};
use crate::util::{le32, slice};

/// `"ITRE"` read as a little-endian `u32`.
pub const NODE_MAGIC: u32 = u32::from_le_bytes(*b"ITRE");
/// Bytes before the first entry.
pub const HEADER_SIZE: usize = 32;
/// Size of one index entry: key (8), child block (8), the child's fullness
/// class (1), zero (3).
pub const INDEX_ENTRY_SIZE: usize = 20;
/// Offset of the child block within an index entry.
pub(super) const INDEX_BLOCK_AT: usize = 8;
/// Offset of the child's fullness class within an index entry.
pub(super) const INDEX_CLASS_AT: usize = 16;
/// The node layout version this code writes and reads (header byte 20).
/// Version 0 nodes (48-bit child blocks in 16-byte index entries, written
/// before 64-bit ones) are refused by name.
pub const NODE_VERSION: u8 = 1;
/// Levels below the root the engine will follow: a bound on a corrupt
/// tree's depth, far above what 2^32 names need.
pub const MAX_LEVELS: u8 = 8;
/// Fixed part of a leaf entry, before the name.
pub(super) const LEAF_FIXED: usize = 12;

const NODE: &str = "itree_node";
const LEAF: &str = "itree_leaf_entry";
const INDEX: &str = "itree_index_entry";

/// Bytes of entries a node of `block_size` bytes holds.
pub fn capacity(block_size: u32) -> usize {
    usize::try_from(block_size).unwrap_or(0).saturating_sub(HEADER_SIZE)
}

/// The 2-bit fullness class of `used` bytes out of `cap`: 0 below a quarter,
/// 1 below half, 2 below three quarters, 3 above. Seed 003 planned these
/// coarse classes so coalescing is considered only when a node crosses a
/// quarter, not on every removal.
pub fn fullness_class(used: usize, cap: usize) -> u8 {
    if cap == 0 {
        return 3;
    }
    let quarters = used.saturating_mul(4) / cap;
    u8::try_from(quarters.min(3)).unwrap_or(3)
}

/// One name in a leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafEntry {
    /// Inode the name points at.
    pub ino: u32,
    /// The htree major hash of the name (bit 0 clear).
    pub hash: u32,
    /// The directory entry's file type code.
    pub file_type: u8,
    /// The name, 1 to 255 bytes.
    pub name: Vec<u8>,
}

impl LeafEntry {
    /// The entry's key, [`crate::itree::key`].
    pub fn key(&self) -> u64 {
        super::key(self.ino, self.hash)
    }

    /// Bytes the entry takes in a leaf.
    pub fn size(&self) -> usize {
        (LEAF_FIXED + self.name.len() + 3) & !3
    }
}

/// One child of an index node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Lowest key the child may hold; the first entry of a node covers
    /// every key below the second's.
    pub key: u64,
    /// The child's block.
    pub block: u64,
    /// The child's fullness class, as last written.
    pub fullness: u8,
}

/// A decoded node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// Level 0: names sorted by key.
    Leaf(Vec<LeafEntry>),
    /// Level 1 and up: children sorted by key.
    Index {
        /// Height above the leaves.
        level: u8,
        /// The children.
        entries: Vec<IndexEntry>,
    },
}

/// What decoding and checksumming a node depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeContext {
    /// File-system block size.
    pub block_size: u32,
    /// The directory's inode number, stored in every node.
    pub dir_ino: u32,
    /// The directory's checksum seed ([`crate::htree::inode_csum_seed`]),
    /// which binds a node to the inode number and generation.
    pub inode_seed: u32,
    /// The node's own block, bound into the checksum so a node written to
    /// the wrong place does not verify.
    pub block: u64,
}

/// The node checksum: crc32c from the directory's seed over the block
/// number (8 bytes, little-endian), then over the node with its checksum
/// field read as zero. Computed whether or not `metadata_csum` is on: the
/// tree is ext4kit's own and always checked.
///
/// # Errors
/// `Truncated` `itree_node` when `buf` is shorter than the block.
pub fn node_checksum(buf: &[u8], ctx: &NodeContext) -> Result<u32> {
    let bs = usize::try_from(ctx.block_size).unwrap_or(usize::MAX);
    let block = slice(buf, 0, bs, NODE)?;
    let seed = crc32c_raw(ctx.inode_seed, &ctx.block.to_le_bytes());
    let crc = crc32c_raw(seed, &block[..4]);
    let crc = crc32c_raw(crc, &[0; 4]);
    Ok(crc32c_raw(crc, &block[8..]))
}

impl Node {
    /// Height above the leaves.
    pub fn level(&self) -> u8 {
        match self {
            Node::Leaf(_) => 0,
            Node::Index { level, .. } => *level,
        }
    }

    /// Bytes of entries in use.
    pub fn used(&self) -> usize {
        match self {
            Node::Leaf(v) => v.iter().map(LeafEntry::size).sum(),
            Node::Index { entries, .. } => entries.len() * INDEX_ENTRY_SIZE,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        match self {
            Node::Leaf(v) => v.len(),
            Node::Index { entries, .. } => entries.len(),
        }
    }

    /// True when the node holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The lowest key in the node, if any.
    pub fn first_key(&self) -> Option<u64> {
        match self {
            Node::Leaf(v) => v.first().map(LeafEntry::key),
            Node::Index { entries, .. } => entries.first().map(|e| e.key),
        }
    }

    /// Decodes and validates the node at the start of `buf`: magic, owner,
    /// level, count and byte totals, entries in key order, and the
    /// checksum. Allocates at most one entry per 12 bytes of the block.
    ///
    /// # Errors
    /// `BadMagic` `itree_node.magic` (0); `Checksum` `itree_node.checksum`
    /// (4); `Invalid` `level` (8), `count` (10), `used` (12), `dir_ino` (16);
    /// `Invalid` on an entry's `name_len`, `inode`, `block` or key order,
    /// at the entry's offset.
    pub fn parse(buf: &[u8], ctx: &NodeContext) -> Result<Self> {
        let super::raw::Header { level, count, used } = super::raw::verify(buf, ctx)?;
        let block = slice(buf, 0, HEADER_SIZE + used, NODE)?;
        let area = &block[HEADER_SIZE..HEADER_SIZE + used];
        let node = if level == 0 {
            Node::Leaf(parse_leaf(area, count)?)
        } else {
            let entries = parse_index(area, count)?;
            Node::Index { level, entries }
        };
        if node.len() != count {
            return Err(FormatError::invalid(NODE, "count", 10, count as u64));
        }
        Ok(node)
    }

    /// Encodes the node into a fresh block for `ctx`, checksum included.
    ///
    /// # Errors
    /// `Invalid` `itree_node.used` (12) when the entries do not fit,
    /// `itree_leaf_entry.name_len` for an empty or over-long name,
    /// `itree_index_entry.block` 0.
    pub fn encode(&self, ctx: &NodeContext) -> Result<Vec<u8>> {
        let bs = usize::try_from(ctx.block_size).unwrap_or(0);
        let used = self.used();
        if used > capacity(ctx.block_size) {
            return Err(FormatError::invalid(NODE, "used", 12, used as u64));
        }
        let mut block = vec![0u8; bs];
        block[..4].copy_from_slice(&NODE_MAGIC.to_le_bytes());
        block[8] = self.level();
        block[9] = fullness_class(used, capacity(ctx.block_size));
        let count = u16::try_from(self.len()).map_err(|_| FormatError::invalid(NODE, "count", 10, 0))?;
        block[10..12].copy_from_slice(&count.to_le_bytes());
        block[12..16].copy_from_slice(&(used as u32).to_le_bytes());
        block[16..20].copy_from_slice(&ctx.dir_ino.to_le_bytes());
        block[20] = NODE_VERSION;
        let area = &mut block[HEADER_SIZE..HEADER_SIZE + used];
        match self {
            Node::Leaf(v) => encode_leaf(area, v)?,
            Node::Index { entries, .. } => encode_index(area, entries)?,
        }
        let crc = node_checksum(&block, ctx)?;
        block[4..8].copy_from_slice(&crc.to_le_bytes());
        Ok(block)
    }
}

fn parse_leaf(area: &[u8], count: usize) -> Result<Vec<LeafEntry>> {
    let mut out = Vec::with_capacity(count.min(area.len() / LEAF_FIXED));
    let mut off = 0;
    let mut last = 0u64;
    while off < area.len() {
        let at = HEADER_SIZE + off;
        let ino = le32(area, off, LEAF)?;
        let hash = le32(area, off + 4, LEAF)?;
        let name_len = usize::from(*slice(area, off + 8, 1, LEAF)?.first().unwrap_or(&0));
        let file_type = *slice(area, off + 9, 1, LEAF)?.first().unwrap_or(&0);
        if ino == 0 {
            return Err(FormatError::invalid(LEAF, "inode", at, 0));
        }
        if name_len == 0 {
            return Err(FormatError::invalid(LEAF, "name_len", at + 8, 0));
        }
        let name = slice(area, off + LEAF_FIXED, name_len, LEAF)?.to_vec();
        let e = LeafEntry {
            ino,
            hash,
            file_type,
            name,
        };
        if e.key() < last {
            return Err(FormatError::invalid(LEAF, "key", at, e.key()));
        }
        last = e.key();
        off += e.size();
        out.push(e);
    }
    if off != area.len() {
        return Err(FormatError::invalid(NODE, "used", 12, area.len() as u64));
    }
    Ok(out)
}

fn parse_index(area: &[u8], count: usize) -> Result<Vec<IndexEntry>> {
    if area.len() != count.saturating_mul(INDEX_ENTRY_SIZE) {
        return Err(FormatError::invalid(NODE, "used", 12, area.len() as u64));
    }
    let mut out: Vec<IndexEntry> = Vec::with_capacity(count);
    for i in 0..count {
        let off = i * INDEX_ENTRY_SIZE;
        let at = HEADER_SIZE + off;
        let key = le64(area, off)?;
        let block = le64(area, off + INDEX_BLOCK_AT)?;
        let fullness = area[off + INDEX_CLASS_AT];
        if block == 0 {
            return Err(FormatError::invalid(INDEX, "block", at + INDEX_BLOCK_AT, 0));
        }
        if fullness > 3 {
            return Err(FormatError::invalid(
                INDEX,
                "fullness",
                at + INDEX_CLASS_AT,
                fullness.into(),
            ));
        }
        if out.last().is_some_and(|p| p.key >= key) {
            return Err(FormatError::invalid(INDEX, "key", at, key));
        }
        out.push(IndexEntry { key, block, fullness });
    }
    Ok(out)
}

/// The little-endian `u64` at `off` of an index entry area (a key or a
/// child block).
pub(super) fn le64(area: &[u8], off: usize) -> Result<u64> {
    Ok(u64::from(le32(area, off, INDEX)?) | (u64::from(le32(area, off + 4, INDEX)?) << 32))
}

fn encode_leaf(area: &mut [u8], entries: &[LeafEntry]) -> Result<()> {
    let mut off = 0;
    for e in entries {
        let n = e.name.len();
        if n == 0 || n > 255 {
            return Err(FormatError::invalid(LEAF, "name_len", HEADER_SIZE + off + 8, n as u64));
        }
        area[off..off + 4].copy_from_slice(&e.ino.to_le_bytes());
        area[off + 4..off + 8].copy_from_slice(&e.hash.to_le_bytes());
        area[off + 8] = n as u8;
        area[off + 9] = e.file_type;
        area[off + LEAF_FIXED..off + LEAF_FIXED + n].copy_from_slice(&e.name);
        off += e.size();
    }
    Ok(())
}

fn encode_index(area: &mut [u8], entries: &[IndexEntry]) -> Result<()> {
    for (i, e) in entries.iter().enumerate() {
        let off = i * INDEX_ENTRY_SIZE;
        if e.block == 0 {
            return Err(FormatError::invalid(
                INDEX,
                "block",
                HEADER_SIZE + off + INDEX_BLOCK_AT,
                0,
            ));
        }
        area[off..off + 8].copy_from_slice(&e.key.to_le_bytes());
        area[off + INDEX_BLOCK_AT..off + INDEX_BLOCK_AT + 8].copy_from_slice(&e.block.to_le_bytes());
        area[off + INDEX_CLASS_AT] = e.fullness.min(3);
    }
    Ok(())
}
