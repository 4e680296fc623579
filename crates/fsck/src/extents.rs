//! Extent trees (`Documentation/filesystems/ext4/ifork.rst`,
//! `struct ext4_extent_header` / `ext4_extent_idx` / `ext4_extent`):
//! header magic and limits, depth that drops by one per level, entries in
//! order and inside their parent's range, blocks inside the file system,
//! and the tail checksum of every tree block.
//!
//! Repairs (pass 1 with a [`crate::map_fix::Fixer`]), as e2fsck's
//! `scan_extent_node`: a bad entry is removed from its node; a child node
//! left empty is removed from its parent (its block is then not claimed);
//! an index whose start disagrees with its child's first entry takes the
//! child's start; an extent block whose only fault is its checksum is
//! rewritten; a bad root header clears the inode.

use ext4kit_format::extent::{
    EXT_INIT_MAX_LEN, EXT4_EXT_MAGIC, MAX_DEPTH, node_capacity, set_block_checksum, verify_block_checksum,
};

use crate::problem::{self as p, Code, Finding};
use crate::walk::{Event, Walker};

/// Deepest tree accepted. The kernel stops at 5 (`MAX_DEPTH`); e2fsck reads
/// deeper trees (it only offers to shorten them), so a check-only run
/// accepts them up to this bound, which also bounds the recursion.
const MAX_TREE_DEPTH: u16 = 4 * MAX_DEPTH;

fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// Why a node header is unusable, or its entry count and depth.
fn header(buf: &[u8], is_root: bool, want_depth: Option<u16>) -> Result<(u16, u16), String> {
    let magic = le16(buf, 0);
    let (entries, max, depth) = (le16(buf, 2), le16(buf, 4), le16(buf, 6));
    if magic != EXT4_EXT_MAGIC {
        Err(format!("extent header has bad magic {magic:#x}"))
    } else if max == 0 || max > node_capacity(buf.len(), is_root) {
        Err(format!("extent header eh_max {max} is out of range"))
    } else if entries > max {
        Err(format!("extent header eh_entries {entries} exceeds eh_max {max}"))
    } else if depth > MAX_TREE_DEPTH {
        Err(format!("extent tree depth {depth} is too deep"))
    } else if let Some(d) = want_depth.filter(|&d| d != depth) {
        Err(format!("extent node depth {depth}, its parent expects {d}"))
    } else {
        Ok((entries, depth))
    }
}

/// Records a problem the walk can repair; true when it is to be repaired.
fn ask(w: &mut Walker, code: Code, msg: String, would: &'static str, blk: u64) -> bool {
    let mut f = Finding::new(code, msg, would).blk(blk);
    f.fixed = w.fixing(code);
    let yes = f.fixed;
    w.problem(f);
    yes
}

/// What a node holds after the walk (and its repairs).
struct NodeOut {
    /// Logical start of its first entry.
    first: Option<u64>,
    /// Entries left.
    entries: u16,
    /// The node's bytes changed.
    changed: bool,
}

/// Walks the tree rooted in `i_block`.
pub fn walk(w: &mut Walker, i_block: &[u8]) {
    let mut root = [0u8; 60];
    root.copy_from_slice(&i_block[..60]);
    let (entries, depth) = match header(&root, true, None) {
        Ok(h) => h,
        Err(why) => {
            let code = if le16(&root, 0) != EXT4_EXT_MAGIC {
                p::P1_MISSING_EXTENT_HEADER
            } else {
                p::P1_EXTENT_HEADER_INVALID
            };
            if ask(w, code, why, "clear the inode", 0)
                && let Some(fx) = w.fixer.as_mut()
            {
                fx.clear = true;
            }
            return;
        }
    };
    let out = node(w, &mut root, entries, depth, 0, 1u64 << 32);
    if out.changed
        && let Some(fx) = w.fixer.as_mut()
    {
        if out.entries == 0 {
            // An empty root holds leaves (`ext2fs_extent_delete`).
            root[6..8].fill(0);
        }
        fx.root = root;
        fx.root_dirty = true;
    }
}

