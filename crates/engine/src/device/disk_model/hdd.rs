//! The rotating disk's mechanism: what a read, write or flush costs on the
//! virtual clock, per seed 004's eq. (3)–(8).
//!
//! A request the drive cache serves costs the interface transfer alone
//! (eq. 2's hit term). One that reaches the media costs eq. (3): command
//! overhead + seek (eq. 7, by cylinder distance) + settle (after a seek or
//! a head switch) + rotational latency + media transfer (eq. 6: sectors
//! over the zone's sectors per revolution) + interface transfer. With
//! [`Rotation::Tracked`] the platter's angle is the virtual clock modulo
//! one revolution and sector `s` of a `n`-sector track sits at angle
//! `s/n`, so the wait is exact rather than eq. (8)'s half turn; track and
//! head switches inside one transfer are not charged, and read-ahead fills
//! the rest of the track without charging the host (the host's own time
//! is not on the clock, and the drive reads while it works).

use super::drive_cache::DriveCache;
use super::profile::{HddProfile, ProfileError, Rotation};
use super::seek::SeekCurve;
use super::stats::{Meter, transfer_ns};
use super::zones::{Geometry, Location, Zones};

/// Bytes in a sector, the unit positions are computed in.
pub(super) const SECTOR: u64 = 512;

/// A rotating disk's state: the arm's place, the caches, and the fixed
/// figures the costs come from.
#[derive(Debug, Clone)]
pub(super) struct Hdd {
    zones: Zones,
    curve: SeekCurve,
    revolution_ns: u64,
    command_ns: u64,
    settle_ns: u64,
    write_settle_ns: u64,
    interface_rate: u64,
    rotation: Rotation,
    cache: DriveCache,
    cylinder: u64,
    head: u64,
    /// The sector after the last one transferred: where the drain sweep
    /// starts.
    next_lba: u64,
}

impl Hdd {
    /// Lays out the drive and fits its seek curve.
    ///
    /// # Errors
    /// [`ProfileError::Invalid`] naming the figure that makes no drive.
    pub fn new(p: &HddProfile) -> Result<Self, ProfileError> {
        let invalid = |what: String| ProfileError::Invalid {
            profile: p.name.to_owned(),
            what,
        };
        let capacity = p.capacity_bytes / SECTOR;
        if p.rpm == 0 || p.heads == 0 || p.zones == 0 || capacity == 0 || p.interface_bytes_per_sec == 0 {
            return Err(invalid(format!(
                "rpm {}, heads {}, zones {}, capacity {} bytes and interface rate {} B/s must all be positive",
                p.rpm, p.heads, p.zones, p.capacity_bytes, p.interface_bytes_per_sec
            )));
        }
        if p.inner_sectors_per_track == 0 || p.outer_sectors_per_track < p.inner_sectors_per_track {
            return Err(invalid(format!(
                "sectors per track must be positive and not grow inwards (outer {}, inner {})",
                p.outer_sectors_per_track, p.inner_sectors_per_track
            )));
        }
        let zones = Zones::new(
            capacity,
            p.heads.into(),
            p.zones.into(),
            p.outer_sectors_per_track.into(),
            p.inner_sectors_per_track.into(),
        );
        let curve = SeekCurve::fit(p.seek, p.settle_ns, zones.cylinders() - 1).map_err(invalid)?;
        Ok(Self {
            zones,
            curve,
            revolution_ns: 60_000_000_000 / u64::from(p.rpm),
            command_ns: p.command_overhead_ns,
            settle_ns: p.settle_ns,
            write_settle_ns: p.write_settle_ns,
            interface_rate: p.interface_bytes_per_sec,
            rotation: p.rotation,
            cache: DriveCache::new(
                p.read_cache_bytes / SECTOR,
                p.read_segments as usize,
                p.write_cache_bytes / SECTOR,
            ),
            cylinder: 0,
            head: 0,
            next_lba: 0,
        })
    }

    /// The fitted seek curve.
    pub fn curve(&self) -> &SeekCurve {
        &self.curve
    }

    /// The zoned layout.
    pub fn geometry(&self) -> Geometry {
        self.zones.geometry(self.revolution_ns)
    }

    /// Bytes in the write cache not yet on the media.
    pub fn dirty_bytes(&self) -> u64 {
        self.cache.dirty_sectors() * SECTOR
    }

    /// Reads sectors `[lba, end)`, `bytes` bytes, for the host.
    pub fn read(&mut self, m: &mut Meter<'_>, lba: u64, end: u64, bytes: u64) {
        if self.cache.read_hit(lba, end) {
            m.stats.read_hits += 1;
        } else {
            m.command(self.command_ns);
            self.transfer(m, lba, end, false);
            let last = self.zones.locate(end - 1);
            let track_end = end - 1 - last.sector + last.sectors_per_track;
            self.cache.fill(lba, track_end);
        }
        m.interface(transfer_ns(bytes, self.interface_rate));
    }

    /// Writes sectors `[lba, end)`, `bytes` bytes, from the host: into the
    /// write cache (drained first if it would not fit), or to the media
    /// when there is no write cache or the write is larger than it.
    pub fn write(&mut self, m: &mut Meter<'_>, lba: u64, end: u64, bytes: u64) {
        if self.cache.can_cache_write(end - lba) {
            if !self.cache.write_fits(lba, end) {
                m.stats.forced_drains += 1;
                self.drain(m);
            }
            self.cache.add_dirty(lba, end);
            m.stats.cached_writes += 1;
        } else {
            m.command(self.command_ns);
            self.transfer(m, lba, end, true);
        }
        m.interface(transfer_ns(bytes, self.interface_rate));
    }

    /// A cache flush: the command, then every dirty run to the media.
    pub fn flush(&mut self, m: &mut Meter<'_>) {
        m.command(self.command_ns);
        self.drain(m);
    }

    /// Forgets the read segments (a cold drive cache).
    pub fn drop_cache(&mut self) {
        self.cache.drop_segments();
    }

    /// Writes the write cache's runs to the media in sweep order.
    fn drain(&mut self, m: &mut Meter<'_>) {
        for (start, end) in self.cache.take_dirty(self.next_lba) {
            self.transfer(m, start, end, true);
        }
    }

    /// Positions the head on sector `lba` and moves `[lba, end)` between
    /// media and buffer.
    fn transfer(&mut self, m: &mut Meter<'_>, lba: u64, end: u64, write: bool) {
        let to = self.zones.locate(lba);
        self.position(m, to, write);
        let media = u128::from(end - lba) * u128::from(self.revolution_ns) / u128::from(to.sectors_per_track);
        m.media(media as u64);
        let last = self.zones.locate(end - 1);
        (self.cylinder, self.head, self.next_lba) = (last.cylinder, last.head, end);
    }

    /// Seek, settle and rotational latency to reach `to`.
    fn position(&mut self, m: &mut Meter<'_>, to: Location, write: bool) {
        let distance = to.cylinder.abs_diff(self.cylinder);
        m.seek(distance, self.curve.time_ns(distance));
        if distance > 0 || to.head != self.head {
            m.settle(if write { self.write_settle_ns } else { self.settle_ns });
        }
        let wait = match self.rotation {
            Rotation::Average => self.revolution_ns / 2,
            Rotation::Tracked => {
                let angle = m.now() % self.revolution_ns;
                let target = to.sector * self.revolution_ns / to.sectors_per_track;
                (target + self.revolution_ns - angle) % self.revolution_ns
            }
        };
        m.rotation(wait);
    }
}
