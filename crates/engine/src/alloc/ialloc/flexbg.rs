//! The flex_bg inode allocator of seed 001 §4.3 (`find_group_flex`, the
//! kernel's default on flex_bg images in 2.6.27, later reachable only
//! through the since-removed `oldalloc` mount option): fill the parent's flex group while more than a
//! tenth of its blocks are free, then the one before it, then another;
//! directories are placed like files. Without flex_bg every group is its
//! own flex group.

use super::Placement;
use super::stats::{Groups, Stats, View};
use crate::error::Result;

/// Percentage of a flex group's blocks kept free for the appends of the
/// files already in it (`free_block_ratio` in `fs/ext4/ialloc.c`).
pub(super) const FREE_BLOCK_RATIO: u64 = 10;

/// The start group, or `None` when no flex group has both a free inode
/// and a free cluster (the caller then falls back as the kernel did, to
/// `find_group_other`).
pub(super) fn find_group_flex<G: Groups>(v: &View<'_, G>, p: &Placement) -> Result<Option<u32>> {
    let all = v.all_flex_stats()?;
    let blocks_per_flex = u64::from(v.clusters_per_group) * u64::from(v.flex_size());
    let Some(f) = choose_flex(&all, v.flex_of(p.parent_group), blocks_per_flex) else {
        return Ok(None);
    };
    v.first_free_in_flex(f)
}

/// The flex group: the parent's or the previous one when above the ratio,
/// else the first above it, else the one with the most free clusters.
fn choose_flex(all: &[Stats], parent: u32, blocks_per_flex: u64) -> Option<u32> {
    let above = |s: &Stats| s.free_inodes > 0 && s.free_clusters * 100 / blocks_per_flex.max(1) > FREE_BLOCK_RATIO;
    let at = |f: u32| all.get(f as usize).copied().unwrap_or_default();
    if above(&at(parent)) {
        return Some(parent);
    }
    let mut best = parent;
    if parent > 0 {
        best = parent - 1;
        if above(&at(best)) {
            return Some(best);
        }
    }
    for (i, s) in (0u32..).zip(all) {
        if i == parent || Some(i) == parent.checked_sub(1) {
            continue;
        }
        if above(s) {
            return Some(i);
        }
        let b = at(best);
        if b.free_inodes == 0 || (s.free_clusters > b.free_clusters && s.free_inodes > 0) {
            best = i;
        }
    }
    let b = at(best);
    (b.free_inodes > 0 && b.free_clusters > 0).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flex(free_inodes: u64, free_clusters: u64) -> Stats {
        Stats {
            free_inodes,
            free_clusters,
            used_dirs: 0,
        }
    }

    /// The parent's flex group is used down to the ratio, then the one
    /// before it, then the first other one above the ratio.
    #[test]
    fn fills_the_parents_flex_group_to_the_ratio() {
        let mut all = vec![flex(10, 500); 4];
        assert_eq!(choose_flex(&all, 2, 1000), Some(2));
        all[2].free_clusters = 100;
        assert_eq!(choose_flex(&all, 2, 1000), Some(1));
        all[1].free_clusters = 110;
        assert_eq!(choose_flex(&all, 2, 1000), Some(1));
        all[1].free_clusters = 100;
        assert_eq!(choose_flex(&all, 2, 1000), Some(0));
        all[0].free_inodes = 0;
        assert_eq!(choose_flex(&all, 2, 1000), Some(3));
    }

    /// When every flex group is below the ratio, the one with the most
    /// free clusters among those with free inodes; none when nothing is free.
    #[test]
    fn below_the_ratio_everywhere_takes_the_most_free() {
        let mut all = vec![flex(10, 50), flex(10, 80), flex(0, 90), flex(10, 60)];
        assert_eq!(choose_flex(&all, 0, 1000), Some(1));
        for s in &mut all {
            s.free_inodes = 0;
        }
        assert_eq!(choose_flex(&all, 0, 1000), None);
    }
}
