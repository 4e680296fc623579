//! Where a sector lies on a zoned disk, and how fast it passes the head.
//!
//! Seed 004 notes (after eq. 6) that transfer rates vary with "different
//! track sizes in different zones". The model: zones of equal cylinder
//! count, outermost first; sectors per track step linearly from the outer
//! zone's figure to the inner one's, so a zone's media rate is its track
//! size per revolution. Logical blocks fill a cylinder's tracks head by
//! head, then the next cylinder inwards. A sector beyond the stated
//! capacity (an image larger than the drive) is placed on extra cylinders
//! of the innermost zone, so nothing is refused.

/// The zoned layout of one drive.
#[derive(Debug, Clone)]
pub(super) struct Zones {
    heads: u64,
    cylinders_per_zone: u64,
    zones: Vec<Zone>,
}

#[derive(Debug, Clone, Copy)]
struct Zone {
    first_lba: u64,
    first_cylinder: u64,
    sectors_per_track: u64,
}

/// A drive's layout, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Cylinders the stated capacity spans.
    pub cylinders: u64,
    /// Tracks per cylinder.
    pub heads: u64,
    /// Sectors per track of each zone, outermost first.
    pub sectors_per_track: Vec<u64>,
    /// One revolution, ns.
    pub revolution_ns: u64,
}

impl Geometry {
    /// Media rate of each zone in bytes a second, outermost first.
    pub fn media_rates(&self) -> Vec<u64> {
        self.sectors_per_track
            .iter()
            .map(|s| s * 512 * 1_000_000_000 / self.revolution_ns)
            .collect()
    }
}

/// A sector's place: cylinder, head, and index within its track.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Location {
    pub cylinder: u64,
    pub head: u64,
    pub sector: u64,
    pub sectors_per_track: u64,
}

impl Zones {
    /// Lays out `capacity_sectors` over `zones` zones of `heads` tracks per
    /// cylinder; the caller has checked every count is at least 1 and
    /// `outer >= inner`.
    pub fn new(capacity_sectors: u64, heads: u64, zones: u64, outer: u64, inner: u64) -> Self {
        let spt = |z: u64| {
            if zones == 1 {
                outer
            } else {
                outer - (outer - inner) * z / (zones - 1)
            }
        };
        let per_cylinder_all_zones: u64 = (0..zones).map(|z| spt(z) * heads).sum();
        let cylinders_per_zone = capacity_sectors.div_ceil(per_cylinder_all_zones).max(1);
        let mut first_lba = 0;
        let zones = (0..zones)
            .map(|z| {
                let zone = Zone {
                    first_lba,
                    first_cylinder: z * cylinders_per_zone,
                    sectors_per_track: spt(z),
                };
                first_lba += cylinders_per_zone * heads * spt(z);
                zone
            })
            .collect();
        Self {
            heads,
            cylinders_per_zone,
            zones,
        }
    }

    /// Cylinders the stated capacity spans.
    pub fn cylinders(&self) -> u64 {
        self.cylinders_per_zone * self.zones.len() as u64
    }

    /// The layout as a report value.
    pub fn geometry(&self, revolution_ns: u64) -> Geometry {
        Geometry {
            cylinders: self.cylinders(),
            heads: self.heads,
            sectors_per_track: self.zones.iter().map(|z| z.sectors_per_track).collect(),
            revolution_ns,
        }
    }

    /// Where logical sector `lba` lies.
    pub fn locate(&self, lba: u64) -> Location {
        let i = self.zones.partition_point(|z| z.first_lba <= lba).saturating_sub(1);
        let z = self.zones[i];
        let rel = lba - z.first_lba;
        let track = rel / z.sectors_per_track;
        Location {
            cylinder: z.first_cylinder + track / self.heads,
            head: track % self.heads,
            sector: rel % z.sectors_per_track,
            sectors_per_track: z.sectors_per_track,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sectors_fill_heads_then_cylinders_then_zones() {
        // 2 zones of 10 and 6 sectors a track, 2 heads: 32 sectors per
        // cylinder pair, capacity 64 sectors -> 2 cylinders per zone.
        let z = Zones::new(64, 2, 2, 10, 6);
        assert_eq!(z.cylinders(), 4);
        let at = |lba| {
            let l = z.locate(lba);
            (l.cylinder, l.head, l.sector, l.sectors_per_track)
        };
        assert_eq!(at(0), (0, 0, 0, 10));
        assert_eq!(at(9), (0, 0, 9, 10));
        assert_eq!(at(10), (0, 1, 0, 10));
        assert_eq!(at(20), (1, 0, 0, 10));
        assert_eq!(at(39), (1, 1, 9, 10));
        assert_eq!(at(40), (2, 0, 0, 6), "the inner zone starts after 2 cylinders of 20");
        assert_eq!(at(52), (3, 0, 0, 6));
        assert_eq!(at(63), (3, 1, 5, 6));
        assert_eq!(at(64), (4, 0, 0, 6), "past the capacity: more inner cylinders");
    }

    #[test]
    fn zone_sizes_step_linearly() {
        let z = Zones::new(1 << 30, 4, 16, 1200, 720);
        let g = z.geometry(6_000_000);
        let spt = &g.sectors_per_track;
        assert_eq!(spt.first(), Some(&1200));
        assert_eq!(spt.last(), Some(&720));
        assert!(spt.windows(2).all(|w| w[0] - w[1] == 32));
        assert_eq!(g.media_rates()[0], 102_400_000, "1200 sectors per 6 ms");
    }
}
