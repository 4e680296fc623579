//! The disk model (`DiskModel`, seed 004's eq. 2–8) against request
//! sequences whose cost is worked out by hand from the profile's figures:
//! a seek of known distance, tracked rotation, a read-ahead hit, sequential
//! reads without seeks, the write cache and its flush, an SSD and `none`;
//! then a real workload (mkfs and 3,000 creates through `Filesystem`) run
//! twice gives identical figures and an e2fsck-clean image.

use std::io;
use std::sync::Arc;

use ext4kit_engine::device::disk_model::{HddProfile, Rotation, SeekHistogram};
use ext4kit_engine::device::{BlockDevice, DiskModel, DiskProfile, DiskStats, MemDevice};
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

/// A device as large as the modeled drive that keeps nothing: positions
/// anywhere on the platter can be reached without holding 146 GB.
#[derive(Debug)]
struct Void(u64);

impl BlockDevice for Void {
    fn len(&self) -> u64 {
        self.0
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if offset + buf.len() as u64 > self.0 {
            return Err(io::Error::other("past the end"));
        }
        buf.fill(0);
        Ok(())
    }
    fn write_at(&self, _: u64, _: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn read_only(&self) -> bool {
        false
    }
}

const KIB4: usize = 4096;
/// Sectors per track in the outer zone, and per cylinder (4 heads).
const SPT: u64 = 1200;
const PER_CYL: u64 = 4 * SPT;
const REV: u64 = 6_000_000;
const COMMAND: u64 = 200_000;
const SETTLE: u64 = 100_000;
const WRITE_SETTLE: u64 = 500_000;
/// 8 sectors of a 1,200-sector track: 8/1200 of a 6 ms turn.
const MEDIA_4K: u64 = 40_000;
/// 4096 bytes at 600 MB/s, rounded down.
const IFACE_4K: u64 = 6_826;

fn hp(rotation: Rotation, write_cache: bool) -> DiskProfile {
    let mut p = HddProfile::hp_sas_10k();
    p.rotation = rotation;
    if !write_cache {
        p.write_cache_bytes = 0;
    }
    DiskProfile::Hdd(p)
}

fn void_model(profile: &DiskProfile) -> DiskModel<Void> {
    DiskModel::new(Void(146_000_000_000), profile).unwrap()
}

/// Byte offset of sector 0 of `cylinder` (outer zone), plus `sector`.
fn at(cylinder: u64, sector: u64) -> u64 {
    (cylinder * PER_CYL + sector) * 512
}

fn read(d: &impl BlockDevice, offset: u64, len: usize) {
    d.read_at(offset, &mut vec![0; len]).unwrap();
}

fn write(d: &impl BlockDevice, offset: u64, len: usize) {
    d.write_at(offset, &vec![7; len]).unwrap();
}

fn consistent(s: &DiskStats) {
    assert_eq!(s.time.total_ns(), s.modeled_ns, "the parts add up: {s:?}");
    assert_eq!(s.seek_distances.total(), s.positionings);
}

#[test]
fn a_seek_of_known_distance_costs_the_curve_plus_the_fixed_parts() {
    let d = void_model(&hp(Rotation::Average, true));
    let curve = d.seek_curve().unwrap();
    for (from, to) in [(0, 1), (1, 101), (101, 2101), (2101, 3)] {
        let before = d.stats().modeled_ns;
        read(&d, at(to, 0), KIB4);
        let cost = d.stats().modeled_ns - before;
        let dist: u64 = to.abs_diff(from);
        assert_eq!(
            cost,
            COMMAND + curve.time_ns(dist) + SETTLE + REV / 2 + MEDIA_4K + IFACE_4K,
            "{from} -> {to}"
        );
    }
    let s = d.stats();
    assert_eq!(s.reads, 4);
    assert_eq!(s.positionings, 4);
    assert_eq!(s.time.rotation_ns, 4 * REV / 2, "eq. (8): half a turn each");
    let buckets: Vec<_> = s.seek_distances.buckets().collect();
    // Distances 1, 100, 2000, 2098.
    assert_eq!(buckets, vec![(1, 1, 1), (64, 127, 1), (1024, 2047, 1), (2048, 4095, 1)]);
    consistent(&s);
}

#[test]
fn the_fitted_curve_gives_the_seed_s_three_figures() {
    let d = void_model(&hp(Rotation::Tracked, true));
    let curve = d.seek_curve().unwrap();
    let cylinders = d.geometry().unwrap().cylinders;
    assert_eq!(curve.max_distance, cylinders - 1);
    assert_eq!(curve.time_ns(1) + SETTLE, 200_000, "track-to-track 0.2 ms");
    assert_eq!(curve.time_ns(cylinders - 1) + SETTLE, 8_100_000, "full stroke 8.1 ms");
    let avg = curve.mean_over_random_seeks_ns() + SETTLE as f64;
    // Tolerance: 0.1 % (the fit solves a continuous form of the mean).
    assert!((avg - 4_000_000.0).abs() < 4_000.0, "average 4 ms, got {avg}");
}

#[test]
fn rotation_is_tracked_from_the_clock_and_read_ahead_serves_the_track() {
    let d = void_model(&hp(Rotation::Tracked, true));
    // Sector 600 of 1,200 is half a turn round; the clock reads 0.2 ms
    // (the command) when the head, already on the track, starts waiting.
    read(&d, at(0, 600), KIB4);
    let first = COMMAND + (REV / 2 - COMMAND) + MEDIA_4K + IFACE_4K;
    assert_eq!(d.stats().modeled_ns, first);
    // The rest of the track was read ahead: a later sector is interface time only.
    read(&d, at(0, 1100), KIB4);
    assert_eq!(d.stats().modeled_ns, first + IFACE_4K);
    assert_eq!(d.stats().read_hits, 1);
    // Before the request's start was not read: a miss. The platter has
    // turned past sector 0, so the wait runs to the end of this turn.
    let clock = d.now_ns() + COMMAND;
    read(&d, at(0, 0), KIB4);
    let wait = (REV - clock % REV) % REV;
    assert_eq!(
        d.stats().modeled_ns,
        first + IFACE_4K + COMMAND + wait + MEDIA_4K + IFACE_4K
    );
    assert_eq!(d.stats().read_hits, 1);
    consistent(&d.stats());
}

#[test]
fn sequential_reads_do_not_seek() {
    let d = void_model(&hp(Rotation::Tracked, true));
    // One cylinder, 4 tracks, in 4 KiB reads: one media access per track.
    for i in 0..(PER_CYL / 8) {
        read(&d, i * KIB4 as u64, KIB4);
    }
    let s = d.stats();
    assert_eq!(s.time.seek_ns, 0);
    assert_eq!(s.positionings, 4);
    assert_eq!(s.seek_distances.count(0), 4, "every positioning at distance 0");
    assert_eq!(s.time.settle_ns, 3 * SETTLE, "three head switches");
    assert_eq!(s.read_hits, PER_CYL / 8 - 4);
    assert_eq!(s.bytes_read, PER_CYL * 512);
    consistent(&s);
}

#[test]
fn writes_land_in_the_cache_and_a_flush_drains_it_in_sweep_order() {
    let d = void_model(&hp(Rotation::Average, true));
    let curve = d.seek_curve().unwrap();
    write(&d, at(100, 0), KIB4);
    write(&d, at(10, 0), KIB4);
    write(&d, at(10, 0), KIB4);
    let s = d.stats();
    assert_eq!(s.modeled_ns, 3 * IFACE_4K, "writes complete at interface speed");
    assert_eq!((s.cached_writes, s.positionings), (3, 0));
    assert_eq!(d.dirty_bytes(), 8192, "a rewrite takes no more room");
    // A read of data still in the write cache is a hit.
    read(&d, at(10, 0), KIB4);
    assert_eq!(d.stats().read_hits, 1);
    let before = d.stats().modeled_ns;
    d.flush().unwrap();
    let drain = |dist| curve.time_ns(dist) + WRITE_SETTLE + REV / 2 + MEDIA_4K;
    assert_eq!(
        d.stats().modeled_ns - before,
        COMMAND + drain(10) + drain(90),
        "cyl 10 then 100"
    );
    assert_eq!(d.dirty_bytes(), 0);
    let before = d.stats().modeled_ns;
    d.flush().unwrap();
    assert_eq!(d.stats().modeled_ns - before, COMMAND, "nothing left to write");
    let s = d.stats();
    assert_eq!((s.writes, s.flushes, s.bytes_written), (3, 2, 3 * 4096));
    consistent(&s);
}

#[test]
fn a_full_write_cache_drains_before_the_next_write() {
    let d = void_model(&hp(Rotation::Tracked, true));
    let mib = 1 << 20;
    for i in 0..8 {
        write(&d, i * 2 * mib as u64, mib);
    }
    assert_eq!(d.stats().forced_drains, 0, "8 MiB fit");
    assert_eq!(d.dirty_bytes(), 8 << 20);
    write(&d, 64 << 20, KIB4);
    let s = d.stats();
    assert_eq!(s.forced_drains, 1);
    assert_eq!(s.positionings, 8, "each 1 MiB run written in one access");
    assert_eq!(d.dirty_bytes(), 4096, "only the new write waits");
    consistent(&s);
}

#[test]
fn without_a_write_cache_a_write_pays_the_mechanism() {
    let d = void_model(&hp(Rotation::Average, false));
    let curve = d.seek_curve().unwrap();
    write(&d, at(50, 0), KIB4);
    assert_eq!(
        d.stats().modeled_ns,
        COMMAND + curve.time_ns(50) + WRITE_SETTLE + REV / 2 + MEDIA_4K + IFACE_4K
    );
    assert_eq!(d.stats().cached_writes, 0);
}

#[test]
fn inner_zones_transfer_slower() {
    let d = void_model(&hp(Rotation::Average, true));
    let g = d.geometry().unwrap();
    let rates = g.media_rates();
    assert!(rates.windows(2).all(|w| w[0] > w[1]), "{rates:?}");
    d.read_at(0, &mut vec![0; 1 << 20]).unwrap();
    let outer = d.stats().time.media_ns;
    d.reset();
    d.read_at(140_000_000_000, &mut vec![0; 1 << 20]).unwrap();
    let inner = d.stats().time.media_ns;
    // 2,048 sectors at 1,200 and at 720 sectors a 6 ms turn.
    assert_eq!((outer, inner), (2048 * REV / 1200, 2048 * REV / 720));
}

#[test]
fn ssd_and_none_profiles() {
    let ssd = void_model(&"ssd".parse().unwrap());
    read(&ssd, at(1000, 0), KIB4);
    write(&ssd, 0, KIB4);
    ssd.flush().unwrap();
    let s = ssd.stats();
    // 60 µs a request; 4096 bytes at 500 MB/s = 8,192 ns.
    assert_eq!(s.modeled_ns, 3 * 60_000 + 2 * 8_192);
    assert_eq!((s.positionings, s.time.seek_ns), (0, 0));
    assert!(ssd.seek_curve().is_none());

    let none = void_model(&"none".parse().unwrap());
    read(&none, at(1000, 0), KIB4);
    write(&none, at(9000, 0), 512);
    none.flush().unwrap();
    let s = none.stats();
    assert_eq!(s.modeled_ns, 0);
    assert_eq!(
        (s.reads, s.writes, s.flushes, s.bytes_read, s.bytes_written),
        (1, 1, 1, 4096, 512)
    );
}

#[test]
fn failed_requests_cost_nothing_and_reset_keeps_the_clock() {
    let d = void_model(&hp(Rotation::Tracked, true));
    assert!(d.read_at(d.len(), &mut [0; 512]).is_err());
    assert_eq!(d.stats(), DiskStats::default());
    read(&d, at(7, 0), KIB4);
    let now = d.now_ns();
    assert!(now > 0);
    d.reset();
    assert_eq!(d.stats(), DiskStats::default());
    assert_eq!(d.now_ns(), now);
    read(&d, at(7, 8), KIB4);
    assert_eq!(d.stats().read_hits, 1, "the drive cache survives a reset");
    d.drop_cache();
    read(&d, at(7, 8), KIB4);
    assert_eq!(d.stats().read_hits, 1, "but not drop_cache");
}

#[test]
fn an_offset_places_the_image_further_in() {
    let d = void_model(&hp(Rotation::Average, true)).with_offset(at(1000, 0));
    let curve = d.seek_curve().unwrap();
    read(&d, 0, KIB4);
    let s = d.stats();
    assert_eq!(s.time.seek_ns, curve.time_ns(1000), "image byte 0 is on cylinder 1000");
    assert_eq!(s.seek_distances.count(SeekHistogram::bucket(1000)), 1);
}

#[test]
fn bad_profiles_are_refused_by_name() {
    let mut p = HddProfile::hp_sas_10k();
    p.seek.average_ns = 7_500_000;
    let err = DiskModel::new(Void(1 << 20), &DiskProfile::Hdd(p)).unwrap_err();
    assert!(err.to_string().starts_with("disk profile hp-sas-10k: "), "{err}");
    let err = "hp-sas-15k".parse::<DiskProfile>().unwrap_err();
    assert!(err.to_string().contains("hp-sas-10k, ssd, none"), "{err}");
}

#[test]
fn the_model_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<DiskModel<MemDevice>>();
}

