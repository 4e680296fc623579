//! How large a directory may grow, checked before a block is added to it.
//!
//! Without `large_dir` a directory is at most 2 GiB: e2fsck's pass 1 calls
//! a directory whose blocks reach past `2^31` bytes too big
//! (`PR_1_TOOBIG_DIR`), and the kernel's `ext4_isize` reads only
//! `i_size_lo` of a directory, so a size past 4 GiB would wrap. (The
//! kernel itself does not stop a directory at 2 GiB; refusing here keeps
//! every image e2fsck-clean.) With
//! `large_dir` the size is 64-bit (`i_size_high` counts) and the bound is
//! the logical block number itself: 32 bits in an htree `dx_entry.block`
//! and in an extent's `ee_block`. See `Documentation/filesystems/ext4/
//! directory.rst` and `inodes.rst` (`i_size_high`).

use crate::error::{Error, Result};
use crate::inode::Inode;
use crate::txn::Txn;

/// Bytes a directory may hold without `large_dir`.
const SMALL_DIR_MAX_BYTES: u64 = 1 << 31;

/// Logical blocks a directory may have (blocks `0..max`), for blocks of
/// `1 << block_size_log2` bytes.
pub(crate) fn max_dir_blocks(block_size_log2: u32, large_dir: bool) -> u64 {
    if large_dir {
        1 << 32
    } else {
        SMALL_DIR_MAX_BYTES >> block_size_log2
    }
}

impl Txn<'_> {
    /// Refuses to add logical block `logical` to `dir` past
    /// [`max_dir_blocks`], with an error naming the directory and the
    /// limit, before anything is allocated.
    pub(super) fn check_dir_growth(&self, dir: &Inode, logical: u64) -> Result<()> {
        let geo = &self.fs.geo;
        let large_dir = geo
            .features
            .incompat
            .contains(ext4kit_format::features::IncompatFeatures::LARGEDIR);
        let max = max_dir_blocks(geo.block_size_log2, large_dir);
        if logical < max {
            return Ok(());
        }
        let why = if large_dir {
            "32-bit logical block numbers"
        } else {
            "2 GiB without the large_dir feature"
        };
        Err(Error::DirTooBig(format!(
            "directory inode {} has {max} blocks, the most it may have ({why})",
            dir.ino
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::max_dir_blocks;

    #[test]
    fn two_gib_without_large_dir_and_32_bit_blocks_with_it() {
        assert_eq!(max_dir_blocks(10, false), 2 << 20);
        assert_eq!(max_dir_blocks(12, false), 512 << 10);
        assert_eq!(max_dir_blocks(16, false), 32 << 10);
        assert_eq!(max_dir_blocks(10, true), 1 << 32);
        assert_eq!(max_dir_blocks(16, true), 1 << 32);
    }
}
