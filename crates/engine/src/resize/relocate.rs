//! Kept groups' tables past the new end of a shrink: flex_bg packs a
//! flex group's tables in its first group as a rule, but a grow whose
//! flex group began full, or a table moved by resize2fs, can leave a
//! kept group's bitmap or inode table in a group being cut. As
//! resize2fs's `blocks_to_move` does, each such table gets a new home
//! below the end (`ext2fs_allocate_group_table` on a location set to
//! zero: the first free run from the start of the group's flex group,
//! or of the group itself without flex_bg), taken before any data block
//! is moved; the table's contents are copied there before the switch
//! (the copy lands where the old file system keeps nothing), and the
//! descriptor points at it in the switch.

use ext4kit_format::group_desc::RawGroupDesc;

use super::plan::Plan;
use super::stage::Stage;
use crate::error::{Error, Result};
use crate::mkfs::layout::{GroupTables, UsedMap};

/// A table moved: (old first block, new first block, length).
pub(crate) type Move = (u64, u64, u64);

/// The tables of `kept` reaching past the new end, with their lengths
/// (block bitmap, inode bitmap, inode table), in group order.
pub(crate) fn cut_tables(p: &Plan, kept: &[GroupTables]) -> Vec<(u32, usize, u64, u64)> {
    let end = p.new.blocks_count;
    let itb = u64::from(p.new.inode_table_blocks);
    let mut out = Vec::new();
    for (g, t) in kept.iter().enumerate() {
        for (k, (b, n)) in [(t.block_bitmap, 1), (t.inode_bitmap, 1), (t.inode_table, itb)]
            .into_iter()
            .enumerate()
        {
            if b + n > end {
                out.push((g as u32, k, b, n));
            }
        }
    }
    out
}

/// Finds new homes for `cut` (from [`cut_tables`]) among blocks free in
/// `busy` (the old file system's used blocks, live ones included), marks
/// them in `busy` and `map`, and points `kept` at them.
pub(crate) fn place(
    p: &Plan,
    busy: &mut UsedMap,
    map: &mut UsedMap,
    kept: &mut [GroupTables],
    cut: &[(u32, usize, u64, u64)],
) -> Result<Vec<Move>> {
    let end = p.new.blocks_count;
    let flex = p.new.groups_per_flex.max(1);
    let mut moves = Vec::new();
    for &(g, k, old, n) in cut {
        let from = p.new.group_first_block(g - g % flex);
        let new = busy
            .get_free(from, end, n)
            .filter(|b| b + n <= end)
            .or_else(|| busy.get_free(u64::from(p.new.first_data_block), end, n))
            .filter(|b| b + n <= end)
            .ok_or(Error::NoSpace)?;
        busy.mark(new, n);
        map.mark(new, n);
        let t = &mut kept[g as usize];
        match k {
            0 => t.block_bitmap = new,
            1 => t.inode_bitmap = new,
            _ => t.inode_table = new,
        }
        moves.push((old, new, n));
    }
    Ok(moves)
}

/// Moving tables needs the superblock to go home last (see
/// [`Stage::sb_last`]): the old superblock must still read the new
/// descriptor blocks, which holds only while there are as many, the cut
/// groups' descriptors kept in them.
pub(crate) fn refuse_shorter_table(p: &Plan) -> Result<()> {
    if p.new_desc_blocks != p.old.group_count.div_ceil(p.old.descs_per_block()) {
        return Err(Error::Unsupported(
            "moving a kept group's tables while the descriptor table shrinks is not implemented".into(),
        ));
    }
    Ok(())
}

/// Points descriptor `d` at tables `t`.
pub(crate) fn point(d: &mut RawGroupDesc, t: &GroupTables) {
    d.bg_block_bitmap_lo.set(t.block_bitmap as u32);
    d.bg_block_bitmap_hi.set((t.block_bitmap >> 32) as u32);
    d.bg_inode_bitmap_lo.set(t.inode_bitmap as u32);
    d.bg_inode_bitmap_hi.set((t.inode_bitmap >> 32) as u32);
    d.bg_inode_table_lo.set(t.inode_table as u32);
    d.bg_inode_table_hi.set((t.inode_table >> 32) as u32);
}

/// Copies each moved table to its new home before the switch, and
/// carries the blocks staged for its old place (inode records and
/// bitmaps changed by the shrink) over the copy: the new place is one the
/// old file system does not read, so they go `before` too.
pub(crate) fn redirect(st: &mut Stage, moves: &[Move]) {
    for &(old, new, n) in moves {
        st.copy.push((old, new, n));
        for b in old..old + n {
            let data = st.txn.remove(&b).or_else(|| st.before.remove(&b));
            if let Some(data) = data {
                st.before.insert(new + (b - old), data);
            }
        }
    }
}
