//! `struct ext4_inode`: the 128-byte core record plus the `i_extra_isize`
//! tail of large inodes (nanosecond times, creation time, checksum high half,
//! project id). The record is `s_inode_size` bytes; the bytes after the tail
//! hold in-inode extended attributes.
//!
//! See `Documentation/filesystems/ext4/inodes.rst`.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};
use crate::util::hilo64;

const STRUCT: &str = "ext4_inode";
/// Size of the core inode shared by every revision.
pub const GOOD_OLD_INODE_SIZE: usize = 128;
/// Bytes of `i_block` (`EXT4_N_BLOCKS` × 4).
pub const I_BLOCK_SIZE: usize = 60;

/// The raw inode: the 128-byte core and the 32-byte large-inode tail. For a
/// 128-byte record the tail reads as zeros and is not written back.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
#[repr(C)]
#[allow(missing_docs)] // kernel field names; see inodes.rst
pub struct RawInode {
    pub i_mode: U16,
    pub i_uid: U16,
    pub i_size_lo: U32,
    pub i_atime: U32,
    pub i_ctime: U32,
    pub i_mtime: U32,
    pub i_dtime: U32,
    pub i_gid: U16,
    pub i_links_count: U16,
    pub i_blocks_lo: U32,
    pub i_flags: U32,
    pub i_version_lo: U32,
    pub i_block: [u8; I_BLOCK_SIZE],
    pub i_generation: U32,
    pub i_file_acl_lo: U32,
    pub i_size_high: U32,
    pub i_obso_faddr: U32,
    pub i_blocks_high: U16,
    pub i_file_acl_high: U16,
    pub i_uid_high: U16,
    pub i_gid_high: U16,
    pub i_checksum_lo: U16,
    pub i_reserved: U16,
    pub i_extra_isize: U16,
    pub i_checksum_hi: U16,
    pub i_ctime_extra: U32,
    pub i_mtime_extra: U32,
    pub i_atime_extra: U32,
    pub i_crtime: U32,
    pub i_crtime_extra: U32,
    pub i_version_hi: U32,
    pub i_projid: U32,
}

const _: () = assert!(core::mem::size_of::<RawInode>() == 160);
const CSUM_LO: usize = 0x7C;
const CSUM_HI: usize = 0x82;

/// File type bits of `i_mode`.
pub mod mode {
    /// Mask of the type bits.
    pub const S_IFMT: u16 = 0o170000;
    /// Socket.
    pub const S_IFSOCK: u16 = 0o140000;
    /// Symbolic link.
    pub const S_IFLNK: u16 = 0o120000;
    /// Regular file.
    pub const S_IFREG: u16 = 0o100000;
    /// Block device.
    pub const S_IFBLK: u16 = 0o060000;
    /// Directory.
    pub const S_IFDIR: u16 = 0o040000;
    /// Character device.
    pub const S_IFCHR: u16 = 0o020000;
    /// FIFO.
    pub const S_IFIFO: u16 = 0o010000;
}

/// `i_flags` bits this project acts on (`EXT4_*_FL`).
pub mod flags {
    /// Immutable file.
    pub const IMMUTABLE: u32 = 0x10;
    /// Append only.
    pub const APPEND: u32 = 0x20;
    /// Do not update atime.
    pub const NOATIME: u32 = 0x80;
    /// Directory has an htree index.
    pub const INDEX: u32 = 0x1000;
    /// Top of a directory hierarchy: the Orlov allocator spreads its
    /// subdirectories as it does the root's (`EXT4_TOPDIR_FL`).
    pub const TOPDIR: u32 = 0x20000;
    /// `i_blocks` counts file-system blocks.
    pub const HUGE_FILE: u32 = 0x40000;
    /// File uses an extent tree.
    pub const EXTENTS: u32 = 0x80000;
    /// Inode holds a large xattr value.
    pub const EA_INODE: u32 = 0x200000;
    /// Data is stored inline.
    pub const INLINE_DATA: u32 = 0x1000_0000;
    /// Encrypted inode.
    pub const ENCRYPT: u32 = 0x800;
    /// Case-folded directory.
    pub const CASEFOLD: u32 = 0x4000_0000;
    /// fs-verity file.
    pub const VERITY: u32 = 0x100000;
}

/// The kind of file, from the type bits of `i_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// Regular file.
    Regular,
    /// Directory.
    Directory,
    /// Symbolic link.
    Symlink,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
    /// FIFO.
    Fifo,
    /// Socket.
    Socket,
}

