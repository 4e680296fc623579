//! Group descriptors under a tune: each gets the checksum of the new
//! scheme (crc32c with `metadata_csum`, crc16 over the UUID with
//! `uninit_bg`, none otherwise), with bitmap checksums computed from the
//! bitmaps on disk, and the backup descriptor tables become copies of the
//! primary one, as e2fsprogs writes them. `meta_bg` layouts are refused by
//! the plan.

use ext4kit_format::group_desc::{BG_INODE_ZEROED, bitmap_checksum};

use super::Plan;
use super::rewrite::Rewrite;
use crate::error::Result;

/// Rewrites the descriptor table and its backups.
pub(crate) fn rewrite(rw: &mut Rewrite<'_>, p: &Plan) -> Result<()> {
    let fs = rw.fs;
    let f = p.new.features();
    let seed = p.new_seed();
    let ds = usize::from(fs.geo.desc_size);
    let per_block = fs.geo.descs_per_block();
    let block_len = (p.old.s_clusters_per_group.get() / 8) as usize;
    let inode_len = (fs.geo.inodes_per_group / 8) as usize;
    for (g, d) in fs.group_descs().into_iter().enumerate() {
        let g = g as u32;
        let mut d = d;
        if p.reset_group_flags {
            // Without a group checksum the flags meant nothing and every
            // table was written out whole.
            d.bg_flags.set(BG_INODE_ZEROED);
            d.bg_itable_unused_lo.set(0);
            d.bg_itable_unused_hi.set(0);
        }
        if p.init_groups {
            // `uninit` wrote the bitmaps and zeroed the unused records.
            d.bg_flags.set(BG_INODE_ZEROED);
            d.bg_itable_unused_lo.set(0);
            d.bg_itable_unused_hi.set(0);
        }
        if f.metadata_csum() {
            let bb = rw.block(d.block_bitmap())?.clone();
            d.set_block_bitmap_csum(bitmap_checksum(seed, &bb, block_len, fs.geo.desc_size));
            let ib = rw.block(d.inode_bitmap())?.clone();
            d.set_inode_bitmap_csum(bitmap_checksum(seed, &ib, inode_len, fs.geo.desc_size));
        } else {
            d.set_block_bitmap_csum(0);
            d.set_inode_bitmap_csum(0);
        }
        d.bg_checksum.set(d.compute_checksum(&f, seed, &p.new.s_uuid, g, ds));
        let off = (g % per_block) as usize * ds;
        d.encode_into(&mut rw.block(fs.group_desc_block(g))?[off..off + ds]);
    }
    let table_blocks = fs.geo.group_count.div_ceil(per_block);
    // Each table follows its group's superblock: block 2 for group 0 with
    // 1 KiB blocks and bigalloc, whose first data block is 0.
    let primary_table = fs.geo.superblock_block(0) + 1;
    for g in (1..fs.geo.group_count).filter(|&g| fs.group_has_super(g)) {
        let backup = fs.geo.superblock_block(g) + 1;
        for i in 0..u64::from(table_blocks) {
            let primary = rw.block(primary_table + i)?.clone();
            *rw.block(backup + i)? = primary;
        }
    }
    Ok(())
}
