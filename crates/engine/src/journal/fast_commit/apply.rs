//! The replay of each fast-commit record, inside one transaction, with the
//! kernel's rules (`fs/ext4/fast_commit.c`, replay path): a record naming
//! an inode or directory that cannot be read is skipped, as the kernel's
//! `ext4_iget` failure is; i_blocks is counted again from the tree rather
//! than taken from the record.

use std::collections::{BTreeMap, BTreeSet};

use ext4kit_format::extent::{EXT4_EXT_MAGIC, Extent};
use ext4kit_format::inode::{FileType, flags, set_inode_checksum};
use ext4kit_format::journal::fast_commit::{Dentry, Tag};

use crate::clock;
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::inode::extent_edit::{normalize, partition};
use crate::inode::extent_write::charge_blocks;
use crate::inode::write::{set_times, touch_ctime};
use crate::ops::remove::drop_link;
use crate::txn::Txn;

/// `struct ext4_inode` offsets: `i_flags`, `i_block`, `i_generation`,
/// `i_extra_isize`.
const I_FLAGS: usize = 0x20;
const I_BLOCK: usize = 0x28;
const I_GENERATION: usize = 0x64;
const I_EXTRA_ISIZE: usize = 0x80;
/// The 128-byte core record (`EXT4_GOOD_OLD_INODE_SIZE`).
const GOOD_OLD: usize = 128;

/// Inodes the replay changed: their i_blocks are counted at the end, and
/// those replayed from an `INODE` record get their bitmap bit from their
/// link count.
#[derive(Default)]
struct Touched {
    ranges: BTreeSet<u32>,
    records: BTreeSet<u32>,
    /// Block → in use, as the records leave it: the bitmaps are set once
    /// at the end, so a range removed by one record and added back by the
    /// next costs nothing (e2fsck works on its in-memory bitmap alike).
    blocks: BTreeMap<u64, bool>,
}

/// Applies `tags` in order, then settles i_blocks and inode bitmaps.
pub(super) fn replay(txn: &mut Txn<'_>, tags: &[Tag]) -> Result<()> {
    // What the log promised lands, reserve or not.
    txn.use_reserve();
    let mut touched = Touched::default();
    for tag in tags {
        match tag {
            Tag::Inode { ino, raw } => {
                copy_inode(txn, *ino, raw)?;
                touched.records.insert(*ino);
            }
            Tag::AddRange { ino, extent } => {
                let (lo, hi) = (u64::from(extent.logical), extent_end(extent));
                if edit_range(txn, *ino, lo, hi, Some(*extent), &mut touched.blocks)? {
                    touched.ranges.insert(*ino);
                }
            }
            Tag::DelRange { ino, lblk, len } => {
                let (lo, hi) = (u64::from(*lblk), (u64::from(*lblk) + u64::from(*len)).min(1 << 32));
                if edit_range(txn, *ino, lo, hi, None, &mut touched.blocks)? {
                    touched.ranges.insert(*ino);
                }
            }
            Tag::Create(d) => link(txn, d, true)?,
            Tag::Link(d) => link(txn, d, false)?,
            Tag::Unlink(d) => unlink(txn, d)?,
            Tag::Pad | Tag::Head { .. } | Tag::Tail { .. } => {}
        }
    }
    for (&b, &used) in &touched.blocks {
        mark_block(txn, b, used)?;
    }
    for &ino in touched.ranges.union(&touched.records) {
        settle(txn, ino, touched.records.contains(&ino))?;
    }
    Ok(())
}

fn extent_end(e: &Extent) -> u64 {
    u64::from(e.logical) + u64::from(e.len)
}

fn corrupt(ino: u32, why: &str) -> Error {
    Error::inconsistent(Location::Inode(ino), format!("fast-commit inode record: {why}"))
}

