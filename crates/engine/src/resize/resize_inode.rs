//! The resize inode (inode 7) after a resize, rebuilt as resize2fs's
//! `fix_resize_inode` does through `ext2fs_create_resize_inode`: its
//! double-indirect block lists each primary reserved GDT block at slot
//! `(descriptor blocks + i) mod (block size / 4)`, and each primary
//! reserved block lists its copies in the backup groups, in group order.
//! `i_blocks` counts the double-indirect block and every reserved block,
//! primary and copies.

use ext4kit_format::features::CompatFeatures;
use ext4kit_format::inode::set_inode_checksum;

use super::plan::Plan;
use super::stage::Stage;
use super::superblocks::primary_table;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::mkfs::layout::GroupTables;

/// `EXT2_RESIZE_INO`.
const RESIZE_INO: u32 = 7;
/// `EXT2_DIND_BLOCK`: slot of `i_block` holding the double-indirect block.
const DIND_SLOT: usize = 13;

/// Stages the rebuilt inode, its double-indirect block and the primary
/// reserved GDT blocks (all in group 0: `txn`).
pub(crate) fn rebuild(fs: &Filesystem, p: &Plan, tables: &[GroupTables], st: &mut Stage) -> Result<()> {
    if !p.new.features.compat.contains(CompatFeatures::RESIZE_INODE) {
        return Ok(());
    }
    let bs = u64::from(p.new.block_size);
    let isz = u64::from(p.new.inode_size);
    let at = u64::from(RESIZE_INO - 1) * isz;
    let itable_block = tables[0].inode_table + at / bs;
    let off = (at % bs) as usize;
    // A shrink that moved blocks may already have rewritten this block; a
    // grow that moved the inode table has staged it whole at its home.
    let mut block = match st.txn.remove(&itable_block).or_else(|| st.before.remove(&itable_block)) {
        Some(b) => b,
        None => {
            let mut b = vec![0u8; bs as usize];
            fs.read_bytes(itable_block << p.new.block_size_log2, &mut b)?;
            b
        }
    };
    let rec = &mut block[off..off + isz as usize];
    let slot = 40 + DIND_SLOT * 4;
    let dind = u64::from(u32::from_le_bytes(rec[slot..slot + 4].try_into().expect("4 bytes")));
    if dind == 0 || dind >= p.old.blocks_count {
        return Err(Error::inconsistent(
            Location::Inode(RESIZE_INO),
            format!("the resize inode's double-indirect block {dind} is not in the file system"),
        ));
    }
    let apb = bs / 4;
    let backups: Vec<u64> = (1..p.new.group_count)
        .filter(|&g| p.new_has_super(g))
        .map(u64::from)
        .collect();
    if backups.len() as u64 > apb {
        return Err(Error::Unsupported(
            "more backup groups than a resize inode block can list".into(),
        ));
    }
    let mut dind_buf = vec![0u8; bs as usize];
    let reserved = u64::from(p.new_sb.s_reserved_gdt_blocks.get());
    let desc = u64::from(p.new_desc_blocks);
    let first = primary_table(p) + desc;
    for r in 0..reserved {
        let gdt_off = ((desc + r) % apb) as usize * 4;
        let gdt_blk = first + r;
        dind_buf[gdt_off..gdt_off + 4].copy_from_slice(&(gdt_blk as u32).to_le_bytes());
        let mut list = vec![0u8; bs as usize];
        for (i, g) in backups.iter().enumerate() {
            let copy = gdt_blk + g * u64::from(p.new.blocks_per_group);
            list[i * 4..i * 4 + 4].copy_from_slice(&(copy as u32).to_le_bytes());
        }
        st.txn.insert(gdt_blk, list);
    }
    st.txn.insert(dind, dind_buf);
    let blocks = 1 + reserved * (1 + backups.len() as u64);
    let i_blocks = blocks * (bs / 512);
    rec[28..32].copy_from_slice(&(i_blocks as u32).to_le_bytes());
    if p.new.features.metadata_csum() {
        set_inode_checksum(rec, p.new_sb.csum_seed(), RESIZE_INO)
            .map_err(|e| Error::format(Location::Inode(RESIZE_INO), e))?;
    }
    st.txn.insert(itable_block, block);
    Ok(())
}
