//! Where everything goes: the used-block map of the new file system (a set of
//! ranges, so a 16 TiB layout costs memory per range, not per block), the
//! superblock and descriptor copies of each group, and the placement of each
//! group's bitmaps and inode table — packed at the start of each flex group
//! exactly as e2fsprogs' `ext2fs_allocate_group_table` packs them, or with
//! `-E flex_meta=middle` packed the same way from the flex group's middle
//! group on.
//!
//! See `Documentation/filesystems/ext4/overview.rst` ("Flexible Block
//! Groups", "Meta Block Groups") and `bitmaps.rst`.

use std::collections::BTreeMap;

use ext4kit_format::features::IncompatFeatures;

use super::options::FlexMeta;
use super::plan::Plan;
use crate::error::{Error, Result};

/// The blocks in use, as disjoint `start -> end` (exclusive) ranges.
///
/// With bigalloc the group tables are placed block by block (mke2fs's
/// "subcluster" bitmap), then [`UsedMap::to_clusters`] widens every range
/// to whole clusters: from there on each mark takes whole clusters and
/// each search starts at a cluster boundary, as `ext2fs_new_block2` on a
/// cluster bitmap does.
#[derive(Debug, Clone)]
pub struct UsedMap {
    ranges: BTreeMap<u64, u64>,
    blocks: u64,
    first: u64,
    /// `log2` of the cluster ratio once [`UsedMap::to_clusters`] ran, else 0.
    cluster_bits: u32,
}

impl UsedMap {
    /// An empty map over a file system of `blocks` blocks.
    pub fn new(plan: &Plan) -> Self {
        Self {
            ranges: BTreeMap::new(),
            blocks: plan.blocks_count,
            first: u64::from(plan.first_data_block),
            cluster_bits: 0,
        }
    }

    /// An empty map over `blocks` blocks whose first data block is `first`
    /// (resize places new groups' tables in an existing file system).
    pub fn over(blocks: u64, first: u64) -> Self {
        Self {
            ranges: BTreeMap::new(),
            blocks,
            first,
            cluster_bits: 0,
        }
    }

    /// Widens every used range to whole clusters of `1 << bits` blocks;
    /// later marks and searches work in clusters
    /// (`ext2fs_convert_subcluster_bitmap`).
    pub fn to_clusters(&mut self, bits: u32) {
        self.cluster_bits = bits;
        let old = std::mem::take(&mut self.ranges);
        for (s, e) in old {
            self.mark(s, e - s);
        }
    }

    /// Blocks per cluster (1 before [`UsedMap::to_clusters`]).
    pub fn cluster_ratio(&self) -> u64 {
        1 << self.cluster_bits
    }

    /// Marks `len` blocks from `start` used (the clusters holding them,
    /// after [`UsedMap::to_clusters`]).
    pub fn mark(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mask = self.cluster_ratio() - 1;
        let (mut s, mut e) = (start & !mask, (start + len + mask) & !mask);
        if let Some((&ps, &pe)) = self.ranges.range(..=s).next_back()
            && pe >= s
        {
            s = ps;
            e = e.max(pe);
        }
        let absorbed: Vec<(u64, u64)> = self.ranges.range(s..=e).map(|(&a, &b)| (a, b)).collect();
        for (a, b) in absorbed {
            self.ranges.remove(&a);
            e = e.max(b);
        }
        self.ranges.insert(s, e);
    }

    /// The end of the used range overlapping `[b, b + n)`, if any.
    fn blocker(&self, b: u64, n: u64) -> Option<u64> {
        self.ranges
            .range(..b + n)
            .next_back()
            .and_then(|(_, &e)| (e > b).then_some(e))
    }

    fn search(&self, mut b: u64, hi: u64, n: u64) -> Option<u64> {
        loop {
            if b >= hi || b + n > self.blocks {
                return None;
            }
            match self.blocker(b, n) {
                None => return Some(b),
                Some(end) => b = end,
            }
        }
    }

    /// `ext2fs_get_free_blocks2`: the first `n` free blocks in a row at a
    /// start in `[start, finish)`, wrapping to the first data block when
    /// `finish <= start`; 0 means "the first data block" for `start` and
    /// "same as start" for `finish`.
    pub fn get_free(&self, start: u64, finish: u64, n: u64) -> Option<u64> {
        let start = if start == 0 { self.first } else { start };
        let finish = if finish == 0 { start } else { finish };
        let n = n.max(1);
        if finish > start {
            return self.search(start, finish, n);
        }
        self.search(start, u64::MAX, n)
            .or_else(|| self.search(self.first, finish, n))
    }

