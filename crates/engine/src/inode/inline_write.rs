//! Keeping bodies inline (`inlinedata.rst`) on an `inline_data` file
//! system: new regular files and directories start in the inode, a write
//! that still fits stays there, an entry that fits the 56 bytes of `i_block`
//! after the parent goes there, and a symlink target too long for a fast
//! symlink is stored inline when the inode has room. The rules are
//! `mke2fs -d`'s (libext2fs `ext2fs_inline_data_set`, `ext2fs_mkdir`,
//! `ext2fs_link`, `ext2fs_symlink`): the body is `i_block` (60 bytes) then
//! the `system.data` value, which must fit the inode body beside the other
//! in-inode attributes; a body of a block or more never stays inline.

use ext4kit_format::dir_entry::encode_entry;
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

    /// The first write of a new regular file ([`crate::inode::inline::MayInline`]):
    /// the file becomes inline holding `data` when the result fits the
    /// inode (`ext4_try_to_write_inline_data`); true when so written.
    /// Either way the chance is used up.
    pub(crate) fn first_write_inline(&mut self, inode: &mut Inode, offset: u64, data: &[u8]) -> Result<bool> {
        if data.is_empty() || !self.fs.may_inline.take(inode.ino) {
            return Ok(false);
        }
        let untouched = inode.size() == 0 && inode.uses_extents() && self.extents(inode)?.is_empty();
        if !untouched || !self.inline_enabled() {
            return Ok(false);
        }
        let mut probe = inode.clone();
        if !(self.start_inline_file(&mut probe)? && self.write_inline(&mut probe, offset, data)?) {
            return Ok(false);
        }
        *inode = probe;
        Ok(true)
    }

    /// Cuts an inline regular file to `size` bytes, which stays inline
    /// (`ext4_inline_data_truncate`): `i_block` past the end zeroed, the
    /// `system.data` value shortened (empty under 60 bytes). False when
    /// `inode` is not inline (any more: a body that no longer fits, which
    /// a shorter one always does, is moved to blocks for the caller).
    pub(crate) fn truncate_inline(&mut self, inode: &mut Inode, size: u64) -> Result<bool> {
        if !inode.has_inline_data() {
            return Ok(false);
        }
        let mut body = self.fs.inline_body(inode)?;
        body.truncate(size as usize);
        if self.store_inline_body(inode, &body)? {
            return Ok(true);
        }
        self.uninline(inode)?;
        Ok(false)
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
}
