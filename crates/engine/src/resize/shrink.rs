//! Shrinking: the groups past the new end are cut, with the blocks their
//! metadata took in the remaining groups (flex_bg packs a flex group's
//! tables in its first group) given back, the last group's bitmap padded
//! at its new end, and freed descriptor blocks turned into reserved GDT
//! blocks (`s_reserved_gdt_blocks` grows by as many, the resize inode
//! lists them), as resize2fs's `adjust_fs_info` and `free_gdp_blocks` do.
//!
//! Inodes in use in the cut groups are renumbered into the kept ones
//! ([`inodes`]) and blocks in use past the new end moved below it
//! ([`moves`]), as resize2fs's `inode_scan_and_fix` and `block_mover` do;
//! kept groups' tables past the new end get new homes first ([`relocate`]).

use std::collections::BTreeSet;

use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, bitmap_checksum};

use super::plan::Plan;
use super::stage::Stage;
use super::{inodes, moves, relocate, superblocks, usage};
use crate::error::Result;
use crate::fs::Filesystem;
use crate::mkfs::layout::{GroupTables, UsedMap};

/// Stages a shrink.
pub(crate) fn stage(fs: &Filesystem, p: &Plan) -> Result<Stage> {
    let old_descs = fs.group_descs();
    let keep = p.new.group_count as usize;
    let mut tables: Vec<GroupTables> = old_descs
        .iter()
        .map(|d| GroupTables {
            block_bitmap: d.block_bitmap(),
            inode_bitmap: d.inode_bitmap(),
            inode_table: d.inode_table(),
        })
        .collect();
    let itb = u64::from(p.old.inode_table_blocks);
    let mut released = Vec::new();
    for (g, t) in tables.iter().enumerate().skip(keep) {
        released.extend([(t.block_bitmap, 1), (t.inode_bitmap, 1), (t.inode_table, itb)]);
        // Superblock and descriptor copies, or (meta_bg) the meta group's
        // descriptor block: a dropped meta group takes its blocks along.
        if p.old_base(g as u32) > 0 {
            released.push((p.old.group_first_block(g as u32), p.old_base(g as u32)));
        }
    }
    // A shorter descriptor table (no reserve to take the freed blocks)
    // frees the tail of each kept copy.
    for g in 0..keep as u32 {
        let (old, new) = (p.old_base(g), p.new_base(g));
        if p.old_has_super(g) && p.new_has_super(g) && old > new {
            released.push((p.old.group_first_block(g) + new, old - new));
        }
    }
    let mut cut = relocate::cut_tables(p, &tables[..keep]);
    let area = new_backup(p);
    cut.extend(super::displace::in_the_way(p, &tables[..keep], &area));
    released.extend(cut.iter().map(|c| (c.2, c.3)));
    let mut map = usage::load(fs, p, &old_descs, &released)?;
    let area_data: u64 = area.iter().map(|&(b, n)| map.used_in(b, b + n)).sum();
    for &(b, n) in &area {
        map.mark(b, n);
    }
    let mut busy = map.clone();
    for &(b, n) in &released {
        busy.mark(b, n);
    }
    let old_tables = tables.clone();
    let table_moves = relocate::place(p, &mut busy, &mut map, &mut tables[..keep], &cut)?;
    let mut st = Stage::new(p);
    if !table_moves.is_empty() {
        relocate::refuse_shorter_table(p)?;
        st.sb_last = true;
    }
    let mut descs = old_descs.clone();
    descs.truncate(keep);
    let ren = inodes::renumber(fs, p, &old_descs, &mut descs, &mut st)?;
    let end = p.new.blocks_count;
    let mut gone = UsedMap::over(p.old.blocks_count, u64::from(p.new.first_data_block));
    gone.mark(end, p.old.blocks_count - end);
    for &(b, n) in &area {
        gone.mark(b, n);
    }
    let past = map.used_in(end, p.old.blocks_count) + area_data;
    let moved = moves::move_blocks(fs, p, &ren, map, (busy, gone, past), &mut st)?;
    for (d, t) in descs.iter_mut().zip(&tables) {
        relocate::point(d, t);
    }
    let map = moved.map;
    let csum = p.new.features.has_group_csum();
    let mut touched: BTreeSet<u32> = released
        .iter()
        .filter(|(b, _)| *b < p.new.blocks_count)
        .map(|(b, _)| group_of(p, *b))
        .collect();
    touched.insert(p.new.group_count - 1);
    touched.extend(moved.touched);
    for &(_, new, n) in &table_moves {
        touched.extend([group_of(p, new), group_of(p, new + n - 1)]);
    }
    touched.extend(cut.iter().filter(|c| c.1 == 0).map(|c| c.0));
    let mut free_blocks = 0u64;
    for (g, d) in descs.iter_mut().enumerate() {
        let g = g as u32;
        let start = p.new.group_first_block(g);
        let n = u64::from(p.new.blocks_in_group(g));
        let free = n - map.used_in(start, start + n);
        d.set_free_blocks(free as u32);
        free_blocks += free;
        if touched.contains(&g) {
            d.bg_flags.set(d.flags() & !BG_BLOCK_UNINIT);
            let bits = usage::block_bitmap(p, &map, g);
            if p.new.features.metadata_csum() {
                let len = (p.new.clusters_per_group / 8) as usize;
                d.set_block_bitmap_csum(bitmap_checksum(p.new_sb.csum_seed(), &bits, len, p.new.desc_size));
            }
            st.put(d.block_bitmap(), bits, false);
        }
        if csum && free == u64::from(p.new.blocks_per_group) && g + 1 != p.new.group_count {
            d.bg_flags.set(d.flags() | BG_BLOCK_UNINIT);
        }
        let ds = usize::from(p.new.desc_size);
        d.bg_checksum
            .set(d.compute_checksum(&p.new.features, p.new_sb.csum_seed(), &p.new_sb.s_uuid, g, ds));
    }
    let removed = (p.old.group_count - p.new.group_count) * p.new.inodes_per_group;
    let free_inodes = p.old_sb.s_free_inodes_count.get().saturating_sub(removed);
    let mut p = p.clone();
    if let Some((i_block, size)) = moved.journal {
        keep_journal_backup(&mut p.new_sb, &i_block, size);
        st.skip_journal = true;
    }
    // The resize inode is rebuilt in the old table; the move below
    // carries it to the new one.
    let mut st = superblocks::finish(fs, &p, (&descs, &old_tables), st, (free_blocks, free_inodes))?;
    relocate::redirect(&mut st, &table_moves);
    Ok(st)
}

/// `s_jnl_blocks`: the superblock's copy of the journal inode's `i_block`
/// and size (`EXT3_JNL_BACKUP_BLOCKS`), kept in step with a moved journal.
pub(crate) fn keep_journal_backup(sb: &mut ext4kit_format::superblock::RawSuperblock, i_block: &[u8; 60], size: u64) {
    if sb.s_jnl_backup_type == ext4kit_format::superblock::JNL_BACKUP_BLOCKS {
        sb.set_journal_backup(i_block, size);
    }
}

/// sparse_super2: the superblock and descriptor copy the new last group
/// takes when `s_backup_bgs` follows it there, as runs; what lies there
/// moves first, as resize2fs's `reserve_sparse_super2_last_group` has it.
fn new_backup(p: &Plan) -> Vec<(u64, u64)> {
    (1..p.new.group_count)
        .filter(|&g| !p.old_has_super(g) && p.new_has_super(g))
        .map(|g| (p.new.group_first_block(g), p.new_base(g)))
        .collect()
}

fn group_of(p: &Plan, b: u64) -> u32 {
    ((b - u64::from(p.new.first_data_block)) / u64::from(p.new.blocks_per_group)) as u32
}
