//! Extent trees (`struct ext4_extent_header`, `ext4_extent_idx`,
//! `ext4_extent`, `ext4_extent_tail`): the 60-byte root in `i_block` and the
//! tree blocks below it.
//!
//! See `Documentation/filesystems/ext4/ifork.rst`.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};
use crate::util::{hilo64, le32};

/// `eh_magic`.
pub const EXT4_EXT_MAGIC: u16 = 0xF30A;
/// Deepest tree the kernel builds (`EXT4_MAX_EXTENT_DEPTH`).
pub const MAX_DEPTH: u16 = 5;
/// Longest initialized extent; longer `ee_len` values mark unwritten extents.
pub const EXT_INIT_MAX_LEN: u16 = 1 << 15;
const HDR: &str = "ext4_extent_header";
const TAIL: &str = "ext4_extent_tail";

/// Header opening every extent-tree node (12 bytes).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
#[repr(C)]
#[allow(missing_docs)] // kernel field names; see ifork.rst
pub struct RawExtentHeader {
    pub eh_magic: U16,
    pub eh_entries: U16,
    pub eh_max: U16,
    pub eh_depth: U16,
    pub eh_generation: U32,
}
const _: () = assert!(core::mem::size_of::<RawExtentHeader>() == 12);

/// Interior entry pointing at the node covering blocks from `ei_block` on.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
#[repr(C)]
#[allow(missing_docs)]
pub struct RawExtentIdx {
    pub ei_block: U32,
    pub ei_leaf_lo: U32,
    pub ei_leaf_hi: U16,
    pub ei_unused: U16,
}
const _: () = assert!(core::mem::size_of::<RawExtentIdx>() == 12);

/// Leaf entry mapping `ee_len` logical blocks from `ee_block` to a physical run.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
#[repr(C)]
#[allow(missing_docs)]
pub struct RawExtent {
    pub ee_block: U32,
    pub ee_len: U16,
    pub ee_start_hi: U16,
    pub ee_start_lo: U32,
}
const _: () = assert!(core::mem::size_of::<RawExtent>() == 12);

/// A decoded leaf extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// First logical block.
    pub logical: u32,
    /// Length in blocks (1..=32768).
    pub len: u16,
    /// First physical block.
    pub physical: u64,
    /// Unwritten (preallocated) extent: reads as zeros.
    pub unwritten: bool,
}

impl Extent {
    /// Encodes the extent (the unwritten flag rides in the length).
    pub fn to_raw(&self) -> RawExtent {
        let len = if self.unwritten {
            self.len + EXT_INIT_MAX_LEN
        } else {
            self.len
        };
        RawExtent {
            ee_block: self.logical.into(),
            ee_len: len.into(),
            ee_start_hi: ((self.physical >> 32) as u16).into(),
            ee_start_lo: (self.physical as u32).into(),
        }
    }
}

/// A decoded index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentIdx {
    /// First logical block covered by the child.
    pub logical: u32,
    /// Physical block of the child node.
    pub child: u64,
}

/// The entries of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEntries {
    /// Depth 0: leaf extents.
    Leaf(Vec<Extent>),
    /// Depth > 0: index entries.
    Index(Vec<ExtentIdx>),
}

/// A validated extent-tree node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtentNode {
    /// The raw header.
    pub header: RawExtentHeader,
    /// Depth of this node (0 = leaf).
    pub depth: u16,
    /// The entries.
    pub entries: NodeEntries,
}

