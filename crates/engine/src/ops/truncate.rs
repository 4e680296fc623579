//! Changing a file's size (`ext4_truncate`, `ext4_setattr` with a size):
//! growing only moves `i_size` (the new range is a hole); shrinking frees
//! every block past the new end, shortens the extent that straddles it,
//! folds a depth-1 tree back into the inode when it fits, and zeroes the
//! rest of the last partial block so a later extension reads zeros.

use ext4kit_format::extent::Extent;

use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::extent_write::charge_blocks;
use crate::inode::write::set_times;
use crate::txn::Txn;

impl Filesystem {
    /// Sets the size of regular file `ino` to `size`.
    ///
    /// # Errors
    /// [`Error::IsDir`], [`Error::FileTooBig`], [`Error::ReadOnly`],
    /// [`Error::NotPermitted`] for immutable and append-only files;
    /// [`Error::Unsupported`] for block-mapped or inline files. Nothing
    /// changes on error.
    pub fn truncate(&self, ino: u32, size: u64) -> Result<()> {
        self.noting_errors("truncate", self.truncate_in_txn(ino, size))
    }

    fn truncate_in_txn(&self, ino: u32, size: u64) -> Result<()> {
        let _file = self.inode_locks.write(ino);
        // Refusals first: held pages dropped for a truncate that then
        // fails would be lost.
        if self.read_only_reason.is_some() {
            return Err(Error::ReadOnly);
        }
        let seen = self.inode_on_disk(ino)?;
        seen.require_regular()?;
        super::flags::require_changeable(&seen)?;
        super::flags::require_not_verity(&seen)?;
        // fscrypt_prepare_setattr: a size change needs the key.
        self.contents_key(&seen)?;
        self.check_file_end(&seen, size)?;
        self.truncate_held(ino, size)?;
        if size == 0 {
            self.delalloc.truncated_to_zero(ino);
        }
        let mut txn = Txn::begin(self)?;
        txn.under_inode_lock();
        // Cutting inside an extent may split it (`ext4_ext_remove_space`).
        txn.use_reserve();
        txn.truncate(ino, size)?;
        txn.commit()
    }
}

impl Txn<'_> {
    /// The body of [`Filesystem::truncate`] inside this transaction.
    pub(crate) fn truncate(&mut self, ino: u32, size: u64) -> Result<()> {
        self.fs.prealloc.release(ino);
        let mut inode = self.inode(ino)?;
        inode.require_regular()?;
        super::flags::require_changeable(&inode)?;
        super::flags::require_not_verity(&inode)?;
        let bs = u64::from(self.fs.geo.block_size);
        self.fs.check_file_end(&inode, size)?;
        if size > inode.size() && inode.has_inline_data() {
            // The kernel moves an inline file that grows to blocks.
            self.uninline(&mut inode)?;
        }
        if size < inode.size() && !self.truncate_inline(&mut inode, size)? {
            if inode.uses_extents() {
                self.shrink(&mut inode, size)?;
            } else {
                self.shrink_block_map(&mut inode, size.div_ceil(bs))?;
                self.zero_tail(&inode, size)?;
            }
        }
        inode.raw.set_size(size);
        set_times(&mut inode.raw, clock::now(), false);
        self.write_inode(&mut inode)
    }

    /// Frees the blocks of an extent-mapped `inode` past `size` bytes.
    pub(crate) fn shrink(&mut self, inode: &mut Inode, size: u64) -> Result<()> {
        let bs = u64::from(self.fs.geo.block_size);
        let keep = size.div_ceil(bs);
        let (mut kept, mut gone) = (Vec::new(), Vec::new());
        for e in self.extents(inode)? {
            let start = u64::from(e.logical);
            let end = start + u64::from(e.len);
            if end <= keep {
                kept.push(e);
                continue;
            }
            let cut = keep.max(start);
            gone.push(Extent {
                logical: cut as u32,
                len: (end - cut) as u16,
                physical: e.physical + (cut - start),
                ..e
            });
            if cut > start {
                kept.push(Extent {
                    len: (cut - start) as u16,
                    ..e
                });
            }
        }
        let freed = self.release_runs(&gone, &kept)?;
        charge_blocks(&mut inode.raw, -freed, self.fs.geo.block_size);
        self.rebuild_tree(inode, kept)?;
        self.zero_tail(inode, size)
    }

    /// Stores `kept` back into a fresh tree: the old tree blocks are freed
    /// first (in this transaction), so rebuilding never needs new space.
    fn rebuild_tree(&mut self, inode: &mut Inode, kept: Vec<Extent>) -> Result<()> {
        let (_, tree_blocks) = self.tree_contents(inode)?;
        for b in &tree_blocks {
            self.free_blocks(*b, 1)?;
        }
        let tree = self.meta_charge(tree_blocks.len() as i64);
        charge_blocks(&mut inode.raw, -tree, self.fs.geo.block_size);
        crate::inode::extent_write::init_root(&mut inode.raw);
        kept.into_iter().try_for_each(|e| self.insert_extent(inode, e))
    }

    /// Zeroes the bytes of the last block past `size`.
    pub(crate) fn zero_tail(&mut self, inode: &Inode, size: u64) -> Result<()> {
        let bs = u64::from(self.fs.geo.block_size);
        if size.is_multiple_of(bs) {
            return Ok(());
        }
        self.zero_in_block(inode, size, (size / bs + 1) * bs)
    }
}
