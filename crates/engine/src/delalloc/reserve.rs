//! How many blocks a delayed write must reserve: its pages, plus the
//! extent-tree blocks that mapping them could take. Like the kernel's
//! per-page reservation before the global pool (`ext4_calc_metadata_amount`,
//! which counted one new extent per logically discontiguous page), each
//! run of logically contiguous pages counts as an extent; on top, one extent
//! per 256 pages (1 MiB at 4 KiB) allows for free space too fragmented to
//! give a run in one piece, and every node split is taken as leaving its
//! halves half full. Counting every page as its own extent would be exact
//! but would hold back about 1 block in 170 — enough to refuse the last
//! megabytes of a nearly full image that the kernel fills. The excess is
//! given back as soon as the pages are mapped.

use ext4kit_format::extent::{MAX_DEPTH, parse_node};

use crate::inode::Inode;

/// Entries the inode's 60-byte root holds (`i_block`: a 12-byte header
/// and four 12-byte entries).
const ROOT_ENTRIES: u64 = 4;

/// An extent tree's shape, from its root in `i_block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TreeShape {
    /// `eh_depth`: 0 when the extents are in the inode.
    pub depth: u16,
    /// `eh_entries` of the root.
    pub root_entries: u16,
}

impl TreeShape {
    /// The shape of `inode`'s tree; an unreadable root counts as a full
    /// one of the deepest kind, which only reserves more.
    pub(crate) fn of(inode: &Inode) -> Self {
        match parse_node(&inode.raw.i_block, true) {
            Ok(node) => Self {
                depth: node.depth,
                root_entries: node.header.eh_entries.get(),
            },
            Err(_) => Self {
                depth: MAX_DEPTH,
                root_entries: ROOT_ENTRIES as u16,
            },
        }
    }
}

/// Pages that may map as one extent however fragmented free space is.
const PAGES_PER_EXTENT: u64 = 256;

/// Blocks to reserve for `pages` held pages in `runs` logically
/// contiguous runs, mapped into a tree of `shape` with nodes of
/// `block_size` bytes.
pub(crate) fn reservation(shape: TreeShape, pages: u64, runs: u64, block_size: u32) -> u64 {
    pages + tree_blocks(shape, runs + pages.div_ceil(PAGES_PER_EXTENT), block_size)
}

/// [`reservation`] under bigalloc, in blocks: `clusters` new data
/// clusters for `pages` held pages, and a whole cluster for each tree
/// block (e2fsck charges every metadata block a cluster).
pub(crate) fn cluster_reservation(
    shape: TreeShape,
    clusters: u64,
    pages: u64,
    runs: u64,
    block_size: u32,
    bits: u32,
) -> u64 {
    (clusters + tree_blocks(shape, runs + pages.div_ceil(PAGES_PER_EXTENT), block_size)) << bits
}

/// Tree blocks that adding `extents` extents to a tree of `shape` may
/// allocate.
pub(crate) fn tree_blocks(shape: TreeShape, extents: u64, block_size: u32) -> u64 {
    if extents == 0 {
        return 0;
    }
    // Entries per node after a split: half of (block - header - tail) / 12.
    let per = ((u64::from(block_size) - 16) / 12 / 2).max(1);
    if shape.depth == 0 && u64::from(shape.root_entries) + extents <= ROOT_ENTRIES {
        return 0;
    }
    // Each level gets the nodes that `n` new entries fill, plus one split
    // of the node they land in; the level above gets an entry per new
    // node.
    let mut total = 0;
    let mut n = extents;
    for _ in 0..=shape.depth {
        let nodes = n.div_ceil(per) + 1;
        total += nodes;
        n = nodes;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(depth: u16, root_entries: u16) -> TreeShape {
        TreeShape { depth, root_entries }
    }

    #[test]
    fn small_files_in_the_inode_need_no_tree_blocks() {
        assert_eq!(tree_blocks(shape(0, 0), 4, 4096), 0);
        assert_eq!(tree_blocks(shape(0, 3), 1, 4096), 0);
        assert_eq!(tree_blocks(shape(0, 0), 0, 4096), 0);
    }

    #[test]
    fn overflowing_the_root_reserves_leaves_for_every_page_as_an_extent() {
        // 170 entries per half-full 4 KiB leaf: 1,000 pages need 6 leaves
        // plus a split.
        assert_eq!(tree_blocks(shape(0, 4), 1, 4096), 2);
        assert_eq!(tree_blocks(shape(0, 0), 1000, 4096), 6 + 1);
        // A depth-1 tree adds index nodes over them.
        assert_eq!(tree_blocks(shape(1, 2), 1000, 4096), 7 + 2);
    }

    #[test]
    fn a_contiguous_run_reserves_a_little_more_than_its_pages() {
        // 16,000 pages in one run: 64 extents allowed for, 2 leaves.
        assert_eq!(reservation(shape(0, 0), 16_000, 1, 4096), 16_000 + 2);
        // Scattered pages count an extent each.
        assert_eq!(reservation(shape(0, 0), 1_000, 1_000, 4096), 1_000 + 7);
        assert_eq!(reservation(shape(0, 0), 3, 3, 4096), 3);
    }

    #[test]
    fn bigalloc_reserves_whole_clusters() {
        // 40 pages in 3 new clusters of 16 blocks, one run: the tree fits
        // in the inode.
        assert_eq!(cluster_reservation(shape(0, 0), 3, 40, 1, 1024, 4), 48);
        // Pages all in allocated clusters reserve nothing.
        assert_eq!(cluster_reservation(shape(0, 0), 0, 40, 1, 1024, 4), 0);
        // A full root: the leaf and its split take a cluster each.
        assert_eq!(cluster_reservation(shape(0, 4), 1, 1, 1, 1024, 4), 3 * 16);
    }

    #[test]
    fn grows_with_pages_and_never_undercounts_the_leaves() {
        let mut last = 0;
        for pages in [1u64, 10, 100, 1_000, 100_000, 1 << 20] {
            let n = tree_blocks(shape(2, 4), pages, 1024);
            assert!(n >= last, "{pages}: {n} < {last}");
            assert!(n >= pages.div_ceil(42), "{pages}: {n}");
            last = n;
        }
    }
}