impl FileType {
    /// Decodes the type bits of `i_mode`; `None` for an invalid type.
    pub fn from_mode(m: u16) -> Option<Self> {
        Some(match m & mode::S_IFMT {
            mode::S_IFREG => Self::Regular,
            mode::S_IFDIR => Self::Directory,
            mode::S_IFLNK => Self::Symlink,
            mode::S_IFCHR => Self::CharDevice,
            mode::S_IFBLK => Self::BlockDevice,
            mode::S_IFIFO => Self::Fifo,
            mode::S_IFSOCK => Self::Socket,
            _ => return None,
        })
    }

    /// The directory-entry `file_type` code (`EXT4_FT_*`).
    pub fn dirent_code(self) -> u8 {
        match self {
            Self::Regular => 1,
            Self::Directory => 2,
            Self::CharDevice => 3,
            Self::BlockDevice => 4,
            Self::Fifo => 5,
            Self::Socket => 6,
            Self::Symlink => 7,
        }
    }
}

/// A timestamp with the extra-field epoch bits applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp {
    /// Seconds since the Unix epoch (may be negative).
    pub secs: i64,
    /// Nanoseconds.
    pub nsecs: u32,
}

impl Timestamp {
    /// Joins a 32-bit seconds field with its `_extra` word (2 epoch bits,
    /// 30 nanosecond bits), as `ext4_decode_extra_time` does.
    pub fn decode(secs: u32, extra: Option<u32>) -> Self {
        let base = i64::from(secs as i32);
        match extra {
            None => Self { secs: base, nsecs: 0 },
            Some(e) => Self {
                secs: base + (i64::from(e & 3) << 32),
                nsecs: (e >> 2).min(999_999_999),
            },
        }
    }
}

impl RawInode {
    /// Decodes a record of `inode_size` bytes from `buf`.
    pub fn parse(buf: &[u8], inode_size: usize) -> Result<Self> {
        let rec = buf
            .get(..inode_size.max(GOOD_OLD_INODE_SIZE))
            .ok_or_else(|| FormatError::truncated(STRUCT, inode_size, buf.len()))?;
        let mut full = [0u8; 160];
        let n = rec.len().min(160);
        full[..n].copy_from_slice(&rec[..n]);
        let raw = Self::read_from_bytes(&full).map_err(|_| FormatError::truncated(STRUCT, 160, n))?;
        let extra = raw.i_extra_isize.get();
        if inode_size > GOOD_OLD_INODE_SIZE
            && (usize::from(extra) + GOOD_OLD_INODE_SIZE > inode_size || !extra.is_multiple_of(4))
        {
            return Err(FormatError::invalid(STRUCT, "i_extra_isize", 0x80, extra.into()));
        }
        Ok(raw)
    }

    /// Writes this inode over the first bytes of `out` (the record), leaving
    /// the in-inode xattr area beyond the tail untouched.
    pub fn encode_into(&self, out: &mut [u8]) {
        let n = out.len().min(GOOD_OLD_INODE_SIZE + self.extra_isize());
        out[..n].copy_from_slice(&self.as_bytes()[..n]);
    }

    /// `i_extra_isize` for large records, 0 for 128-byte ones.
    pub fn extra_isize(&self) -> usize {
        usize::from(self.i_extra_isize.get()).min(160 - GOOD_OLD_INODE_SIZE)
    }

    fn has_extra(&self, field_end: usize) -> bool {
        GOOD_OLD_INODE_SIZE + usize::from(self.i_extra_isize.get()) >= field_end
    }

