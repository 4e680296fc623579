//! External journals at mkfs time, as mke2fs makes them: `-O journal_dev`
//! turns a device into a journal device (an ext4 superblock with only
//! `journal_dev`, and `metadata_csum` for ext4, no groups; the jbd2
//! superblock in the next block, its log running to the end of the
//! device), and `-J device=` attaches a new file system to one
//! (e2fsprogs' `ext2fs_add_journal_device`): the file system's UUID goes
//! into the journal's `s_users`, the journal's UUID into the file system's
//! `s_journal_uuid` (every superblock copy), `s_journal_inum` stays 0.
//! The layout is described in `crate::journal::external`.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::journal::superblock::RawJournalSuperblock;
use ext4kit_format::superblock::{EXT4_SUPER_MAGIC, RawSuperblock, STATE_VALID, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

use crate::device::BlockDevice;
use crate::error::{Error, Location, Result};
use crate::journal::external::{journal_sb_block, uuid};

/// The fewest log blocks the kernel's jbd2 accepts (`JBD2_MIN_JOURNAL_BLOCKS`).
const MIN_LOG_BLOCKS: u64 = 1024;

/// `s_users[]` holds at most 48 UUIDs (`JBD2_USERS_MAX`).
const USERS_MAX: u32 = 48;

/// What `mkfs -O journal_dev` takes.
#[derive(Debug, Clone, Default)]
pub struct JournalDevOptions {
    /// `-b`; `None` picks 1024 below 512 MiB and 4096 above, as mke2fs's
    /// `small` type does.
    pub block_size: Option<u32>,
    /// Bytes to use; `None` uses the whole device.
    pub size_bytes: Option<u64>,
    /// `-U`; `None` draws a random UUID.
    pub uuid: Option<[u8; 16]>,
    /// `-L`.
    pub label: String,
    /// Set `metadata_csum` on the device's superblock (mke2fs does for ext4).
    pub metadata_csum: bool,
    /// The device reads as zeros: the log need not be zeroed.
    pub device_zeroed: bool,
}

/// What was made.
#[derive(Debug, Clone)]
pub struct JournalDevReport {
    /// Device blocks (`s_blocks_count`, the journal's `s_maxlen`).
    pub blocks: u64,
    /// Block size.
    pub block_size: u32,
    /// The journal's UUID, which file systems record as `s_journal_uuid`.
    pub uuid: [u8; 16],
}

fn io(offset: u64) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { offset, source }
}

/// Makes `dev` a journal device.
///
/// # Errors
/// [`Error::InvalidArgument`] for a block size ext4 cannot have or a
/// device too small for the kernel's 1024-block minimum log; I/O errors.
pub fn make_journal_device(dev: &dyn BlockDevice, o: &JournalDevOptions) -> Result<JournalDevReport> {
    let bytes = o.size_bytes.unwrap_or(dev.len()).min(dev.len());
    let bs = o.block_size.unwrap_or(if bytes < 512 << 20 { 1024 } else { 4096 });
    if !bs.is_power_of_two() || !(1024..=65536).contains(&bs) {
        return Err(Error::InvalidArgument(format!(
            "block size {bs}: a power of two from 1024 to 65536"
        )));
    }
    let blocks = (bytes / u64::from(bs)).min(u64::from(u32::MAX));
    let first = journal_sb_block(bs) + 1;
    if blocks < first + MIN_LOG_BLOCKS {
        return Err(Error::InvalidArgument(format!(
            "{blocks} blocks of {bs} bytes: a journal device needs at least {} (a log of {MIN_LOG_BLOCKS}, the kernel's minimum)",
            first + MIN_LOG_BLOCKS
        )));
    }
    let id = o.uuid.unwrap_or_else(super::random_uuid);
    let sb = device_superblock(o, bs, blocks, id);
    let mut jsb = RawJournalSuperblock::parse(&super::journal::empty_superblock_block(bs, blocks as u32, 0, &id))
        .map_err(|e| Error::format(Location::Journal { block: 0 }, e))?;
    jsb.s_first.set(first as u32);
    jsb.s_nr_users.set(0);
    jsb.set_checksum();
    if !o.device_zeroed {
        zero(dev, first * u64::from(bs), blocks * u64::from(bs))?;
    }
    let mut head = vec![0u8; (first * u64::from(bs)) as usize];
    let at = SUPERBLOCK_OFFSET as usize;
    head[at..at + SUPERBLOCK_SIZE].copy_from_slice(&sb.encode());
    let j = ((first - 1) * u64::from(bs)) as usize;
    head[j..j + 1024].copy_from_slice(&jsb.encode());
    dev.write_at(0, &head).map_err(io(0))?;
    dev.flush().map_err(io(0))?;
    Ok(JournalDevReport {
        blocks,
        block_size: bs,
        uuid: id,
    })
}

