//! `struct mmp_struct`: the multi-mount protection block (`INCOMPAT_MMP`).
//!
//! One block, named by `s_mmp_block` in the superblock, whose first 1024
//! bytes say who holds the file system: `mmp_seq` is [`EXT4_MMP_SEQ_CLEAN`]
//! when nobody does, [`EXT4_MMP_SEQ_FSCK`] while e2fsck runs, and otherwise
//! a number the holder rewrites every `s_mmp_update_interval` seconds; a
//! would-be opener that sees it change knows the holder is alive. The node
//! and device names and the time are for people only. Under `metadata_csum`,
//! `mmp_checksum` is crc32c with the file system's checksum seed over every
//! byte before it. The rest of the block is unused.
//!
//! See `Documentation/filesystems/ext4/mmp.rst` and e2fsprogs'
//! `lib/ext2fs/ext2_fs.h`.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};

/// `mmp_magic`: "MMP" in ASCII.
pub const EXT4_MMP_MAGIC: u32 = 0x004D_4D50;
/// `mmp_seq` after a clean unmount.
pub const EXT4_MMP_SEQ_CLEAN: u32 = 0xFF4D_4D50;
/// `mmp_seq` while e2fsck has the file system.
pub const EXT4_MMP_SEQ_FSCK: u32 = 0xE24D_4D50;
/// The largest `mmp_seq` a live holder writes; anything above that is not
/// [`EXT4_MMP_SEQ_CLEAN`] means "do not touch".
pub const EXT4_MMP_SEQ_MAX: u32 = 0xE24D_4D4F;
/// `s_mmp_update_interval` mke2fs writes when none is given (seconds).
pub const EXT4_MMP_UPDATE_INTERVAL: u16 = 5;
/// The largest `s_mmp_update_interval` mke2fs accepts (seconds).
pub const EXT4_MMP_MAX_UPDATE_INTERVAL: u16 = 300;
/// The shortest check interval the kernel and e2fsprogs use (seconds).
pub const EXT4_MMP_MIN_CHECK_INTERVAL: u16 = 5;
/// The longest `mmp_check_interval` the kernel writes (seconds).
pub const EXT4_MMP_MAX_CHECK_INTERVAL: u16 = 300;
/// The kernel writes `mmp_check_interval` as this many update periods.
pub const EXT4_MMP_CHECK_MULT: u16 = 2;
/// Bytes of `struct mmp_struct` at the start of the block.
pub const MMP_SIZE: usize = 1024;
/// Byte offset of `mmp_checksum`: the checksum covers the bytes before it.
pub const MMP_CHECKSUM_OFFSET: usize = 0x3FC;
const STRUCT: &str = "mmp_struct";

/// The raw MMP record, every byte kept (`struct mmp_struct`).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // field names are the kernel's; see mmp.rst
pub struct RawMmp {
    pub mmp_magic: U32,
    pub mmp_seq: U32,
    pub mmp_time: U64,
    pub mmp_nodename: [u8; 64],
    pub mmp_bdevname: [u8; 32],
    pub mmp_check_interval: U16,
    pub mmp_pad1: U16,
    pub mmp_pad2: [U32; 226],
    pub mmp_checksum: U32,
}

const _: () = assert!(core::mem::size_of::<RawMmp>() == MMP_SIZE);
const _: () = assert!(core::mem::offset_of!(RawMmp, mmp_check_interval) == 0x70);
const _: () = assert!(core::mem::offset_of!(RawMmp, mmp_checksum) == MMP_CHECKSUM_OFFSET);

/// What `mmp_seq` says about the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmpState {
    /// Nobody holds the file system.
    Clean,
    /// e2fsck is checking it.
    Fsck,
    /// A holder writes this sequence number (1..=[`EXT4_MMP_SEQ_MAX`], or
    /// 0 as a holder that never updated may leave it).
    Active(u32),
    /// A value above [`EXT4_MMP_SEQ_MAX`] that no tool writes.
    Unknown(u32),
}

impl RawMmp {
    /// A clean record (`ext2fs_mmp_reset`): magic, [`EXT4_MMP_SEQ_CLEAN`],
    /// the names, the check interval; time and checksum left to the writer.
    pub fn clean(nodename: &[u8], bdevname: &[u8], check_interval: u16) -> Self {
        let mut m = Self::new_zeroed();
        m.mmp_magic.set(EXT4_MMP_MAGIC);
        m.mmp_seq.set(EXT4_MMP_SEQ_CLEAN);
        m.set_nodename(nodename);
        m.set_bdevname(bdevname);
        m.mmp_check_interval.set(check_interval);
        m
    }

