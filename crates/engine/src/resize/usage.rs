//! Which blocks are in use, over the new size: the old groups' block
//! bitmaps (an uninitialised group counts its superblock and descriptor
//! copies and its own tables, as the kernel's `ext4_init_block_bitmap`
//! does), and the superblock and descriptor copies of the new groups.
//! Kept as ranges ([`UsedMap`]), so a large file system costs memory per
//! run of used blocks.

use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, RawGroupDesc};

use super::plan::Plan;
use crate::error::Result;
use crate::fs::Filesystem;
use crate::mkfs::layout::UsedMap;

/// The used-block map of the old file system, over the larger of the two
/// sizes, without the `released` runs (the metadata of groups a shrink
/// removes).
pub(crate) fn load(fs: &Filesystem, p: &Plan, descs: &[RawGroupDesc], released: &[(u64, u64)]) -> Result<UsedMap> {
    let size = p.new.blocks_count.max(p.old.blocks_count);
    let mut map = UsedMap::over(size, u64::from(p.new.first_data_block));
    let csum = p.old.features.has_group_csum();
    let bs = p.old.block_size as usize;
    let mut buf = vec![0u8; bs];
    for (g, d) in descs.iter().enumerate() {
        let g = g as u32;
        let start = p.old.group_first_block(g);
        let n = u64::from(p.old.blocks_in_group(g));
        if csum && d.flags() & BG_BLOCK_UNINIT != 0 {
            if g >= p.new.group_count {
                continue;
            }
            // (A grow's longer descriptor table is marked by the caller; a
            // shrink's shorter one leaves its tail free.)
            let base = p.old_base(g).min(p.new_base(g));
            if p.old_has_super(g) == p.new_has_super(g) && base > 0 {
                map.mark(start, base);
            }
            for (b, len) in [
                (d.block_bitmap(), 1),
                (d.inode_bitmap(), 1),
                (d.inode_table(), u64::from(p.old.inode_table_blocks)),
            ] {
                // (A table moved away is released here as in a bitmap.)
                if b >= start && b < start + n && !released.iter().any(|r| r.0 == b) {
                    map.mark(b, len.min(start + n - b));
                }
            }
            continue;
        }
        fs.read_bytes(d.block_bitmap() << p.old.block_size_log2, &mut buf)?;
        if p.old_has_super(g) && !p.new_has_super(g) {
            // sparse_super2: a backup the new layout drops is freed.
            for i in 0..p.old_base(g) {
                buf[(i / 8) as usize] &= !(1 << (i % 8));
            }
        }
        for &(b, len) in released {
            for blk in b.max(start)..(b + len).min(start + n) {
                let i = blk - start;
                buf[(i / 8) as usize] &= !(1 << (i % 8));
            }
        }
        mark_bits(&mut map, &buf, start, n);
    }
    for g in p.old.group_count..p.new.group_count {
        if p.new_base(g) > 0 {
            map.mark(p.new.group_first_block(g), p.new_base(g));
        }
    }
    Ok(map)
}

/// Marks the runs of set bits among the first `n` of `bits`.
fn mark_bits(map: &mut UsedMap, bits: &[u8], start: u64, n: u64) {
    let set = |i: u64| bits[(i / 8) as usize] & (1 << (i % 8)) != 0;
    let mut i = 0;
    while i < n {
        if !set(i) {
            i += 1;
            continue;
        }
        let s = i;
        while i < n && set(i) {
            i += 1;
        }
        map.mark(start + s, i - s);
    }
}

/// The block bitmap of `group` in the new layout, from `map`; bits past
/// the group's end are set, as e2fsprogs and the kernel pad them.
pub(crate) fn block_bitmap(p: &Plan, map: &UsedMap, group: u32) -> Vec<u8> {
    let mut out = vec![0u8; p.new.block_size as usize];
    let start = p.new.group_first_block(group);
    let n = u64::from(p.new.blocks_in_group(group));
    map.for_each_in(start, start + n, |a, b| {
        for i in a - start..b - start {
            out[(i / 8) as usize] |= 1 << (i % 8);
        }
    });
    pad(&mut out, n);
    out
}

/// An inode bitmap with no inode in use, padded past `inodes_per_group`.
pub(crate) fn empty_inode_bitmap(p: &Plan) -> Vec<u8> {
    let mut out = vec![0u8; p.new.block_size as usize];
    pad(&mut out, u64::from(p.new.inodes_per_group));
    out
}

fn pad(bits: &mut [u8], from: u64) {
    let total = bits.len() as u64 * 8;
    for i in from..total {
        bits[(i / 8) as usize] |= 1 << (i % 8);
    }
}
