//! A disk model: a [`BlockDevice`] that stores data in an inner device and
//! charges every request the time seed 004's access-time model (eq. 2–8)
//! gives for a chosen drive, on a virtual clock. Benchmarks run on it to
//! get seek- and rotation-related effects deterministically on any
//! machine: the same request sequence gives the same modeled figures, with
//! no wall clock, randomness or hash order anywhere in the model.
//!
//! Modules, one concern each: `profile` (drives as values, parsed by
//! name), `seek` (eq. 7 and its fit to datasheet figures), `zones` (sector
//! to cylinder/head/angle, zone rates), `drive_cache` (read-ahead segments
//! and write cache), `hdd` (what a request costs), `stats` (counts, time
//! split, seek histogram). `docs/disk-model.md` shows the fit and states
//! every assumption.
//!
//! Share the model through an `Arc` to read its statistics while the
//! engine owns it:
//!
//! ```
//! use std::sync::Arc;
//! use ext4kit_engine::device::{BlockDevice, DiskModel, DiskProfile, MemDevice};
//!
//! let profile: DiskProfile = "hp-sas-10k".parse()?;
//! let disk = Arc::new(DiskModel::new(MemDevice::new(vec![0; 1 << 20]), &profile)?);
//! let engine_side: Box<dyn BlockDevice> = Box::new(disk.clone());
//! engine_side.write_at(0, &[1; 4096])?;
//! engine_side.flush()?;
//! let s = disk.stats();
//! assert_eq!((s.writes, s.flushes), (1, 1));
//! assert!(s.modeled_ns > 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod drive_cache;
mod hdd;
mod profile;
mod seek;
mod stats;
mod zones;

pub use profile::{DiskProfile, HddProfile, ProfileError, Rotation, SsdProfile};
pub use seek::{SeekCurve, SeekFigures};
pub use stats::{DiskStats, SeekHistogram, TimeSplit};
pub use zones::Geometry;

use std::io;

use parking_lot::Mutex;

use super::BlockDevice;
use hdd::{Hdd, SECTOR};
use stats::{Meter, transfer_ns};

/// A device that charges modeled time for every request; `Send + Sync`,
/// with the model's state behind one lock.
#[derive(Debug)]
pub struct DiskModel<D> {
    inner: D,
    profile: DiskProfile,
    /// Bytes of the drive before the image's first byte.
    offset: u64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    clock_ns: u64,
    stats: DiskStats,
    drive: Drive,
}

#[derive(Debug)]
enum Drive {
    Hdd(Box<Hdd>),
    Ssd { request_ns: u64, bytes_per_sec: u64 },
    Untimed,
}

impl<D: BlockDevice> DiskModel<D> {
    /// Wraps `inner` as the first bytes of a `profile` drive, its clock at
    /// 0, the head on cylinder 0 and the drive cache empty.
    ///
    /// # Errors
    /// [`ProfileError::Invalid`] when the profile's figures make no drive
    /// (for a rotating disk: zero counts or rates, or seek figures no
    /// eq. (7) curve meets).
    pub fn new(inner: D, profile: &DiskProfile) -> Result<Self, ProfileError> {
        let drive = match profile {
            DiskProfile::Hdd(p) => Drive::Hdd(Box::new(Hdd::new(p)?)),
            DiskProfile::Ssd(p) if p.bytes_per_sec == 0 => {
                return Err(ProfileError::Invalid {
                    profile: p.name.to_owned(),
                    what: "bandwidth must be positive".to_owned(),
                });
            }
            DiskProfile::Ssd(p) => Drive::Ssd {
                request_ns: p.request_ns,
                bytes_per_sec: p.bytes_per_sec,
            },
            DiskProfile::Untimed => Drive::Untimed,
        };
        Ok(Self {
            inner,
            profile: profile.clone(),
            offset: 0,
            state: Mutex::new(State {
                clock_ns: 0,
                stats: DiskStats::default(),
                drive,
            }),
        })
    }

