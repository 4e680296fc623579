//! Room for a longer descriptor table: a grow without meta_bg that needs
//! more descriptor blocks than are reserved (`^resize_inode`, or the
//! reserve used up) takes the blocks after each superblock copy's table,
//! as resize2fs's `blocks_to_move` does:
//! - a bitmap or inode table lying there gets a new home, chosen as
//!   `ext2fs_allocate_group_table` chooses it over the reserved map (the
//!   superblock and descriptor areas and every group's tables; blocks
//!   holding data are fair game, their data moves);
//! - data there or under a new home is moved ([`super::moves`]) into
//!   blocks neither file system uses, from the start, as resize2fs's
//!   `get_new_block` takes them; extent trees and block maps follow.
//!
//! A relocated table's contents are staged whole at its new home: in the
//! switch (`txn`) where the old file system has data there, else before
//! it. The old places are left to the descriptor copies written with the
//! switch (the primary) or after it (backups).

use std::collections::BTreeSet;

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::RawGroupDesc;

use super::inodes;
use super::moves::{self, Moved};
use super::plan::Plan;
use super::relocate::{self, Move};
use super::stage::Stage;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::mkfs::layout::{GroupTables, UsedMap};

/// A table in the way: (group, 0 block bitmap / 1 inode bitmap / 2 inode
/// table, first block, length).
pub(crate) type InTheWay = (u32, usize, u64, u64);

/// The blocks the longer table takes in the old groups holding a
/// superblock copy, as runs.
pub(crate) fn area(p: &Plan) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for g in 0..p.old.group_count {
        if !p.old_has_super(g) || !p.new_has_super(g) {
            continue;
        }
        let (old, new) = (p.old_base(g), p.new_base(g));
        if new > old {
            let start = p.new.group_first_block(g);
            out.push((start + old, new - old));
        }
    }
    out
}

/// The old groups' tables overlapping `area`, in group order.
pub(crate) fn in_the_way(p: &Plan, tables: &[GroupTables], area: &[(u64, u64)]) -> Vec<InTheWay> {
    let itb = u64::from(p.new.inode_table_blocks);
    let mut out = Vec::new();
    for (g, t) in tables.iter().enumerate().take(p.old.group_count as usize) {
        for (k, (b, n)) in [(t.block_bitmap, 1), (t.inode_bitmap, 1), (t.inode_table, itb)]
            .into_iter()
            .enumerate()
        {
            if area.iter().any(|&(a, l)| b < a + l && a < b + n) {
                out.push((g as u32, k, b, n));
            }
        }
    }
    out
}

/// What making room changed.
pub(crate) struct Room {
    /// The used map afterwards.
    pub(crate) map: UsedMap,
    /// Groups whose block bitmap changed.
    pub(crate) touched: BTreeSet<u32>,
    /// The journal inode's new `i_block` and size, when its blocks moved.
    pub(crate) journal: Option<([u8; 60], u64)>,
}

/// Gives the tables in `way` new homes, moves the data under the longer
/// table and those homes, stages the tables' contents at their homes and
/// points `descs` at them. `data`: the old file system's used blocks
/// without `way`; `map`: the same plus the area and the new groups'
/// metadata; `tables`: every group's tables, updated.
pub(crate) fn make_room(
    fs: &Filesystem,
    p: &Plan,
    (data, map): (&UsedMap, UsedMap),
    tables: &mut [GroupTables],
    (area, way): (&[(u64, u64)], &[InTheWay]),
    descs: &mut [RawGroupDesc],
    st: &mut Stage,
) -> Result<Room> {
    let homes = rehome(p, tables, way, data)?;
    let size = p.new.blocks_count;
    let first = u64::from(p.new.first_data_block);
    let mut gone = UsedMap::over(size, first);
    let mut map = map;
    for &(b, n) in area {
        gone.mark(b, n);
    }
    for &(_, new, n) in &homes {
        gone.mark(new, n);
        map.mark(new, n);
    }
    let mut past = 0;
    gone.for_each_in(first, size, |a, b| past += data.used_in(a, b));
    let mut busy = map.clone();
    for &(_, _, old, n) in way {
        busy.mark(old, n);
    }
    let old_count = p.old.group_count as usize;
    let ren = inodes::renumber(fs, p, &descs[..old_count], &mut descs[..old_count].to_vec(), st)?;
    let Moved {
        map,
        mut touched,
        journal,
    } = moves::move_blocks(fs, p, &ren, map, (busy, gone, past), st)?;
    carry(fs, p, data, way, &homes, st)?;
    for (d, t) in descs.iter_mut().zip(tables.iter()) {
        relocate::point(d, t);
    }
    let group = |b: u64| ((b - first) / u64::from(p.new.blocks_per_group)) as u32;
    for &(b, n) in area {
        touched.insert(group(b));
        touched.insert(group(b + n - 1));
    }
    for &(old, new, n) in &homes {
        touched.extend([group(old), group(old + n - 1), group(new), group(new + n - 1)]);
    }
    Ok(Room { map, touched, journal })
}