fn device_superblock(o: &JournalDevOptions, bs: u32, blocks: u64, id: [u8; 16]) -> RawSuperblock {
    let now = super::now();
    let mut sb = RawSuperblock::parse(&[0u8; SUPERBLOCK_SIZE]).expect("a zero superblock parses");
    sb.s_blocks_count_lo.set(blocks as u32);
    sb.s_first_data_block.set(u32::from(bs == 1024));
    let log = bs.trailing_zeros() - 10;
    sb.s_log_block_size.set(log);
    sb.s_log_cluster_size.set(log);
    sb.s_blocks_per_group.set(bs * 8);
    sb.s_clusters_per_group.set(bs * 8);
    sb.s_wtime.set(now);
    sb.s_max_mnt_count.set(0xFFFF);
    sb.s_magic.set(EXT4_SUPER_MAGIC);
    sb.s_state.set(STATE_VALID);
    sb.s_errors.set(1);
    sb.s_lastcheck.set(now);
    sb.s_rev_level.set(1);
    sb.s_first_ino.set(11);
    sb.s_inode_size.set(256);
    sb.s_feature_incompat.set(IncompatFeatures::JOURNAL_DEV.0);
    sb.s_uuid = id;
    let label = &o.label.as_bytes()[..o.label.len().min(16)];
    sb.s_volume_name[..label.len()].copy_from_slice(label);
    for (i, c) in super::random_uuid().chunks(4).enumerate() {
        sb.s_hash_seed[i].set(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    }
    sb.s_def_hash_version = 1;
    sb.s_default_mount_opts.set(0x0004 | 0x0008);
    sb.s_mkfs_time.set(now);
    sb.s_min_extra_isize.set(32);
    sb.s_want_extra_isize.set(32);
    if o.metadata_csum {
        sb.s_feature_ro_compat.set(RoCompatFeatures::METADATA_CSUM.0);
        sb.s_checksum_type = 1;
    }
    sb.set_checksum();
    sb
}

/// Zeroes `from..to` a MiB at a time.
fn zero(dev: &dyn BlockDevice, from: u64, to: u64) -> Result<()> {
    let chunk = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let n = (to - at).min(chunk.len() as u64) as usize;
        dev.write_at(at, &chunk[..n]).map_err(io(at))?;
        at += n as u64;
    }
    Ok(())
}

/// The block size of the journal device on `dev` (mke2fs `-J device=`
/// takes it when `-b` is not given).
///
/// # Errors
/// When `dev` is not a journal device.
pub fn journal_device_block_size(dev: &dyn BlockDevice) -> Result<u32> {
    let sb = device_sb(dev)?;
    Ok(1024 << sb.s_log_block_size.get().min(6))
}

fn device_sb(dev: &dyn BlockDevice) -> Result<RawSuperblock> {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    dev.read_at(SUPERBLOCK_OFFSET, &mut buf)
        .map_err(io(SUPERBLOCK_OFFSET))?;
    let sb = RawSuperblock::parse(&buf).map_err(|e| Error::format(Location::Journal { block: 0 }, e))?;
    if sb.s_magic.get() != EXT4_SUPER_MAGIC || !sb.features().incompat.contains(IncompatFeatures::JOURNAL_DEV) {
        return Err(Error::InvalidArgument(
            "not a journal device (no ext4 superblock with journal_dev): make one with mkfs -O journal_dev".into(),
        ));
    }
    Ok(sb)
}

