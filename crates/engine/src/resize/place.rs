//! Where a new group's bitmaps and inode table go:
//! `ext2fs_allocate_group_table` as resize2fs calls it, over the used-block
//! map of the whole file system. With flex_bg a new group's tables follow
//! the previous group's (the tables of a flex group stay packed, in free
//! blocks of an old group when the flex group began there); without it
//! they open the group, after its superblock and descriptor copies.

use super::plan::Plan;
use crate::error::{Error, Result};
use crate::mkfs::layout::{GroupTables, UsedMap};

/// Places the tables of `group`; `prev` holds the tables of every group
/// before it.
pub(crate) fn place(p: &Plan, map: &mut UsedMap, prev: &[GroupTables], group: u32) -> Result<GroupTables> {
    let none = GroupTables {
        block_bitmap: 0,
        inode_bitmap: 0,
        inode_table: 0,
    };
    place_missing(p, map, prev, group, none)
}

/// Places the tables of `group` that `cur` leaves at 0, keeping the
/// others, as `ext2fs_allocate_group_table` does for a descriptor whose
/// locations are partly cleared (resize2fs's `blocks_to_move`).
pub(crate) fn place_missing(
    p: &Plan,
    map: &mut UsedMap,
    prev: &[GroupTables],
    group: u32,
    cur: GroupTables,
) -> Result<GroupTables> {
    let g = &p.new;
    let group_blk = g.group_first_block(group);
    let itb = u64::from(g.inode_table_blocks);
    let flex = g.groups_per_flex;
    let keep = |b: u64, f: &mut dyn FnMut() -> Result<u64>| if b != 0 { Ok(b) } else { f() };
    if flex <= 1 {
        let last = last_block(p, group);
        let bb = keep(cur.block_bitmap, &mut || take(map, group_blk, group_blk, last))?;
        let ib = keep(cur.inode_bitmap, &mut || take(map, group_blk, group_blk, last))?;
        let it = keep(cur.inode_table, &mut || {
            let it = map.get_free(group_blk, last, itb).ok_or_else(no_room)?;
            map.mark(it, itb);
            Ok(it)
        })?;
        return Ok(GroupTables {
            block_bitmap: bb,
            inode_bitmap: ib,
            inode_table: it,
        });
    }
    let last_grp = (group | (flex - 1)).min(g.group_count - 1);
    let rem = last_grp - group + 1;
    let last = last_block(p, last_grp);
    let first_in_flex = group.is_multiple_of(flex);
    let mut table_offset = u64::from(flex);
    if first_in_flex && last_grp == g.group_count - 1 {
        let t = u64::from(last_grp & (flex - 1));
        table_offset = if t == 0 { u64::from(flex) } else { t + 1 };
    }
    let before = (!first_in_flex).then(|| prev[group as usize - 1]);
    let hint = before.map_or(0, |t| t.block_bitmap + 1);
    let start = offset(p, map, group, hint, rem, 1);
    let bb = keep(cur.block_bitmap, &mut || take(map, start, group_blk, last))?;
    let hint = before.map_or(bb + table_offset, |t| t.inode_bitmap + 1);
    let start = offset(p, map, group, hint, rem, 1);
    let ib = keep(cur.inode_bitmap, &mut || take(map, start, group_blk, last))?;
    let hint = before.map_or(ib + table_offset, |t| t.inode_table + itb);
    let start = offset(p, map, group, hint, rem, itb);
    let it = keep(cur.inode_table, &mut || {
        let it = map.get_free(start, last, itb).ok_or_else(no_room)?;
        map.mark(it, itb);
        Ok(it)
    })?;
    Ok(GroupTables {
        block_bitmap: bb,
        inode_bitmap: ib,
        inode_table: it,
    })
}

fn last_block(p: &Plan, group: u32) -> u64 {
    p.new.group_first_block(group) + u64::from(p.new.blocks_in_group(group)) - 1
}

fn take(map: &mut UsedMap, start: u64, group_blk: u64, last: u64) -> Result<u64> {
    let b = map
        .get_free(start, last, 1)
        .or_else(|| map.get_free(group_blk, last, 1))
        .ok_or_else(no_room)?;
    map.mark(b, 1);
    Ok(b)
}

/// `flexbg_offset`: keep on from the previous table when the run after it
/// is free, else the first free run of the flex group.
fn offset(p: &Plan, map: &UsedMap, group: u32, hint: u64, rem: u32, elem: u64) -> u64 {
    let g = &p.new;
    let flex = g.groups_per_flex;
    let size = (u64::from(rem) * elem).min(u64::from(g.blocks_per_group / 4));
    if hint != 0
        && hint < g.blocks_count
        && let Some(b) = map.get_free(hint, hint + size, elem)
    {
        return b;
    }
    let start = g.group_first_block(flex * (group / flex));
    let last_grp = (group | (flex - 1)).min(g.group_count - 1);
    let last = last_block(p, last_grp);
    map.get_free(start, last, size)
        .or_else(|| map.get_free(start, last, elem))
        .or_else(|| map.get_free(0, last, elem))
        .unwrap_or(0)
}

fn no_room() -> Error {
    Error::NoSpace
}