/// New homes for the tables in `way`, each group's at once, over the
/// reserved map (`blocks_to_move`'s `reserve_blocks`); but the inode
/// table holding the journal inode goes only where the old file system
/// keeps nothing ([`journal_safe`]).
fn rehome(p: &Plan, tables: &mut [GroupTables], way: &[InTheWay], data: &UsedMap) -> Result<Vec<Move>> {
    let mut reserve = UsedMap::over(p.new.blocks_count, u64::from(p.new.first_data_block));
    let itb = u64::from(p.new.inode_table_blocks);
    for g in 0..p.new.group_count {
        if p.new_base(g) > 0 {
            reserve.mark(p.new.group_first_block(g), p.new_base(g));
        }
        let t = &tables[g as usize];
        for (b, n) in [(t.block_bitmap, 1), (t.inode_bitmap, 1), (t.inode_table, itb)] {
            reserve.mark(b, n);
        }
    }
    let mut moves = Vec::new();
    let groups: BTreeSet<u32> = way.iter().map(|w| w.0).collect();
    for g in groups {
        let mut cur = tables[g as usize];
        for &(_, k, _, _) in way.iter().filter(|w| w.0 == g) {
            match k {
                0 => cur.block_bitmap = 0,
                1 => cur.inode_bitmap = 0,
                _ => cur.inode_table = 0,
            }
        }
        let mut t = super::place::place_missing(p, &mut reserve, &tables[..g as usize], g, cur)?;
        if cur.inode_table == 0 {
            t.inode_table = journal_safe(p, g, t.inode_table, &mut reserve, data)?;
        }
        for &(_, k, old, n) in way.iter().filter(|w| w.0 == g) {
            let new = [t.block_bitmap, t.inode_bitmap, t.inode_table][k];
            moves.push((old, new, n));
        }
        tables[g as usize] = t;
    }
    Ok(moves)
}

/// Stages each moved inode bitmap and inode table whole at its new home
/// (the changes already staged for its old place laid over it): in the
/// switch where the old file system has data there, else before it.
/// Block bitmaps are written afresh by the grow.
fn carry(fs: &Filesystem, p: &Plan, data: &UsedMap, way: &[InTheWay], homes: &[Move], st: &mut Stage) -> Result<()> {
    let bs = p.new.block_size as usize;
    for (&(_, k, _, _), &(old, new, n)) in way.iter().zip(homes) {
        if k == 0 {
            continue;
        }
        let in_use = data.used_in(new, new + n) > 0;
        for i in 0..n {
            let block = match st.txn.remove(&(old + i)).or_else(|| st.before.remove(&(old + i))) {
                Some(b) => b,
                None => {
                    let mut b = vec![0u8; bs];
                    fs.read_bytes((old + i) << p.new.block_size_log2, &mut b)?;
                    b
                }
            };
            st.put(new + i, block, !in_use);
        }
    }
    Ok(())
}

/// The home of group `g`'s inode table, `it` unless the table holds the
/// journal inode and the old file system has data there: the switch would
/// then carry the table, and while it goes home from the journal a
/// descriptor already pointing there would hide the journal inode from
/// whoever must replay it (the kernel, e2fsck, ext4kit). Such a table
/// takes the first run free in both maps from the start of its flex
/// group instead (where resize2fs, which has no journal to replay, may
/// put it elsewhere).
fn journal_safe(p: &Plan, g: u32, it: u64, reserve: &mut UsedMap, data: &UsedMap) -> Result<u64> {
    let jino = p.old_sb.s_journal_inum.get();
    let itb = u64::from(p.new.inode_table_blocks);
    if jino == 0 || (jino - 1) / p.new.inodes_per_group != g || data.used_in(it, it + itb) == 0 {
        return Ok(it);
    }
    let mut both = reserve.clone();
    let first = u64::from(p.new.first_data_block);
    data.for_each_in(first, p.new.blocks_count, |a, b| both.mark(a, b - a));
    let home = if p.new.features.incompat.contains(IncompatFeatures::FLEX_BG) {
        let flex = p.new.groups_per_flex.max(1);
        let from = p.new.group_first_block(g - g % flex);
        both.get_free(from, p.new.blocks_count, itb)
            .or_else(|| both.get_free(first, p.new.blocks_count, itb))
    } else {
        // Without flex_bg a group's tables lie in the group
        // (`ext2fs_check_desc`).
        let from = p.new.group_first_block(g);
        let end = (from + u64::from(p.new.blocks_per_group)).min(p.new.blocks_count);
        let last_start = (end + 1).checked_sub(itb).filter(|&l| l > from);
        last_start.and_then(|l| both.get_free(from, l, itb))
    };
    let home = home.ok_or_else(|| {
        Error::Unsupported(format!(
            "group {g}'s inode table holds the journal inode and must move out of the longer descriptor \
             table's way, but no run of {itb} blocks is free where it may go; free space in the group \
             (or grow with meta_bg)"
        ))
    })?;
    reserve.mark(home, itb);
    Ok(home)
}
