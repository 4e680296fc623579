//! Laying out a new, empty ext2/ext3/ext4 file system on a [`BlockDevice`],
//! as `mke2fs` does: superblock and backups, group descriptors and backups,
//! bitmaps, inode tables, the root directory, `lost+found`, the resize inode
//! and the journal. It writes straight to the device (there is no engine
//! write path yet) and keeps its used-block map as ranges, so a 16 TiB image
//! costs a few megabytes of memory.
//!
//! - [`options`]: [`MkfsOptions`] and the mke2fs-style strings it parses.
//! - [`plan`]: the pure geometry ([`Plan`]).
//! - [`layout`]: where each group's copies and tables go.
//! - [`flexsize`], [`media`]: `-G auto`, the flex group size from the
//!   device.
//! - `files`: the inodes and blocks of the root directory, lost+found, the
//!   resize inode and the journal.
//! - `write`: descriptors, bitmaps and superblocks onto the device.
//!
//! With `quota`, the layout names no quota files yet: the caller makes
//! them next on the opened file system with
//! [`crate::Filesystem::create_quota_files`] for
//! [`MkfsOptions::quota_files`], as mke2fs's `create_quota_inodes` runs
//! after the layout (before any `-d` copy). `ext4kit mkfs` does.
//!
//! ```no_run
//! use ext4kit_engine::device::FileDevice;
//! use ext4kit_engine::mkfs::{mkfs, MkfsOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = FileDevice::open("disk.img".as_ref(), true)?;
//! let mut opts = MkfsOptions::default();
//! opts.add_features("^has_journal");
//! let report = mkfs(&dev, &opts)?;
//! println!("{} blocks, {} inodes", report.plan.blocks_count, report.inodes_count);
//! # Ok(()) }
//! ```

pub mod filemap;
mod files;
pub mod flexsize;
pub mod journal;
pub mod journal_dev;
pub mod layout;
pub mod media;
pub mod options;
pub mod plan;
mod write;

pub use flexsize::Media;
pub use options::{FlexMeta, FsType, MkfsOptions, parse_size, parse_uuid};
pub use plan::Plan;

use crate::device::BlockDevice;
use crate::error::Result;
use files::Files;
use layout::{GroupTables, UsedMap};

/// What [`mkfs`] made.
#[derive(Debug, Clone)]
pub struct MkfsReport {
    /// The geometry.
    pub plan: Plan,
    /// Total inodes.
    pub inodes_count: u32,
    /// Free blocks left.
    pub free_blocks: u64,
    /// The file system UUID.
    pub uuid: [u8; 16],
    /// Blocks of the journal (0: none).
    pub journal_blocks: u32,
    /// Bytes written to the device.
    pub bytes_written: u64,
}

/// Everything decided before writing.
pub(crate) struct Build {
    pub plan: Plan,
    pub map: UsedMap,
    pub tables: Vec<GroupTables>,
    pub uuid: [u8; 16],
    pub hash_seed: [u8; 16],
    pub now: u32,
    pub csum_seed: u32,
    pub opts: MkfsOptions,
    /// Group metadata clusters (bases and tables) plus the first data
    /// block (blocks without bigalloc, where clusters are blocks).
    pub overhead: u64,
    /// The device's name as given ([`BlockDevice::name`]), for the MMP block.
    pub device_name: String,
}

/// Creates a new file system on `dev` as `opts` describes.
///
/// Writes the inode tables' used blocks, the bitmaps that are not
/// `*_UNINIT`, every descriptor and superblock copy, and the blocks of the
/// root directory, lost+found, the resize inode and the journal; the rest of
/// the device is zeroed only where it matters and the device is not known to
/// be zero ([`MkfsOptions::device_zeroed`]). Flushes the device at the end.
///
/// # Errors
/// - [`crate::Error::InvalidArgument`]: options that cannot be laid out (sizes,
///   a device too small), with the value.
/// - [`crate::Error::Unsupported`]: features this mkfs cannot create, named.
/// - [`crate::Error::Io`]: the device failed or is read-only.
pub fn mkfs(dev: &dyn BlockDevice, opts: &MkfsOptions) -> Result<MkfsReport> {
    let plan = Plan::new(opts, dev.len())?;
    let mut map = UsedMap::new(&plan);
    layout::reserve_bases(&plan, &mut map);
    let tables = layout::allocate_tables(&plan, &mut map, opts.stride)?;
    if plan.cluster_bits > 0 {
        map.to_clusters(plan.cluster_bits);
    }
    let overhead = (u64::from(plan.first_data_block) + map.used_in(0, plan.blocks_count)) >> plan.cluster_bits;
    let uuid = opts.uuid.unwrap_or_else(random_uuid);
    let csum_seed = ext4kit_format::checksum::fs_csum_seed(&uuid);
    let mut b = Build {
        plan,
        map,
        tables,
        uuid,
        hash_seed: opts.hash_seed.unwrap_or_else(random_uuid),
        now: opts.timestamp.unwrap_or_else(now),
        csum_seed,
        opts: opts.clone(),
        overhead,
        device_name: dev.name(),
    };
    let files = Files::allocate(&mut b)?;
    let mut w = write::Writer::new(dev);
    write::zero_tables(&b, &mut w)?;
    files.write(&b, &mut w)?;
    let (free_blocks, jnl) = write::write_metadata(&b, &files, &mut w)?;
    w.flush()?;
    Ok(MkfsReport {
        inodes_count: b.plan.inodes_per_group * b.plan.group_count,
        free_blocks,
        uuid,
        journal_blocks: jnl,
        bytes_written: w.written,
        plan: b.plan,
    })
}

/// `SOURCE_DATE_EPOCH` when set and valid, else the current time.
pub(crate) fn now() -> u32 {
    if let Some(t) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
    {
        return t;
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    u32::try_from(secs).unwrap_or(u32::MAX)
}

/// A version-4 UUID from `/dev/urandom` (falling back to the clock and pid).
pub(crate) fn random_uuid() -> [u8; 16] {
    use std::io::Read;
    let mut u = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut u))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        u = (t ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}
