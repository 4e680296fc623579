//! An external journal: the jbd2 log of a file system kept on another
//! device (`s_journal_inum` 0, `s_journal_uuid` naming the device).
//!
//! The device starts like a file system, an ext4 superblock at byte 1024
//! with incompat `journal_dev` whose `s_uuid` is the file system's
//! `s_journal_uuid`, and holds no groups: the jbd2 superblock sits in the
//! block after the ext4 superblock's (block 2 with 1 KiB blocks, block 1
//! otherwise: e2fsprogs' `ext2fs_journal_sb_start`), and journal block
//! numbers are device block numbers (`s_first` is the block after the
//! journal superblock, `s_maxlen` the device's `s_blocks_count`), as the
//! kernel's `jbd2_journal_bmap` maps a device journal. `s_nr_users` and
//! `s_users[]` list the file systems the journal serves; the kernel and
//! e2fsck refuse a journal shared by more than one, and so does this.

use std::fmt;
use std::sync::Arc;

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::journal::superblock::RawJournalSuperblock;
use ext4kit_format::superblock::{EXT4_SUPER_MAGIC, RawSuperblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

use crate::device::BlockDevice;
use crate::error::{Error, Location, Result};
use crate::inode::map::Run;

/// The device holding a file system's external journal, given at open
/// ([`crate::OpenOptions::journal_device`]; `--journal PATH`,
/// `-o journal_path=PATH`).
#[derive(Clone)]
pub struct JournalDevice(pub Arc<dyn BlockDevice>);

impl fmt::Debug for JournalDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JournalDevice({:?})", self.0.name())
    }
}

/// What to tell someone whose image has an external journal not given.
pub const NOT_GIVEN: &str = "the journal is on an external device (s_journal_uuid) that was not given: \
     pass it with --journal PATH (mount: -o journal_path=PATH)";

/// A validated external journal.
pub(crate) struct External {
    pub(crate) dev: Arc<dyn BlockDevice>,
    /// Device block of the jbd2 superblock.
    pub(crate) sb_block: u64,
    /// The jbd2 superblock as found.
    pub(crate) jsb: RawJournalSuperblock,
}

fn at(block: u64) -> Location {
    Location::Journal { block }
}

fn bad(block: u64, why: impl Into<String>) -> Error {
    Error::inconsistent(at(block), why)
}

/// Device block of the jbd2 superblock on a journal device of `block_size`.
pub(crate) fn journal_sb_block(block_size: u32) -> u64 {
    if block_size == 1024 { 2 } else { 1 }
}

impl External {
    /// Checks that `dev` is the journal device of the file system whose
    /// superblock is `fs_sb`: an ext4 superblock with `journal_dev`, its
    /// UUID the file system's `s_journal_uuid`, the file system's block
    /// size, a v2 jbd2 superblock whose only user is this file system and
    /// whose log fits the device.
    pub(crate) fn open(dev: &JournalDevice, fs_sb: &RawSuperblock, block_size: u32) -> Result<Self> {
        let dev = dev.0.clone();
        let esb = read_ext4_superblock(dev.as_ref())?;
        let jbs = 1024u64 << esb.s_log_block_size.get().min(6);
        if u64::from(block_size) != jbs {
            return Err(bad(
                0,
                format!("the journal device's block size {jbs} differs from the file system's {block_size}"),
            ));
        }
        if esb.s_uuid != fs_sb.s_journal_uuid {
            return Err(bad(
                0,
                format!(
                    "the journal device's UUID {} is not the file system's s_journal_uuid {}",
                    uuid(&esb.s_uuid),
                    uuid(&fs_sb.s_journal_uuid)
                ),
            ));
        }
        let hi = if esb.features().incompat.contains(IncompatFeatures::BIT64) {
            u64::from(esb.s_blocks_count_hi.get()) << 32
        } else {
            0
        };
        let blocks = hi | u64::from(esb.s_blocks_count_lo.get());
        let sb_block = journal_sb_block(block_size);
        let mut buf = vec![0u8; block_size as usize];
        dev.read_at(sb_block * jbs, &mut buf).map_err(|source| Error::Io {
            offset: sb_block * jbs,
            source,
        })?;
        let jsb = RawJournalSuperblock::parse(&buf).map_err(|e| Error::format(at(sb_block), e))?;
        jsb.verify_checksum().map_err(|e| Error::format(at(sb_block), e))?;
        if !jsb.is_v2() {
            return Err(bad(sb_block, "an external journal needs a v2 journal superblock"));
        }
        check_users(&jsb, fs_sb, sb_block)?;
        let (first, maxlen) = (u64::from(jsb.s_first.get()), u64::from(jsb.s_maxlen.get()));
        if jsb.s_blocksize.get() != block_size
            || first <= sb_block
            || first >= maxlen
            || maxlen > blocks
            || maxlen * jbs > dev.len()
        {
            return Err(bad(
                sb_block,
                format!(
                    "s_blocksize {}, s_first {first}, s_maxlen {maxlen} do not fit a journal device of {blocks} blocks of {jbs} bytes ({} bytes)",
                    jsb.s_blocksize.get(),
                    dev.len()
                ),
            ));
        }
        Ok(Self { dev, sb_block, jsb })
    }

