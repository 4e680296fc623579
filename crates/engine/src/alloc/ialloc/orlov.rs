//! The Orlov allocator, as the kernel runs it today (`find_group_orlov`
//! and `find_group_other` in `fs/ext4/ialloc.c`; seed 001 §4.1).
//! Top-level directories are spread over the groups with the most room;
//! other directories go near their parent unless its group is crowded;
//! files go to the parent's group. On a flex_bg image every decision but
//! the last is made over flex groups, then the first group of the chosen
//! flex group with a free inode is taken.

use super::Placement;
use super::stats::{Groups, Stats, View, totals};
use crate::error::Result;

/// The start group for a new directory (`find_group_orlov`).
pub(super) fn find_group_orlov<G: Groups>(v: &View<'_, G>, p: &Placement) -> Result<Option<u32>> {
    let all = v.all_flex_stats()?;
    let avg = Averages::of(&all);
    let chosen = if p.is_dir && p.topdir {
        spread_topdir(&all, &avg, p.name_hash, v.inodes_per_group)
    } else {
        near_parent(v, &all, &avg, p)
    };
    if let Some(f) = chosen {
        if v.flex_size() == 1 {
            return Ok(Some(f));
        }
        if let Some(g) = v.first_free_in_flex(f)? {
            return Ok(Some(g));
        }
    }
    fallback(v, avg.total.free_inodes, p.parent_group)
}

/// Totals and per-(flex-)group averages, read once per allocation. The
/// kernel reads approximate per-CPU counters here; these are exact sums.
struct Averages {
    total: Stats,
    free_inodes: u64,
    free_clusters: u64,
    units: u64,
}

impl Averages {
    fn of(all: &[Stats]) -> Self {
        let total = totals(all);
        let units = (all.len() as u64).max(1);
        Averages {
            total,
            free_inodes: total.free_inodes / units,
            free_clusters: total.free_clusters / units,
            units,
        }
    }
}

/// A top-level directory: starting at `hash % units`, the (flex) group with
/// the fewest directories among those with at least average free inodes
/// and free clusters; ties go to the first met. Starting at the hash of
/// the name keeps the choice reproducible and spreads equal candidates.
fn spread_topdir(all: &[Stats], avg: &Averages, hash: u32, ipg: u32) -> Option<u32> {
    let n = all.len() as u32;
    let start = hash % n.max(1);
    let mut best: Option<(u32, u64)> = None;
    for i in 0..n {
        let f = ((u64::from(start) + u64::from(i)) % u64::from(n)) as u32;
        let s = all[f as usize];
        let fewest = best.map_or(u64::from(ipg), |(_, d)| d);
        if s.free_inodes == 0 || s.used_dirs >= fewest {
            continue;
        }
        if s.free_inodes < avg.free_inodes || s.free_clusters < avg.free_clusters {
            continue;
        }
        best = Some((f, s.used_dirs));
    }
    best.map(|(f, _)| f)
}

/// Any other inode Orlov places: the first (flex) group from where this
/// parent's last inode went (`i_last_alloc_group`), else from the parent's
/// own, that is not crowded with directories and keeps enough free inodes
/// and clusters. All three limits scale with the flex group size, as in
/// today's kernel (older ones allowed one group's worth of directories,
/// `inodes_per_group / 16`, per flex group, and let a negative
/// `min_clusters` reject every group).
fn near_parent<G: Groups>(v: &View<'_, G>, all: &[Stats], avg: &Averages, p: &Placement) -> Option<u32> {
    let size = u64::from(v.flex_size());
    let inodes = u64::from(v.inodes_per_group) * size;
    let max_dirs = avg.total.used_dirs / avg.units + inodes / 16;
    let min_inodes = avg.free_inodes.saturating_sub(inodes / 4).max(1);
    let min_clusters = avg
        .free_clusters
        .saturating_sub(u64::from(v.clusters_per_group) * size / 4);
    let start = v.flex_of(p.last_group.unwrap_or(p.parent_group));
    let n = all.len() as u32;
    (0..n)
        .map(|i| ((u64::from(start) + u64::from(i)) % u64::from(n)) as u32)
        .find(|&f| {
            let s = all[f as usize];
            s.used_dirs < max_dirs && s.free_inodes >= min_inodes && s.free_clusters >= min_clusters
        })
}

/// When no (flex) group qualifies: the first group from the parent's with
/// at least the per-group average of free inodes, then any free inode
/// (the kernel's retry for small file systems).
fn fallback<G: Groups>(v: &View<'_, G>, free_inodes: u64, parent_group: u32) -> Result<Option<u32>> {
    let n = v.groups.count();
    let avg = free_inodes / u64::from(n.max(1));
    for need in [avg, 0] {
        for i in 0..n {
            let g = ((u64::from(parent_group) + u64::from(i)) % u64::from(n)) as u32;
            let free = v.groups.stats(g)?.free_inodes;
            if free > 0 && free >= need {
                return Ok(Some(g));
            }
        }
        if avg == 0 {
            break;
        }
    }
    Ok(None)
}