    /// The first free block at or after `goal`, wrapping around.
    pub fn new_block(&self, goal: u64) -> Result<u64> {
        let goal = if goal >= self.blocks { self.first } else { goal };
        let goal = goal & !(self.cluster_ratio() - 1);
        self.get_free(goal, goal, 1).ok_or_else(no_space)
    }

    /// Length of the free run starting at the free block `s`, at most `limit`.
    pub fn free_run(&self, s: u64, limit: u64) -> u64 {
        let next_used = self.ranges.range(s..).next().map_or(self.blocks, |(&a, _)| a);
        (next_used.min(self.blocks) - s).min(limit)
    }

    /// True when `block` is used.
    pub fn is_used(&self, block: u64) -> bool {
        self.blocker(block, 1).is_some()
    }

    /// Calls `f(start, end)` for each used range clipped to `[lo, hi)`.
    pub fn for_each_in(&self, lo: u64, hi: u64, mut f: impl FnMut(u64, u64)) {
        let first = self.ranges.range(..=lo).next_back().map(|(&s, _)| s).unwrap_or(lo);
        for (&s, &e) in self.ranges.range(first..hi) {
            let (a, b) = (s.max(lo), e.min(hi));
            if a < b {
                f(a, b);
            }
        }
    }

    /// Number of used blocks in `[lo, hi)`.
    pub fn used_in(&self, lo: u64, hi: u64) -> u64 {
        let mut n = 0;
        self.for_each_in(lo, hi, |a, b| n += b - a);
        n
    }
}

fn no_space() -> Error {
    Error::InvalidArgument("the device is too small: no room left for the file system's metadata".into())
}

/// Where a group's superblock and descriptor copies are
/// (`ext2fs_super_and_bgd_loc2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupBase {
    /// The superblock copy, if the group holds one.
    pub super_block: Option<u64>,
    /// First block and length of the old-style descriptor table (plus
    /// reserved GDT blocks) copy.
    pub old_desc: Option<(u64, u64)>,
    /// The meta_bg descriptor block held by this group.
    pub meta_desc: Option<u64>,
}

impl GroupBase {
    /// Blocks this layout uses.
    pub fn used(&self) -> u64 {
        u64::from(self.super_block.is_some())
            + self.old_desc.map_or(0, |(_, n)| n)
            + u64::from(self.meta_desc.is_some())
    }
}

/// The superblock and descriptor copies in `group`.
pub fn group_base(plan: &Plan, group: u32) -> GroupBase {
    // Group 0's copies follow the primary superblock, which is block 1
    // with 1 KiB blocks even when bigalloc starts the group at block 0.
    let first = plan.group_first_block(group).max(plan.superblock_block());
    let has_super = plan.has_super(group);
    let meta_bg = plan.features.incompat.contains(IncompatFeatures::META_BG);
    let dpb = plan.descs_per_block();
    let mut base = GroupBase {
        super_block: has_super.then_some(first),
        ..GroupBase::default()
    };
    if !meta_bg || group / dpb < plan.first_meta_bg {
        let old = if meta_bg {
            plan.first_meta_bg
        } else {
            plan.desc_blocks + plan.reserved_gdt
        };
        if has_super && old > 0 {
            let n = u64::from(old).min(plan.blocks_count - (first + 1));
            base.old_desc = Some((first + 1, n));
        }
    } else if matches!(group % dpb, 0 | 1) || group % dpb == dpb - 1 {
        base.meta_desc = Some(first + u64::from(has_super));
    }
    base
}

/// The blocks of one group's own metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupTables {
    /// Block bitmap.
    pub block_bitmap: u64,
    /// Inode bitmap.
    pub inode_bitmap: u64,
    /// First inode-table block.
    pub inode_table: u64,
}

/// Marks every group's superblock and descriptor copies used
/// (`ext2fs_reserve_super_and_bgd` for each group).
pub fn reserve_bases(plan: &Plan, map: &mut UsedMap) {
    // Block 0 before a 1 KiB-block superblock at block 1 (bigalloc) is
    // reserved with it, as `ext2fs_reserve_super_and_bgd` does.
    if plan.first_data_block == 0 {
        map.mark(0, plan.superblock_block());
    }
    for g in 0..plan.group_count {
        let b = group_base(plan, g);
        if let Some(s) = b.super_block {
            map.mark(s, 1);
        }
        if let Some((s, n)) = b.old_desc {
            map.mark(s, n);
        }
        if let Some(s) = b.meta_desc {
            map.mark(s, 1);
        }
    }
}

