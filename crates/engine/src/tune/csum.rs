//! The whole-image part of a tune: every inode record, extent-tree block,
//! directory block (see [`super::dirs`]) and xattr block gets the checksum
//! of the new scheme (`metadata_csum` on), or loses it (off); `^dir_index`
//! clears `INDEX_FL`. Checksums follow `Documentation/filesystems/ext4/
//! checksums.rst`; the per-inode seed comes from the new file-system seed.
//!
//! Inodes are visited through the inode bitmaps: only inodes in use own
//! blocks, so only theirs are followed (a deleted inode may still point at
//! blocks reused since). Every nonzero record in the initialized part of a
//! table gets a checksum, as the kernel and e2fsck check any record they
//! read; all-zero records are left as they are, which both accept.

use std::collections::BTreeSet;

use ext4kit_format::group_desc::{BG_INODE_UNINIT, RawGroupDesc};
use ext4kit_format::inode::{RawInode, flags, set_inode_checksum};
use ext4kit_format::{extent, xattr};

use super::Plan;
use super::rewrite::Rewrite;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// `l_i_checksum_lo`, `i_flags`, `i_extra_isize`, `i_checksum_hi` offsets.
const CSUM_LO: usize = 0x7C;
const FLAGS: usize = 0x20;
const EXTRA_ISIZE: usize = 0x80;
const CSUM_HI: usize = 0x82;
/// `h_checksum` of an xattr block header.
const XATTR_CSUM: usize = 0x10;
/// Refusals listed before "and N more".
const SHOWN: usize = 5;

/// Rewrites every inode and the blocks of inodes in use; refuses (before
/// anything is written) when a directory block has no room for its tail.
pub(crate) fn rewrite_all(rw: &mut Rewrite<'_>, p: &Plan) -> Result<()> {
    let fs = rw.fs;
    let mut xattrs = BTreeSet::new();
    let mut refusals = Vec::new();
    for g in 0..fs.geo.group_count {
        let desc = fs.group_desc(g)?;
        let (count, bitmap) = group_inodes(rw, &desc)?;
        for i in 0..count {
            let in_use = bitmap[(i / 8) as usize] & (1 << (i % 8)) != 0;
            let ino = g * fs.geo.inodes_per_group + i + 1;
            let mut v = Visit {
                p,
                xattrs: &mut xattrs,
                refusals: &mut refusals,
            };
            v.inode(rw, &desc, i, ino, in_use)?;
        }
    }
    if !refusals.is_empty() {
        let more = refusals.len().saturating_sub(SHOWN);
        refusals.truncate(SHOWN);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        return Err(Error::InvalidArgument(format!(
            "directory blocks without room for a checksum: {}{tail}; such directories must be rebuilt \
             with room for checksums, which ext4kit does not do (tune2fs turns the feature on and asks for \
             e2fsck -fD, which then packs them with room); nothing was changed",
            refusals.join("; ")
        )));
    }
    if p.csum {
        for b in xattrs {
            xattr_block(rw, p, b)?;
        }
    }
    Ok(())
}

/// Inodes of the group's table that may hold anything (the part below
/// `bg_itable_unused` with a group checksum) and the inode bitmap.
fn group_inodes(rw: &mut Rewrite<'_>, desc: &RawGroupDesc) -> Result<(u32, Vec<u8>)> {
    let fs = rw.fs;
    let ipg = fs.geo.inodes_per_group;
    if fs.geo.features.has_group_csum() {
        if desc.flags() & BG_INODE_UNINIT != 0 {
            return Ok((0, Vec::new()));
        }
        let used = ipg.saturating_sub(desc.itable_unused());
        return Ok((used, rw.original(desc.inode_bitmap())?.to_vec()));
    }
    Ok((ipg, rw.original(desc.inode_bitmap())?.to_vec()))
}

struct Visit<'p> {
    p: &'p Plan,
    xattrs: &'p mut BTreeSet<u64>,
    refusals: &'p mut Vec<String>,
}