    /// The type bits of `i_mode`.
    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_mode(self.i_mode.get())
    }
    /// Permission bits (07777).
    pub fn permissions(&self) -> u16 {
        self.i_mode.get() & 0o7777
    }
    /// 64-bit size.
    pub fn size(&self) -> u64 {
        hilo64(self.i_size_high.get(), self.i_size_lo.get())
    }
    /// Sets the 64-bit size.
    pub fn set_size(&mut self, size: u64) {
        self.i_size_lo.set(size as u32);
        self.i_size_high.set((size >> 32) as u32);
    }
    /// 32-bit uid.
    pub fn uid(&self) -> u32 {
        u32::from(self.i_uid.get()) | (u32::from(self.i_uid_high.get()) << 16)
    }
    /// 32-bit gid.
    pub fn gid(&self) -> u32 {
        u32::from(self.i_gid.get()) | (u32::from(self.i_gid_high.get()) << 16)
    }
    /// Link count.
    pub fn links(&self) -> u16 {
        self.i_links_count.get()
    }
    /// `i_flags`.
    pub fn flags(&self) -> u32 {
        self.i_flags.get()
    }
    /// True when `flag` (an `EXT4_*_FL` bit) is set.
    pub fn has_flag(&self, flag: u32) -> bool {
        self.i_flags.get() & flag != 0
    }
    /// Why these flags cannot belong to an inode of a file system with
    /// `features`, where the kernel refuses the inode at `__ext4_iget`
    /// ("casefold flag without casefold feature", "inode has both inline
    /// data and extents flags") or e2fsck clears it (inline data without
    /// the feature, whose `i_block` would otherwise be read as a mapping).
    /// `None` when they are consistent.
    pub fn flag_conflict(&self, features: &crate::features::Features) -> Option<&'static str> {
        use crate::features::IncompatFeatures;
        let fl = self.flags();
        if fl & flags::CASEFOLD != 0 && !features.incompat.contains(IncompatFeatures::CASEFOLD) {
            return Some("casefold flag without the casefold feature");
        }
        if fl & flags::INLINE_DATA != 0 && !features.incompat.contains(IncompatFeatures::INLINE_DATA) {
            return Some("inline data flag without the inline_data feature");
        }
        if fl & flags::INLINE_DATA != 0 && fl & flags::EXTENTS != 0 {
            return Some("both the inline data and the extents flags");
        }
        None
    }
    /// Block holding external xattrs (`i_file_acl`), 0 for none.
    pub fn file_acl(&self) -> u64 {
        hilo64(self.i_file_acl_high.get().into(), self.i_file_acl_lo.get())
    }
    /// Blocks charged to the file in 512-byte units, as `stat` reports them.
    /// `huge_file` says whether the `huge_file` feature is on.
    pub fn blocks_512(&self, huge_file: bool, block_size: u32) -> u64 {
        let lo = u64::from(self.i_blocks_lo.get());
        if !huge_file {
            return lo;
        }
        let n = lo | (u64::from(self.i_blocks_high.get()) << 32);
        if self.has_flag(flags::HUGE_FILE) {
            n.saturating_mul(u64::from(block_size / 512))
        } else {
            n
        }
    }

    fn time(&self, secs: u32, extra: u32, extra_end: usize) -> Timestamp {
        Timestamp::decode(secs, self.has_extra(extra_end).then_some(extra))
    }
    /// Access time.
    pub fn atime(&self) -> Timestamp {
        self.time(self.i_atime.get(), self.i_atime_extra.get(), 0x90)
    }
    /// Modification time.
    pub fn mtime(&self) -> Timestamp {
        self.time(self.i_mtime.get(), self.i_mtime_extra.get(), 0x8C)
    }
    /// Inode change time.
    pub fn ctime(&self) -> Timestamp {
        self.time(self.i_ctime.get(), self.i_ctime_extra.get(), 0x88)
    }
    /// Creation time, when the record has room for it.
    pub fn crtime(&self) -> Option<Timestamp> {
        self.has_extra(0x94)
            .then(|| self.time(self.i_crtime.get(), self.i_crtime_extra.get(), 0x98))
    }

    /// Device number of a character or block device as (major, minor),
    /// from the old (`i_block[0]`) or new (`i_block[1]`) encoding.
    pub fn device(&self) -> (u32, u32) {
        let w = |i: usize| {
            u32::from_le_bytes([
                self.i_block[i],
                self.i_block[i + 1],
                self.i_block[i + 2],
                self.i_block[i + 3],
            ])
        };
        let old = w(0);
        if old != 0 {
            ((old >> 8) & 0xff, old & 0xff)
        } else {
            let new = w(4);
            ((new & 0xfff00) >> 8, (new & 0xff) | ((new >> 12) & 0xfff00))
        }
    }

    /// The per-inode checksum seed: crc32c(crc32c(fs seed, le32 ino), le32 generation).
    pub fn csum_seed(&self, fs_seed: u32, ino: u32) -> u32 {
        let c = crc32c_raw(fs_seed, &ino.to_le_bytes());
        crc32c_raw(c, &self.i_generation.get().to_le_bytes())
    }
}