const FILE: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// mkfs and 3,000 creates in one directory, on a 64 MiB image inside the
/// model; the image and the model's figures.
fn workload() -> (Vec<u8>, DiskStats) {
    let profile: DiskProfile = "hp-sas-10k".parse().unwrap();
    let disk = Arc::new(DiskModel::new(MemDevice::new(vec![0; 64 << 20]), &profile).unwrap());
    let opts = MkfsOptions {
        uuid: Some([7; 16]),
        hash_seed: Some([9; 16]),
        timestamp: Some(1_700_000_000),
        device_zeroed: true,
        ..MkfsOptions::default()
    };
    mkfs(&*disk, &opts).expect("mkfs");
    let fs = Filesystem::open(Box::new(disk.clone()), OpenOptions::default()).expect("open");
    let dir = fs.create(ROOT_INO, b"d", NodeKind::Directory, FILE).unwrap().ino;
    for i in 0..3000 {
        fs.create(dir, format!("file-{i:05}").as_bytes(), NodeKind::Regular, FILE)
            .unwrap();
        if i % 500 == 499 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    drop(fs);
    (disk.inner().snapshot(), disk.stats())
}

#[test]
fn the_same_workload_gives_the_same_figures_and_a_clean_image() {
    let (image, first) = workload();
    let (_, second) = workload();
    assert_eq!(first, second, "modeled figures differ between identical runs");
    assert!(
        first.writes > 0 && first.flushes >= 6 && first.positionings > 0,
        "{first:?}"
    );
    assert!(first.modeled_ns > 0);
    consistent(&first);
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), &image).unwrap();
    let r = e2fsck_fn(tmp.path()).unwrap();
    assert!(r.is_clean(), "e2fsck -fn:\n{}", r.output);
}
