//! The MMP block on the device: reading it afresh (never through the
//! engine's cache: another host writes it) and writing it synchronously,
//! plus the facts about this host that go into it.

use std::sync::Arc;

use ext4kit_format::mmp::{EXT4_MMP_SEQ_MAX, MMP_SIZE, RawMmp};

use crate::device::BlockDevice;
use crate::error::{Error, Location, Result};

/// Where the MMP block is and how to check it. Cheap to clone: the
/// updating thread keeps its own.
#[derive(Clone)]
pub(crate) struct Site {
    /// The device itself, beneath the guard the engine writes through
    /// ([`super::guard`]): the MMP block is written here even after the
    /// engine's writes are stopped.
    pub dev: Arc<dyn BlockDevice>,
    /// `s_mmp_block`.
    pub block: u64,
    /// Byte offset of the block.
    pub offset: u64,
    pub csum_seed: u32,
    /// `metadata_csum` is on: `mmp_checksum` is kept.
    pub metadata_csum: bool,
    /// Refuse a record whose checksum does not match
    /// ([`crate::OpenOptions::verify_checksums`]).
    pub verify_checksums: bool,
}

impl Site {
    fn at(&self) -> Location {
        Location::Block {
            block: self.block,
            inode: 0,
        }
    }

    /// Reads and checks the record (`read_mmp_block`): magic, then the
    /// checksum under `metadata_csum`. Read past any page cache
    /// ([`BlockDevice::read_uncached`]), or another host's write would
    /// never be seen.
    ///
    /// # Errors
    /// [`Error::Io`]; [`Error::Corrupt`] / [`Error::BadChecksum`] at the
    /// MMP block for a bad `mmp_magic` or `mmp_checksum`.
    pub fn read(&self) -> Result<RawMmp> {
        let mut buf = [0u8; MMP_SIZE];
        self.dev
            .read_uncached(self.offset, &mut buf)
            .map_err(|source| Error::Io {
                offset: self.offset,
                source,
            })?;
        let rec = RawMmp::parse(&buf).map_err(|e| Error::format(self.at(), e))?;
        match rec.validate(self.csum_seed, self.metadata_csum) {
            Err(e) if !e.is_checksum() || self.verify_checksums => Err(Error::format(self.at(), e)),
            _ => Ok(rec),
        }
    }

    /// Stamps `rec` with the time and its checksum, writes it and flushes
    /// the device, as the kernel's `write_mmp_block` submits a synchronous
    /// write and e2fsprogs flushes after `ext2fs_mmp_write`.
    ///
    /// # Errors
    /// [`Error::Io`] when the write or the flush fails.
    pub fn write(&self, rec: &mut RawMmp) -> Result<()> {
        rec.mmp_time.set(now_secs());
        if self.metadata_csum {
            rec.set_checksum(self.csum_seed);
        }
        let io = |source| Error::Io {
            offset: self.offset,
            source,
        };
        self.dev.write_at(self.offset, &rec.encode()).map_err(io)?;
        self.dev.flush().map_err(io)
    }
}

/// Wall-clock seconds (`mmp_time` tells people when the holder was last
/// alive, so it ignores `SOURCE_DATE_EPOCH`).
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// This host's node name, as `uname -n` (the kernel writes
/// `init_utsname()->nodename`, e2fsprogs `gethostname`).
pub(crate) fn nodename() -> Vec<u8> {
    std::fs::read("/proc/sys/kernel/hostname")
        .ok()
        .map(|mut n| {
            while n.last().is_some_and(|b| b.is_ascii_whitespace()) {
                n.pop();
            }
            n
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| b"unknown host".to_vec())
}

/// A random sequence number no larger than [`EXT4_MMP_SEQ_MAX`]
/// (`mmp_new_seq`), from `/dev/urandom` or, failing that, the clock and pid.
pub(crate) fn new_seq() -> u32 {
    use std::io::Read;
    let mut f = std::fs::File::open("/dev/urandom").ok();
    let mut fallback = clock_mix();
    loop {
        let mut b = [0u8; 4];
        let seq = match f.as_mut().map(|f| f.read_exact(&mut b)) {
            Some(Ok(())) => u32::from_le_bytes(b),
            _ => {
                // xorshift32 over the clock and pid.
                fallback ^= fallback << 13;
                fallback ^= fallback >> 17;
                fallback ^= fallback << 5;
                fallback
            }
        };
        if seq <= EXT4_MMP_SEQ_MAX {
            return seq;
        }
    }
}

fn clock_mix() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mixed = (t as u32) ^ ((t >> 32) as u32) ^ std::process::id().rotate_left(16);
    mixed.max(1)
}