    /// Places the image `bytes` into the drive, as a partition that does
    /// not start at the outer edge (seed 004's runs used a 10 GB volume on
    /// the 146 GB disk).
    #[must_use]
    pub fn with_offset(mut self, bytes: u64) -> Self {
        self.offset = bytes;
        self
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The profile modeled.
    pub fn profile(&self) -> &DiskProfile {
        &self.profile
    }

    /// Counts and modeled time since creation or the last
    /// [`DiskModel::reset`].
    pub fn stats(&self) -> DiskStats {
        self.state.lock().stats.clone()
    }

    /// Zeroes the statistics. The clock (the platter's angle), the head's
    /// place and the drive cache stay, so a run can measure its phases one
    /// by one.
    pub fn reset(&self) {
        self.state.lock().stats = DiskStats::default();
    }

    /// Forgets the drive's read segments, as after a power cycle; data in
    /// the write cache stays until a flush.
    pub fn drop_cache(&self) {
        if let Drive::Hdd(h) = &mut self.state.lock().drive {
            h.drop_cache();
        }
    }

    /// The virtual clock: modeled ns since creation (not reset).
    pub fn now_ns(&self) -> u64 {
        self.state.lock().clock_ns
    }

    /// The fitted seek curve, for a rotating-disk profile.
    pub fn seek_curve(&self) -> Option<SeekCurve> {
        match &self.state.lock().drive {
            Drive::Hdd(h) => Some(*h.curve()),
            _ => None,
        }
    }

    /// The zoned layout, for a rotating-disk profile.
    pub fn geometry(&self) -> Option<Geometry> {
        match &self.state.lock().drive {
            Drive::Hdd(h) => Some(h.geometry()),
            _ => None,
        }
    }

    /// Bytes the drive's write cache holds that a flush would write.
    pub fn dirty_bytes(&self) -> u64 {
        match &self.state.lock().drive {
            Drive::Hdd(h) => h.dirty_bytes(),
            _ => 0,
        }
    }

    /// Sectors `[first, end)` of the drive that bytes `[offset, offset +
    /// len)` of the image cover.
    fn sectors(&self, offset: u64, len: usize) -> (u64, u64) {
        let start = self.offset.saturating_add(offset);
        let end = start.saturating_add(len as u64);
        (start / SECTOR, end.div_ceil(SECTOR))
    }

    fn charge(&self, kind: Kind, offset: u64, len: usize) {
        let (lba, end) = self.sectors(offset, len);
        let bytes = len as u64;
        let mut st = self.state.lock();
        let State { clock_ns, stats, drive } = &mut *st;
        match kind {
            Kind::Read => {
                stats.reads += 1;
                stats.bytes_read += bytes;
            }
            Kind::Write => {
                stats.writes += 1;
                stats.bytes_written += bytes;
            }
            Kind::Flush => stats.flushes += 1,
        }
        let mut m = Meter { clock_ns, stats };
        match drive {
            Drive::Untimed => {}
            Drive::Ssd {
                request_ns,
                bytes_per_sec,
            } => {
                m.command(*request_ns);
                m.media(transfer_ns(bytes, *bytes_per_sec));
            }
            Drive::Hdd(h) => match kind {
                Kind::Read => h.read(&mut m, lba, end, bytes),
                Kind::Write => h.write(&mut m, lba, end, bytes),
                Kind::Flush => h.flush(&mut m),
            },
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Read,
    Write,
    Flush,
}

/// Requests go to the inner device first; only those that succeed are
/// charged and counted. Empty reads and writes cost nothing.
impl<D: BlockDevice> BlockDevice for DiskModel<D> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)?;
        if !buf.is_empty() {
            self.charge(Kind::Read, offset, buf.len());
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, buf)?;
        if !buf.is_empty() {
            self.charge(Kind::Write, offset, buf.len());
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()?;
        self.charge(Kind::Flush, 0, 0);
        Ok(())
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn name(&self) -> String {
        self.inner.name()
    }
}
