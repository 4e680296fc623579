//! The allocation policies and their tunables, chosen per open
//! (DESIGN.md: "policies are values"), so the seed 001 comparisons —
//! mballoc against the ext3 allocator, Orlov against the flex_bg inode
//! allocator — run in one binary on one image. The defaults are the
//! kernel's (`fs/ext4/mballoc.h`, `Documentation/ABI/testing/sysfs-fs-ext4`).

use std::fmt;
use std::str::FromStr;

/// How data and metadata blocks are found (`-o alloc=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BlockAllocator {
    /// ext4's multiblock allocator (seed 001 §2.3): per-group buddy
    /// bitmaps searched in criteria passes, requests normalized, per-inode
    /// and locality-group preallocation.
    #[default]
    Mballoc,
    /// The ext3 allocator kept for comparison (seed 001 §2.1): the goal
    /// after the file's last block (a new file's goal coloured by the
    /// writer), per-file reservation windows in an ordered map, and a
    /// bitmap scan.
    Ext3,
}

/// Where new inodes go (`-o inode_alloc=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InodeAllocator {
    /// Orlov for directories (top-level ones spread over groups with more
    /// than average free inodes and blocks, the rest near their parent),
    /// the parent's group for files; over flex groups when the image has
    /// `flex_bg` — the kernel's `find_group_orlov`/`find_group_other`.
    #[default]
    Orlov,
    /// Seed 001 §4.3: a flex group is filled to a free-block ratio before
    /// the next is used, directories like files, the previous group tried
    /// before moving on, room kept in each group for appends.
    FlexBg,
    /// The parent's group, then the following ones (ext4kit's first
    /// allocator; no spreading at all).
    Parent,
}

/// Allocation policy and tunables of one open file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocOptions {
    /// Block allocator.
    pub blocks: BlockAllocator,
    /// Inode allocator.
    pub inodes: InodeAllocator,
    /// Files smaller than this many blocks (size after the request) are
    /// served from the locality group; larger ones get a per-inode
    /// preallocation (`mb_stream_req`, default 16).
    pub stream_req: u32,
    /// Blocks a locality-group preallocation takes at a time
    /// (`mb_group_prealloc`, default 512); rounded to the stripe when one
    /// is set.
    pub group_prealloc: u32,
    /// Per-inode preallocation for growing files (default on, as mballoc).
    /// Off: every write allocates from its goal alone, so files written
    /// side by side interleave.
    pub inode_prealloc: bool,
    /// Choose groups from per-order lists of their largest free extent
    /// instead of scanning groups in order (`mb_optimize_scan`). `None`:
    /// the kernel's default, on when the image has 16 groups or more.
    pub optimize_scan: Option<bool>,
    /// RAID stripe in blocks (`stripe=`); 0 takes the superblock's
    /// `s_raid_stripe_width` (or `s_raid_stride`), as the kernel does.
    pub stripe: u32,
    /// Smallest request, as a power of two, that the power-of-two pass
    /// (`CR_POWER2_ALIGNED`) serves (`mb_order2_req`, default 2).
    pub order2_req: u32,
    /// Most free extents the best-fit passes look at before taking the
    /// best so far (`mb_max_to_scan`, default 200).
    pub max_to_scan: u32,
    /// Fewest they look at before a good-enough one ends the search
    /// (`mb_min_to_scan`, default 10).
    pub min_to_scan: u32,
    /// Delayed allocation (`-o delalloc`, the default; `nodelalloc`):
    /// buffered writes into holes and past the end of extent-mapped files
    /// hold their data and reserve space, and get blocks at write-back
    /// (see the `delalloc` module).
    pub delalloc: bool,
    /// Most bytes of file data held for delayed allocation before a write
    /// writes them back (default 64 MiB). A single write of half this or
    /// more allocates at once: its size is known, and holding it would
    /// overrun the bound.
    pub delalloc_bytes: usize,
    /// Write a file's held data back before a rename replaces another file
    /// with it, and at the last close after it was truncated to zero
    /// (`-o auto_da_alloc`, the default; `noauto_da_alloc`): the
    /// write-new-then-rename idiom then never leaves an empty file after
    /// a crash, as in ext4.
    pub auto_da_alloc: bool,
    /// Treat a flex group as the allocation unit (`mb_flex_aware=`,
    /// seed 001 §4.5: "make the various block allocators FLEX_BG grouping
    /// aware"): a new file's goal is next to its flex group's inode
    /// tables, a request is served inside its goal's flex group before
    /// anywhere else, then in the flex group with the most free blocks.
    /// Off (the default) is the kernel's per-group search.
    pub flex_aware: bool,
}

impl Default for AllocOptions {
    fn default() -> Self {
        Self {
            blocks: BlockAllocator::default(),
            inodes: InodeAllocator::default(),
            stream_req: 16,
            group_prealloc: 512,
            inode_prealloc: true,
            optimize_scan: None,
            stripe: 0,
            order2_req: 2,
            max_to_scan: 200,
            min_to_scan: 10,
            delalloc: true,
            delalloc_bytes: 64 << 20,
            auto_da_alloc: true,
            flex_aware: false,
        }
    }
}

impl FromStr for BlockAllocator {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mballoc" => Ok(Self::Mballoc),
            "ext3" => Ok(Self::Ext3),
            _ => Err(format!("unknown block allocator `{s}` (mballoc, ext3)")),
        }
    }
}

impl fmt::Display for BlockAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Mballoc => "mballoc",
            Self::Ext3 => "ext3",
        })
    }
}

impl FromStr for InodeAllocator {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "orlov" => Ok(Self::Orlov),
            "flexbg" => Ok(Self::FlexBg),
            "parent" => Ok(Self::Parent),
            _ => Err(format!("unknown inode allocator `{s}` (orlov, flexbg, parent)")),
        }
    }
}

impl fmt::Display for InodeAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Orlov => "orlov",
            Self::FlexBg => "flexbg",
            Self::Parent => "parent",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for b in [BlockAllocator::Mballoc, BlockAllocator::Ext3] {
            assert_eq!(b.to_string().parse::<BlockAllocator>(), Ok(b));
        }
        for i in [InodeAllocator::Orlov, InodeAllocator::FlexBg, InodeAllocator::Parent] {
            assert_eq!(i.to_string().parse::<InodeAllocator>(), Ok(i));
        }
        assert!("buddy".parse::<BlockAllocator>().unwrap_err().contains("mballoc, ext3"));
    }
}
