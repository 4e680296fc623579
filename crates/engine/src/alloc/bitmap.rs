//! Group bitmaps inside a transaction, including the groups mke2fs left
//! uninitialised (`BLOCK_UNINIT`, `INODE_UNINIT`): their bitmaps are built
//! the way the kernel's `ext4_init_block_bitmap` builds them — the group's
//! own superblock backup and descriptor blocks, every bitmap and inode table
//! of any group that lies inside it, and the padding past the group's end.

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};

use crate::error::Result;
use crate::txn::Txn;

pub(crate) fn test_bit(map: &[u8], i: u32) -> bool {
    map.get((i / 8) as usize).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

/// The first run of clear bits found from `from` to `limit`, wrapping to
/// 0 if none is there: its start and length (at most `want`). The goal
/// scans of both block and cluster allocation use it.
pub(crate) fn free_run(map: &[u8], from: u32, limit: u32, want: u32) -> Option<(u32, u32)> {
    let start = find_zero(map, from, limit).or_else(|| find_zero(map, 0, from))?;
    let len = (start..limit)
        .take(want as usize)
        .take_while(|&i| !test_bit(map, i))
        .count();
    Some((start, len as u32))
}

/// The first clear bit in `from..limit`, skipping full 64-bit words (then
/// full bytes) at once: a group filled from its start is passed over in a
/// few hundred word compares rather than bit by bit.
pub(crate) fn find_zero(map: &[u8], from: u32, limit: u32) -> Option<u32> {
    let mut i = from;
    while i < limit {
        if i.is_multiple_of(8) {
            let byte = (i / 8) as usize;
            let end = (limit as usize / 8).min(map.len());
            let full = map.get(byte..end).map_or(0, |rest| {
                let words = rest
                    .chunks_exact(8)
                    .take_while(|w| w.iter().all(|&b| b == 0xFF))
                    .count();
                let after = &rest[words * 8..];
                words * 8 + after.iter().take_while(|&&b| b == 0xFF).count()
            });
            if full > 0 {
                i += (full * 8) as u32;
                continue;
            }
        }
        if !test_bit(map, i) {
            return Some(i);
        }
        i += 1;
    }
    None
}

pub(crate) fn set_bit(map: &mut [u8], i: u32, on: bool) {
    if let Some(b) = map.get_mut((i / 8) as usize) {
        if on {
            *b |= 1 << (i % 8);
        } else {
            *b &= !(1 << (i % 8));
        }
    }
}

impl Txn<'_> {
    /// Blocks at the start of `group` holding its superblock backup and
    /// descriptor table (plus reserved GDT blocks), 0 when it has none.
    fn group_overhead(&self, group: u32) -> u64 {
        let fs = self.fs;
        let geo = &fs.geo;
        let sb = fs.sb.read();
        let has_super = u64::from(fs.group_has_super(group));
        let per = geo.descs_per_block();
        let desc_blocks = u64::from(geo.group_count.div_ceil(per));
        if geo.features.incompat.contains(IncompatFeatures::META_BG) {
            let first_meta = u64::from(sb.s_first_meta_bg.get());
            let meta_group = u64::from(group / per);
            if meta_group < first_meta {
                return has_super * (1 + first_meta + u64::from(sb.s_reserved_gdt_blocks.get()));
            }
            let i = group % per;
            let gdt = u64::from(i == 0 || i == 1 || i == per - 1);
            return has_super + gdt;
        }
        has_super * (1 + desc_blocks + u64::from(sb.s_reserved_gdt_blocks.get()))
    }

    /// Write access to the block bitmap of `group`, building it first when
    /// the group is `BLOCK_UNINIT`.
    pub(crate) fn block_bitmap_mut(&mut self, group: u32) -> Result<&mut [u8]> {
        let d = self.group(group)?;
        let blk = d.block_bitmap();
        if d.flags() & BG_BLOCK_UNINIT == 0 || !self.fs.geo.features.has_group_csum() {
            return self.block_bitmap_loaded(blk);
        }
        let map = self.uninit_block_bitmap(group)?;
        self.put_block(blk, map.into());
        let mut d = self.group(group)?;
        d.bg_flags.set(d.flags() & !BG_BLOCK_UNINIT);
        self.set_group(group, d);
        self.block_bitmap_loaded(blk)
    }

    /// A copy of group `group`'s block bitmap as this transaction sees it,
    /// without taking the block into the transaction: a `BLOCK_UNINIT`
    /// group's is built, not stored.
    pub(crate) fn block_bitmap_read(&mut self, group: u32) -> Result<Vec<u8>> {
        let d = self.group(group)?;
        if d.flags() & BG_BLOCK_UNINIT != 0 && self.fs.geo.features.has_group_csum() {
            return self.uninit_block_bitmap(group);
        }
        Ok(self.block(d.block_bitmap(), 0)?.to_vec())
    }

    fn block_bitmap_loaded(&mut self, blk: u64) -> Result<&mut [u8]> {
        self.block_mut(blk, 0)
    }

    fn uninit_block_bitmap(&self, group: u32) -> Result<Vec<u8>> {
        let geo = &self.fs.geo;
        let mut map = vec![0u8; self.fs.block_size()];
        let first = geo.group_first_block(group);
        let end = first + u64::from(geo.blocks_per_group);
        // A bit is a cluster under bigalloc: any block in it takes it.
        let cb = geo.cluster_bits;
        let mut mark = |b: u64, n: u64| {
            for x in b..b + n {
                if x >= first && x < end {
                    set_bit(&mut map, ((x - first) >> cb) as u32, true);
                }
            }
        };
        mark(first, self.group_overhead(group));
        for g in 0..geo.group_count {
            let d = self.group(g)?;
            mark(d.block_bitmap(), 1);
            mark(d.inode_bitmap(), 1);
            mark(d.inode_table(), u64::from(geo.inode_table_blocks));
        }
        for i in geo.clusters_in_group(group)..(map.len() * 8) as u32 {
            set_bit(&mut map, i, true);
        }
        Ok(map)
    }

    /// Write access to the inode bitmap of `group`; an `INODE_UNINIT` group
    /// gets an empty bitmap with the padding past `inodes_per_group` set.
    pub(crate) fn inode_bitmap_mut(&mut self, group: u32) -> Result<&mut [u8]> {
        let d = self.group(group)?;
        let blk = d.inode_bitmap();
        if d.flags() & BG_INODE_UNINIT != 0 && self.fs.geo.features.has_group_csum() {
            let ipg = self.fs.geo.inodes_per_group;
            let map = self.new_block(blk);
            for i in ipg..(map.len() * 8) as u32 {
                set_bit(map, i, true);
            }
            let mut d = self.group(group)?;
            d.bg_flags.set(d.flags() & !BG_INODE_UNINIT);
            self.set_group(group, d);
        }
        self.block_mut(blk, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::{find_zero, test_bit};

    /// The word-skipping search agrees with a bit-by-bit one on maps with
    /// full runs of every length and alignment.
    #[test]
    fn find_zero_matches_a_naive_scan() {
        let naive = |map: &[u8], from: u32, limit: u32| (from..limit).find(|&i| !test_bit(map, i));
        for full in [0usize, 1, 7, 8, 9, 63, 64, 65, 200, 511] {
            for hole in [0u32, 3, 7] {
                let mut map = vec![0xFFu8; full];
                map.push(!(1u8 << hole));
                map.extend_from_slice(&[0xFF; 16]);
                let bits = (map.len() * 8) as u32;
                for from in [0, 1, 8, 13, 64, 100] {
                    for limit in [bits, bits - 3, (full as u32) * 8 + hole, 70] {
                        assert_eq!(
                            find_zero(&map, from, limit),
                            naive(&map, from, limit),
                            "full {full} hole {hole} from {from} limit {limit}"
                        );
                    }
                }
            }
        }
    }
}
