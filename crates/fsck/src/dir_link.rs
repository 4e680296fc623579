//! Editing directory entries during a repair (`directory.rst`, "Linear
//! (Classic) Directories"): a name added where a block has room (or in a
//! block appended to the directory), a name removed, `..` pointed at
//! another parent, and the first block of a new directory. Blocks keep
//! their checksum tail under metadata_csum (`ext4_dir_entry_tail`).
//!
//! A hash-indexed directory loses its index before a name is added (its
//! index blocks read as empty entries), as e2fsck lets `ext2fs_link` do;
//! with metadata_csum the index blocks have no dirent tail, so the name is
//! refused instead.

use ext4kit_format::dir_entry::{
    encode_entry, has_tail, rec_len_for, rec_len_from_disk, rec_len_to_disk, set_block_checksum,
};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::flags;

use crate::dir_expand::append_block;
use crate::inode_edit;
use crate::state::{Ctx, DirBlock};

/// Bytes of a dirent checksum tail.
const TAIL: usize = 12;
/// Directory file type of a directory.
pub const FT_DIR: u8 = 2;

/// The blocks pass 1 found for `dir`, in logical order.
fn blocks_of(ctx: &Ctx, dir: u32) -> Vec<DirBlock> {
    let a = ctx.dblocks.partition_point(|b| b.ino < dir);
    let z = ctx.dblocks.partition_point(|b| b.ino <= dir);
    ctx.dblocks[a..z].iter().filter(|b| b.pblk != 0).copied().collect()
}

fn filetype(ctx: &Ctx) -> bool {
    ctx.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE)
}

/// Where the entries of `buf` end: before the tail when it has one.
fn entries_end(ctx: &Ctx, buf: &[u8]) -> usize {
    if ctx.fs.geo.features.metadata_csum() && has_tail(buf) {
        buf.len() - TAIL
    } else {
        buf.len()
    }
}

/// Writes a directory block back, its tail checksum recomputed.
fn write_dir_block(ctx: &Ctx, dir: u32, pblk: u64, buf: &mut [u8]) -> Result<(), String> {
    if ctx.fs.geo.features.metadata_csum() && has_tail(buf) {
        let seed = ctx.dirs.get(&dir).map_or(0, |d| d.csum_seed);
        set_block_checksum(buf, seed);
    }
    ctx.fs.write_block(pblk, buf).map_err(|e| e.to_string())
}

/// One raw entry: (inode, rec_len, name_len), or None when it does not fit.
fn entry_at(buf: &[u8], pos: usize, end: usize, ft: bool) -> Option<(u32, usize, usize)> {
    if pos + 8 > end {
        return None;
    }
    let ino = u32::from_le_bytes(buf[pos..pos + 4].try_into().ok()?);
    let rec_len = rec_len_from_disk(u16::from_le_bytes([buf[pos + 4], buf[pos + 5]]), buf.len());
    let mut name_len = usize::from(buf[pos + 6]);
    if !ft {
        name_len |= usize::from(buf[pos + 7]) << 8;
    }
    (rec_len >= 8 && rec_len.is_multiple_of(4) && pos + rec_len <= end).then_some((ino, rec_len, name_len))
}

/// Puts (`ino`, `name`) into `buf` where an entry has room to spare;
/// false when none has.
fn insert_in_block(buf: &mut [u8], end: usize, ft_on: bool, ino: u32, name: &[u8], ft: u8) -> bool {
    let need = rec_len_for(name.len());
    let mut pos = 0;
    while let Some((cur, rec_len, name_len)) = entry_at(buf, pos, end, ft_on) {
        let used = if cur == 0 { 0 } else { rec_len_for(name_len) };
        if rec_len >= used + need {
            let bs = buf.len();
            if used > 0 {
                buf[pos + 4..pos + 6].copy_from_slice(&rec_len_to_disk(used, bs).to_le_bytes());
            }
            let ft = if ft_on { ft } else { 0 };
            encode_entry(buf, pos + used, ino, rec_len - used, ft, name, bs);
            return true;
        }
        pos += rec_len;
    }
    false
}

/// Adds the entry `name` → `ino` (of dirent file type `ft`) to directory
/// `dir`, appending a block when no block has room (e2fsck's
/// `ext2fs_link` with `EXT2FS_LINK_EXPAND`).
///
/// # Errors
/// Why the name could not be added.
pub fn add_entry(ctx: &mut Ctx, dir: u32, name: &[u8], ino: u32, ft: u8) -> Result<(), String> {
    let info = ctx.dirs.get(&dir).cloned().ok_or("not a directory")?;
    if info.inline {
        return Err("inline directory".into());
    }
    if info.htree {
        drop_index(ctx, dir)?;
    }
    let ft_on = filetype(ctx);
    for b in blocks_of(ctx, dir) {
        let Ok(mut buf) = ctx.fs.read_block(b.pblk) else {
            continue;
        };
        let end = entries_end(ctx, &buf);
        if insert_in_block(&mut buf, end, ft_on, ino, name, ft) {
            return write_dir_block(ctx, dir, b.pblk, &mut buf);
        }
    }
    let (_, pblk) = append_block(ctx, dir)?;
    let mut buf = empty_block(ctx);
    let end = entries_end(ctx, &buf);
    if !insert_in_block(&mut buf, end, ft_on, ino, name, ft) {
        return Err("name too long for a block".into());
    }
    write_dir_block(ctx, dir, pblk, &mut buf)
}