    /// Journal block → device block, as runs: the superblock is journal
    /// block 0 to the rest of the engine, the log blocks map to themselves.
    pub(crate) fn runs(&self) -> Vec<Run> {
        let (first, maxlen) = (u64::from(self.jsb.s_first.get()), u64::from(self.jsb.s_maxlen.get()));
        let sb = Run {
            logical: 0,
            physical: self.sb_block,
            len: 1,
            unwritten: false,
        };
        let log = Run {
            logical: first,
            physical: first,
            len: maxlen - first,
            unwritten: false,
        };
        vec![sb, log]
    }
}

/// Checks that `dev` is the journal device of the file system whose
/// superblock is `fs_sb` (as at open) and decodes its journal superblock:
/// for a checker, which reads the image without the engine.
///
/// # Errors
/// As [`crate::Filesystem::open`] given that journal device: no
/// `journal_dev` superblock, another UUID or block size, a journal shared
/// or not naming this file system, a log that does not fit the device.
pub fn inspect(dev: &JournalDevice, fs_sb: &RawSuperblock) -> Result<super::JournalSummary> {
    let bs = 1024u32
        .checked_shl(fs_sb.s_log_block_size.get())
        .filter(|b| *b <= 65536);
    let bs = bs.ok_or_else(|| Error::inconsistent(Location::Superblock, "s_log_block_size is out of range"))?;
    let ext = External::open(dev, fs_sb, bs)?;
    Ok(super::info::summary(&ext.jsb))
}

fn read_ext4_superblock(dev: &dyn BlockDevice) -> Result<RawSuperblock> {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    dev.read_at(SUPERBLOCK_OFFSET, &mut buf).map_err(|source| Error::Io {
        offset: SUPERBLOCK_OFFSET,
        source,
    })?;
    let sb = RawSuperblock::parse(&buf).map_err(|e| Error::format(at(0), e))?;
    if sb.s_magic.get() != EXT4_SUPER_MAGIC || !sb.features().incompat.contains(IncompatFeatures::JOURNAL_DEV) {
        return Err(bad(
            0,
            "the journal device has no ext4 superblock with incompat feature journal_dev",
        ));
    }
    sb.verify_checksum().map_err(|e| Error::format(at(0), e))?;
    Ok(sb)
}

/// One user, this file system (`s_users[0]` is its `s_uuid`).
fn check_users(jsb: &RawJournalSuperblock, fs_sb: &RawSuperblock, block: u64) -> Result<()> {
    match jsb.s_nr_users.get() {
        1 if jsb.s_users[..16] == fs_sb.s_uuid => Ok(()),
        1 => Err(bad(
            block,
            format!(
                "the journal device serves file system {}, not this one ({})",
                uuid(&jsb.s_users[..16]),
                uuid(&fs_sb.s_uuid)
            ),
        )),
        0 => Err(bad(
            block,
            "the journal device lists no file system as its user (s_nr_users 0)",
        )),
        n => Err(Error::Unsupported(format!(
            "an external journal shared by {n} file systems"
        ))),
    }
}