/// The entries of one node covering logical blocks `[lo, hi)`.
fn node(w: &mut Walker, buf: &mut [u8], entries: u16, depth: u16, lo: u64, hi: u64) -> NodeOut {
    let keep = if depth == 0 {
        leaves(w, buf, entries, lo, hi)
    } else {
        indexes(w, buf, entries, depth, lo, hi)
    };
    let changed = keep.len() != usize::from(entries) || keep.iter().any(|k| k.1);
    let n = keep.len();
    if keep.len() != usize::from(entries) {
        for (dst, &(src, _)) in keep.iter().enumerate() {
            buf.copy_within(12 + src * 12..24 + src * 12, 12 + dst * 12);
        }
        buf[12 + n * 12..12 + usize::from(entries) * 12].fill(0);
        buf[2..4].copy_from_slice(&(n as u16).to_le_bytes());
    }
    NodeOut {
        first: (n > 0).then(|| u64::from(le32(buf, 12))),
        entries: n as u16,
        changed,
    }
}

/// Leaf extents of a node covering `[lo, hi)`; returns the entries kept
/// (index, changed in place).
fn leaves(w: &mut Walker, buf: &mut [u8], n: u16, lo: u64, hi: u64) -> Vec<(usize, bool)> {
    let mut keep = Vec::with_capacity(usize::from(n));
    let mut next = lo;
    for i in 0..usize::from(n) {
        let o = 12 + i * 12;
        let lblk = u64::from(le32(buf, o));
        let raw_len = le16(buf, o + 4);
        let (len, mut unwritten) = if raw_len > EXT_INIT_MAX_LEN {
            (raw_len - EXT_INIT_MAX_LEN, true)
        } else {
            (raw_len, false)
        };
        let mut changed = false;
        if unwritten && w.is_dir {
            let msg = format!("directory extent at logical {lblk} is marked uninitialized");
            if ask(w, p::P1_UNINIT_DBLOCK, msg, "clear the flag", 0) {
                buf[o + 4..o + 6].copy_from_slice(&len.to_le_bytes());
                (unwritten, changed) = (false, true);
            }
        }
        let pblk = (u64::from(le16(buf, o + 6)) << 32) | u64::from(le32(buf, o + 8));
        let bad = if !w.fs.valid_block(pblk) {
            Some((
                p::P1_EXTENT_BAD_START_BLK,
                format!("extent at logical {lblk} starts at invalid block {pblk}"),
            ))
        } else if lblk < next {
            Some((
                p::P1_OUT_OF_ORDER_EXTENTS,
                format!("extent at logical {lblk} overlaps or precedes the previous one"),
            ))
        } else if len > 0 && lblk + u64::from(len) > hi {
            Some((
                p::P1_EXTENT_END_OUT_OF_BOUNDS,
                format!("extent {lblk}+{len} ends past its index range"),
            ))
        } else if len == 0 {
            Some((
                p::P1_EXTENT_LENGTH_ZERO,
                format!("extent at logical {lblk} has zero length"),
            ))
        } else if pblk + u64::from(len) > w.fs.geo.blocks_count {
            Some((
                p::P1_EXTENT_ENDS_BEYOND,
                format!("extent at logical {lblk} ends past the file system"),
            ))
        } else if w.dir_limit.is_some_and(|m| lblk + u64::from(len) > m) {
            Some((
                p::P1_TOOBIG_DIR,
                format!("extent at logical {lblk} makes the directory too big"),
            ))
        } else {
            None
        };
        if let Some((code, msg)) = bad {
            let removed = ask(w, code, msg, "remove the extent", pblk);
            // Left in place, an extent past its index range still maps
            // blocks; the other faults make it unusable.
            if removed || code != p::P1_EXTENT_END_OUT_OF_BOUNDS {
                if !removed {
                    keep.push((i, false));
                }
                continue;
            }
        }
        keep.push((i, changed));
        next = lblk + u64::from(len);
        w.emit(Event::Data {
            lblk,
            pblk,
            len: u32::from(len),
            unwritten,
        });
    }
    keep
}

