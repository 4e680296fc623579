//! Growing: the new groups' descriptors, bitmaps, superblock and
//! descriptor copies, and the changes to old groups (the last one gains
//! blocks; with flex_bg, groups whose free blocks receive new tables),
//! staged in memory as [`Stage`] before anything is written.

use std::collections::BTreeSet;

use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED, RawGroupDesc, bitmap_checksum};

use super::plan::Plan;
use super::stage::Stage;
use super::{displace, place, superblocks, usage};
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::mkfs::layout::GroupTables;

/// Stages a grow; `zero_itables` also zeroes new inode tables under a
/// group checksum (without one they are always zeroed).
pub(crate) fn stage(fs: &Filesystem, p: &Plan, zero_itables: bool) -> Result<Stage> {
    let old_descs = fs.group_descs();
    let mut tables: Vec<GroupTables> = old_descs
        .iter()
        .map(|d| GroupTables {
            block_bitmap: d.block_bitmap(),
            inode_bitmap: d.inode_bitmap(),
            inode_table: d.inode_table(),
        })
        .collect();
    let area = displace::area(p);
    let way = displace::in_the_way(p, &tables, &area);
    let released: Vec<(u64, u64)> = way.iter().map(|w| (w.2, w.3)).collect();
    let data = usage::load(fs, p, &old_descs, &released)?;
    let mut map = data.clone();
    // `adjust_fs_info` reserves the longer tables before new groups' tables
    // are placed.
    for &(b, n) in &area {
        map.mark(b, n);
    }
    for g in p.old.group_count..p.new.group_count {
        let t = place::place(p, &mut map, &tables, g)?;
        tables.push(t);
    }
    let mut descs = old_descs.clone();
    let mut st = Stage::new(p);
    let mut touched = touched_old_groups(p, &tables);
    let mut p = p.clone();
    if !area.is_empty() {
        let room = displace::make_room(fs, &p, (&data, map), &mut tables, (&area, &way), &mut descs, &mut st)?;
        map = room.map;
        touched.extend(room.touched);
        if let Some((i_block, size)) = room.journal {
            super::shrink::keep_journal_backup(&mut p.new_sb, &i_block, size);
            st.sb = p.new_sb;
            st.skip_journal = true;
        }
    }
    let p = &p;
    let hosts = if p.new.groups_per_flex > 1 {
        host_groups(p, &tables)
    } else {
        BTreeSet::new()
    };
    let csum = p.new.features.has_group_csum();
    let zero = !csum || zero_itables;
    for g in p.old.group_count..p.new.group_count {
        descs.push(new_desc(p, &tables[g as usize], g, csum, zero)?);
    }
    // `ext2fs_allocate_group_table` initialises a flex group's hosts.
    for &g in touched.iter().chain(hosts.iter()) {
        let d = &mut descs[g as usize];
        d.bg_flags.set(d.flags() & !BG_BLOCK_UNINIT);
    }
    let mut free_blocks = 0u64;
    for (g, d) in descs.iter_mut().enumerate() {
        let g = g as u32;
        let start = p.new.group_first_block(g);
        let n = u64::from(p.new.blocks_in_group(g));
        let free = n - map.used_in(start, start + n);
        d.set_free_blocks(free as u32);
        // `ext2fs_set_gdt_csum` at close: a group with nothing in use
        // (and not the last) is left uninitialised.
        if csum && free == u64::from(p.new.blocks_per_group) && g + 1 != p.new.group_count {
            d.bg_flags.set(d.flags() | BG_BLOCK_UNINIT);
        }
        free_blocks += free;
        if g >= p.old.group_count || touched.contains(&g) {
            let bits = usage::block_bitmap(p, &map, g);
            if p.new.features.metadata_csum() {
                let len = (p.new.clusters_per_group / 8) as usize;
                d.set_block_bitmap_csum(bitmap_checksum(p.new_sb.csum_seed(), &bits, len, p.new.desc_size));
            }
            st.put(d.block_bitmap(), bits, g >= p.old.group_count);
        }
        if g >= p.old.group_count {
            let bits = usage::empty_inode_bitmap(p);
            if p.new.features.metadata_csum() {
                let len = (p.new.inodes_per_group / 8) as usize;
                d.set_inode_bitmap_csum(bitmap_checksum(p.new_sb.csum_seed(), &bits, len, p.new.desc_size));
            }
            st.put(d.inode_bitmap(), bits, true);
            if zero {
                st.zero.push((d.inode_table(), u64::from(p.new.inode_table_blocks)));
            }
        }
        let ds = usize::from(p.new.desc_size);
        d.bg_checksum
            .set(d.compute_checksum(&p.new.features, p.new_sb.csum_seed(), &p.new_sb.s_uuid, g, ds));
    }
    let added = (p.new.group_count - p.old.group_count) * p.new.inodes_per_group;
    let free_inodes = p.old_sb.s_free_inodes_count.get().saturating_add(added);
    superblocks::finish(fs, p, (&descs, &tables), st, (free_blocks, free_inodes))
}

