//! The size a resize asks for, as resize2fs reads it, and the size it
//! settles on: a last group too small for its own metadata is dropped
//! (`adjust_new_size` in resize2fs), and the inode count must fit 32 bits.

use ext4kit_format::superblock::{Geometry, RawSuperblock};

use crate::error::{Error, Result};

/// A SIZE argument: a bare number counts file-system blocks; `K`, `M`,
/// `G`, `T` are binary units of bytes; `s` counts 512-byte sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeSpec {
    /// File-system blocks.
    Blocks(u64),
    /// Bytes (rounded down to whole blocks).
    Bytes(u64),
}

impl SizeSpec {
    /// Blocks of `block_size` bytes.
    pub fn blocks(self, block_size: u32) -> u64 {
        match self {
            Self::Blocks(n) => n,
            Self::Bytes(n) => n / u64::from(block_size),
        }
    }
}

/// Parses SIZE as resize2fs does.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the text.
pub fn parse_size(s: &str) -> Result<SizeSpec> {
    let bad = || Error::InvalidArgument(format!("invalid new size: {s}"));
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit {
        "" => return Ok(SizeSpec::Blocks(n)),
        "s" => 9,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).map(SizeSpec::Bytes).ok_or_else(bad)
}

/// `adjust_new_size`: the size the file system will really have when
/// `want` blocks are asked for. A last group with fewer blocks than its
/// metadata plus 50 is left out; one group that cannot hold its metadata
/// is an error.
///
/// # Errors
/// [`Error::InvalidArgument`] when no group fits or the inode count
/// would pass 2^32 - 1.
pub fn fit(sb: &RawSuperblock, geo: &Geometry, want: u64) -> Result<u64> {
    let first = u64::from(geo.first_data_block);
    let bpg = u64::from(geo.blocks_per_group);
    let mut size = want;
    loop {
        if size <= first {
            return Err(Error::InvalidArgument(format!("new size {want} blocks is too small")));
        }
        let groups = (size - first).div_ceil(bpg);
        if groups > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument(format!("new size {want} blocks is too large")));
        }
        let desc_blocks = groups.div_ceil(u64::from(geo.descs_per_block()));
        let mut overhead = 2 + u64::from(geo.inode_table_blocks);
        if has_backup(sb, geo, groups as u32) {
            overhead += 1 + desc_blocks + u64::from(sb.s_reserved_gdt_blocks.get());
        }
        let rem = (size - first) % bpg;
        if groups == 1 && rem != 0 && rem < overhead {
            return Err(Error::InvalidArgument(format!(
                "new size {want} blocks is too small for one group's metadata ({overhead} blocks)"
            )));
        }
        if groups > 1 && rem != 0 && rem < overhead + 50 {
            size -= rem;
            continue;
        }
        if groups.saturating_mul(u64::from(geo.inodes_per_group)) > u64::from(u32::MAX) {
            if (groups - 1).saturating_mul(u64::from(geo.inodes_per_group)) > u64::from(u32::MAX) {
                return Err(Error::InvalidArgument(format!(
                    "new size {want} blocks would need more than 2^32 - 1 inodes"
                )));
            }
            size = bpg * (groups - 1) + first;
            continue;
        }
        return Ok(size);
    }
}

/// Whether the last of `groups` groups holds a superblock backup, as
/// resize2fs decides it before `s_backup_bgs` is updated.
fn has_backup(sb: &RawSuperblock, geo: &Geometry, groups: u32) -> bool {
    if geo
        .features
        .compat
        .contains(ext4kit_format::features::CompatFeatures::SPARSE_SUPER2)
    {
        let i = if groups == 2 { 0 } else { 1 };
        return sb.s_backup_bgs[i].get() != 0;
    }
    geo.group_has_super_sparse(groups - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_resize2fs_reads_them() {
        assert_eq!(parse_size("1000").unwrap(), SizeSpec::Blocks(1000));
        assert_eq!(parse_size("64M").unwrap(), SizeSpec::Bytes(64 << 20));
        assert_eq!(parse_size("2G").unwrap().blocks(4096), (2 << 30) / 4096);
        assert_eq!(parse_size("2048s").unwrap(), SizeSpec::Bytes(1 << 20));
        for bad in ["", "M", "12Q", "-5", "99999999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn absurd_sizes_are_errors_not_overflows() {
        let dev = crate::device::MemDevice::new(vec![0; 8 << 20]);
        crate::mkfs::mkfs(&dev, &crate::mkfs::MkfsOptions::default()).unwrap();
        let fs = crate::fs::Filesystem::open(Box::new(dev), crate::fs::OpenOptions::default()).unwrap();
        assert!(fit(&fs.superblock(), &fs.geo, u64::MAX).is_err());
        assert!(
            fit(&fs.superblock(), &fs.geo, 1 << 40).is_err(),
            "more than 2^32 inodes"
        );
        assert!(fit(&fs.superblock(), &fs.geo, 0).is_err());
    }
}
