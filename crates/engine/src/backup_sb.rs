//! Backup superblocks: opening from one (e2fsck's `-b BLOCK -B SIZE`, the
//! kernel's `sb=N`) and naming the intact ones when the primary is damaged.
//!
//! Every group that holds a backup (group 1 and the powers of 3, 5 and 7
//! with `sparse_super`, the two `s_backup_bgs` with `sparse_super2`, every
//! group otherwise) starts with a copy of the superblock followed by a copy
//! of the group descriptor table. The copies are as `mke2fs`, `resize2fs`
//! or `e2fsck` last wrote them: free counts and `bg_flags` may be stale.
//!
//! An image opened from a backup is read-only, always: writing would leave
//! the damaged primary beside a superblock and descriptors that moved on
//! (the kernel's `sb=` mounts read-write and writes the superblock back at
//! the backup's location; `e2fsck -b` rewrites the primary as it repairs).
//! `ext4kit fsck -fy` is what rewrites the primary.

use std::io;

use ext4kit_format::features::{CompatFeatures, RoCompatFeatures};
use ext4kit_format::superblock::{EXT4_SUPER_MAGIC, Geometry, RawSuperblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

use crate::device::BlockDevice;
use crate::error::{Error, Location, Result};

/// Where to read the superblock instead of byte 1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuperblockAt {
    /// e2fsck's `-b BLOCK` and `-B SIZE`: the superblock at `block` in
    /// blocks of `block_size`, which must be the file system's block size.
    /// Without a size each one from 1 KiB to 64 KiB is tried, as e2fsck
    /// does, and the first whose superblock says that size is used.
    Block {
        /// Block number.
        block: u64,
        /// Block size in bytes (`-B`).
        block_size: Option<u32>,
    },
    /// The kernel's `sb=N` mount option: N counts 1 KiB units whatever the
    /// block size (ext4's mount options documentation).
    Kib(u64),
}

/// A superblock found at [`SuperblockAt`]: where it is and what it says.
pub(crate) struct Found {
    pub offset: u64,
    pub sb: RawSuperblock,
}

const BLOCK_SIZES: [u32; 7] = [1024, 2048, 4096, 8192, 16384, 32768, 65536];

impl SuperblockAt {
    /// Reads and checks the superblock this names.
    pub(crate) fn read(&self, dev: &dyn BlockDevice, verify_checksum: bool) -> Result<Found> {
        let candidates: Vec<(u64, Option<u32>)> = match *self {
            Self::Kib(n) => vec![(n.saturating_mul(1024), None)],
            Self::Block {
                block,
                block_size: Some(bs),
            } => vec![(block.saturating_mul(u64::from(bs)), Some(bs))],
            Self::Block {
                block,
                block_size: None,
            } => BLOCK_SIZES
                .iter()
                .map(|&bs| (block.saturating_mul(u64::from(bs)), Some(bs)))
                .collect(),
        };
        let mut last = None;
        for (offset, bs) in candidates {
            match read_at(dev, offset, bs, verify_checksum) {
                Ok(sb) => return Ok(Found { offset, sb }),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::InvalidArgument("no superblock location".into())))
    }

    /// How a person would name it: "block 32768 (4096-byte blocks)".
    pub fn describe(&self) -> String {
        match *self {
            Self::Block {
                block,
                block_size: Some(bs),
            } => format!("block {block} ({bs}-byte blocks)"),
            Self::Block {
                block,
                block_size: None,
            } => format!("block {block}"),
            Self::Kib(n) => format!("sb={n} (1 KiB units)"),
        }
    }
}

/// Reads the superblock at byte `offset`; `block_size`, when given, must be
/// the one it records (a copy found at the wrong scale is not that backup).
fn read_at(dev: &dyn BlockDevice, offset: u64, block_size: Option<u32>, verify: bool) -> Result<RawSuperblock> {
    let end = offset.saturating_add(SUPERBLOCK_SIZE as u64);
    if end > dev.len() {
        return Err(Error::InvalidArgument(format!(
            "no superblock at byte {offset}: the image is {} bytes",
            dev.len()
        )));
    }
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    dev.read_at(offset, &mut buf)
        .map_err(|source| Error::Io { offset, source })?;
    let sb = RawSuperblock::parse(&buf).map_err(|e| Error::format(Location::Superblock, e))?;
    if sb.s_magic.get() != EXT4_SUPER_MAGIC {
        return Err(Error::NotExt4(format!(
            "no ext2/3/4 magic number (0xef53) at byte {offset} but {:#06x}",
            sb.s_magic.get()
        )));
    }
    let log = sb.s_log_block_size.get();
    if let Some(bs) = block_size
        && (log > 6 || 1024u32 << log != bs)
    {
        return Err(Error::InvalidArgument(format!(
            "the superblock at byte {offset} records a block size of 2^(10+{log}) bytes, not {bs}"
        )));
    }
    // A backup starts its group's first block; only the primary does not.
    let own = 1024u64.checked_shl(log).filter(|_| log <= 6);
    if offset != SUPERBLOCK_OFFSET && own.is_some_and(|bs| !offset.is_multiple_of(bs)) {
        return Err(Error::InvalidArgument(format!(
            "the superblock at byte {offset} does not start a block of its block size ({} bytes)",
            own.unwrap_or_default()
        )));
    }
    if verify {
        sb.verify_checksum()
            .map_err(|e| Error::format(Location::Superblock, e))?;
    }
    Ok(sb)
}

/// An intact backup superblock found by [`find_backups`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backup {
    /// Block number in blocks of `block_size` (e2fsck's `-b`).
    pub block: u64,
    /// The file system's block size (e2fsck's `-B`).
    pub block_size: u32,
    /// The group it starts.
    pub group: u32,
}