/// Attaches the file system on `fs_dev`, made without a journal, to the
/// journal device on `jdev`; `rdev` is the journal device's device number
/// for `s_journal_dev` (0 for an image file).
///
/// # Errors
/// Not a journal device, another block size, a journal already serving
/// another file system (the kernel takes one user only); I/O errors.
pub fn attach_journal_device(fs_dev: &dyn BlockDevice, jdev: &dyn BlockDevice, rdev: u32) -> Result<()> {
    let jsb_dev = device_sb(jdev)?;
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    fs_dev
        .read_at(SUPERBLOCK_OFFSET, &mut buf)
        .map_err(io(SUPERBLOCK_OFFSET))?;
    let fs_sb = RawSuperblock::parse(&buf).map_err(|e| Error::format(Location::Superblock, e))?;
    let bs = 1024u32 << fs_sb.s_log_block_size.get().min(6);
    if jsb_dev.s_log_block_size.get() != fs_sb.s_log_block_size.get() {
        return Err(Error::InvalidArgument(format!(
            "the journal device's block size {} differs from the file system's {bs}",
            1024u32 << jsb_dev.s_log_block_size.get().min(6)
        )));
    }
    add_user(jdev, bs, &fs_sb.s_uuid)?;
    patch_superblocks(fs_dev, &fs_sb, bs, |sb| {
        let c = sb.s_feature_compat.get() | CompatFeatures::HAS_JOURNAL.0;
        sb.s_feature_compat.set(c);
        sb.s_journal_inum.set(0);
        sb.s_journal_dev.set(rdev);
        sb.s_journal_uuid = jsb_dev.s_uuid;
        sb.s_jnl_blocks.iter_mut().for_each(|b| b.set(0));
        sb.s_jnl_backup_type = 0;
    })
}

/// Lists `fs_uuid` in the journal's `s_users`.
fn add_user(jdev: &dyn BlockDevice, bs: u32, fs_uuid: &[u8; 16]) -> Result<()> {
    let at = journal_sb_block(bs) * u64::from(bs);
    let mut buf = [0u8; 1024];
    jdev.read_at(at, &mut buf).map_err(io(at))?;
    let loc = Location::Journal {
        block: journal_sb_block(bs),
    };
    let mut jsb = RawJournalSuperblock::parse(&buf).map_err(|e| Error::format(loc, e))?;
    jsb.verify_checksum().map_err(|e| Error::format(loc, e))?;
    let n = jsb.s_nr_users.get();
    if (0..n.min(USERS_MAX)).any(|i| &jsb.s_users[16 * i as usize..16 * (i as usize + 1)] == fs_uuid) {
        return Ok(());
    }
    if n >= 1 {
        return Err(Error::InvalidArgument(format!(
            "the journal device already serves file system {} (the kernel takes one file system per journal)",
            uuid(&jsb.s_users[..16])
        )));
    }
    jsb.s_users[..16].copy_from_slice(fs_uuid);
    jsb.s_nr_users.set(1);
    jsb.set_checksum();
    jdev.write_at(at, &jsb.encode()).map_err(io(at))?;
    jdev.flush().map_err(io(at))
}

/// Applies `edit` to the primary superblock and every backup copy (a copy
/// is one that decodes with the file system's UUID and its group number).
pub(crate) fn patch_superblocks(
    dev: &dyn BlockDevice,
    sb: &RawSuperblock,
    bs: u32,
    edit: impl Fn(&mut RawSuperblock),
) -> Result<()> {
    let mut primary = *sb;
    edit(&mut primary);
    primary.set_checksum();
    dev.write_at(SUPERBLOCK_OFFSET, &primary.encode())
        .map_err(io(SUPERBLOCK_OFFSET))?;
    let per_group = u64::from(sb.s_blocks_per_group.get().max(1));
    let first = u64::from(sb.s_first_data_block.get());
    let blocks = (u64::from(sb.s_blocks_count_hi.get()) << 32) | u64::from(sb.s_blocks_count_lo.get());
    let groups = blocks.saturating_sub(first).div_ceil(per_group);
    for g in 1..groups {
        let at = (first + g * per_group) * u64::from(bs);
        let mut buf = [0u8; SUPERBLOCK_SIZE];
        if dev.read_at(at, &mut buf).is_err() {
            break;
        }
        let Ok(mut copy) = RawSuperblock::parse(&buf) else {
            continue;
        };
        if copy.s_magic.get() != EXT4_SUPER_MAGIC
            || copy.s_uuid != sb.s_uuid
            || u64::from(copy.s_block_group_nr.get()) != g
        {
            continue;
        }
        edit(&mut copy);
        copy.set_checksum();
        dev.write_at(at, &copy.encode()).map_err(io(at))?;
    }
    dev.flush().map_err(io(0))
}