impl Visit<'_> {
    fn inode(&mut self, rw: &mut Rewrite<'_>, desc: &RawGroupDesc, index: u32, ino: u32, in_use: bool) -> Result<()> {
        let fs = rw.fs;
        let isz = usize::from(fs.geo.inode_size);
        let byte = u64::from(index) * isz as u64;
        let blk = desc.inode_table() + (byte >> fs.geo.block_size_log2);
        let off = (byte & (u64::from(fs.geo.block_size) - 1)) as usize;
        let mut rec = rw.block(blk)?[off..off + isz].to_vec();
        if rec.iter().all(|&b| b == 0) {
            return Ok(());
        }
        if in_use {
            let inode = fs.decode_inode(ino, &rec)?;
            self.owned_blocks(rw, &inode)?;
            if self.p.clear_index && inode.raw.has_flag(flags::INDEX) {
                let f = inode.raw.flags() & !flags::INDEX;
                rec[FLAGS..FLAGS + 4].copy_from_slice(&f.to_le_bytes());
            }
        }
        if self.p.new.features().metadata_csum() {
            if in_use || self.p.csum {
                // A record that does not even parse is not in use: left alone.
                if RawInode::parse(&rec, isz).is_ok() {
                    set_inode_checksum(&mut rec, self.p.new_seed(), ino)
                        .map_err(|e| Error::format(Location::Inode(ino), e))?;
                }
            }
        } else if self.p.csum {
            clear_inode_checksum(&mut rec);
        }
        rw.block(blk)?[off..off + isz].copy_from_slice(&rec);
        Ok(())
    }

    /// The xattr block, extent-tree blocks and directory blocks of `inode`.
    fn owned_blocks(&mut self, rw: &mut Rewrite<'_>, inode: &Inode) -> Result<()> {
        let fs = rw.fs;
        let seed = inode.raw.csum_seed(self.p.new_seed(), inode.ino);
        if self.p.csum && inode.raw.file_acl() != 0 {
            let b = inode.raw.file_acl();
            fs.check_block(b, Location::Inode(inode.ino))?;
            self.xattrs.insert(b);
        }
        let inline = inode.has_inline_data();
        if self.p.csum && inode.uses_extents() && !inline {
            for (at, _) in fs.extent_tree(inode)? {
                if let Some(b) = at {
                    extent_block(rw, self.p, b, seed, inode.ino)?;
                }
            }
        }
        let new_csum = self.p.new.features().metadata_csum();
        if inode.is_dir() && !inline && (self.p.csum || (self.p.clear_index && new_csum)) {
            super::dirs::rewrite_dir(rw, self.p, inode, seed, self.refusals)?;
        }
        Ok(())
    }
}

/// Zeroes `i_checksum_lo` and, where the extra space covers it, `i_checksum_hi`.
fn clear_inode_checksum(rec: &mut [u8]) {
    rec[CSUM_LO..CSUM_LO + 2].fill(0);
    if rec.len() > EXTRA_ISIZE + 2 {
        let extra = usize::from(u16::from_le_bytes([rec[EXTRA_ISIZE], rec[EXTRA_ISIZE + 1]]));
        if extra >= CSUM_HI + 2 - EXTRA_ISIZE && rec.len() >= CSUM_HI + 2 {
            rec[CSUM_HI..CSUM_HI + 2].fill(0);
        }
    }
}

/// An extent-tree block: its tail gets the checksum, or is zeroed.
fn extent_block(rw: &mut Rewrite<'_>, p: &Plan, b: u64, seed: u32, ino: u32) -> Result<()> {
    let at = Location::Block { block: b, inode: ino };
    let buf = rw.block(b)?;
    if p.new.features().metadata_csum() {
        extent::set_block_checksum(buf, seed).map_err(|e| Error::format(at, e))
    } else {
        let t = extent::tail_offset(buf).map_err(|e| Error::format(at, e))?;
        buf[t..t + 4].fill(0);
        Ok(())
    }
}

/// An xattr block (possibly shared by several inodes): `h_checksum`.
fn xattr_block(rw: &mut Rewrite<'_>, p: &Plan, b: u64) -> Result<()> {
    let at = Location::Block { block: b, inode: 0 };
    let buf = rw.block(b)?;
    xattr::parse_block(buf).map_err(|e| Error::format(at, e))?;
    if p.new.features().metadata_csum() {
        xattr::set_block_checksum(p.new_seed(), b, buf).map_err(|e| Error::format(at, e))
    } else {
        buf[XATTR_CSUM..XATTR_CSUM + 4].fill(0);
        Ok(())
    }
}

/// The first directory in use with `INDEX_FL` (an htree), if any.
pub(crate) fn first_indexed_dir(fs: &Filesystem) -> Result<Option<u32>> {
    first_inode_where(fs, |i| i.is_dir() && i.raw.has_flag(flags::INDEX))
}

/// The first inode in use (by the inode bitmaps) for which `pred` holds.
pub(crate) fn first_inode_where(fs: &Filesystem, pred: impl Fn(&crate::inode::Inode) -> bool) -> Result<Option<u32>> {
    let mut rw = Rewrite::new(fs);
    for g in 0..fs.geo.group_count {
        let desc = fs.group_desc(g)?;
        let (count, bitmap) = group_inodes(&mut rw, &desc)?;
        for i in 0..count {
            if bitmap[(i / 8) as usize] & (1 << (i % 8)) == 0 {
                continue;
            }
            let ino = g * fs.geo.inodes_per_group + i + 1;
            if pred(&fs.inode(ino)?) {
                return Ok(Some(ino));
            }
        }
    }
    Ok(None)
}