impl PartialEq for RawExtentHeader {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for RawExtentHeader {}

/// Largest `eh_max` a node of `bytes` bytes can hold (a block node keeps 4
/// bytes for the tail).
pub fn node_capacity(bytes: usize, is_root: bool) -> u16 {
    let usable = if is_root { bytes } else { bytes.saturating_sub(4) };
    u16::try_from(usable.saturating_sub(12) / 12).unwrap_or(u16::MAX)
}

/// Parses a node: the 60-byte `i_block` root (`is_root`) or a tree block.
///
/// # Errors
/// Bad `eh_magic`; `eh_max` larger than the node can hold; `eh_entries >
/// eh_max`; `eh_depth > 5`; leaf extents with zero length, overlapping or
/// out of order, or that wrap past 2^32; index entries out of order.
pub fn parse_node(buf: &[u8], is_root: bool) -> Result<ExtentNode> {
    let (header, _) = RawExtentHeader::read_from_prefix(buf).map_err(|_| FormatError::truncated(HDR, 12, buf.len()))?;
    if header.eh_magic.get() != EXT4_EXT_MAGIC {
        return Err(FormatError::bad_magic(HDR, "eh_magic", 0, header.eh_magic.get().into()));
    }
    let max = header.eh_max.get();
    if max == 0 || max > node_capacity(buf.len(), is_root) {
        return Err(FormatError::invalid(HDR, "eh_max", 4, max.into()));
    }
    let count = header.eh_entries.get();
    if count > max {
        return Err(FormatError::invalid(HDR, "eh_entries", 2, count.into()));
    }
    let depth = header.eh_depth.get();
    if depth > MAX_DEPTH {
        return Err(FormatError::invalid(HDR, "eh_depth", 6, depth.into()));
    }
    let n = usize::from(count);
    let body = &buf[12..12 + n * 12];
    let entries = if depth == 0 {
        NodeEntries::Leaf(parse_leaves(body)?)
    } else {
        NodeEntries::Index(parse_indexes(body)?)
    };
    Ok(ExtentNode { header, depth, entries })
}

fn parse_leaves(body: &[u8]) -> Result<Vec<Extent>> {
    let mut out = Vec::with_capacity(body.len() / 12);
    let mut next_free: u64 = 0;
    for (i, chunk) in body.chunks_exact(12).enumerate() {
        let off = 12 + i * 12;
        let raw =
            RawExtent::read_from_bytes(chunk).map_err(|_| FormatError::truncated("ext4_extent", 12, chunk.len()))?;
        let raw_len = raw.ee_len.get();
        let (len, unwritten) = if raw_len > EXT_INIT_MAX_LEN {
            (raw_len - EXT_INIT_MAX_LEN, true)
        } else {
            (raw_len, false)
        };
        let logical = raw.ee_block.get();
        if len == 0 {
            return Err(FormatError::invalid("ext4_extent", "ee_len", off + 4, raw_len.into()));
        }
        if u64::from(logical) < next_free {
            return Err(FormatError::invalid("ext4_extent", "ee_block", off, logical.into()));
        }
        next_free = u64::from(logical) + u64::from(len);
        if next_free > 1 << 32 {
            return Err(FormatError::invalid("ext4_extent", "ee_len", off + 4, raw_len.into()));
        }
        let physical = hilo64(raw.ee_start_hi.get().into(), raw.ee_start_lo.get());
        out.push(Extent {
            logical,
            len,
            physical,
            unwritten,
        });
    }
    Ok(out)
}

fn parse_indexes(body: &[u8]) -> Result<Vec<ExtentIdx>> {
    let mut out: Vec<ExtentIdx> = Vec::with_capacity(body.len() / 12);
    for (i, chunk) in body.chunks_exact(12).enumerate() {
        let raw = RawExtentIdx::read_from_bytes(chunk)
            .map_err(|_| FormatError::truncated("ext4_extent_idx", 12, chunk.len()))?;
        let logical = raw.ei_block.get();
        if out.last().is_some_and(|p| p.logical >= logical) {
            return Err(FormatError::invalid(
                "ext4_extent_idx",
                "ei_block",
                12 + i * 12,
                logical.into(),
            ));
        }
        out.push(ExtentIdx {
            logical,
            child: hilo64(raw.ei_leaf_hi.get().into(), raw.ei_leaf_lo.get()),
        });
    }
    Ok(out)
}

/// Offset of the `ext4_extent_tail` in a tree block: right after `eh_max` entries.
pub fn tail_offset(block: &[u8]) -> Result<usize> {
    let max = usize::from(crate::util::le16(block, 4, HDR)?);
    let off = 12 + 12 * max;
    if off + 4 > block.len() {
        return Err(FormatError::invalid(HDR, "eh_max", 4, max as u64));
    }
    Ok(off)
}

/// The checksum of an extent-tree block: crc32c(inode seed) over the block
/// up to the tail (`ext4_extent_block_csum`).
pub fn block_checksum(block: &[u8], inode_seed: u32) -> Result<u32> {
    let off = tail_offset(block)?;
    Ok(crc32c_raw(inode_seed, &block[..off]))
}

/// Verifies the `et_checksum` of an extent-tree block.
pub fn verify_block_checksum(block: &[u8], inode_seed: u32) -> Result<()> {
    let off = tail_offset(block)?;
    let stored = le32(block, off, TAIL)?;
    let computed = crc32c_raw(inode_seed, &block[..off]);
    if stored != computed {
        return Err(FormatError::checksum(TAIL, "et_checksum", off, stored, computed));
    }
    Ok(())
}

/// Stores the checksum of an extent-tree block in its tail.
pub fn set_block_checksum(block: &mut [u8], inode_seed: u32) -> Result<()> {
    let off = tail_offset(block)?;
    let c = crc32c_raw(inode_seed, &block[..off]);
    block[off..off + 4].copy_from_slice(&c.to_le_bytes());
    Ok(())
}

/// Encodes `node` into `out` (the 60-byte root or a whole block), zeroing
/// unused entry slots. The caller sets the block checksum afterwards.
pub fn encode_node(node: &ExtentNode, out: &mut [u8]) {
    let mut header = node.header;
    let n = match &node.entries {
        NodeEntries::Leaf(v) => v.len(),
        NodeEntries::Index(v) => v.len(),
    };
    header.eh_entries.set(n as u16);
    header.eh_depth.set(node.depth);
    out[..12].copy_from_slice(header.as_bytes());
    let end = (12 + 12 * usize::from(header.eh_max.get())).min(out.len());
    out[12..end].fill(0);
    match &node.entries {
        NodeEntries::Leaf(v) => {
            for (i, e) in v.iter().enumerate() {
                out[12 + 12 * i..24 + 12 * i].copy_from_slice(e.to_raw().as_bytes());
            }
        }
        NodeEntries::Index(v) => {
            for (i, e) in v.iter().enumerate() {
                let raw = RawExtentIdx {
                    ei_block: e.logical.into(),
                    ei_leaf_lo: (e.child as u32).into(),
                    ei_leaf_hi: ((e.child >> 32) as u16).into(),
                    ei_unused: 0.into(),
                };
                out[12 + 12 * i..24 + 12 * i].copy_from_slice(raw.as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(entries: &[(u32, u16, u64)]) -> [u8; 60] {
        let node = ExtentNode {
            header: RawExtentHeader {
                eh_magic: EXT4_EXT_MAGIC.into(),
                eh_entries: 0.into(),
                eh_max: 4.into(),
                eh_depth: 0.into(),
                eh_generation: 0.into(),
            },
            depth: 0,
            entries: NodeEntries::Leaf(
                entries
                    .iter()
                    .map(|&(logical, len, physical)| Extent {
                        logical,
                        len,
                        physical,
                        unwritten: false,
                    })
                    .collect(),
            ),
        };
        let mut out = [0u8; 60];
        encode_node(&node, &mut out);
        out
    }

    #[test]
    fn leaf_round_trip() {
        let buf = root_with(&[(0, 10, 1000), (20, 5, 1 << 33)]);
        let node = parse_node(&buf, true).unwrap();
        let mut again = [0u8; 60];
        encode_node(&node, &mut again);
        assert_eq!(buf, again);
    }

    #[test]
    fn overlapping_and_bad_counts_are_rejected() {
        let buf = root_with(&[(0, 10, 1000), (5, 5, 2000)]);
        assert_eq!(parse_node(&buf, true).unwrap_err().field, "ee_block");
        let mut buf = root_with(&[(0, 10, 1000)]);
        buf[2] = 9; // eh_entries > eh_max
        assert_eq!(parse_node(&buf, true).unwrap_err().field, "eh_entries");
        let mut buf = root_with(&[]);
        buf[4] = 200; // eh_max beyond the 60 bytes
        assert_eq!(parse_node(&buf, true).unwrap_err().field, "eh_max");
    }

    #[test]
    fn unwritten_extent_decodes() {
        let mut buf = root_with(&[(0, 10, 1000)]);
        buf[16..18].copy_from_slice(&(EXT_INIT_MAX_LEN + 10).to_le_bytes());
        let node = parse_node(&buf, true).unwrap();
        assert_eq!(
            node.entries,
            NodeEntries::Leaf(vec![Extent {
                logical: 0,
                len: 10,
                physical: 1000,
                unwritten: true
            }])
        );
    }
}