/// Most backups [`find_backups`] names (each costs a read).
const MAX_NAMED: usize = 6;

/// The intact backup superblocks at the standard places, as e2fsck's
/// `get_backup_sb` looks: for each block size, group 1 of a file system
/// made with the default `8 * block_size` blocks per group; when that copy
/// is intact its geometry names the further backups. Empty when none is.
pub fn find_backups(dev: &dyn BlockDevice) -> Vec<Backup> {
    for bs in BLOCK_SIZES {
        let first_data = u64::from(bs == 1024);
        let block = u64::from(bs) * 8 + first_data;
        let Ok(sb) = read_at(dev, block * u64::from(bs), Some(bs), true) else {
            continue;
        };
        let Ok(geo) = Geometry::from_superblock(&sb) else {
            continue;
        };
        return backups_of(dev, &sb, &geo);
    }
    Vec::new()
}

fn backups_of(dev: &dyn BlockDevice, sb: &RawSuperblock, geo: &Geometry) -> Vec<Backup> {
    let mut out = Vec::new();
    for group in backup_groups(Layout::of(sb), geo.group_count) {
        let block = geo.group_first_block(group);
        let offset = block.saturating_mul(u64::from(geo.block_size));
        if read_at(dev, offset, Some(geo.block_size), true).is_ok() {
            out.push(Backup {
                block,
                block_size: geo.block_size,
                group,
            });
            if out.len() == MAX_NAMED {
                break;
            }
        }
    }
    out
}

/// Most groups [`backups_of`] looks at: the superblock found may be a
/// stale or crafted one claiming billions of groups, all with backups.
const MAX_PROBED: usize = 64;

/// Which groups hold backups: `sparse_super2`'s two (`s_backup_bgs`) or
/// `sparse_super`'s 1 and powers of 3, 5 and 7, else every one.
enum Layout {
    Listed([u32; 2]),
    Sparse,
    Every,
}

impl Layout {
    fn of(sb: &RawSuperblock) -> Self {
        let f = sb.features();
        if f.compat.contains(CompatFeatures::SPARSE_SUPER2) {
            Self::Listed([sb.s_backup_bgs[0].get(), sb.s_backup_bgs[1].get()])
        } else if f.ro_compat.contains(RoCompatFeatures::SPARSE_SUPER) {
            Self::Sparse
        } else {
            Self::Every
        }
    }
}

/// The groups after 0 below `count` that hold backups, in order, at most
/// [`MAX_PROBED`].
fn backup_groups(layout: Layout, count: u32) -> Vec<u32> {
    let mut groups: Vec<u32> = match layout {
        Layout::Listed(listed) => listed.into_iter().filter(|&g| g > 0).collect(),
        Layout::Sparse => {
            let mut g = vec![1];
            for base in [3u64, 5, 7] {
                let mut p = base;
                while p < u64::from(count) {
                    g.push(p as u32);
                    p *= base;
                }
            }
            g
        }
        Layout::Every => (1..count.min(MAX_PROBED as u32 + 1)).collect(),
    };
    groups.retain(|&g| g < count);
    groups.sort_unstable();
    groups.dedup();
    groups.truncate(MAX_PROBED);
    groups
}

/// "intact backup superblocks at block 8193 (1024-byte blocks), 24577,
/// 40961", or `None` when there is none.
pub fn describe_backups(found: &[Backup]) -> Option<String> {
    let first = found.first()?;
    let rest: String = found[1..].iter().map(|b| format!(", {}", b.block)).collect();
    let plural = if found.len() > 1 { "s" } else { "" };
    Some(format!(
        "intact backup superblock{plural} at block {} ({}-byte blocks){rest}",
        first.block, first.block_size
    ))
}

/// For an open failure that says the primary superblock or the primary
/// group descriptors are damaged (bad magic, checksum, geometry, a
/// descriptor pointing outside its file system), which of the two, in
/// words ("the primary superblock is"): a backup holds copies of both.
pub fn primary_damaged(e: &Error) -> Option<&'static str> {
    let at = match e {
        // Zeros may be a wiped first block; another format's signature is not damage.
        Error::NotExt4(why) if !why.starts_with("it looks like") || why.contains("zeros where a superblock") => {
            return Some("the primary superblock is");
        }
        Error::BadChecksum { at, .. } => *at,
        Error::Corrupt(c) => c.at,
        _ => return None,
    };
    match at {
        Location::Superblock => Some("the primary superblock is"),
        Location::Group(_) => Some("the primary group descriptors are"),
        _ => None,
    }
}

/// A device whose writes are refused: what an image opened from a backup
/// superblock reads through, so that nothing (journal replay, multi-mount
/// protection, orphan cleanup) writes beside the damaged primary.
pub(crate) struct ReadOnlyView(pub Box<dyn BlockDevice>);

impl BlockDevice for ReadOnlyView {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, _offset: u64, _buf: &[u8]) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn read_only(&self) -> bool {
        true
    }
    fn name(&self) -> String {
        self.0.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_groups_follow_the_layout_and_stay_bounded() {
        assert_eq!(backup_groups(Layout::Sparse, 50), [1, 3, 5, 7, 9, 25, 27, 49]);
        assert_eq!(backup_groups(Layout::Sparse, 1), [] as [u32; 0]);
        assert_eq!(backup_groups(Layout::Listed([5, 0]), 8), [5]);
        assert_eq!(backup_groups(Layout::Listed([9, 3]), 8), [3]);
        assert_eq!(backup_groups(Layout::Every, u32::MAX).len(), MAX_PROBED);
        assert!(backup_groups(Layout::Sparse, u32::MAX).len() <= MAX_PROBED);
    }
}
