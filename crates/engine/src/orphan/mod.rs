//! The orphan list (the kernel's `fs/ext4/orphan.c`): inodes whose last
//! name went while they were open, kept on disk so that a crash does not
//! leak their blocks. Two forms, both walked here inside a transaction:
//!
//! - the classic chain: `s_last_orphan` names the first orphan, each
//!   orphan's `i_dtime` the next (0 ends it);
//! - with `COMPAT_ORPHAN_FILE`, slots in the blocks of the inode named by
//!   `s_orphan_file_inum` (format in [`ext4kit_format::orphan`]); the chain
//!   is the fallback when every slot is taken.
//!
//! Every walk is bounded (the chain by `s_inodes_count` steps, the orphan
//! file by the kernel's 8 MiB limit), so a looping or corrupt list is an
//! error, never a hang.

mod cleanup;

use ext4kit_format::features::CompatFeatures;
use ext4kit_format::orphan;

use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

/// Largest orphan file the kernel accepts (`ext4_init_orphan_info`).
const MAX_ORPHAN_FILE_BYTES: u64 = 8 << 20;

/// Where an inode sits on the orphan list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OrphanSlot {
    /// In the chain, after `prev` (`None`: first, named by `s_last_orphan`).
    Chain {
        /// The orphan whose `i_dtime` points at this one.
        prev: Option<u32>,
    },
    /// In slot `slot` of the orphan-file block stored at `block`.
    File {
        /// Physical block.
        block: u64,
        /// Slot within the block.
        slot: usize,
    },
}

/// The orphan file's inode number, checksum seed and physical blocks.
struct OrphanFile {
    ino: u32,
    seed: u32,
    blocks: Vec<u64>,
}