/// Places every group's bitmaps and inode table, in group order, as
/// `ext2fs_allocate_tables` does.
///
/// # Errors
/// [`Error::InvalidArgument`] when a table does not fit.
pub fn allocate_tables(plan: &Plan, map: &mut UsedMap, stride: u32) -> Result<Vec<GroupTables>> {
    let mut tables = Vec::with_capacity(plan.group_count as usize);
    for g in 0..plan.group_count {
        let t = allocate_group(plan, map, &tables, g, stride)?;
        tables.push(t);
    }
    Ok(tables)
}

struct FlexCtx {
    size: u32,
    last_grp: u32,
    rem: u32,
    /// Where the flex group's packed tables start: its first block
    /// (mke2fs), or the first block of its middle group.
    base: u64,
}

/// The first block of the packing of the flex group whose groups are
/// `first..=last`: the start (mke2fs), or the start of the middle group
/// (`first + n/2` of its `n` groups), so that no data block of the flex
/// group is more than about half of it from the metadata.
fn flex_base(plan: &Plan, first: u32, last: u32) -> u64 {
    match plan.flex_meta {
        FlexMeta::Start => plan.group_first_block(first),
        FlexMeta::Middle => {
            let groups = last - first + 1;
            plan.group_first_block(first + groups / 2)
        }
    }
}

fn allocate_group(plan: &Plan, map: &mut UsedMap, prev: &[GroupTables], g: u32, stride: u32) -> Result<GroupTables> {
    let flex_on = plan.features.incompat.contains(IncompatFeatures::FLEX_BG) && plan.log_groups_per_flex > 0;
    let group_blk = plan.group_first_block(g);
    let itb = u64::from(plan.inode_blocks_per_group);
    if !flex_on {
        let last_blk = plan.group_last_block(g);
        let mut start = group_blk;
        if stride > 0 {
            let s = map.get_free(group_blk, last_blk, 1).ok_or_else(no_space)? + itb;
            let s = s + (u64::from(stride) * u64::from(g)) % (last_blk.saturating_sub(s) + 1);
            start = if s >= last_blk { group_blk } else { s };
        }
        let bb = take_one(map, start, group_blk, last_blk)?;
        let ib = take_one(map, start, group_blk, last_blk)?;
        let it = map.get_free(group_blk, last_blk, itb).ok_or_else(no_space)?;
        map.mark(it, itb);
        return Ok(GroupTables {
            block_bitmap: bb,
            inode_bitmap: ib,
            inode_table: it,
        });
    }
    let size = plan.flex_size();
    let last_grp = (g | (size - 1)).min(plan.group_count - 1);
    let fx = FlexCtx {
        size,
        last_grp,
        rem: last_grp - g + 1,
        base: flex_base(plan, g & !(size - 1), last_grp),
    };
    let last_blk = plan.group_last_block(last_grp);
    let mut table_offset = u64::from(size);
    let first_in_flex = g.is_multiple_of(size);
    if first_in_flex && last_grp == plan.group_count - 1 {
        let t = last_grp & (size - 1);
        table_offset = if t == 0 { u64::from(size) } else { u64::from(t) + 1 };
    }
    let prev_g = (!first_in_flex).then(|| prev[g as usize - 1]);
    let first_hint = if plan.flex_meta == FlexMeta::Start { 0 } else { fx.base };
    let hint = prev_g.map_or(first_hint, |p| p.block_bitmap + 1);
    let start = flexbg_offset(plan, map, g, hint, &fx, 1);
    let bb = take_one(map, start, group_blk, last_blk)?;
    let hint = prev_g.map_or(bb + table_offset, |p| p.inode_bitmap + 1);
    let start = flexbg_offset(plan, map, g, hint, &fx, 1);
    let ib = take_one(map, start, group_blk, last_blk)?;
    let hint = prev_g.map_or(ib + table_offset, |p| p.inode_table + itb);
    let start = flexbg_offset(plan, map, g, hint, &fx, itb);
    let it = map.get_free(start, last_blk, itb).ok_or_else(no_space)?;
    map.mark(it, itb);
    Ok(GroupTables {
        block_bitmap: bb,
        inode_bitmap: ib,
        inode_table: it,
    })
}

fn take_one(map: &mut UsedMap, start: u64, group_blk: u64, last_blk: u64) -> Result<u64> {
    let b = map
        .get_free(start, last_blk, 1)
        .or_else(|| map.get_free(group_blk, last_blk, 1))
        .ok_or_else(no_space)?;
    map.mark(b, 1);
    Ok(b)
}