/// `EXT4_FC_TAG_INODE`: the record over the inode, except `i_block` (the
/// ranges rebuild the tree), which is kept, or made an empty extent root
/// when it holds none, or taken from the record for inline data.
fn copy_inode(txn: &mut Txn<'_>, ino: u32, raw: &[u8]) -> Result<()> {
    let isz = usize::from(txn.fs.geo.inode_size);
    let mut len = GOOD_OLD;
    if isz > GOOD_OLD {
        let extra = raw
            .get(I_EXTRA_ISIZE..I_EXTRA_ISIZE + 2)
            .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])));
        match extra {
            Some(e) if (4..=isz - GOOD_OLD).contains(&e) => len += e,
            _ => return Err(corrupt(ino, "i_extra_isize out of range")),
        }
    }
    if raw.len() < len {
        return Err(corrupt(ino, "shorter than its i_extra_isize says"));
    }
    // An inode number outside the table is skipped, as the kernel's
    // `ext4_get_fc_inode_loc` failure is.
    let Ok(slot) = txn.fs.inode_slot(ino) else {
        return Ok(());
    };
    let mut rec = txn.with_block(slot.block, ino, |b| b[slot.offset..slot.offset + isz].to_vec())?;
    rec[..I_BLOCK].copy_from_slice(&raw[..I_BLOCK]);
    rec[I_GENERATION..len].copy_from_slice(&raw[I_GENERATION..len]);
    let fl = u32::from_le_bytes([rec[I_FLAGS], rec[I_FLAGS + 1], rec[I_FLAGS + 2], rec[I_FLAGS + 3]]);
    if fl & flags::EXTENTS != 0 {
        if u16::from_le_bytes([rec[I_BLOCK], rec[I_BLOCK + 1]]) != EXT4_EXT_MAGIC {
            let root = &mut rec[I_BLOCK..I_BLOCK + 12];
            root.fill(0);
            root[..2].copy_from_slice(&EXT4_EXT_MAGIC.to_le_bytes());
            root[4..6].copy_from_slice(&4u16.to_le_bytes());
        }
    } else if fl & flags::INLINE_DATA != 0 {
        rec[I_BLOCK..I_GENERATION].copy_from_slice(&raw[I_BLOCK..I_GENERATION]);
    }
    if txn.fs.geo.features.metadata_csum() {
        set_inode_checksum(&mut rec, txn.fs.csum_seed, ino).map_err(|e| Error::format(Location::Inode(ino), e))?;
    }
    txn.block_mut(slot.block, ino)?[slot.offset..slot.offset + isz].copy_from_slice(&rec);
    txn.inode_written(ino);
    Ok(())
}

/// The inode a record names, or `None` when it cannot be read (the
/// kernel skips the record then).
fn readable(txn: &Txn<'_>, ino: u32) -> Option<Inode> {
    txn.inode(ino).ok()
}

/// `ADD_RANGE` (`add` given) and `DEL_RANGE`: logical blocks `lo..hi` of
/// `ino` unmapped, then mapped to `add`; the blocks they leave are to be
/// freed and the blocks of `add` taken (`ext4_mb_mark_bb`), in `blocks`.
/// False when the record was skipped.
fn edit_range(
    txn: &mut Txn<'_>,
    ino: u32,
    lo: u64,
    hi: u64,
    add: Option<Extent>,
    blocks: &mut BTreeMap<u64, bool>,
) -> Result<bool> {
    let Some(mut inode) = readable(txn, ino) else {
        return Ok(false);
    };
    if !inode.uses_extents() {
        return Ok(false);
    }
    let (exts, _) = txn.tree_contents(&inode)?;
    let (mut kept, gone) = partition(&exts, lo, hi);
    for g in &gone {
        for b in g.physical..g.physical + u64::from(g.len) {
            blocks.insert(b, false);
        }
    }
    if let Some(e) = add {
        txn.fs.check_block(e.physical, Location::Inode(ino))?;
        txn.fs
            .check_block(e.physical + u64::from(e.len).max(1) - 1, Location::Inode(ino))?;
        for b in e.physical..e.physical + u64::from(e.len) {
            blocks.insert(b, true);
        }
        kept.push(e);
    }
    txn.replace_extents(&mut inode, normalize(kept))?;
    txn.write_inode(&mut inode)?;
    Ok(true)
}