/// The start group for anything but a directory (`find_group_other`).
/// With flex groups: the parent's flex group, then that of this parent's
/// last inode, then Orlov's search as for a non-top directory.
pub(super) fn find_group_other<G: Groups>(v: &View<'_, G>, p: &Placement) -> Result<Option<u32>> {
    if v.flex_size() == 1 {
        return find_group_hashed(v.groups, p);
    }
    if let Some(g) = v.first_free_in_flex(v.flex_of(p.parent_group))? {
        return Ok(Some(g));
    }
    if let Some(last) = p.last_group
        && let Some(g) = v.first_free_in_flex(v.flex_of(last))?
    {
        return Ok(Some(g));
    }
    let file = Placement { is_dir: false, ..*p };
    find_group_orlov(v, &file)
}

/// Without flex groups (and as the flex_bg policy's fallback): the
/// parent's group when it has free inodes and clusters; else a quadratic
/// probe from a start offset by the parent's inode number, so that files
/// of one directory share a group and those of its neighbours do not;
/// else the first group after the parent's with any free inode.
pub(super) fn find_group_hashed<G: Groups>(groups: &G, p: &Placement) -> Result<Option<u32>> {
    let n = u64::from(groups.count());
    let roomy = |s: Stats| s.free_inodes > 0 && s.free_clusters > 0;
    if roomy(groups.stats(p.parent_group)?) {
        return Ok(Some(p.parent_group));
    }
    let mut g = (u64::from(p.parent_group) + u64::from(p.parent_ino)) % n;
    let mut step = 1u64;
    while step < n {
        g = (g + step) % n;
        if roomy(groups.stats(g as u32)?) {
            return Ok(Some(g as u32));
        }
        step <<= 1;
    }
    for i in 1..=n {
        let g = ((u64::from(p.parent_group) + i) % n) as u32;
        if groups.stats(g)?.free_inodes > 0 {
            return Ok(Some(g));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::super::stats::Table;
    use super::*;

    fn dir(parent_group: u32, topdir: bool, hash: u32) -> Placement {
        Placement {
            parent_ino: 2,
            parent_group,
            last_group: None,
            is_dir: true,
            topdir,
            name_hash: hash,
        }
    }

    /// The group with fewest directories wins, ties to the first from the
    /// hash's start; groups below average free clusters are passed over.
    #[test]
    fn topdir_takes_fewest_dirs_from_the_hash_start() {
        let mut t = Table::fresh(8, 100, 1000);
        for s in &mut t.0 {
            s.used_dirs = 1;
        }
        t.0[2].used_dirs = 0;
        t.0[6].used_dirs = 0;
        t.0[6].free_clusters = 10;
        let v = t.view(0, 100, 1000);
        assert_eq!(find_group_orlov(&v, &dir(0, true, 5)).unwrap(), Some(2));
        t.0[6].free_clusters = 1000;
        let v = t.view(0, 100, 1000);
        assert_eq!(find_group_orlov(&v, &dir(0, true, 5)).unwrap(), Some(6));
        assert_eq!(find_group_orlov(&v, &dir(0, true, 7)).unwrap(), Some(2));
    }

    /// A subdirectory stays in its parent's group until that group holds
    /// `max_dirs` directories, then moves to the next.
    #[test]
    fn subdirectory_stays_near_parent_until_crowded() {
        let mut t = Table::fresh(8, 256, 1000);
        let v = t.view(0, 256, 1000);
        assert_eq!(find_group_orlov(&v, &dir(3, false, 0)).unwrap(), Some(3));
        t.0[3].used_dirs = 20;
        let v = t.view(0, 256, 1000);
        assert_eq!(find_group_orlov(&v, &dir(3, false, 0)).unwrap(), Some(4));
    }

    /// Flex groups: the choice is made on sums, then the first group of
    /// the flex group with a free inode is returned.
    #[test]
    fn flex_groups_pick_the_first_group_with_room() {
        let mut t = Table::fresh(16, 40, 1000);
        for s in &mut t.0[8..12] {
            s.free_inodes = 64;
        }
        t.0[8].free_inodes = 0;
        let v = t.view(2, 64, 1000);
        let p = dir(0, true, 2);
        assert_eq!(find_group_orlov(&v, &p).unwrap(), Some(9));
    }

    /// Files: the parent's group while it has room, then the quadratic
    /// probe, then any group with a free inode.
    #[test]
    fn files_probe_from_the_parent() {
        let mut t = Table::fresh(8, 10, 10);
        let file = Placement {
            is_dir: false,
            ..dir(1, false, 0)
        };
        assert_eq!(find_group_hashed(&t, &file).unwrap(), Some(1));
        t.0[1].free_clusters = 0;
        // start (1 + 2) % 8 = 3, probes 4, 6, 2 (3+1, +2, +4 mod 8)
        assert_eq!(find_group_hashed(&t, &file).unwrap(), Some(4));
        for g in [4, 6, 2] {
            t.0[g].free_clusters = 0;
        }
        assert_eq!(find_group_hashed(&t, &file).unwrap(), Some(2));
        for s in &mut t.0 {
            s.free_inodes = 0;
        }
        assert_eq!(find_group_hashed(&t, &file).unwrap(), None);
    }
}
