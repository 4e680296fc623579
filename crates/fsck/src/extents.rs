//! Extent trees (`Documentation/filesystems/ext4/ifork.rst`,
//! `struct ext4_extent_header` / `ext4_extent_idx` / `ext4_extent`):
//! header magic and limits, depth that drops by one per level, entries in
//! order and inside their parent's range, blocks inside the file system,
//! and the tail checksum of every tree block.

use ext4kit_format::extent::{EXT_INIT_MAX_LEN, EXT4_EXT_MAGIC, MAX_DEPTH, node_capacity, verify_block_checksum};

use crate::problem::{self as p, Finding};
use crate::walk::{Event, Walker};

/// Deepest tree accepted. The kernel stops at 5 (`MAX_DEPTH`); e2fsck reads
/// deeper trees (it only offers to shorten them), so a check-only run
/// accepts them up to this bound, which also bounds the recursion.
const MAX_TREE_DEPTH: u16 = 4 * MAX_DEPTH;

/// Header fields of one node.
struct Header {
    entries: u16,
    depth: u16,
}

fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// Validates a node header; `None` (with a finding) if the node is unusable.
fn header(w: &mut Walker, buf: &[u8], is_root: bool, want_depth: Option<u16>, blk: Option<u64>) -> Option<Header> {
    let bad = |why: String| {
        let f = Finding::new(
            if is_root && le16(buf, 0) != EXT4_EXT_MAGIC {
                p::P1_MISSING_EXTENT_HEADER
            } else {
                p::P1_EXTENT_HEADER_INVALID
            },
            why,
            "clear the inode (or rebuild its extent tree)",
        );
        match blk {
            Some(b) => f.blk(b),
            None => f,
        }
    };
    let magic = le16(buf, 0);
    let (entries, max, depth) = (le16(buf, 2), le16(buf, 4), le16(buf, 6));
    let why = if magic != EXT4_EXT_MAGIC {
        Some(format!("extent header has bad magic {magic:#x}"))
    } else if max == 0 || max > node_capacity(buf.len(), is_root) {
        Some(format!("extent header eh_max {max} is out of range"))
    } else if entries > max {
        Some(format!("extent header eh_entries {entries} exceeds eh_max {max}"))
    } else if depth > MAX_TREE_DEPTH {
        Some(format!("extent tree depth {depth} is too deep"))
    } else if want_depth.is_some_and(|d| d != depth) {
        Some(format!(
            "extent node depth {depth}, its parent expects {}",
            want_depth.unwrap_or(0)
        ))
    } else {
        None
    };
    if let Some(why) = why {
        w.problem(bad(why));
        return None;
    }
    Some(Header { entries, depth })
}

/// Walks the tree rooted in `i_block`.
pub fn walk(w: &mut Walker, i_block: &[u8]) {
    node(w, i_block, true, None, 0, 1u64 << 32, None);
}

/// One node covering logical blocks `[lo, hi)`.
fn node(w: &mut Walker, buf: &[u8], is_root: bool, want: Option<u16>, lo: u64, hi: u64, blk: Option<u64>) {
    let Some(h) = header(w, buf, is_root, want, blk) else {
        return;
    };
    if h.depth == 0 {
        leaves(w, buf, h.entries, lo, hi, !is_root);
    } else {
        indexes(w, buf, h.entries, h.depth, lo, hi, !is_root);
    }
}