/// Index entries of a node covering `[lo, hi)`; returns the entries kept
/// (index, changed in place).
fn indexes(w: &mut Walker, buf: &mut [u8], n: u16, depth: u16, lo: u64, hi: u64) -> Vec<(usize, bool)> {
    let mut keep = Vec::with_capacity(usize::from(n));
    let mut prev: Option<u64> = None;
    for i in 0..usize::from(n) {
        if w.stopped() {
            keep.push((i, false));
            continue;
        }
        let o = 12 + i * 12;
        let start = u64::from(le32(buf, o));
        let blk = (u64::from(le16(buf, o + 8)) << 32) | u64::from(le32(buf, o + 4));
        let end = if i + 1 < usize::from(n) {
            u64::from(le32(buf, o + 12)).min(hi)
        } else {
            hi
        };
        let why = if !w.fs.valid_block(blk) {
            Some((
                p::P1_EXTENT_BAD_START_BLK,
                format!("extent index points at invalid block {blk}"),
            ))
        } else if prev.is_some_and(|p| start <= p) || start < lo {
            Some((
                p::P1_OUT_OF_ORDER_EXTENTS,
                format!("extent index at logical {start} is out of order"),
            ))
        } else {
            None
        };
        if let Some((code, msg)) = why {
            if !ask(w, code, msg, "remove the index entry", blk) {
                keep.push((i, false));
            }
            continue;
        }
        prev = Some(start);
        match subtree(w, blk, depth - 1, start, end.max(start + 1)) {
            Child::Keep { first } => {
                let mut changed = false;
                if let Some(f) = first.filter(|&f| f != start) {
                    let msg = format!("index entry starts at {start}, its child at {f}");
                    if ask(w, p::P1_EXTENT_INDEX_START_INVALID, msg, "set the index start", blk) {
                        buf[o..o + 4].copy_from_slice(&(f as u32).to_le_bytes());
                        changed = true;
                    }
                }
                keep.push((i, changed));
            }
            Child::Drop => {}
        }
    }
    keep
}

/// What became of a child node.
enum Child {
    /// Still referenced; its first logical block, when it has entries.
    Keep { first: Option<u64> },
    /// Its index entry is to be removed.
    Drop,
}

/// The child node at `blk`, at `depth`, covering `[lo, hi)`.
fn subtree(w: &mut Walker, blk: u64, depth: u16, lo: u64, hi: u64) -> Child {
    let keep = Child::Keep { first: Some(lo) };
    if !w.first_visit(blk) {
        let f = Finding::new(
            p::P1_EXTENT_HEADER_INVALID,
            format!("extent tree block {blk} is reached twice"),
            "remove the index entry",
        );
        w.problem(f.blk(blk));
        return keep;
    }
    let mut block = match w.fs.read_block(blk) {
        Ok(b) => b,
        Err(e) => {
            let f = Finding::new(
                p::P1_READ_EXTENT,
                format!("cannot read extent block {blk}: {e}"),
                "clear it",
            );
            w.problem(f.blk(blk));
            w.emit(Event::Meta { pblk: blk, level: 0 });
            return keep;
        }
    };
    let (entries, d) = match header(&block, false, Some(depth)) {
        Ok(h) => h,
        Err(why) => {
            if ask(w, p::P1_EXTENT_HEADER_INVALID, why, "remove the index entry", blk) {
                return Child::Drop;
            }
            w.emit(Event::Meta { pblk: blk, level: 0 });
            return keep;
        }
    };
    let csum = w.fs.geo.features.metadata_csum();
    let csum_bad = csum && verify_block_checksum(&block, w.csum_seed).is_err();
    let out = node(w, &mut block, entries, d, lo, hi);
    if out.entries == 0 && out.changed {
        return Child::Drop;
    }
    w.emit(Event::Meta { pblk: blk, level: 0 });
    let rewrite = if out.changed {
        true
    } else if csum_bad {
        let msg = format!("extent block {blk} checksum does not match");
        ask(w, p::P1_EXTENT_ONLY_CSUM_INVALID, msg, "recompute it", blk)
    } else {
        false
    };
    if rewrite {
        if csum {
            let _ = set_block_checksum(&mut block, w.csum_seed);
        }
        // A failed write leaves the node as it was; the next run finds it.
        let _ = w.fs.write_block(blk, &block);
    }
    Child::Keep { first: out.first }
}