/// Old groups whose block bitmap changes: those holding new tables, the
/// old last group when it gains blocks, and groups losing a backup
/// (sparse_super2).
fn touched_old_groups(p: &Plan, tables: &[GroupTables]) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let old_end = p.old.blocks_count;
    let group_of = |b: u64| ((b - u64::from(p.new.first_data_block)) / u64::from(p.new.blocks_per_group)) as u32;
    let itb = u64::from(p.new.inode_table_blocks);
    for t in &tables[p.old.group_count as usize..] {
        for (b, n) in [(t.block_bitmap, 1), (t.inode_bitmap, 1), (t.inode_table, itb)] {
            for blk in [b, b + n - 1] {
                if blk < old_end {
                    out.insert(group_of(blk));
                }
            }
        }
    }
    let last = p.old.group_count - 1;
    if p.new.blocks_in_group(last) != p.old.blocks_in_group(last) {
        out.insert(last);
    }
    for g in 1..p.old.group_count {
        if p.old_has_super(g) && !p.new_has_super(g) {
            out.insert(g);
        }
    }
    out
}

/// Groups holding a table of a new group.
fn host_groups(p: &Plan, tables: &[GroupTables]) -> BTreeSet<u32> {
    let first = u64::from(p.new.first_data_block);
    let bpg = u64::from(p.new.blocks_per_group);
    let itb = u64::from(p.new.inode_table_blocks);
    let mut out = BTreeSet::new();
    for t in &tables[p.old.group_count as usize..] {
        for b in [t.block_bitmap, t.inode_bitmap, t.inode_table, t.inode_table + itb - 1] {
            out.insert(((b - first) / bpg) as u32);
        }
    }
    out
}

/// The descriptor of new group `g`, counts filled in later.
fn new_desc(p: &Plan, t: &GroupTables, g: u32, csum: bool, zeroed: bool) -> Result<RawGroupDesc> {
    let ds = usize::from(p.new.desc_size);
    let mut d = RawGroupDesc::parse(&vec![0u8; ds], ds).map_err(|e| Error::format(Location::Group(g), e))?;
    d.bg_block_bitmap_lo.set(t.block_bitmap as u32);
    d.bg_block_bitmap_hi.set((t.block_bitmap >> 32) as u32);
    d.bg_inode_bitmap_lo.set(t.inode_bitmap as u32);
    d.bg_inode_bitmap_hi.set((t.inode_bitmap >> 32) as u32);
    d.bg_inode_table_lo.set(t.inode_table as u32);
    d.bg_inode_table_hi.set((t.inode_table >> 32) as u32);
    d.set_free_inodes(p.new.inodes_per_group);
    let mut flags = 0;
    if csum {
        flags |= BG_INODE_UNINIT;
        if zeroed {
            flags |= BG_INODE_ZEROED;
        }
        d.set_itable_unused(p.new.inodes_per_group);
        // resize2fs's allocation of a backup superblock or a meta_bg
        // descriptor block clears the flag.
        if g < p.new.group_count - 1 && p.new_base(g) == 0 {
            flags |= BG_BLOCK_UNINIT;
        }
    }
    d.bg_flags.set(flags);
    Ok(d)
}
