//! Pass 2, a hole inside a directory (P2_DIRECTORY_HOLE): as e2fsck's
//! `allocate_dir_block`, a new block holding one empty record (with the
//! checksum tail under metadata_csum; block 0 holds `.` and `..` naming
//! the root instead) is mapped at the missing logical
//! block, and `i_blocks` (and `i_size` if it ends before) grow with it.
//! The mapping is written where the inode already has room: a slot of an
//! extent tree held in the inode (`extents.rst`, depth 0), a direct
//! `i_block` pointer, or an existing single-indirect block. Anything else
//! is left unrepaired.

use ext4kit_format::inode::flags::{EXTENTS, HUGE_FILE};

use crate::dir_block::empty_block;
use crate::state::Ctx;

const I_SIZE: usize = 0x04;
const I_BLOCKS: usize = 0x1C;
const I_FLAGS: usize = 0x20;
const I_BLOCK: usize = 0x28;
const I_SIZE_HIGH: usize = 0x6C;
/// `ext4_extent_header.eh_magic`.
const EXT_MAGIC: u16 = 0xF30A;
/// Longest initialized extent.
const EXT_MAX_LEN: u16 = 32768;

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Fills logical block `lblk` of directory `ino` (the finding was
/// allowed); `goal` is where to look for a free block. False when the
/// hole could not be filled (said in the finding).
pub fn fill(ctx: &mut Ctx, ino: u32, seed: u32, lblk: u32, goal: u64) -> bool {
    let Ok(mut rec) = ctx.fs.inode_record(ino) else {
        ctx.not_fixed("cannot read the directory inode");
        return false;
    };
    if le32(&rec, I_FLAGS) & HUGE_FILE != 0 {
        ctx.not_fixed("i_blocks counts blocks (huge_file)");
        return false;
    }
    let Some(blk) = ctx.alloc_block(goal) else {
        ctx.not_fixed("no free block");
        return false;
    };
    let mapped = if le32(&rec, I_FLAGS) & EXTENTS != 0 {
        map_extent(&mut rec, lblk, blk)
    } else {
        map_blockmap(ctx, &mut rec, lblk, blk)
    };
    if let Err(why) = mapped {
        ctx.free_block(blk);
        ctx.not_fixed(why);
        return false;
    }
    let bs = ctx.fs.bs();
    let block = if lblk == 0 {
        crate::dir_link::first_block(ctx, ino, crate::lost_found::ROOT, seed)
    } else {
        empty_block(bs, ctx.fs.geo.features.metadata_csum(), seed)
    };
    let sectors = le32(&rec, I_BLOCKS).saturating_add((bs / 512) as u32);
    rec[I_BLOCKS..I_BLOCKS + 4].copy_from_slice(&sectors.to_le_bytes());
    let size = u64::from(le32(&rec, I_SIZE)) | (u64::from(le32(&rec, I_SIZE_HIGH)) << 32);
    let want = (u64::from(lblk) + 1) * bs as u64;
    if size < want {
        rec[I_SIZE..I_SIZE + 4].copy_from_slice(&(want as u32).to_le_bytes());
        rec[I_SIZE_HIGH..I_SIZE_HIGH + 4].copy_from_slice(&((want >> 32) as u32).to_le_bytes());
    }
    let wrote = ctx
        .fs
        .write_block(blk, &block)
        .and_then(|()| ctx.fs.write_inode_record(ino, &mut rec));
    if let Err(e) = wrote {
        ctx.not_fixed(format!("writing the new block: {e}"));
        return false;
    }
    true
}

/// Maps `lblk` to `blk` in an extent tree held in the inode: the extent
/// ending just before grows when `blk` follows it on disk, else a new
/// extent goes into a free slot, kept in logical order.
fn map_extent(rec: &mut [u8], lblk: u32, blk: u64) -> Result<(), &'static str> {
    let h = I_BLOCK;
    if le16(rec, h) != EXT_MAGIC || le16(rec, h + 6) != 0 {
        return Err("the extent tree is deeper than the inode");
    }
    let (n, max) = (usize::from(le16(rec, h + 2)), usize::from(le16(rec, h + 4)).min(4));
    let at = |i: usize| h + 12 + 12 * i;
    let mut idx = n;
    for i in 0..n {
        let e = at(i);
        let (start, len) = (le32(rec, e), le16(rec, e + 4));
        let phys = u64::from(le32(rec, e + 8)) | (u64::from(le16(rec, e + 6)) << 32);
        if len < EXT_MAX_LEN && start + u32::from(len) == lblk && phys + u64::from(len) == blk {
            rec[e + 4..e + 6].copy_from_slice(&(len + 1).to_le_bytes());
            return Ok(());
        }
        if start > lblk {
            idx = idx.min(i);
        }
    }
    if n >= max {
        return Err("no free extent slot in the inode");
    }
    rec.copy_within(at(idx)..at(n), at(idx) + 12);
    let e = at(idx);
    rec[e..e + 4].copy_from_slice(&lblk.to_le_bytes());
    rec[e + 4..e + 6].copy_from_slice(&1u16.to_le_bytes());
    rec[e + 6..e + 8].copy_from_slice(&((blk >> 32) as u16).to_le_bytes());
    rec[e + 8..e + 12].copy_from_slice(&(blk as u32).to_le_bytes());
    rec[h + 2..h + 4].copy_from_slice(&((n + 1) as u16).to_le_bytes());
    Ok(())
}

/// Maps `lblk` to `blk` in a block map: a direct pointer, or a slot of the
/// single-indirect block when there is one.
fn map_blockmap(ctx: &mut Ctx, rec: &mut [u8], lblk: u32, blk: u64) -> Result<(), &'static str> {
    let blk32 = u32::try_from(blk).map_err(|_| "block beyond 2^32 in a block map")?;
    if lblk < 12 {
        let at = I_BLOCK + 4 * lblk as usize;
        rec[at..at + 4].copy_from_slice(&blk32.to_le_bytes());
        return Ok(());
    }
    let per = (ctx.fs.bs() / 4) as u32;
    let ind = u64::from(le32(rec, I_BLOCK + 48));
    if lblk - 12 >= per || ind == 0 || !ctx.fs.valid_block(ind) {
        return Err("the hole is past the single-indirect block");
    }
    let mut b = ctx.fs.read_block(ind).map_err(|_| "cannot read the indirect block")?;
    let at = 4 * (lblk - 12) as usize;
    b[at..at + 4].copy_from_slice(&blk32.to_le_bytes());
    ctx.fs
        .write_block(ind, &b)
        .map_err(|_| "cannot write the indirect block")
}
