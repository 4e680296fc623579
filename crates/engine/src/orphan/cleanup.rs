//! Orphan cleanup when a writable image is opened (`ext4_orphan_cleanup`):
//! every inode left on the list by a crash is finished — one with no links
//! left is freed with its body, one still linked (an interrupted truncate)
//! loses the blocks past `i_size` — and taken off the list, one
//! transaction per orphan, so a crash during cleanup leaves a list that a
//! later open (or e2fsck, or the kernel) finishes.

use ext4kit_format::inode::FileType;
use ext4kit_format::superblock::STATE_ERROR;

use super::OrphanSlot;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::txn::Txn;

impl Filesystem {
    /// Empties the orphan list of a writable image. Skipped, as by the
    /// kernel, on read-only opens, with a journal to replay, and when the
    /// file system records errors (e2fsck's job then).
    ///
    /// # Errors
    /// What reading or writing the list and the orphans reports; the
    /// orphans finished before the failure stay finished.
    pub(crate) fn orphan_cleanup(&self) -> Result<()> {
        if self.read_only_reason.is_some() || self.journal.needs_recovery {
            return Ok(());
        }
        // Reopened after a live grow: the list holds files still open.
        if !self.opts.keep_open.is_empty() {
            return Ok(());
        }
        if self.superblock().s_state.get() & STATE_ERROR != 0 {
            return Ok(());
        }
        for _ in 0..=self.geo.inodes_count {
            let mut txn = Txn::begin(self)?;
            let Some((ino, at)) = txn.orphan_first()? else {
                return Ok(());
            };
            txn.finish_orphan(ino, at)?;
            txn.commit()?;
        }
        Err(Error::inconsistent(
            Location::Superblock,
            "the orphan list does not end",
        ))
    }
}

impl Txn<'_> {
    /// Frees or truncates orphan `ino` and takes it off the list. An entry
    /// that names no inode in use is dropped (the kernel's
    /// `ext4_orphan_get` refuses it; a chain cannot be followed past it).
    fn finish_orphan(&mut self, ino: u32, at: OrphanSlot) -> Result<()> {
        let ordinary = ino >= self.fs.geo.first_ino && ino <= self.fs.geo.inodes_count;
        if !ordinary || !self.inode_in_use(ino)? {
            return self.drop_bad_entry(at);
        }
        let mut inode = self.inode(ino)?;
        self.orphan_del(&mut inode, at)?;
        if inode.raw.links() == 0 {
            crate::ops::release_inode(self, &mut inode)?;
        } else {
            self.cut_past_size(&mut inode)?;
        }
        self.write_inode(&mut inode)
    }

    fn drop_bad_entry(&mut self, at: OrphanSlot) -> Result<()> {
        match at {
            OrphanSlot::Chain { .. } => {
                self.sb_mut().s_last_orphan.set(0);
                Ok(())
            }
            OrphanSlot::File { block, slot } => self.orphan_clear_slot(block, slot),
        }
    }

    /// Frees the blocks of a linked regular orphan past `i_size`, the
    /// blocks an interrupted truncate or extension left behind.
    fn cut_past_size(&mut self, inode: &mut Inode) -> Result<()> {
        let has_blocks = inode.raw.i_blocks_lo.get() != 0 || inode.raw.i_blocks_high.get() != 0;
        if inode.file_type()? != FileType::Regular || inode.has_inline_data() || !has_blocks {
            return Ok(());
        }
        let size = inode.size();
        if inode.uses_extents() {
            return self.shrink(inode, size);
        }
        self.shrink_block_map(inode, size.div_ceil(u64::from(self.fs.geo.block_size)))?;
        self.zero_tail(inode, size)
    }
}
