//! `-G auto`: the flex group size chosen from the device, as seed 001
//! §4.5 asks ("because the right size of groups depends on things
//! related to the disk itself, making mke2fs smarter to automatically set
//! the virtual group size based on media size, media type and RAID
//! configuration will help users deploy this feature"). mke2fs always
//! takes 16 (`-G` default); so does ext4kit unless asked.
//!
//! The rule, in groups per flex group (`s_log_groups_per_flex`, a power
//! of two), never below mke2fs's 16:
//!
//! - **Rotating disk:** a flex group spans 1/64 of the file system (at
//!   least 16 groups), at most 1,024 groups. A seek from a flex group's metadata to its data
//!   then crosses at most 1/64 of the stroke (about 1 ms on the seed's
//!   10K SAS drive, whose fitted seek curve is `a + b·√d`; a larger
//!   virtual group buys more packing with longer seeks); 16 groups is
//!   exactly that span on a 146 GB drive, and a larger disk gets
//!   proportionally larger virtual groups for the same worst seek.
//! - **RAID** (`-E stride=,stripe_width=`): each of the
//!   `stripe_width / stride` data disks holds 1/n of a flex group, so
//!   the per-spindle span stays at the budget with a flex group n times
//!   larger (n rounded down to a power of two; at most 1,024 groups). The seed's own 64 groups on
//!   a Fibre Channel array are 16 × 4.
//! - **Flash (no seek):** span costs nothing, so a flex group is as
//!   large as keeps 8 flex groups for the inode allocators to spread
//!   top-level directories over, at most 256 groups (a flex group's
//!   bitmaps, 2 × 256 blocks, stay one short read each).
//! - **Unknown media** (an image on tmpfs, overlayfs or btrfs, whose
//!   device number names no disk) is treated as a rotating disk: that
//!   rule only grows with size, so it never makes a small file system's
//!   groups larger than mke2fs's.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// What the device is made of (`/sys/block/<dev>/queue/rotational`, or
/// `-E media=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// A rotating disk: seeks cost by distance.
    Hdd,
    /// Flash: no seek.
    Ssd,
}

impl FromStr for Media {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "hdd" | "rotational" => Ok(Self::Hdd),
            "ssd" | "flash" => Ok(Self::Ssd),
            _ => Err(Error::InvalidArgument(format!("media {s:?}: expected hdd or ssd"))),
        }
    }
}

impl fmt::Display for Media {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Hdd => "hdd",
            Self::Ssd => "ssd",
        })
    }
}

/// mke2fs's flex group size, and the floor of the rule.
pub const DEFAULT_GROUPS_PER_FLEX: u32 = 16;
/// Largest flex group on a rotating disk (or array).
const MAX_HDD: u32 = 1024;
/// Largest flex group on flash.
const MAX_SSD: u32 = 256;
/// A flex group spans at most 1/`HDD_SPAN_DIVISOR` of a rotating disk.
const HDD_SPAN_DIVISOR: u64 = 64;
/// Flex groups kept on flash for the inode allocators to spread over.
const SSD_MIN_FLEXES: u32 = 8;

/// The device as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    /// Groups of the new file system.
    pub groups: u32,
    /// Media type; `None` when unknown.
    pub media: Option<Media>,
    /// `-E stride=` (blocks per disk per stripe), 0 when none.
    pub stride: u32,
    /// `-E stripe_width=` (blocks per full stripe), 0 when none.
    pub stripe_width: u32,
}

/// The flex group size `-G auto` picks, with the reason in words.
pub fn auto_groups_per_flex(d: &Device) -> (u32, String) {
    let disks = data_disks(d.stride, d.stripe_width);
    let (n, why) = match d.media {
        Some(Media::Ssd) => {
            let n = floor_pow2(d.groups / SSD_MIN_FLEXES).clamp(DEFAULT_GROUPS_PER_FLEX, MAX_SSD);
            (n, format!("flash: {SSD_MIN_FLEXES} flex groups of {} groups", d.groups))
        }
        media => {
            let span = floor_pow2((u64::from(d.groups) / HDD_SPAN_DIVISOR) as u32).max(DEFAULT_GROUPS_PER_FLEX);
            let n = span.saturating_mul(floor_pow2(disks)).min(MAX_HDD);
            let what = if media.is_some() {
                "rotating disk"
            } else {
                "unknown media, as a rotating disk"
            };
            let raid = if disks > 1 {
                format!(", times {disks} data disks")
            } else {
                String::new()
            };
            (n, format!("{what}: 1/{HDD_SPAN_DIVISOR} of {} groups{raid}", d.groups))
        }
    };
    (
        n,
        format!("{n} groups per flex group ({why}; at least {DEFAULT_GROUPS_PER_FLEX})"),
    )
}

/// Data disks of a RAID stripe: `stripe_width / stride` when both are
/// given, else 1.
fn data_disks(stride: u32, stripe_width: u32) -> u32 {
    if stride > 0 && stripe_width >= stride {
        stripe_width / stride
    } else {
        1
    }
}

/// The largest power of two not above `n` (1 for 0).
fn floor_pow2(n: u32) -> u32 {
    if n == 0 { 1 } else { 1 << (31 - n.leading_zeros()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(groups: u32, media: Option<Media>, stride: u32, width: u32) -> u32 {
        let d = Device {
            groups,
            media,
            stride,
            stripe_width: width,
        };
        auto_groups_per_flex(&d).0
    }

    #[test]
    fn a_rotating_disk_gets_one_sixty_fourth_of_its_groups() {
        assert_eq!(pick(64, Some(Media::Hdd), 0, 0), 16, "8 GiB: mke2fs's 16 is the floor");
        assert_eq!(pick(1088, Some(Media::Hdd), 0, 0), 16, "the seed's 146 GB drive: 16");
        assert_eq!(pick(32768, Some(Media::Hdd), 0, 0), 512, "4 TiB");
        assert_eq!(pick(1 << 20, Some(Media::Hdd), 0, 0), 1024, "128 TiB: capped");
        assert_eq!(pick(32768, None, 0, 0), 512, "unknown media as a rotating disk");
    }

    #[test]
    fn raid_multiplies_by_the_data_disks_and_flash_keeps_eight_flex_groups() {
        assert_eq!(pick(1088, Some(Media::Hdd), 16, 64), 64, "4 data disks: the seed's 64");
        assert_eq!(pick(1088, Some(Media::Hdd), 16, 48), 32, "3 data disks round down");
        assert_eq!(pick(1088, Some(Media::Hdd), 16, 0), 16, "a stride alone names no disks");
        assert_eq!(pick(64, Some(Media::Hdd), 16, 64), 64, "the floor, then the disks");
        assert_eq!(pick(64, Some(Media::Ssd), 0, 0), 16);
        assert_eq!(pick(1024, Some(Media::Ssd), 16, 64), 128, "flash ignores the stripe");
        assert_eq!(pick(1 << 16, Some(Media::Ssd), 0, 0), 256);
    }

    #[test]
    fn the_reason_names_the_rule() {
        let d = Device {
            groups: 1088,
            media: Some(Media::Hdd),
            stride: 16,
            stripe_width: 64,
        };
        let (_, why) = auto_groups_per_flex(&d);
        assert!(why.contains("rotating disk") && why.contains("4 data disks"), "{why}");
        assert_eq!("ssd".parse::<Media>().unwrap(), Media::Ssd);
        assert!("tape".parse::<Media>().is_err());
    }
}