/// `xxxxxxxx-xxxx-…` of 16 bytes.
pub fn uuid(b: &[u8]) -> String {
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    let h = h.concat();
    if h.len() != 32 {
        return h;
    }
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// The kernel's `journal_dev=` (a device number, `new_decode_dev`
/// encoding: the minor's low byte in bits 0–7, the major in bits 8–19,
/// the rest of the minor above) or `MAJ:MIN`: (major, minor).
///
/// # Errors
/// [`Error::InvalidArgument`] for anything else.
pub fn parse_device_number(s: &str) -> Result<(u32, u32)> {
    let bad = || Error::InvalidArgument(format!("journal_dev={s:?}: expected a device number or MAJOR:MINOR"));
    if let Some((maj, min)) = s.split_once(':') {
        return Ok((maj.parse().map_err(|_| bad())?, min.parse().map_err(|_| bad())?));
    }
    let n: u32 = s.parse().map_err(|_| bad())?;
    Ok(decode_dev(n))
}

/// `new_decode_dev` of a 32-bit device number (`s_journal_dev`).
pub fn decode_dev(n: u32) -> (u32, u32) {
    ((n & 0xfff00) >> 8, (n & 0xff) | ((n >> 12) & 0xfff00))
}

/// The block device node of `major:minor`: the name in
/// `/sys/dev/block/MAJ:MIN/uevent` under `/dev`, else the
/// `/dev/block/MAJ:MIN` link.
///
/// # Errors
/// [`Error::InvalidArgument`] naming both places when neither exists.
pub fn device_path(major: u32, minor: u32) -> Result<std::path::PathBuf> {
    let sys = format!("/sys/dev/block/{major}:{minor}/uevent");
    let name = std::fs::read_to_string(&sys).ok().and_then(|u| {
        u.lines()
            .find_map(|l| l.strip_prefix("DEVNAME=").map(|n| format!("/dev/{n}")))
    });
    if let Some(p) = name.map(std::path::PathBuf::from).filter(|p| p.exists()) {
        return Ok(p);
    }
    let link = std::path::PathBuf::from(format!("/dev/block/{major}:{minor}"));
    if link.exists() {
        return Ok(link);
    }
    Err(Error::InvalidArgument(format!(
        "no block device {major}:{minor} (neither {sys} nor {} exists)",
        link.display()
    )))
}

/// Finds the journal device of the file system whose superblock is
/// `fs_sb` (which names an external journal by `s_journal_uuid`), as
/// e2fsprogs asks blkid: the device numbered `s_journal_dev`, then
/// `/dev/disk/by-uuid/UUID`, then every block device in `/sys/class/block`
/// whose ext4 superblock has `journal_dev` and that UUID. `Err` says what
/// was looked at.
pub fn find_device(fs_sb: &RawSuperblock) -> std::result::Result<std::path::PathBuf, String> {
    let want = fs_sb.s_journal_uuid;
    let matches = |p: &std::path::Path| {
        let Ok(f) = std::fs::File::open(p) else { return false };
        let mut buf = [0u8; SUPERBLOCK_SIZE];
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut buf, SUPERBLOCK_OFFSET).is_ok()
            && RawSuperblock::parse(&buf).is_ok_and(|sb| {
                sb.s_magic.get() == EXT4_SUPER_MAGIC
                    && sb.features().incompat.contains(IncompatFeatures::JOURNAL_DEV)
                    && sb.s_uuid == want
            })
    };
    let numbered = Some(fs_sb.s_journal_dev.get())
        .filter(|&n| n != 0)
        .and_then(|n| device_path(decode_dev(n).0, decode_dev(n).1).ok());
    let by_uuid = std::path::PathBuf::from(format!("/dev/disk/by-uuid/{}", uuid(&want)));
    let probed = std::fs::read_dir("/sys/class/block")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| std::path::Path::new("/dev").join(e.file_name()));
    numbered
        .into_iter()
        .chain(std::iter::once(by_uuid))
        .chain(probed)
        .find(|p| matches(p))
        .ok_or_else(|| {
            format!(
                "the journal device with UUID {} was not found (looked at device number {:#x}, \
                 /dev/disk/by-uuid and the block devices in /sys/class/block); give it with --journal PATH \
                 (mount: -o journal_path=PATH)",
                uuid(&want),
                fs_sb.s_journal_dev.get()
            )
        })
}

#[cfg(test)]
mod device_number_tests {
    use super::*;

    #[test]
    fn journal_dev_numbers_decode_as_the_kernel() {
        assert_eq!(parse_device_number("7:3").unwrap(), (7, 3));
        assert_eq!(parse_device_number("1795").unwrap(), (7, 3));
        // minor 256 of major 7: new_encode_dev puts minor bits 8+ at 20+.
        assert_eq!(
            parse_device_number(&((7 << 8) | (1 << 20)).to_string()).unwrap(),
            (7, 256)
        );
        assert!(parse_device_number("loop0").is_err());
        assert!(parse_device_number("7:").is_err());
    }
}
