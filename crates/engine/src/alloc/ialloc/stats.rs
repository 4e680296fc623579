//! What the inode policies read about groups: free inodes, free clusters
//! and directories (`bg_free_inodes_count`, `bg_free_blocks_count`,
//! `bg_used_dirs_count`), one group at a time or summed over a flex group
//! — the kernel's `struct orlov_stats` and its `s_flex_groups` counters,
//! which ext4kit sums from the descriptors when asked instead of keeping.

use crate::error::Result;
use crate::txn::Txn;

/// Free inodes, free clusters and directories of a group or a flex group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Stats {
    pub free_inodes: u64,
    pub free_clusters: u64,
    pub used_dirs: u64,
}

impl Stats {
    fn add(self, o: Stats) -> Stats {
        Stats {
            free_inodes: self.free_inodes + o.free_inodes,
            free_clusters: self.free_clusters + o.free_clusters,
            used_dirs: self.used_dirs + o.used_dirs,
        }
    }
}

/// The groups a policy looks at: a transaction's descriptors, or a table
/// in unit tests.
pub(super) trait Groups {
    /// Number of block groups.
    fn count(&self) -> u32;
    /// Counts of group `g` (`g < count()`).
    fn stats(&self, g: u32) -> Result<Stats>;
}

/// The descriptors as a transaction sees them.
pub(super) struct TxnGroups<'t, 'a>(pub &'t Txn<'a>);

impl Groups for TxnGroups<'_, '_> {
    fn count(&self) -> u32 {
        self.0.fs.geo.group_count
    }

    fn stats(&self, g: u32) -> Result<Stats> {
        let d = self.0.group(g)?;
        Ok(Stats {
            free_inodes: d.free_inodes().into(),
            free_clusters: d.free_blocks().into(),
            used_dirs: d.used_dirs().into(),
        })
    }
}

/// Groups seen in flex groups of `1 << log` groups (`s_log_groups_per_flex`;
/// `log` 0 without flex_bg, so every group is its own flex group).
pub(super) struct View<'g, G: Groups> {
    pub groups: &'g G,
    pub log: u32,
    /// `s_inodes_per_group`.
    pub inodes_per_group: u32,
    /// `s_clusters_per_group` (blocks per group without bigalloc).
    pub clusters_per_group: u32,
}

impl<G: Groups> View<'_, G> {
    /// Groups per flex group (`ext4_flex_bg_size`).
    pub fn flex_size(&self) -> u32 {
        1 << self.log
    }

    /// Flex groups, the last one possibly partial.
    pub fn flex_count(&self) -> u32 {
        self.groups.count().div_ceil(self.flex_size())
    }

    /// The flex group holding group `g` (`ext4_flex_group`).
    pub fn flex_of(&self, g: u32) -> u32 {
        g >> self.log
    }

    /// The groups of flex group `f` that exist.
    pub fn members(&self, f: u32) -> std::ops::Range<u32> {
        let first = f.saturating_mul(self.flex_size()).min(self.groups.count());
        first..first.saturating_add(self.flex_size()).min(self.groups.count())
    }

    /// Counts of flex group `f`, summed over its groups.
    pub fn flex_stats(&self, f: u32) -> Result<Stats> {
        let mut sum = Stats::default();
        for g in self.members(f) {
            sum = sum.add(self.groups.stats(g)?);
        }
        Ok(sum)
    }

    /// Counts of every flex group, in order: one pass over the descriptors.
    pub fn all_flex_stats(&self) -> Result<Vec<Stats>> {
        (0..self.flex_count()).map(|f| self.flex_stats(f)).collect()
    }

    /// The first group of flex group `f` with a free inode: inodes are
    /// packed at the start of a flex group's inode tables.
    pub fn first_free_in_flex(&self, f: u32) -> Result<Option<u32>> {
        for g in self.members(f) {
            if self.groups.stats(g)?.free_inodes > 0 {
                return Ok(Some(g));
            }
        }
        Ok(None)
    }
}

/// Sums of `all`: the kernel's `s_freeinodes_counter`,
/// `s_freeclusters_counter` and `s_dirs_counter`.
pub(super) fn totals(all: &[Stats]) -> Stats {
    all.iter().fold(Stats::default(), |a, &s| a.add(s))
}

/// A table of group counts for the policies' unit tests.
#[cfg(test)]
pub(super) struct Table(pub Vec<Stats>);

#[cfg(test)]
impl Groups for Table {
    fn count(&self) -> u32 {
        self.0.len() as u32
    }

    fn stats(&self, g: u32) -> Result<Stats> {
        Ok(self.0[g as usize])
    }
}

#[cfg(test)]
impl Table {
    /// `n` groups of `ipg` free inodes and `free` free clusters, no dirs.
    pub fn fresh(n: usize, ipg: u64, free: u64) -> Self {
        let s = Stats {
            free_inodes: ipg,
            free_clusters: free,
            used_dirs: 0,
        };
        Table(vec![s; n])
    }

    /// A view with flex groups of `1 << log`.
    pub fn view(&self, log: u32, ipg: u32, cpg: u32) -> View<'_, Table> {
        View {
            groups: self,
            log,
            inodes_per_group: ipg,
            clusters_per_group: cpg,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flex_groups_sum_their_members_and_the_last_is_partial() {
        let mut t = Table::fresh(10, 100, 50);
        t.0[9].used_dirs = 3;
        let v = t.view(2, 100, 1000);
        assert_eq!(v.flex_count(), 3);
        assert_eq!(v.members(2), 8..10);
        let s = v.flex_stats(2).unwrap();
        assert_eq!((s.free_inodes, s.free_clusters, s.used_dirs), (200, 100, 3));
        assert_eq!(totals(&v.all_flex_stats().unwrap()).free_inodes, 1000);
    }
}
