//! Keeping bodies inline (`inlinedata.rst`) on an `inline_data` file
//! system: new regular files and directories start in the inode, a write
//! that still fits stays there, an entry that fits the 56 bytes of `i_block`
//! after the parent goes there, and a symlink target too long for a fast
//! symlink is stored inline when the inode has room. The rules are
//! `mke2fs -d`'s (libext2fs `ext2fs_inline_data_set`, `ext2fs_mkdir`,
//! `ext2fs_link`, `ext2fs_symlink`): the body is `i_block` (60 bytes) then
//! the `system.data` value, which must fit the inode body beside the other
//! in-inode attributes; a body of a block or more never stays inline.

use ext4kit_format::dir_entry::{encode_entry, rec_len_for};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inline::{DOTDOT_SIZE, I_BLOCK_SIZE};
use ext4kit_format::inode::flags;

use crate::error::Result;
use crate::inode::Inode;
use crate::txn::Txn;

/// The bytes of `i_block` an inline directory's entries use.
const DIR_REGION: usize = I_BLOCK_SIZE - DOTDOT_SIZE;

impl Txn<'_> {
    /// True when new bodies start inline: the `inline_data` feature, and
    /// an inode large enough for the `system.data` attribute.
    pub(crate) fn inline_enabled(&self) -> bool {
        let geo = &self.fs.geo;
        geo.features.incompat.contains(IncompatFeatures::INLINE_DATA) && geo.inode_size > 128
    }

    /// Makes a fresh regular file inline and empty: the flag, a zeroed
    /// `i_block` and an empty `system.data`, as `mke2fs -d` leaves an empty
    /// file. False (the inode unchanged) when the attribute does not fit.
    pub(crate) fn start_inline_file(&mut self, inode: &mut Inode) -> Result<bool> {
        if !self.put_system_data(inode, &[])? {
            return Ok(false);
        }
        inode
            .raw
            .i_flags
            .set((inode.raw.flags() & !flags::EXTENTS) | flags::INLINE_DATA);
        inode.raw.i_block = [0; 60];
        Ok(true)
    }

    /// Makes a fresh directory inline (`ext2fs_new_dir_inline_data`): the
    /// parent's number in the first 4 bytes of `i_block`, one unused record
    /// over the other 56, size 60, no blocks.
    pub(crate) fn start_inline_dir(&mut self, dir: &mut Inode, parent: u32) -> Result<bool> {
        if !self.start_inline_file(dir)? {
            return Ok(false);
        }
        dir.raw.i_block[..DOTDOT_SIZE].copy_from_slice(&parent.to_le_bytes());
        encode_entry(&mut dir.raw.i_block, DOTDOT_SIZE, 0, DIR_REGION, 0, &[], 4096);
        dir.raw.set_size(I_BLOCK_SIZE as u64);
        Ok(true)
    }

    /// Stores `body` as the inline body of `inode` (flag already set):
    /// `i_block` then `system.data`. False, nothing changed, when it does
    /// not fit the inode.
    pub(crate) fn store_inline_body(&mut self, inode: &mut Inode, body: &[u8]) -> Result<bool> {
        if body.len() >= self.fs.block_size() {
            return Ok(false);
        }
        let split = body.len().min(I_BLOCK_SIZE);
        if !self.put_system_data(inode, &body[split..])? {
            return Ok(false);
        }
        inode.raw.i_block = [0; 60];
        inode.raw.i_block[..split].copy_from_slice(&body[..split]);
        Ok(true)
    }

    /// Writes `data` at `offset` of an inline regular file when the result
    /// still fits the inode (size updated); false, nothing changed, when
    /// the body must move to blocks first.
    pub(crate) fn write_inline(&mut self, inode: &mut Inode, offset: u64, data: &[u8]) -> Result<bool> {
        let end = offset.saturating_add(data.len() as u64).max(inode.size());
        if end >= self.fs.block_size() as u64 {
            return Ok(false);
        }
        let mut body = self.fs.inline_body(inode)?;
        body.resize(end as usize, 0);
        body[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        if !self.store_inline_body(inode, &body)? {
            return Ok(false);
        }
        inode.raw.set_size(end);
        Ok(true)
    }

    /// Adds an entry to inline directory `dir` when it fits the `i_block`
    /// entries (and no entries live in `system.data`): into an unused
    /// record, or the slack of a used one, as `ext2fs_link` places it.
    /// False, nothing changed, when the directory must move to a block.
    pub(crate) fn add_inline_entry(&mut self, dir: &mut Inode, name: &[u8], ino: u32, ft: u8) -> Result<bool> {
        if !self.system_data_value(dir)?.is_empty() {
            return Ok(false);
        }
        let need = rec_len_for(name.len());
        let region = &dir.raw.i_block[DOTDOT_SIZE..];
        let Some((off, rec, keep)) = inline_slot(region, need) else {
            return Ok(false);
        };
        let ft = self.entry_ft(ft);
        let mut region = [0u8; DIR_REGION];
        region.copy_from_slice(&dir.raw.i_block[DOTDOT_SIZE..]);
        if keep > 0 {
            region[off + 4..off + 6].copy_from_slice(&(keep as u16).to_le_bytes());
        }
        encode_entry(&mut region, off + keep, ino, rec - keep, ft, name, 4096);
        dir.raw.i_block[DOTDOT_SIZE..].copy_from_slice(&region);
        Ok(true)
    }
}

/// The first record of `region` that holds `need` more bytes: its offset,
/// length and what its own entry keeps (0 when unused). Stops at a record
/// that does not parse (the caller then moves the directory to a block,
/// whose reader reports it).
fn inline_slot(region: &[u8], need: usize) -> Option<(usize, usize, usize)> {
    let mut off = 0;
    while off + 8 <= region.len() {
        let ino = u32::from_le_bytes(region[off..off + 4].try_into().ok()?);
        let rec = usize::from(u16::from_le_bytes([region[off + 4], region[off + 5]]));
        let name_len = usize::from(region[off + 6]);
        if rec < 12 || off + rec > region.len() {
            return None;
        }
        let keep = if ino == 0 { 0 } else { rec_len_for(name_len) };
        if rec >= keep + need {
            return Some((off, rec, keep));
        }
        off += rec;
    }
    None
}
