//! The largest file the kernel accepts for a feature set and block size
//! (`s_maxbytes` and `s_bitmap_maxbytes`, set at mount by
//! `ext4_max_size` and `ext4_max_bitmap_size`). The kernel refuses to load
//! an inode whose `i_size` is beyond it ("bad i_size value"), so a write,
//! truncate or fallocate that would go past it fails with `EFBIG` here, as
//! it does there. Two limits meet: what the mapping can address, and, on
//! a file system without `huge_file`, `i_blocks` counted in 512-byte
//! sectors in 32 bits.

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// `MAX_LFS_FILESIZE` on a 64-bit kernel.
const MAX_LFS: u64 = i64::MAX as u64;

/// Direct blocks in a block map (`EXT4_NDIR_BLOCKS`).
const DIRECT: u64 = 12;

/// Largest `i_size` of an extent-mapped file: logical blocks are 32-bit
/// and the last one is kept so that an extent's length can reach the end.
pub(crate) fn extent_limit(block_bits: u32, huge_file: bool) -> u64 {
    let mapped = ((1u64 << 32) - 1) << block_bits;
    mapped.min(sector_limit(block_bits, huge_file) << block_bits)
}

/// Blocks `i_blocks` can count without `huge_file` (2^32 - 1 sectors), or
/// no limit beyond `MAX_LFS_FILESIZE` with it.
fn sector_limit(block_bits: u32, huge_file: bool) -> u64 {
    if huge_file {
        MAX_LFS >> block_bits
    } else {
        ((1u64 << 32) - 1) >> (block_bits - 9)
    }
}

/// Largest `i_size` of a block-mapped (ext2/ext3) file: the blocks three
/// levels of indirection address, less the indirect blocks that `i_blocks`
/// must also count when it is the limit.
pub(crate) fn block_map_limit(block_bits: u32, huge_file: bool) -> u64 {
    let ppb = 1u64 << (block_bits - 2);
    let counted = if huge_file {
        (1u64 << 48) - 1
    } else {
        ((1u64 << 32) - 1) >> (block_bits - 9)
    };
    let addressable = DIRECT + ppb + ppb * ppb + ppb * ppb * ppb;
    let all_meta = 1 + (1 + ppb) + (1 + ppb + ppb * ppb);
    let blocks = if addressable + all_meta <= counted {
        addressable
    } else {
        counted - meta_for(counted, ppb)
    };
    (blocks << block_bits).min(MAX_LFS)
}

/// Indirect blocks needed to address `limit - DIRECT` data blocks.
fn meta_for(limit: u64, ppb: u64) -> u64 {
    let rest = limit - DIRECT - ppb;
    if rest < ppb * ppb {
        return 1 + 1 + rest.div_ceil(ppb);
    }
    let rest = rest - ppb * ppb;
    1 + (1 + ppb) + 1 + rest.div_ceil(ppb) + rest.div_ceil(ppb * ppb)
}

impl Filesystem {
    /// The largest size `inode` may have: what the kernel accepts for this
    /// feature set, block size and mapping (`s_maxbytes`, or
    /// `s_bitmap_maxbytes` for a block-mapped file); writes, truncates and
    /// fallocates past it are [`Error::FileTooBig`].
    pub fn max_file_size(&self, inode: &Inode) -> u64 {
        let bits = self.geo.block_size_log2;
        let huge = self
            .geo
            .features
            .ro_compat
            .contains(ext4kit_format::features::RoCompatFeatures::HUGE_FILE);
        // As the kernel's write checks: any inode without EXTENTS_FL (block
        // maps, and inline data not yet moved out) has the block-map limit.
        if inode.uses_extents() {
            extent_limit(bits, huge)
        } else {
            block_map_limit(bits, huge)
        }
    }

    /// [`Error::FileTooBig`] (`EFBIG`) when `end` is past what `inode` may
    /// hold.
    pub(crate) fn check_file_end(&self, inode: &Inode, end: u64) -> Result<()> {
        if end > self.max_file_size(inode) {
            return Err(Error::FileTooBig);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes the kernel reports for these feature sets (ext4's
    /// documentation gives 16 TiB for extent files and ~4 TiB for block
    /// maps at 4 KiB blocks with huge_file; 2 TiB without it).
    #[test]
    fn limits_match_the_kernel_figures() {
        assert_eq!(extent_limit(12, true), ((1 << 32) - 1) << 12);
        assert_eq!(extent_limit(12, false), (((1u64 << 32) - 1) >> 3) << 12);
        assert_eq!(extent_limit(10, false), (((1u64 << 32) - 1) >> 1) << 10);
        let tib = 1u64 << 40;
        assert!(block_map_limit(12, true) > 4 * tib - tib / 100 && block_map_limit(12, true) < 4 * tib + tib / 10);
        assert!(block_map_limit(12, false) < 2 * tib && block_map_limit(12, false) > 2 * tib - tib / 100);
        // 1 KiB blocks: the three levels (~16 GiB) are the limit.
        let ppb = 256u64;
        assert_eq!(
            block_map_limit(10, false),
            (12 + ppb + ppb * ppb + ppb * ppb * ppb) << 10
        );
    }
}