/// Clears `INDEX_FL`, so the directory reads as linear.
fn drop_index(ctx: &mut Ctx, dir: u32) -> Result<(), String> {
    if ctx.fs.geo.features.metadata_csum() {
        return Err("hash-indexed directory with metadata_csum".into());
    }
    inode_edit::update(&ctx.fs, dir, |r| r.i_flags.set(r.flags() & !flags::INDEX)).map_err(|e| e.to_string())?;
    if let Some(d) = ctx.dirs.get_mut(&dir) {
        d.htree = false;
    }
    Ok(())
}

/// A block with one empty entry over all of it (and a tail under
/// metadata_csum), as `ext2fs_new_dir_block` makes for a directory's
/// later blocks.
fn empty_block(ctx: &Ctx) -> Vec<u8> {
    let bs = ctx.fs.bs();
    let mut buf = vec![0u8; bs];
    let end = if ctx.fs.geo.features.metadata_csum() {
        bs - TAIL
    } else {
        bs
    };
    encode_entry(&mut buf, 0, 0, end, 0, b"", bs);
    if end < bs {
        set_block_checksum(&mut buf, 0);
    }
    buf
}

/// The first block of a new directory: `.` → `ino`, `..` → `parent`, and
/// a tail checksummed with `seed` under metadata_csum.
pub fn first_block(ctx: &Ctx, ino: u32, parent: u32, seed: u32) -> Vec<u8> {
    let bs = ctx.fs.bs();
    let mut buf = vec![0u8; bs];
    let csum = ctx.fs.geo.features.metadata_csum();
    let end = if csum { bs - TAIL } else { bs };
    let ft = if filetype(ctx) { FT_DIR } else { 0 };
    encode_entry(&mut buf, 0, ino, 12, ft, b".", bs);
    encode_entry(&mut buf, 12, parent, end - 12, ft, b"..", bs);
    if csum {
        set_block_checksum(&mut buf, seed);
    }
    buf
}

/// Points the `..` entry of `dir` at `parent`; returns what it named.
///
/// # Errors
/// No `..` where it belongs (the second entry of block 0, or the first
/// four bytes of an inline directory).
pub fn set_dotdot(ctx: &mut Ctx, dir: u32, parent: u32) -> Result<u32, String> {
    let info = ctx.dirs.get(&dir).cloned().ok_or("not a directory")?;
    if info.inline {
        let mut old = 0;
        inode_edit::update(&ctx.fs, dir, |r| {
            old = u32::from_le_bytes(r.i_block[..4].try_into().unwrap_or([0; 4]));
            r.i_block[..4].copy_from_slice(&parent.to_le_bytes());
        })
        .map_err(|e| e.to_string())?;
        return Ok(old);
    }
    let b = blocks_of(ctx, dir)
        .into_iter()
        .find(|b| b.lblk == 0)
        .ok_or("no block 0")?;
    let mut buf = ctx.fs.read_block(b.pblk).map_err(|e| e.to_string())?;
    let end = entries_end(ctx, &buf);
    let ft_on = filetype(ctx);
    let (_, first_len, _) = entry_at(&buf, 0, end, ft_on).ok_or("no '.' entry")?;
    let (old, _, name_len) = entry_at(&buf, first_len, end, ft_on).ok_or("no '..' entry")?;
    if name_len != 2 || &buf[first_len + 8..first_len + 10] != b".." {
        return Err("the second entry is not '..'".into());
    }
    buf[first_len..first_len + 4].copy_from_slice(&parent.to_le_bytes());
    buf[first_len + 7] = if ft_on { FT_DIR } else { 0 };
    write_dir_block(ctx, dir, b.pblk, &mut buf)?;
    Ok(old)
}

/// Removes the entry `name` from `dir` (its space joins the entry before
/// it, or the entry is emptied when first in its block); returns the
/// inode it named (e2fsck's `ext2fs_unlink`).
///
/// # Errors
/// No such name, or the directory could not be written.
pub fn remove_entry(ctx: &mut Ctx, dir: u32, name: &[u8]) -> Result<u32, String> {
    let ft_on = filetype(ctx);
    for b in blocks_of(ctx, dir) {
        let Ok(mut buf) = ctx.fs.read_block(b.pblk) else {
            continue;
        };
        let end = entries_end(ctx, &buf);
        let (mut pos, mut prev) = (0usize, None);
        while let Some((ino, rec_len, name_len)) = entry_at(&buf, pos, end, ft_on) {
            if ino != 0 && name_len == name.len() && buf.get(pos + 8..pos + 8 + name_len) == Some(name) {
                match prev {
                    Some(p) => {
                        let (_, plen, _) = entry_at(&buf, p, end, ft_on).ok_or("entry vanished")?;
                        let bs = buf.len();
                        buf[p + 4..p + 6].copy_from_slice(&rec_len_to_disk(plen + rec_len, bs).to_le_bytes());
                    }
                    None => buf[pos..pos + 4].fill(0),
                }
                write_dir_block(ctx, dir, b.pblk, &mut buf)?;
                return Ok(ino);
            }
            prev = Some(pos);
            pos += rec_len;
        }
    }
    Err("no such entry".into())
}
