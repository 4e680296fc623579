//! Which clusters of one file's mapping are new to it, on a bigalloc file
//! system (`bigalloc.rst`). Blocks of a file that fall in the same logical
//! cluster share one physical cluster, so the file owns each cluster once
//! however many of its blocks it maps; a second owner is a duplicate.
//! Decided as e2fsck's pass 1 does: by the previous physical block mapped.
//! Without bigalloc every block is its own cluster.

/// The walk's position in one file's mapping.
#[derive(Debug, Default)]
pub struct FileClusters {
    bits: u32,
    prev: Option<u64>,
}

impl FileClusters {
    /// A walk on a file system of `2^bits` blocks per cluster.
    pub fn new(bits: u32) -> Self {
        Self { bits, prev: None }
    }

    /// An extent mapping `len` blocks from `pblk`: the first block of the
    /// first cluster it brings and how many clusters it brings (its first
    /// cluster is not new when the previous extent ended in it).
    pub fn extent(&mut self, pblk: u64, len: u64) -> (u64, u64) {
        let c = pblk >> self.bits;
        let first = match self.prev {
            Some(p) if self.bits > 0 && p >> self.bits == c => (c + 1) << self.bits,
            _ => c << self.bits,
        };
        let end = pblk.saturating_add(len);
        self.prev = Some(end.saturating_sub(1));
        if first >= end {
            return (first, 0);
        }
        (first, (end - first).div_ceil(1 << self.bits))
    }

    /// A block-map pointer from logical `lblk` to `pblk`: true when it
    /// brings a new cluster (not the previous block's cluster at the same
    /// offset within it).
    pub fn mapped(&mut self, lblk: u64, pblk: u64) -> bool {
        let mask = (1u64 << self.bits) - 1;
        let same = self.bits > 0
            && self
                .prev
                .is_some_and(|p| p >> self.bits == pblk >> self.bits && pblk & mask == lblk & mask);
        self.prev = Some(pblk);
        !same
    }
}

#[cfg(test)]
mod tests {
    use super::FileClusters;

    #[test]
    fn extents_sharing_a_cluster_count_it_once() {
        let mut f = FileClusters::new(4);
        assert_eq!(f.extent(160, 2), (160, 1));
        assert_eq!(f.extent(162, 30), (176, 1));
        assert_eq!(f.extent(200, 3), (192, 1));
        assert_eq!(f.extent(203, 1), (208, 0));
    }

    #[test]
    fn without_bigalloc_every_block_is_new() {
        let mut f = FileClusters::new(0);
        assert_eq!(f.extent(10, 5), (10, 5));
        assert_eq!(f.extent(15, 1), (15, 1));
        assert_eq!(f.extent(15, 1), (15, 1));
        assert!(f.mapped(0, 20) && f.mapped(1, 20));
    }

    #[test]
    fn block_map_follows_offsets() {
        let mut f = FileClusters::new(2);
        assert!(f.mapped(0, 8));
        assert!(!f.mapped(1, 9));
        assert!(f.mapped(3, 10));
        assert!(f.mapped(4, 12));
    }
}