/// Leaf extents of a node covering `[lo, hi)`; a `child` node's first
/// extent must start where its index entry says.
fn leaves(w: &mut Walker, buf: &[u8], n: u16, lo: u64, hi: u64, child: bool) {
    let mut next = lo;
    for i in 0..usize::from(n) {
        let o = 12 + i * 12;
        let lblk = u64::from(le32(buf, o));
        let raw_len = le16(buf, o + 4);
        let (len, unwritten) = if raw_len > EXT_INIT_MAX_LEN {
            (raw_len - EXT_INIT_MAX_LEN, true)
        } else {
            (raw_len, false)
        };
        let pblk = (u64::from(le16(buf, o + 6)) << 32) | u64::from(le32(buf, o + 8));
        let f = |c, m: String| Finding::new(c, m, "remove the extent").blk(pblk);
        if len == 0 {
            w.problem(f(
                p::P1_EXTENT_LENGTH_ZERO,
                format!("extent at logical {lblk} has zero length"),
            ));
            continue;
        }
        if i == 0 && child && lblk != lo {
            w.problem(f(
                p::P1_EXTENT_INDEX_START_INVALID,
                format!("first extent starts at {lblk}, its index says {lo}"),
            ));
        }
        if lblk < next {
            w.problem(f(
                p::P1_OUT_OF_ORDER_EXTENTS,
                format!("extent at logical {lblk} overlaps or precedes the previous one"),
            ));
            continue;
        }
        if lblk + u64::from(len) > hi {
            w.problem(f(
                p::P1_EXTENT_END_OUT_OF_BOUNDS,
                format!("extent {lblk}+{len} ends past its index range"),
            ));
        }
        if !w.fs.valid_block(pblk) {
            w.problem(f(
                p::P1_EXTENT_BAD_START_BLK,
                format!("extent at logical {lblk} starts at invalid block {pblk}"),
            ));
            continue;
        }
        if pblk + u64::from(len) > w.fs.geo.blocks_count {
            w.problem(f(
                p::P1_EXTENT_ENDS_BEYOND,
                format!("extent at logical {lblk} ends past the file system"),
            ));
            continue;
        }
        next = lblk + u64::from(len);
        w.emit(Event::Data {
            lblk,
            pblk,
            len: u32::from(len),
            unwritten,
        });
    }
}

/// Index entries of a node covering `[lo, hi)`.
fn indexes(w: &mut Walker, buf: &[u8], n: u16, depth: u16, lo: u64, hi: u64, is_child: bool) {
    let mut prev: Option<u64> = None;
    for i in 0..usize::from(n) {
        let o = 12 + i * 12;
        let start = u64::from(le32(buf, o));
        let child = (u64::from(le16(buf, o + 8)) << 32) | u64::from(le32(buf, o + 4));
        let end = if i + 1 < usize::from(n) {
            u64::from(le32(buf, o + 12)).min(hi)
        } else {
            hi
        };
        let f = |c, m: String| Finding::new(c, m, "remove the index entry").blk(child);
        if i == 0 && is_child && start != lo {
            let msg = format!("first index entry starts at {start}, its parent says {lo}");
            w.problem(f(p::P1_EXTENT_INDEX_START_INVALID, msg));
        }
        if prev.is_some_and(|p| start <= p) || start < lo {
            w.problem(f(
                p::P1_OUT_OF_ORDER_EXTENTS,
                format!("extent index at logical {start} is out of order"),
            ));
            continue;
        }
        prev = Some(start);
        if !w.fs.valid_block(child) {
            w.problem(f(
                p::P1_EXTENT_BAD_START_BLK,
                format!("extent index points at invalid block {child}"),
            ));
            continue;
        }
        if !w.first_visit(child) {
            w.problem(f(
                p::P1_EXTENT_HEADER_INVALID,
                format!("extent tree block {child} is reached twice"),
            ));
            continue;
        }
        w.emit(Event::Meta { pblk: child, level: 0 });
        let block = match w.fs.read_block(child) {
            Ok(b) => b,
            Err(e) => {
                w.problem(f(p::P1_READ_EXTENT, format!("cannot read extent block {child}: {e}")));
                continue;
            }
        };
        if let Some(h) = header(w, &block, false, Some(depth - 1), Some(child)) {
            if w.fs.geo.features.metadata_csum() && verify_block_checksum(&block, w.csum_seed).is_err() {
                w.problem(f(
                    p::P1_EXTENT_ONLY_CSUM_INVALID,
                    format!("extent block {child} checksum does not match"),
                ));
            }
            if h.depth == 0 {
                leaves(w, &block, h.entries, start, end.max(start + 1), true);
            } else {
                indexes(w, &block, h.entries, h.depth, start, end.max(start + 1), true);
            }
        }
    }
}
