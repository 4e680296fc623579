//! The itree: an auxiliary B+tree of a hashed directory keyed by (inode
//! number, name hash), after seed 003 (Pazdera's "auxiliary tree for the
//! directory index"). `readdir` walks its leaves to return names in inode
//! order, so a `readdir` + `stat` (or a copy) of a huge directory reads the
//! inode table and the file data sequentially instead of in hash order.
//!
//! The tree lives outside the directory file, in blocks taken from the block
//! bitmaps and owned by no extent tree; its nodes hold 64-bit block numbers.
//! The root is linked from the last two `dx_entry` slots of the htree root
//! (`dx_root`), which the htree then never fills: those slots lie past
//! `dx_countlimit.count`, outside what the kernel's `dx_probe` reads and what
//! `ext4_dx_csum` covers, so a kernel still reads the directory when it mounts
//! the image read-only (the feature is read-only compatible). A directory that
//! has the tree carries [`ITREE_FL`]; the file system carries
//! [`crate::features::RoCompatFeatures::ITREE`], a bit no kernel assigns, so
//! a kernel mounts such an image read-only only.
//!
//! This module owns the node and link encodings, their validation and the node
//! checksum. It does not own the htree ([`crate::htree`]), the name hash
//! ([`crate::hash`]) or any walk across blocks (the engine's job).
//!
//! Layout of a node (one file-system block, little-endian):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 4 | magic [`NODE_MAGIC`] |
//! | 4 | 4 | crc32c, see [`node_checksum`] |
//! | 8 | 1 | level: 0 for a leaf |
//! | 9 | 1 | fullness class of this node (0-3: under 25, 50, 75, 100 %) |
//! | 10 | 2 | entry count |
//! | 12 | 4 | bytes of entries in use |
//! | 16 | 4 | inode number of the directory |
//! | 20 | 1 | layout version, [`NODE_VERSION`] |
//! | 21 | 11 | zero |
//! | 32 | | entries, sorted by key |
//!
//! A leaf entry is `inode` (4), `hash` (4), `name_len` (1), `file_type` (1),
//! two zero bytes, then the name, padded to 4 bytes. An index entry
//! ([`INDEX_ENTRY_SIZE`], 20 bytes) is the lowest key of its child (8), the
//! child's block (8: 64 bits, as the issue asks, where the seed's nodes had
//! 32), the child's fullness class (1) and three zero bytes.

mod link;
mod node;
pub mod raw;

pub use link::{LINK_MAGIC, LINK_SIZE, Link, link_offset, read_link, root_limit_with_link, write_link};
pub use node::{
    HEADER_SIZE, INDEX_ENTRY_SIZE, IndexEntry, LeafEntry, MAX_LEVELS, NODE_MAGIC, NODE_VERSION, Node, NodeContext,
    capacity, fullness_class, node_checksum,
};

/// Inode flag of a directory with an itree (a bit no kernel or e2fsprogs
/// release assigns; `EXT4_FL_USER_VISIBLE` does not include it).
pub const ITREE_FL: u32 = 0x0080_0000;

/// The tree's key of a name: inode number above, name hash below. The hash
/// (the htree's major hash, bit 0 clear) tells apart hard links of one inode
/// in one directory.
pub fn key(ino: u32, hash: u32) -> u64 {
    (u64::from(ino) << 32) | u64::from(hash)
}

#[cfg(test)]
mod tests;
