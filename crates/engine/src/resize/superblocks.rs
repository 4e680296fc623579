//! The descriptor table and superblock copies of the new layout: the
//! primary table (`txn`), the copies in old backup groups (`after`) and in
//! new ones (`before`); a descriptor block taken from the reserve replaces
//! the first reserved GDT block of every copy (`s_reserved_gdt_blocks`
//! shrinks by as many); under meta_bg, each meta group's descriptor
//! block lives in its first group (the primary), second and last.

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::superblock::RawSuperblock;

use super::plan::Plan;
use super::stage::Stage;
use crate::error::Result;
use crate::fs::Filesystem;
use crate::mkfs::layout::GroupTables;

/// First block of the primary descriptor table (after the superblock's
/// block, which is block 1 with 1 KiB blocks and 0 otherwise).
pub(crate) fn primary_table(p: &Plan) -> u64 {
    1024 / u64::from(p.new.block_size) + 1
}

/// Stages the descriptor tables and the backup superblocks.
pub(crate) fn stage_descs(fs: &Filesystem, p: &Plan, descs: &[RawGroupDesc], st: &mut Stage) -> Result<()> {
    let bs = p.new.block_size as usize;
    let ds = usize::from(p.new.desc_size);
    let mut table = vec![0u8; p.new_desc_blocks as usize * bs];
    if st.sb_last {
        // The cut groups' descriptors stay past the kept ones, so the old
        // superblock still reads a sound table until the new one is home.
        for (i, chunk) in table.chunks_mut(bs).enumerate() {
            fs.read_bytes(p.primary_desc_block(i as u32) << p.new.block_size_log2, chunk)?;
        }
    }
    for (g, d) in descs.iter().enumerate() {
        d.encode_into(&mut table[g * ds..(g + 1) * ds]);
    }
    let old_desc_blocks = p.old.group_count.div_ceil(p.old.descs_per_block());
    for (i, chunk) in table.chunks(bs).enumerate() {
        // A descriptor block the old table lacks opens a new meta group,
        // in a new group (meta_bg; without it the reserve held it).
        let fresh = p.meta_bg() && i as u32 >= old_desc_blocks;
        st.put(p.primary_desc_block(i as u32), chunk.to_vec(), fresh);
    }
    for g in 1..p.new.group_count {
        let old = g < p.old.group_count;
        for (b, data) in copies(p, &st.sb, &table, g) {
            if old {
                st.after.insert(b, data);
            } else {
                st.before.insert(b, data);
            }
        }
    }
    Ok(())
}

/// The superblock and descriptor copies group `g` holds: the superblock
/// with the old-style table (all of it, or under meta_bg its first
/// `s_first_meta_bg` blocks), or its meta group's descriptor block.
fn copies(p: &Plan, sb: &RawSuperblock, table: &[u8], g: u32) -> Vec<(u64, Vec<u8>)> {
    let bs = p.new.block_size as usize;
    let start = p.new.group_first_block(g);
    let mut blocks = Vec::new();
    let sup = p.new_has_super(g);
    if sup {
        let mut copy = backup(sb, g);
        copy.set_checksum();
        let mut block = vec![0u8; bs];
        block[..1024].copy_from_slice(&copy.encode());
        blocks.push((start, block));
    }
    let dpb = p.new.descs_per_block();
    let first_meta = if p.meta_bg() {
        p.new_sb.s_first_meta_bg.get()
    } else {
        p.new_desc_blocks
    };
    if !p.meta_bg() || g / dpb < first_meta {
        if sup {
            for (i, chunk) in table.chunks(bs).take(first_meta as usize).enumerate() {
                blocks.push((start + 1 + i as u64, chunk.to_vec()));
            }
        }
    } else if p.new_base(g) > u64::from(sup) && !g.is_multiple_of(dpb) {
        // (The first group's block is the primary, staged with the table.)
        let i = (g / dpb) as usize;
        blocks.push((start + u64::from(sup), table[i * bs..(i + 1) * bs].to_vec()));
    }
    blocks
}

/// The copy of `sb` kept in group `g`.
fn backup(sb: &RawSuperblock, g: u32) -> RawSuperblock {
    let mut b = *sb;
    b.s_block_group_nr.set(g as u16);
    let f = b.s_feature_incompat.get() & !IncompatFeatures::RECOVER.0;
    b.s_feature_incompat.set(f);
    b
}

/// The last staging step of a grow or a shrink: the new superblock takes
/// `free_blocks` (recounted from the bitmaps) and `free_inodes`, then the
/// descriptor table and the resize inode are staged for it.
pub(crate) fn finish(
    fs: &Filesystem,
    p: &Plan,
    (descs, tables): (&[RawGroupDesc], &[GroupTables]),
    mut st: Stage,
    (free_blocks, free_inodes): (u64, u32),
) -> Result<Stage> {
    let mut sb = p.new_sb;
    sb.s_free_blocks_count_lo.set(free_blocks as u32);
    if p.new.features.incompat.contains(IncompatFeatures::BIT64) {
        sb.s_free_blocks_count_hi.set((free_blocks >> 32) as u32);
    }
    sb.s_free_inodes_count.set(free_inodes);
    st.sb = sb;
    stage_descs(fs, p, descs, &mut st)?;
    super::resize_inode::rebuild(fs, p, tables, &mut st)?;
    Ok(st)
}