    /// Reads the record from the start of `buf` (its block). Checks only the
    /// length; see [`RawMmp::validate`].
    ///
    /// # Errors
    /// [`FormatError`] `Truncated` when `buf` is shorter than 1024 bytes.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        Self::read_from_prefix(buf)
            .map(|(m, _)| m)
            .map_err(|_| FormatError::truncated(STRUCT, MMP_SIZE, buf.len()))
    }

    /// The 1024 bytes of this record.
    pub fn encode(&self) -> [u8; MMP_SIZE] {
        let mut out = [0u8; MMP_SIZE];
        out.copy_from_slice(self.as_bytes());
        out
    }

    /// Checks `mmp_magic`, then, when `metadata_csum` is on, `mmp_checksum`
    /// against `csum_seed` (the order of the kernel's `read_mmp_block`).
    ///
    /// # Errors
    /// `BadMagic` at `mmp_magic` (offset 0) or `Checksum` at `mmp_checksum`
    /// (offset 0x3FC).
    pub fn validate(&self, csum_seed: u32, metadata_csum: bool) -> Result<()> {
        let magic = self.mmp_magic.get();
        if magic != EXT4_MMP_MAGIC {
            return Err(FormatError::bad_magic(STRUCT, "mmp_magic", 0, u64::from(magic)));
        }
        if metadata_csum {
            self.verify_checksum(csum_seed)?;
        }
        Ok(())
    }

    /// `mmp_checksum` as computed: crc32c seeded with the file system's
    /// checksum seed over the bytes before the field.
    pub fn compute_checksum(&self, csum_seed: u32) -> u32 {
        crc32c_raw(csum_seed, &self.as_bytes()[..MMP_CHECKSUM_OFFSET])
    }

    /// Checks `mmp_checksum` (callers skip this without `metadata_csum`).
    ///
    /// # Errors
    /// `Checksum` at `mmp_checksum` (offset 0x3FC).
    pub fn verify_checksum(&self, csum_seed: u32) -> Result<()> {
        let (stored, computed) = (self.mmp_checksum.get(), self.compute_checksum(csum_seed));
        if stored != computed {
            return Err(FormatError::checksum(
                STRUCT,
                "mmp_checksum",
                MMP_CHECKSUM_OFFSET,
                stored,
                computed,
            ));
        }
        Ok(())
    }

    /// Recomputes `mmp_checksum`.
    pub fn set_checksum(&mut self, csum_seed: u32) {
        let c = self.compute_checksum(csum_seed);
        self.mmp_checksum.set(c);
    }

    /// What `mmp_seq` says.
    pub fn state(&self) -> MmpState {
        match self.mmp_seq.get() {
            EXT4_MMP_SEQ_CLEAN => MmpState::Clean,
            EXT4_MMP_SEQ_FSCK => MmpState::Fsck,
            s if s <= EXT4_MMP_SEQ_MAX => MmpState::Active(s),
            s => MmpState::Unknown(s),
        }
    }

    /// `mmp_nodename` up to its first NUL, lossily as text.
    pub fn nodename(&self) -> String {
        c_text(&self.mmp_nodename)
    }

    /// `mmp_bdevname` up to its first NUL, lossily as text.
    pub fn bdevname(&self) -> String {
        c_text(&self.mmp_bdevname)
    }

    /// Stores `name` in `mmp_nodename` as `strncpy` would: cut to 64 bytes,
    /// NUL-padded, with no NUL when it fills the field.
    pub fn set_nodename(&mut self, name: &[u8]) {
        fill(&mut self.mmp_nodename, name);
    }

    /// Stores `name` in `mmp_bdevname` as `strncpy` would (32 bytes).
    pub fn set_bdevname(&mut self, name: &[u8]) {
        fill(&mut self.mmp_bdevname, name);
    }
}