impl Txn<'_> {
    /// The orphan file, or `None` when the feature is off.
    fn orphan_file(&self) -> Result<Option<OrphanFile>> {
        let fs = self.fs;
        if !fs.geo.features.compat.contains(CompatFeatures::ORPHAN_FILE) {
            return Ok(None);
        }
        let ino = self.superblock().s_orphan_file_inum.get();
        let inode = self.inode(ino)?;
        let size = inode.size();
        if size > MAX_ORPHAN_FILE_BYTES || !size.is_multiple_of(u64::from(fs.geo.block_size)) {
            return Err(Error::inconsistent(
                Location::Inode(ino),
                format!("orphan file size {size} is not a whole number of blocks up to 8 MiB"),
            ));
        }
        let n = size / u64::from(fs.geo.block_size);
        let mut blocks = Vec::with_capacity(n as usize);
        for run in fs.map_range(&inode, 0, n)? {
            if run.logical != blocks.len() as u64 || run.unwritten {
                break;
            }
            blocks.extend(run.physical..run.physical + run.len);
        }
        if blocks.len() as u64 != n {
            return Err(Error::inconsistent(
                Location::Inode(ino),
                format!("orphan file block {} is not mapped", blocks.len()),
            ));
        }
        Ok(Some(OrphanFile {
            ino,
            seed: fs.inode_csum_seed(&inode),
            blocks,
        }))
    }

    /// Orphan-file block `block`, checked (magic, and checksum under metadata_csum).
    fn orphan_block(&self, of: &OrphanFile, block: u64) -> Result<std::sync::Arc<[u8]>> {
        let buf = self.block(block, of.ino)?;
        let at = Location::Block { block, inode: of.ino };
        orphan::check_block(&buf).map_err(|e| Error::format(at, e))?;
        if self.fs.geo.features.metadata_csum() {
            self.fs.check(at, orphan::verify_checksum(of.seed, block, &buf))?;
        }
        Ok(buf)
    }

    /// Puts `inode` (whose last link is going) on the orphan list: a free
    /// orphan-file slot, else the head of the chain (its `i_dtime` then
    /// names the old head). The caller writes `inode`.
    pub(crate) fn orphan_add(&mut self, inode: &mut Inode) -> Result<()> {
        if let Some(of) = self.orphan_file()? {
            for &block in &of.blocks {
                let Some(slot) = orphan::free_slot(&self.orphan_block(&of, block)?) else {
                    continue;
                };
                let csum = self.fs.geo.features.metadata_csum();
                let buf = self.block_mut(block, of.ino)?;
                orphan::set_entry(buf, slot, inode.ino);
                if csum {
                    orphan::set_checksum(of.seed, block, buf);
                }
                return Ok(());
            }
        }
        let head = self.superblock().s_last_orphan.get();
        inode.raw.i_dtime.set(head);
        self.sb_mut().s_last_orphan.set(inode.ino);
        Ok(())
    }

    /// Where `ino` is on the orphan list, if it is.
    pub(crate) fn orphan_find(&self, ino: u32) -> Result<Option<OrphanSlot>> {
        let mut prev = None;
        let mut cur = self.superblock().s_last_orphan.get();
        for _ in 0..self.fs.geo.inodes_count {
            if cur == 0 {
                break;
            }
            if cur == ino {
                return Ok(Some(OrphanSlot::Chain { prev }));
            }
            self.check_orphan_number(cur)?;
            prev = Some(cur);
            cur = self.inode(cur)?.raw.i_dtime.get();
        }
        if cur != 0 {
            return Err(Error::inconsistent(Location::Superblock, "the orphan chain loops"));
        }
        let Some(of) = self.orphan_file()? else {
            return Ok(None);
        };
        for &block in &of.blocks {
            let buf = self.orphan_block(&of, block)?;
            if let Some((slot, _)) = orphan::entries(&buf).find(|&(_, i)| i == ino) {
                return Ok(Some(OrphanSlot::File { block, slot }));
            }
        }
        Ok(None)
    }

    /// The first orphan: the head of the chain, else the first used
    /// orphan-file slot.
    pub(crate) fn orphan_first(&self) -> Result<Option<(u32, OrphanSlot)>> {
        let head = self.superblock().s_last_orphan.get();
        if head != 0 {
            return Ok(Some((head, OrphanSlot::Chain { prev: None })));
        }
        let Some(of) = self.orphan_file()? else {
            return Ok(None);
        };
        for &block in &of.blocks {
            let buf = self.orphan_block(&of, block)?;
            if let Some((slot, ino)) = orphan::entries(&buf).next() {
                return Ok(Some((ino, OrphanSlot::File { block, slot })));
            }
        }
        Ok(None)
    }

    /// True when the orphan file holds no entry (or there is none).
    pub(crate) fn orphan_file_empty(&self) -> Result<bool> {
        let Some(of) = self.orphan_file()? else {
            return Ok(true);
        };
        for &block in &of.blocks {
            if orphan::entries(&self.orphan_block(&of, block)?).next().is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Takes `inode` off the list at `at` (found by [`Txn::orphan_find`] or
    /// [`Txn::orphan_first`]) and clears its link; the caller writes `inode`.
    pub(crate) fn orphan_del(&mut self, inode: &mut Inode, at: OrphanSlot) -> Result<()> {
        match at {
            OrphanSlot::Chain { prev: None } => {
                let next = inode.raw.i_dtime.get();
                self.sb_mut().s_last_orphan.set(next);
            }
            OrphanSlot::Chain { prev: Some(p) } => {
                let mut prev = self.inode(p)?;
                prev.raw.i_dtime.set(inode.raw.i_dtime.get());
                self.write_inode(&mut prev)?;
            }
            OrphanSlot::File { block, slot } => self.orphan_clear_slot(block, slot)?,
        }
        inode.raw.i_dtime.set(0);
        Ok(())
    }

    /// Frees slot `slot` of orphan-file block `block`.
    fn orphan_clear_slot(&mut self, block: u64, slot: usize) -> Result<()> {
        let of = self
            .orphan_file()?
            .ok_or_else(|| Error::inconsistent(Location::Superblock, "orphan file vanished"))?;
        let csum = self.fs.geo.features.metadata_csum();
        let buf = self.block_mut(block, of.ino)?;
        orphan::set_entry(buf, slot, 0);
        if csum {
            orphan::set_checksum(of.seed, block, buf);
        }
        Ok(())
    }

    /// Refuses an orphan number that cannot name an ordinary inode.
    fn check_orphan_number(&self, ino: u32) -> Result<()> {
        let geo = &self.fs.geo;
        if ino < geo.first_ino || ino > geo.inodes_count {
            return Err(Error::inconsistent(
                Location::Superblock,
                format!("orphan list names inode {ino}, which is not an ordinary inode"),
            ));
        }
        Ok(())
    }
}
