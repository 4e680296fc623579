//! Drive profiles as values: the seed's HP SAS 10K disk, an SSD, and
//! `none` (counts only, no time), chosen by name on a command line.
//!
//! Figures that seed 004 gives (Table I: 146 GB, average seek 4 ms, full
//! stroke 8.1 ms, track-to-track 0.2 ms, 10,000 rpm, 6 Gb/s buffer
//! throughput) are used as given. The rest are assumptions, each named in
//! [`HddProfile::hp_sas_10k`] and in `docs/disk-model.md`.

use std::fmt;
use std::str::FromStr;

use super::seek::SeekFigures;

/// Which drive a [`super::DiskModel`] imitates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskProfile {
    /// A rotating disk: seek curve, rotation, zones, drive cache.
    Hdd(HddProfile),
    /// A flash drive: fixed latency per request plus size over bandwidth.
    Ssd(SsdProfile),
    /// No time at all; requests are only counted (`none`).
    Untimed,
}

/// How rotational latency (seed 004, eq. 8) is charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    /// The platter's angle follows the virtual clock; a request waits
    /// until its first sector comes under the head. Deterministic, and
    /// sequential or same-track requests pay what they would on a disk.
    Tracked,
    /// Half a revolution on every media access: eq. (8)'s expectation.
    Average,
}

/// A rotating disk. Times in ns, sizes in bytes; sectors are 512 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HddProfile {
    /// Name for reports.
    pub name: &'static str,
    /// Formatted capacity.
    pub capacity_bytes: u64,
    /// Spindle speed.
    pub rpm: u32,
    /// Recording surfaces (tracks per cylinder).
    pub heads: u32,
    /// Recording zones, outermost first, each a band of equal cylinders.
    pub zones: u32,
    /// Sectors per track in the outermost zone.
    pub outer_sectors_per_track: u32,
    /// Sectors per track in the innermost zone; zones in between step
    /// linearly from outer to inner.
    pub inner_sectors_per_track: u32,
    /// Datasheet seek times (settle included); the curve is fitted to them.
    pub seek: SeekFigures,
    /// Decoding a command, charged on every request that reaches the media
    /// and on every flush (eq. 4's `CommandOverhead`).
    pub command_overhead_ns: u64,
    /// Settling after a read seek or head switch (eq. 4's `SettleTime`).
    pub settle_ns: u64,
    /// Settling before a write, which must be on track more precisely.
    pub write_settle_ns: u64,
    /// Host interface rate (eq. 3's `Tinterface_time`).
    pub interface_bytes_per_sec: u64,
    /// Rotational latency model.
    pub rotation: Rotation,
    /// Drive cache space for read segments.
    pub read_cache_bytes: u64,
    /// Most read segments held at once.
    pub read_segments: u32,
    /// Drive cache space for written data not yet on the media; 0 turns
    /// the write cache off (every write goes to the media before it
    /// completes).
    pub write_cache_bytes: u64,
}

/// A flash drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsdProfile {
    /// Name for reports.
    pub name: &'static str,
    /// Charged on every request and flush.
    pub request_ns: u64,
    /// Bytes per second each way.
    pub bytes_per_sec: u64,
}

/// A profile name that is not known, or a profile that cannot be modeled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// No profile has this name.
    #[error("unknown disk profile '{0}': valid profiles are {list}", list = DiskProfile::NAMES.join(", "))]
    Unknown(String),
    /// The profile's figures do not make a drive.
    #[error("disk profile {profile}: {what}")]
    Invalid {
        /// The profile's name.
        profile: String,
        /// What is wrong with it.
        what: String,
    },
}

impl DiskProfile {
    /// The names [`DiskProfile::from_str`] accepts.
    pub const NAMES: [&'static str; 3] = ["hp-sas-10k", "ssd", "none"];

    /// The profile's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Hdd(h) => h.name,
            Self::Ssd(s) => s.name,
            Self::Untimed => "none",
        }
    }
}

impl FromStr for DiskProfile {
    type Err = ProfileError;

    fn from_str(name: &str) -> Result<Self, ProfileError> {
        match name {
            "hp-sas-10k" => Ok(Self::Hdd(HddProfile::hp_sas_10k())),
            "ssd" => Ok(Self::Ssd(SsdProfile::sata())),
            "none" => Ok(Self::Untimed),
            _ => Err(ProfileError::Unknown(name.to_owned())),
        }
    }
}

impl fmt::Display for DiskProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl HddProfile {
    /// Seed 004's drive, "HP Invent SAS 10K, 146GB, 2.5"" (Table I).
    ///
    /// From the seed: capacity, rpm, the three seek figures, and a 6 Gb/s
    /// interface (600 MB/s after 8b/10b coding). The figures are exactly
    /// the read figures "not including controller overhead" of Seagate's
    /// Savvio SAS manual (§4.2.1), whose "including" column is 0.2 ms
    /// higher: hence a 0.2 ms command overhead, and write settling 0.4 ms
    /// above read settling (its write figures: 0.6 / 4.4 / 8.6 ms).
    /// Assumed: 4 heads, 16 zones of 1,200 (outer) down to 720 (inner)
    /// 512-byte sectors per track, i.e. 102 to 61 MB/s off the media;
    /// 0.1 ms of the read figures is settling; a 16 MiB drive cache split
    /// into 8 MiB for 16 read segments and 8 MiB of write cache (the write
    /// cache on, as drives ship).
    pub fn hp_sas_10k() -> Self {
        Self {
            name: "hp-sas-10k",
            capacity_bytes: 146_000_000_000,
            rpm: 10_000,
            heads: 4,
            zones: 16,
            outer_sectors_per_track: 1_200,
            inner_sectors_per_track: 720,
            seek: SeekFigures {
                track_to_track_ns: 200_000,
                average_ns: 4_000_000,
                full_stroke_ns: 8_100_000,
            },
            command_overhead_ns: 200_000,
            settle_ns: 100_000,
            write_settle_ns: 500_000,
            interface_bytes_per_sec: 600_000_000,
            rotation: Rotation::Tracked,
            read_cache_bytes: 8 << 20,
            read_segments: 16,
            write_cache_bytes: 8 << 20,
        }
    }
}

impl SsdProfile {
    /// A SATA flash drive of the seed's time (assumed): 60 µs per request,
    /// 500 MB/s.
    pub fn sata() -> Self {
        Self {
            name: "ssd",
            request_ns: 60_000,
            bytes_per_sec: 500_000_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_round_trip() {
        for name in DiskProfile::NAMES {
            let p: DiskProfile = name.parse().unwrap();
            assert_eq!(p.name(), name);
            assert_eq!(p.to_string(), name);
        }
    }

    #[test]
    fn an_unknown_name_lists_the_valid_ones() {
        let err = "hdd".parse::<DiskProfile>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown disk profile 'hdd': valid profiles are hp-sas-10k, ssd, none"
        );
    }
}