/// `flexbg_offset`: where to look for the next table of the flex group.
fn flexbg_offset(plan: &Plan, map: &UsedMap, g: u32, hint: u64, fx: &FlexCtx, elem: u64) -> u64 {
    let size = (u64::from(fx.rem) * elem).min(u64::from(plan.blocks_per_group / 4));
    if hint != 0
        && hint < plan.blocks_count
        && let Some(b) = map.get_free(hint, hint + size, elem)
    {
        return b;
    }
    let start = plan.group_first_block(fx.size * (g / fx.size));
    let last = plan.group_last_block(fx.last_grp);
    map.get_free(fx.base, last, size)
        .or_else(|| map.get_free(start, last, size))
        .or_else(|| map.get_free(start, last, elem))
        .or_else(|| map.get_free(0, last, elem))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mkfs::options::MkfsOptions;

    fn layout(size: u64, edit: impl FnOnce(&mut MkfsOptions)) -> (Plan, Vec<GroupTables>) {
        let mut o = MkfsOptions::default();
        edit(&mut o);
        let plan = Plan::new(&o, size).unwrap();
        let mut map = UsedMap::new(&plan);
        reserve_bases(&plan, &mut map);
        let t = allocate_tables(&plan, &mut map, o.stride).unwrap();
        (plan, t)
    }

    #[test]
    fn used_map_merges_and_searches() {
        let plan = Plan::new(&MkfsOptions::default(), 64 << 20).unwrap();
        let mut m = UsedMap::new(&plan);
        m.mark(10, 5);
        m.mark(15, 5);
        m.mark(5, 6);
        assert_eq!(m.ranges.len(), 1);
        assert_eq!(m.used_in(0, 100), 15);
        assert_eq!(m.get_free(6, 100, 3), Some(20));
        assert_eq!(m.get_free(1, 5, 4), Some(1));
        assert_eq!(m.get_free(2, 5, 4), None);
        assert!(m.is_used(19) && !m.is_used(20));
    }

    // Block numbers are mke2fs 1.47.0's for the same options (dumpe2fs).
    #[test]
    fn flex_tables_pack_like_mke2fs_64m() {
        let (_, t) = layout(64 << 20, |_| {});
        assert_eq!(
            (t[0].block_bitmap, t[0].inode_bitmap, t[0].inode_table),
            (259, 267, 275)
        );
        assert_eq!(
            (t[1].block_bitmap, t[1].inode_bitmap, t[1].inode_table),
            (260, 268, 787)
        );
        assert_eq!(t[7].block_bitmap, 266);
    }

    #[test]
    fn sixteen_tib_flex_group_65536() {
        let (_, t) = layout(16 << 40, |_| {});
        assert_eq!(
            (t[0].block_bitmap, t[0].inode_bitmap, t[0].inode_table),
            (2049, 2065, 2081)
        );
        let g = &t[65536];
        assert_eq!(
            (g.block_bitmap, g.inode_bitmap, g.inode_table),
            (2147483648, 2147483664, 2147483680)
        );
    }

    #[test]
    fn flex_meta_middle_packs_from_the_middle_group() {
        // 8 groups of 8,192 blocks, one (partial) flex group: the middle
        // group is 4, and the offsets between tables are mke2fs's.
        let (p, t) = layout(64 << 20, |o| o.flex_meta = FlexMeta::Middle);
        let mid = p.group_first_block(4);
        assert_eq!(
            (t[0].block_bitmap, t[0].inode_bitmap, t[0].inode_table),
            (mid, mid + 8, mid + 16)
        );
        assert_eq!(t[7].block_bitmap, mid + 7);
        // 4 GiB, 32 groups, two flex groups of 16: groups 8 and 24 hold
        // every table of their flex group and nothing lies before them.
        let (p, t) = layout(4 << 30, |o| o.flex_meta = FlexMeta::Middle);
        for (g, tab) in t.iter().enumerate() {
            let home = if g < 16 { 8 } else { 24 };
            for b in [tab.block_bitmap, tab.inode_bitmap, tab.inode_table] {
                assert_eq!(p.group_of_block(b), home, "group {g}: {tab:?}");
            }
        }
    }

    #[test]
    fn meta_bg_descriptor_blocks() {
        let (p, t) = layout(64 << 20, |o| o.add_features("meta_bg,^resize_inode"));
        assert_eq!(group_base(&p, 0).meta_desc, Some(2));
        assert_eq!(group_base(&p, 1).meta_desc, Some(8194));
        assert_eq!(t[0].block_bitmap, 3);
    }
}
