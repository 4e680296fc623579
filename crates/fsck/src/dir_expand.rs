//! Growing a directory by one block (e2fsck's `e2fsck_expand_directory`,
//! used when `/lost+found` has no room for a name): a free block is
//! mapped at the logical block after the last, through the extent tree's
//! rightmost leaf (`ifork.rst`, "Extent Tree") or the block map's direct
//! and single-indirect slots, and `i_size` and `i_blocks` grow with it.

use ext4kit_format::extent::{Extent, NodeEntries, encode_node, parse_node, set_block_checksum};
use ext4kit_format::inode::{RawInode, flags};

use crate::inode_edit::{self, add_blocks};
use crate::pass1::decode;
use crate::state::{Ctx, DirBlock};

/// Extent-tree levels a walk down the rightmost path may take.
const MAX_DEPTH: usize = 5;

/// Maps a new block at the end of directory `dir`; returns its logical
/// and physical block. The block's contents are the caller's to write.
///
/// # Errors
/// Why not: no free block, an inline directory, a mapping this code
/// does not grow (a full extent leaf, a block map past the single
/// indirect block).
pub fn append_block(ctx: &mut Ctx, dir: u32) -> Result<(u32, u64), String> {
    let rec = ctx.fs.inode_record(dir).map_err(|e| e.to_string())?;
    let mut raw = decode(&rec);
    if raw.has_flag(flags::INLINE_DATA) {
        return Err("inline directory".into());
    }
    let bs = u64::from(ctx.fs.geo.block_size);
    let lblk = u32::try_from(raw.size().div_ceil(bs)).map_err(|_| "directory too large")?;
    let goal = last_pblk(ctx, dir).map_or(0, |b| b + 1);
    let pblk = ctx.alloc_block(goal).ok_or("no free block")?;
    let mapped = if raw.has_flag(flags::EXTENTS) {
        map_extent(ctx, &mut raw, dir, lblk, pblk).map(|()| 0)
    } else {
        map_blockmap(ctx, &mut raw, lblk, pblk)
    };
    let extra = match mapped {
        Ok(n) => n,
        Err(e) => {
            ctx.free_block(pblk);
            return Err(e);
        }
    };
    raw.set_size((u64::from(lblk) + 1) * bs);
    add_blocks(&ctx.fs, &mut raw, 1 + extra);
    inode_edit::update(&ctx.fs, dir, |r| {
        r.i_block = raw.i_block;
        r.i_size_lo = raw.i_size_lo;
        r.i_size_high = raw.i_size_high;
        r.i_blocks_lo = raw.i_blocks_lo;
        r.i_blocks_high = raw.i_blocks_high;
    })
    .map_err(|e| e.to_string())?;
    if let Some(d) = ctx.dirs.get_mut(&dir) {
        d.size = raw.size();
    }
    let at = ctx.dblocks.partition_point(|b| (b.ino, b.lblk) < (dir, lblk));
    ctx.dblocks.insert(at, DirBlock { ino: dir, lblk, pblk });
    Ok((lblk, pblk))
}

fn last_pblk(ctx: &Ctx, dir: u32) -> Option<u64> {
    let z = ctx.dblocks.partition_point(|b| b.ino <= dir);
    ctx.dblocks[..z].last().filter(|b| b.ino == dir).map(|b| b.pblk)
}

/// Adds `lblk` → `pblk` to the rightmost leaf: the last extent grows when
/// it runs on contiguously, else a new extent goes after it.
fn map_extent(ctx: &mut Ctx, raw: &mut RawInode, ino: u32, lblk: u32, pblk: u64) -> Result<(), String> {
    let root = parse_node(&raw.i_block, true).map_err(|e| e.to_string())?;
    if root.depth == 0 {
        let mut node = root;
        grow_leaf(&mut node.entries, lblk, pblk, node.header.eh_max.get())?;
        encode_node(&node, &mut raw.i_block);
        return Ok(());
    }
    let mut child = last_child(&root.entries)?;
    for _ in 0..MAX_DEPTH {
        let mut buf = ctx.fs.read_block(child).map_err(|e| e.to_string())?;
        let mut node = parse_node(&buf, false).map_err(|e| e.to_string())?;
        if node.depth > 0 {
            child = last_child(&node.entries)?;
            continue;
        }
        grow_leaf(&mut node.entries, lblk, pblk, node.header.eh_max.get())?;
        encode_node(&node, &mut buf);
        if ctx.fs.geo.features.metadata_csum() {
            set_block_checksum(&mut buf, raw.csum_seed(ctx.fs.seed, ino)).map_err(|e| e.to_string())?;
        }
        return ctx.fs.write_block(child, &buf).map_err(|e| e.to_string());
    }
    Err("extent tree too deep".into())
}

fn last_child(entries: &NodeEntries) -> Result<u64, String> {
    match entries {
        NodeEntries::Index(v) => v.last().map(|i| i.child).ok_or_else(|| "empty extent index".into()),
        NodeEntries::Leaf(_) => Err("extent leaf where an index was expected".into()),
    }
}

fn grow_leaf(entries: &mut NodeEntries, lblk: u32, pblk: u64, max: u16) -> Result<(), String> {
    let NodeEntries::Leaf(v) = entries else {
        return Err("extent index where a leaf was expected".into());
    };
    if let Some(e) = v.last_mut()
        && !e.unwritten
        && e.logical + u32::from(e.len) == lblk
        && e.physical + u64::from(e.len) == pblk
        && e.len < 32768
    {
        e.len += 1;
        return Ok(());
    }
    if v.len() >= usize::from(max) {
        return Err("the last extent leaf is full".into());
    }
    v.push(Extent {
        logical: lblk,
        len: 1,
        physical: pblk,
        unwritten: false,
    });
    Ok(())
}

/// Puts `pblk` in the block map's slot for `lblk`: a direct slot, or the
/// single indirect block (made when missing). Returns the mapping blocks
/// it added.
fn map_blockmap(ctx: &mut Ctx, raw: &mut RawInode, lblk: u32, pblk: u64) -> Result<i64, String> {
    let per = ctx.fs.geo.block_size / 4;
    let slot = |i: usize| i * 4..i * 4 + 4;
    if lblk < 12 {
        raw.i_block[slot(lblk as usize)].copy_from_slice(&(pblk as u32).to_le_bytes());
        return Ok(0);
    }
    let idx = lblk - 12;
    if idx >= per {
        return Err("block map past the single indirect block".into());
    }
    let mut ind = u64::from(u32::from_le_bytes(raw.i_block[48..52].try_into().unwrap_or([0; 4])));
    let mut added = 0;
    let mut buf = if ind == 0 {
        ind = ctx.alloc_block(pblk).ok_or("no free block for the indirect block")?;
        raw.i_block[48..52].copy_from_slice(&(ind as u32).to_le_bytes());
        added = 1;
        vec![0u8; ctx.fs.bs()]
    } else {
        ctx.fs.read_block(ind).map_err(|e| e.to_string())?
    };
    buf[slot(idx as usize)].copy_from_slice(&(pblk as u32).to_le_bytes());
    ctx.fs.write_block(ind, &buf).map_err(|e| e.to_string())?;
    Ok(added)
}