/// Computes the checksum of a whole inode record (`record` is
/// `s_inode_size` bytes): crc32c seeded per inode over the record with
/// `i_checksum_lo` and, when the tail covers it, `i_checksum_hi` taken as zero.
/// Returns the value and whether it is 32 bits wide (else only the low 16
/// bits are stored).
pub fn inode_checksum(record: &[u8], fs_seed: u32, ino: u32) -> Result<(u32, bool)> {
    // Records are `s_inode_size` bytes: a power of two from 128 on.
    if record.len() < GOOD_OLD_INODE_SIZE || !record.len().is_power_of_two() {
        return Err(FormatError::invalid(STRUCT, "s_inode_size", 0, record.len() as u64));
    }
    let raw = RawInode::parse(record, record.len())?;
    let mut c = raw.csum_seed(fs_seed, ino);
    c = crc32c_raw(c, &record[..CSUM_LO]);
    c = crc32c_raw(c, &[0, 0]);
    c = crc32c_raw(c, &record[CSUM_LO + 2..GOOD_OLD_INODE_SIZE]);
    let wide = record.len() > GOOD_OLD_INODE_SIZE && raw.has_extra(CSUM_HI + 2);
    if record.len() > GOOD_OLD_INODE_SIZE {
        c = crc32c_raw(c, &record[GOOD_OLD_INODE_SIZE..CSUM_HI]);
        if wide {
            c = crc32c_raw(c, &[0, 0]);
            c = crc32c_raw(c, &record[CSUM_HI + 2..]);
        } else {
            c = crc32c_raw(c, &record[CSUM_HI..]);
        }
    }
    Ok(if wide { (c, true) } else { (c & 0xFFFF, false) })
}

/// Verifies the checksum of an inode record.
pub fn verify_inode_checksum(record: &[u8], fs_seed: u32, ino: u32) -> Result<()> {
    let raw = RawInode::parse(record, record.len())?;
    let (computed, wide) = inode_checksum(record, fs_seed, ino)?;
    let mut stored = u32::from(raw.i_checksum_lo.get());
    if wide {
        stored |= u32::from(raw.i_checksum_hi.get()) << 16;
    }
    if stored != computed {
        return Err(FormatError::checksum(
            STRUCT,
            "i_checksum_lo",
            CSUM_LO,
            stored,
            computed,
        ));
    }
    Ok(())
}

/// Recomputes and stores the checksum of an inode record in place.
pub fn set_inode_checksum(record: &mut [u8], fs_seed: u32, ino: u32) -> Result<()> {
    let (c, wide) = inode_checksum(record, fs_seed, ino)?;
    record[CSUM_LO..CSUM_LO + 2].copy_from_slice(&(c as u16).to_le_bytes());
    if wide {
        record[CSUM_HI..CSUM_HI + 2].copy_from_slice(&((c >> 16) as u16).to_le_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_time_epoch_bits_extend_past_2038() {
        let t = Timestamp::decode(0x8000_0000, Some(1 | (5 << 2)));
        assert_eq!(t.secs, -(1i64 << 31) + (1i64 << 32));
        assert_eq!(t.nsecs, 5);
        assert_eq!(Timestamp::decode(u32::MAX, None).secs, -1);
    }

    #[test]
    fn checksum_set_then_verify_and_detects_flip() {
        let mut rec = vec![0u8; 256];
        rec[0x80] = 32; // i_extra_isize
        rec[0] = 0xA4;
        rec[1] = 0x81;
        set_inode_checksum(&mut rec, 0x1234_5678, 12).unwrap();
        verify_inode_checksum(&rec, 0x1234_5678, 12).unwrap();
        rec[200] ^= 1;
        let e = verify_inode_checksum(&rec, 0x1234_5678, 12).unwrap_err();
        assert!(e.is_checksum());
    }

    #[test]
    fn odd_record_lengths_are_errors_not_panics() {
        // Found by the format_parsers fuzzer: a 129-byte record.
        for len in [0, 100, 129, 131, 200] {
            let rec = vec![0u8; len];
            assert!(inode_checksum(&rec, 1, 1).is_err(), "{len}");
            assert!(verify_inode_checksum(&rec, 1, 1).is_err(), "{len}");
        }
    }

    #[test]
    fn bad_extra_isize_is_an_error() {
        let mut rec = vec![0u8; 256];
        rec[0x80] = 0xFF;
        assert_eq!(RawInode::parse(&rec, 256).unwrap_err().field, "i_extra_isize");
        assert!(RawInode::parse(&rec[..100], 128).is_err());
    }
}