/// Sets block `b`'s bitmap bit, counting it, when it differs. A block
/// this transaction freed (a tree block) may be taken back: the bit is
/// set directly, not through the allocator, which holds freed blocks
/// until the commit.
fn mark_block(txn: &mut Txn<'_>, b: u64, used: bool) -> Result<()> {
    txn.fs.check_block(b, Location::Block { block: b, inode: 0 })?;
    let g = txn.group_of(b);
    let bit = (b - txn.fs.geo.group_first_block(g)) as u32;
    let map = txn.block_bitmap_mut(g)?;
    let (byte, mask) = (bit as usize / 8, 1u8 << (bit % 8));
    let set = map.get(byte).is_some_and(|x| x & mask != 0);
    match (set, used) {
        (false, true) => {
            if let Some(x) = map.get_mut(byte) {
                *x |= mask;
            }
            txn.adjust_group_blocks(g, -1)?;
            txn.fs.mb.lock().cache.note_taken(g, bit, 1);
            txn.note_buddy_touched(g);
        }
        (true, false) => txn.free_blocks(b, 1)?,
        _ => {}
    }
    Ok(())
}

/// `CREAT` and `LINK`: any entry of the name goes, then the name is added
/// for the inode, typed by its mode; a created inode has one link, a
/// linked one gains one (`ext4_fc_replay_link_internal`). The directory's
/// times are the replay's, as the kernel's `__ext4_link` leaves them.
fn link(txn: &mut Txn<'_>, d: &Dentry, create: bool) -> Result<()> {
    let (Some(mut dir), Some(mut inode)) = (readable(txn, d.parent), readable(txn, d.ino)) else {
        return Ok(());
    };
    if !dir.is_dir() {
        return Ok(());
    }
    let Ok(ft) = inode.file_type() else { return Ok(()) };
    if create {
        txn.set_inode_used(d.ino, ft == FileType::Directory)?;
    }
    if txn.find_entry(&dir, &d.name)?.0.is_some() {
        let (_, at) = txn.remove_entry_at(&dir, &d.name)?;
        txn.after_removal(&mut dir, at)?;
    }
    let code = txn.entry_ft(ft.dirent_code());
    txn.add_dir_name(&mut dir, &d.name, d.ino, code, None)?;
    set_times(&mut dir.raw, clock::now(), false);
    txn.write_inode(&mut dir)?;
    let links = if create { 1 } else { inode.raw.links().saturating_add(1) };
    inode.raw.i_links_count.set(links);
    touch_ctime(&mut inode.raw, clock::now());
    txn.write_inode(&mut inode)
}

/// `UNLINK`: the name goes if it still names the inode, which loses the
/// link and, with its last, is freed (`__ext4_unlink`, then eviction).
fn unlink(txn: &mut Txn<'_>, d: &Dentry) -> Result<()> {
    let (Some(mut dir), Some(mut inode)) = (readable(txn, d.parent), readable(txn, d.ino)) else {
        return Ok(());
    };
    if !dir.is_dir() || txn.find_entry(&dir, &d.name)?.0 != Some(d.ino) {
        return Ok(());
    }
    let (_, at) = txn.remove_entry_at(&dir, &d.name)?;
    txn.after_removal(&mut dir, at)?;
    set_times(&mut dir.raw, clock::now(), false);
    txn.write_inode(&mut dir)?;
    drop_link(txn, &mut inode)
}

/// i_blocks counted from the tree (data, tree blocks, the xattr block),
/// and, for an inode replayed from its record, its bitmap bit from its
/// link count (e2fsck's `ext4_fc_handle_inode`).
fn settle(txn: &mut Txn<'_>, ino: u32, from_record: bool) -> Result<()> {
    let Some(mut inode) = readable(txn, ino) else {
        return Ok(());
    };
    if inode.uses_extents() {
        let (exts, tree) = txn.tree_contents(&inode)?;
        let data: u64 = exts.iter().map(|e| u64::from(e.len)).sum();
        let acl = u64::from(inode.raw.file_acl() != 0);
        inode.raw.i_blocks_lo.set(0);
        inode.raw.i_blocks_high.set(0);
        let n = data + tree.len() as u64 + acl;
        charge_blocks(&mut inode.raw, n as i64, txn.fs.geo.block_size);
        txn.write_inode(&mut inode)?;
    }
    if from_record {
        let is_dir = inode.is_dir();
        if inode.raw.links() > 0 {
            txn.set_inode_used(ino, is_dir)?;
        } else if txn.inode_in_use(ino)? {
            txn.free_inode(ino, is_dir)?;
        }
    }
    Ok(())
}