/// The kernel's `mmp_check_interval` for an update interval: the larger of
/// [`EXT4_MMP_CHECK_MULT`] periods and `min`, capped at
/// [`EXT4_MMP_MAX_CHECK_INTERVAL`] (`kmmpd`).
pub fn check_interval_for(update_secs: u64, min: u16) -> u16 {
    let want = update_secs.saturating_mul(u64::from(EXT4_MMP_CHECK_MULT));
    let capped = want.min(u64::from(EXT4_MMP_MAX_CHECK_INTERVAL));
    u16::try_from(capped).unwrap_or(EXT4_MMP_MAX_CHECK_INTERVAL).max(min)
}

/// Seconds an opener waits before looking again (`ext4_multi_mount_protect`,
/// `ext2fs_mmp_start`): twice the check interval plus one, but at most a
/// minute past it. `check` is the larger of `s_mmp_update_interval` (raised
/// to the minimum) and the record's `mmp_check_interval`.
pub fn wait_secs(check: u16) -> u64 {
    let c = u64::from(check);
    (2 * c + 1).min(c + 60)
}

fn fill(field: &mut [u8], name: &[u8]) {
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let n = end.min(field.len());
    field.fill(0);
    field[..n].copy_from_slice(&name[..n]);
}

fn c_text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FormatErrorKind;

    #[test]
    fn clean_record_round_trips_with_its_checksum() {
        let mut m = RawMmp::clean(b"node-a", b"/dev/loop0", 5);
        m.mmp_time.set(1_700_000_000);
        m.set_checksum(0x1234_5678);
        let bytes = m.encode();
        assert_eq!(&bytes[..4], &EXT4_MMP_MAGIC.to_le_bytes());
        assert_eq!(&bytes[4..8], &EXT4_MMP_SEQ_CLEAN.to_le_bytes());
        assert_eq!(&bytes[16..22], b"node-a");
        assert_eq!(&bytes[80..90], b"/dev/loop0");
        assert_eq!(&bytes[0x70..0x72], &5u16.to_le_bytes());
        let back = RawMmp::parse(&bytes).unwrap();
        assert_eq!(back, m);
        back.validate(0x1234_5678, true).unwrap();
        assert_eq!(back.state(), MmpState::Clean);
        assert_eq!(back.nodename(), "node-a");
        assert_eq!(back.bdevname(), "/dev/loop0");
    }

    #[test]
    fn bad_magic_and_checksum_are_named() {
        let mut m = RawMmp::clean(b"n", b"d", 5);
        m.set_checksum(7);
        let mut bytes = m.encode();
        bytes[0x200] ^= 1;
        let e = RawMmp::parse(&bytes).unwrap().validate(7, true).unwrap_err();
        assert_eq!((e.field, e.offset), ("mmp_checksum", MMP_CHECKSUM_OFFSET));
        assert!(matches!(e.kind, FormatErrorKind::Checksum { .. }));
        RawMmp::parse(&bytes).unwrap().validate(7, false).unwrap();
        bytes[0] = 0;
        let e = RawMmp::parse(&bytes).unwrap().validate(7, false).unwrap_err();
        assert_eq!(e.field, "mmp_magic");
        assert!(RawMmp::parse(&bytes[..1000]).is_err());
    }

    #[test]
    fn names_are_cut_like_strncpy() {
        let mut m = RawMmp::new_zeroed();
        m.set_bdevname(&[b'x'; 40]);
        assert_eq!(m.mmp_bdevname, [b'x'; 32]);
        assert_eq!(m.bdevname().len(), 32);
        m.set_bdevname(b"short");
        assert_eq!(m.bdevname(), "short");
        assert!(m.mmp_bdevname[5..].iter().all(|&b| b == 0));
    }

    #[test]
    fn sequence_states_and_intervals() {
        let mut m = RawMmp::new_zeroed();
        for (seq, state) in [
            (EXT4_MMP_SEQ_CLEAN, MmpState::Clean),
            (EXT4_MMP_SEQ_FSCK, MmpState::Fsck),
            (EXT4_MMP_SEQ_MAX, MmpState::Active(EXT4_MMP_SEQ_MAX)),
            (EXT4_MMP_SEQ_MAX + 2, MmpState::Unknown(EXT4_MMP_SEQ_MAX + 2)),
        ] {
            m.mmp_seq.set(seq);
            assert_eq!(m.state(), state);
        }
        assert_eq!(wait_secs(5), 11);
        assert_eq!(wait_secs(100), 160);
        assert_eq!(check_interval_for(1, 5), 5);
        assert_eq!(check_interval_for(1, 1), 2);
        assert_eq!(check_interval_for(1000, 5), 300);
    }
}
