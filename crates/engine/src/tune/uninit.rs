//! Initializing uninitialized groups, for when no group checksum remains
//! (`^uninit_bg`, or `^metadata_csum` with `^uninit_bg`): without one the
//! kernel and e2fsck ignore `BLOCK_UNINIT`, `INODE_UNINIT` and
//! `bg_itable_unused` and read every bitmap and every inode record, so
//! they must be written out first (tune2fs `disable_uninit_bg`).
//!
//! A `BLOCK_UNINIT` bitmap is built as the kernel builds it in memory
//! (`ext4_init_block_bitmap`): the group's superblock backup and descriptor
//! blocks, any group's bitmaps and inode table lying in it, and the bits
//! past its last block. An `INODE_UNINIT` bitmap is empty but for the bits
//! past `inodes_per_group`. Inode records past the used part of a table
//! must read as zeros: whole blocks are zeroed in place before the
//! transaction (under the old state nobody reads them, so the image means
//! the same; this keeps them out of the journal), partial blocks go into
//! the transaction.

use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};

use super::Plan;
use super::rewrite::Rewrite;
use crate::error::Result;
use crate::fs::Filesystem;

/// Builds the bitmaps of uninitialized groups and zeroes the unused inode
/// records that share a block with used ones; returns the blocks to zero
/// in place.
pub(crate) fn initialize(rw: &mut Rewrite<'_>, p: &Plan) -> Result<Vec<u64>> {
    let fs = rw.fs;
    let mut zero = Vec::new();
    for (g, d) in fs.group_descs().into_iter().enumerate() {
        let g = g as u32;
        if d.flags() & BG_BLOCK_UNINIT != 0 {
            let map = block_bitmap(fs, g);
            rw.block(d.block_bitmap())?.copy_from_slice(&map);
        }
        if d.flags() & BG_INODE_UNINIT != 0 {
            let map = rw.block(d.inode_bitmap())?;
            map.fill(0);
            for i in fs.geo.inodes_per_group..(map.len() * 8) as u32 {
                map[(i / 8) as usize] |= 1 << (i % 8);
            }
        }
        if d.flags() & BG_INODE_ZEROED == 0 {
            let used = if d.flags() & BG_INODE_UNINIT != 0 {
                0
            } else {
                fs.geo.inodes_per_group.saturating_sub(d.itable_unused())
            };
            zero_unused_records(rw, p, d.inode_table(), used, &mut zero)?;
        }
    }
    Ok(zero)
}

/// Zeroes records `used..inodes_per_group` of the table at `table`.
fn zero_unused_records(rw: &mut Rewrite<'_>, _p: &Plan, table: u64, used: u32, zero: &mut Vec<u64>) -> Result<()> {
    let fs = rw.fs;
    let isz = u64::from(fs.geo.inode_size);
    let bs = u64::from(fs.geo.block_size);
    let start = u64::from(used) * isz;
    let end = u64::from(fs.geo.inodes_per_group) * isz;
    if start % bs != 0 {
        let b = table + start / bs;
        let from = (start % bs) as usize;
        rw.block(b)?[from..].fill(0);
    }
    for b in start.div_ceil(bs)..end / bs {
        zero.push(table + b);
    }
    Ok(())
}

/// Blocks at the start of `group` taken by its superblock backup, the
/// descriptor table and the reserved descriptor blocks (no `meta_bg`: the
/// plan refuses it).
fn overhead(fs: &Filesystem, group: u32) -> u64 {
    if !fs.group_has_super(group) {
        return 0;
    }
    let desc_blocks = u64::from(fs.geo.group_count.div_ceil(fs.geo.descs_per_block()));
    1 + desc_blocks + u64::from(fs.superblock().s_reserved_gdt_blocks.get())
}

/// The block bitmap of a `BLOCK_UNINIT` group: a bit per cluster (per
/// block without bigalloc), set for each cluster holding metadata, and
/// every bit past the group's last cluster set as padding.
pub(crate) fn block_bitmap(fs: &Filesystem, group: u32) -> Vec<u8> {
    let geo = &fs.geo;
    let bits = geo.cluster_bits;
    let mut map = vec![0u8; geo.block_size as usize];
    let mut set = |c: u64| map[(c / 8) as usize] |= 1 << (c % 8);
    let first = geo.group_first_block(group);
    let end = first + u64::from(geo.blocks_per_group);
    let base = geo.superblock_block(group) - first;
    let mut mark = |b: u64, n: u64| {
        let (lo, hi) = (b.max(first), (b + n).min(end));
        if lo < hi {
            for c in (lo - first) >> bits..=(hi - 1 - first) >> bits {
                set(c);
            }
        }
    };
    mark(first + base, overhead(fs, group));
    for d in fs.group_descs() {
        mark(d.block_bitmap(), 1);
        mark(d.inode_bitmap(), 1);
        mark(d.inode_table(), u64::from(geo.inode_table_blocks));
    }
    for c in u64::from(geo.clusters_in_group(group))..(geo.block_size as u64) * 8 {
        set(c);
    }
    map
}
