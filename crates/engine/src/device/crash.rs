//! A device that can "lose power": crash-consistency tests run a workload
//! on it once, then rebuild the image as a disk could have left it had the
//! power gone at any write.
//!
//! The model is the one the block layer gives a file system: a completed
//! write may sit in the disk's volatile cache until a flush (`REQ_PREFLUSH`,
//! the `flush` of [`BlockDevice`]) makes every write completed before it
//! durable. So after a power loss, everything written before the last
//! completed flush is on the disk; of the writes issued since, any subset
//! may be, in any order (the cache writes back as it likes), and a write
//! larger than the disk's atomic unit may be torn: 512-byte sectors by
//! default ([`CrashDevice::with_atomic_unit`] sets another, such as the
//! 4 KiB many drives guarantee).
//!
//! The device keeps the image it started from once, the current image (which
//! reads are served from), and a log of every write and where each flush
//! fell. [`CrashDevice::crash_image`] replays the log up to a crash point;
//! that costs one image copy plus the logged bytes, fine for the few-MiB
//! images of tests.

use std::io;

use parking_lot::Mutex;

use super::{BlockDevice, past_end};

/// Sector size: the unit a disk writes atomically unless told otherwise.
const SECTOR: u64 = 512;

/// What becomes of the writes issued after the last flush before a crash
/// point (the volatile ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Survivors {
    /// Every volatile write reached the disk (as if the crash came just
    /// before the next write).
    All,
    /// None did: the image is exactly what the last flush made durable.
    None,
    /// Each volatile write is kept or dropped independently, chosen by a
    /// generator seeded with `seed` (the same seed and crash point always
    /// give the same image).
    Random {
        /// Seed of the choice.
        seed: u64,
        /// Also tear writes: a write is then kept whole, dropped, or split
        /// into its atomic units (512-byte sectors by default) each kept
        /// or dropped on its own.
        torn: bool,
        /// Apply the surviving pieces in a shuffled order rather than the
        /// order issued, so that of two overlapping writes the older one may
        /// land last.
        reorder: bool,
    },
}

/// A memory-backed device that records every write and flush; share it
/// with an `Arc` to keep a handle while the engine owns the device.
#[derive(Debug)]
pub struct CrashDevice {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The image before the first logged write.
    base: Vec<u8>,
    /// The image with every write applied: what reads see.
    current: Vec<u8>,
    /// Every write, in the order issued.
    writes: Vec<(u64, Box<[u8]>)>,
    /// For each flush, how many writes had been issued before it.
    flushes: Vec<usize>,
    /// Bytes the disk writes atomically (aligned), for torn writes.
    atomic_unit: u64,
}

impl CrashDevice {
    /// A writable device holding `image`, with an empty log.
    pub fn new(image: Vec<u8>) -> Self {
        Self::with_atomic_unit(image, SECTOR)
    }

    /// As [`CrashDevice::new`], for a disk that writes `unit` aligned bytes
    /// (a power of two, at least 512) atomically.
    pub fn with_atomic_unit(image: Vec<u8>, unit: u64) -> Self {
        Self {
            state: Mutex::new(State {
                current: image.clone(),
                base: image,
                writes: Vec::new(),
                flushes: Vec::new(),
                atomic_unit: unit.max(SECTOR).next_power_of_two(),
            }),
        }
    }

    /// Writes logged so far. Crash point `k` (in `0..=writes()`) is the
    /// moment just before write `k` was issued: writes `0..k` and the
    /// flushes among them happened, nothing after.
    pub fn writes(&self) -> usize {
        self.state.lock().writes.len()
    }

    /// The crash points at flushes: for each flush, the number of writes
    /// issued before it. At such a point nothing is volatile, so every
    /// [`Survivors`] variant gives the same image.
    pub fn flush_points(&self) -> Vec<usize> {
        self.state.lock().flushes.clone()
    }

    /// How many writes the last flush before crash point `point` made
    /// durable (0 when no flush came before it).
    pub fn durable_writes(&self, point: usize) -> usize {
        barrier(&self.state.lock().flushes, point)
    }

    /// A copy of the image as reads see it now (every write applied).
    pub fn current(&self) -> Vec<u8> {
        self.state.lock().current.clone()
    }

    /// The image a power loss at crash point `point` (clamped to
    /// [`CrashDevice::writes`]) could leave: every write before the last
    /// flush at or before `point`, and of the writes after it and before
    /// `point`, those `survivors` picks.
    pub fn crash_image(&self, point: usize, survivors: Survivors) -> Vec<u8> {
        let st = self.state.lock();
        let point = point.min(st.writes.len());
        let durable = barrier(&st.flushes, point);
        let mut img = st.base.clone();
        for (off, bytes) in &st.writes[..durable] {
            apply(&mut img, *off, bytes);
        }
        let volatile = &st.writes[durable..point];
        match survivors {
            Survivors::None => {}
            Survivors::All => {
                for (off, bytes) in volatile {
                    apply(&mut img, *off, bytes);
                }
            }
            Survivors::Random { seed, torn, reorder } => {
                let mut rng = SplitMix(seed);
                let unit = if torn { Some(st.atomic_unit) } else { None };
                let mut pieces = choose(volatile, &mut rng, unit);
                if reorder {
                    shuffle(&mut pieces, &mut rng);
                }
                for (off, bytes) in pieces {
                    apply(&mut img, off, bytes);
                }
            }
        }
        img
    }
}

/// Writes made durable by the last flush at or before crash point `point`.
fn barrier(flushes: &[usize], point: usize) -> usize {
    flushes.iter().rev().copied().find(|&f| f <= point).unwrap_or(0)
}

/// Copies `bytes` into `img` at `off` (in range: the device checked it).
fn apply(img: &mut [u8], off: u64, bytes: &[u8]) {
    let start = off as usize;
    img[start..start + bytes.len()].copy_from_slice(bytes);
}

/// The pieces of the volatile writes that survive, in issue order.
fn choose<'a>(volatile: &'a [(u64, Box<[u8]>)], rng: &mut SplitMix, torn: Option<u64>) -> Vec<(u64, &'a [u8])> {
    let mut out = Vec::new();
    for (off, bytes) in volatile {
        let fate = if torn.is_some() { rng.below(3) } else { rng.below(2) };
        match fate {
            0 => out.push((*off, &bytes[..])),
            1 => {}
            _ => {
                for (s_off, sector) in sectors(*off, bytes, torn.unwrap_or(SECTOR)) {
                    if rng.below(2) == 0 {
                        out.push((s_off, sector));
                    }
                }
            }
        }
    }
    out
}

/// Splits a write at the boundaries of the device's atomic `unit`.
fn sectors(off: u64, bytes: &[u8], unit: u64) -> Vec<(u64, &[u8])> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let at = off + pos as u64;
        let room = (unit - at % unit) as usize;
        let n = room.min(bytes.len() - pos);
        out.push((at, &bytes[pos..pos + n]));
        pos += n;
    }
    out
}

fn shuffle<T>(v: &mut [T], rng: &mut SplitMix) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// SplitMix64: a tiny generator, so a seed means the same crash on every
/// machine (the engine has no random-number dependency to borrow).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn range(offset: u64, len: usize, size: usize) -> io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(offset).map_err(|_| past_end(offset, len, size as u64))?;
    match start.checked_add(len) {
        Some(end) if end <= size => Ok(start..end),
        _ => Err(past_end(offset, len, size as u64)),
    }
}

impl BlockDevice for CrashDevice {
    fn len(&self) -> u64 {
        self.state.lock().current.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let st = self.state.lock();
        let r = range(offset, buf.len(), st.current.len())?;
        buf.copy_from_slice(&st.current[r]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut st = self.state.lock();
        let r = range(offset, buf.len(), st.current.len())?;
        st.current[r].copy_from_slice(buf);
        st.writes.push((offset, buf.into()));
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut st = self.state.lock();
        let n = st.writes.len();
        st.flushes.push(n);
        Ok(())
    }

    fn read_only(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev() -> CrashDevice {
        CrashDevice::new(vec![0; 8 * 1024])
    }

    fn random(seed: u64) -> Survivors {
        Survivors::Random {
            seed,
            torn: false,
            reorder: false,
        }
    }

    #[test]
    fn reads_see_latest_writes() {
        let d = dev();
        d.write_at(100, &[1; 10]).unwrap();
        d.write_at(105, &[2; 10]).unwrap();
        let mut buf = [0u8; 20];
        d.read_at(100, &mut buf).unwrap();
        assert_eq!(&buf[..5], &[1; 5]);
        assert_eq!(&buf[5..15], &[2; 10]);
        assert_eq!(&buf[15..], &[0; 5]);
        assert!(d.write_at(8 * 1024 - 1, &[0; 2]).is_err());
        assert_eq!(d.writes(), 2);
    }

    #[test]
    fn flush_is_a_barrier() {
        let d = dev();
        d.write_at(0, &[1; 512]).unwrap();
        d.write_at(512, &[2; 512]).unwrap();
        d.flush().unwrap();
        d.write_at(1024, &[3; 512]).unwrap();
        d.write_at(0, &[4; 512]).unwrap();
        assert_eq!(d.flush_points(), vec![2]);
        assert_eq!(d.durable_writes(1), 0);
        assert_eq!(d.durable_writes(2), 2);
        assert_eq!(d.durable_writes(4), 2);
        for seed in 0..50 {
            let img = d.crash_image(4, random(seed));
            assert_eq!(&img[512..1024], &[2; 512], "seed {seed}");
            assert!(img[..512] == [1; 512] || img[..512] == [4; 512], "seed {seed}");
        }
        let none = d.crash_image(4, Survivors::None);
        assert_eq!((none[0], none[512], none[1024]), (1, 2, 0));
        let all = d.crash_image(4, Survivors::All);
        assert_eq!(all, d.current());
        // Before the flush, even the first writes may be lost.
        assert_eq!(d.crash_image(1, Survivors::None), vec![0; 8 * 1024]);
        // Past the end is the end.
        assert_eq!(d.crash_image(99, Survivors::All), d.current());
    }

    #[test]
    fn crash_point_excludes_later_writes() {
        let d = dev();
        for i in 0..4u8 {
            d.write_at(u64::from(i) * 512, &[i + 1; 512]).unwrap();
        }
        let img = d.crash_image(2, Survivors::All);
        assert_eq!((img[0], img[512], img[1024], img[1536]), (1, 2, 0, 0));
    }

    #[test]
    fn subset_is_deterministic_per_seed() {
        let d = dev();
        for i in 0..16u8 {
            d.write_at(u64::from(i) * 512, &[i + 1; 512]).unwrap();
        }
        let a = d.crash_image(16, random(7));
        assert_eq!(a, d.crash_image(16, random(7)));
        let distinct: std::collections::HashSet<Vec<u8>> = (0..20).map(|s| d.crash_image(16, random(s))).collect();
        assert!(distinct.len() > 10, "seeds should pick different subsets");
        // Each write is whole or absent.
        for i in 0..16 {
            let s = &a[i * 512..(i + 1) * 512];
            assert!(s == [i as u8 + 1; 512] || s == [0; 512]);
        }
    }

    #[test]
    fn torn_writes_split_at_sectors() {
        let d = dev();
        d.write_at(512, &[9; 4096]).unwrap();
        let mut saw_torn = false;
        for seed in 0..40 {
            let img = d.crash_image(
                1,
                Survivors::Random {
                    seed,
                    torn: true,
                    reorder: false,
                },
            );
            // Sectors are atomic: within each, all new or all old.
            for s in img.chunks(512) {
                assert!(s.iter().all(|&b| b == s[0]), "seed {seed}");
            }
            let kept = img.iter().filter(|&&b| b == 9).count();
            saw_torn |= kept != 0 && kept != 4096;
        }
        assert!(saw_torn);
    }

    #[test]
    fn unaligned_writes_split_at_sector_boundaries() {
        let bytes = [0u8; 1200];
        let parts: Vec<(u64, usize)> = sectors(300, &bytes, SECTOR)
            .iter()
            .map(|(o, b)| (*o, b.len()))
            .collect();
        assert_eq!(parts, vec![(300, 212), (512, 512), (1024, 476)]);
    }

    #[test]
    fn reorder_lets_an_older_write_land_last() {
        // A covers sectors 0-1, B sectors 1-2: only B-then-A leaves
        // sectors (A, A, B), which issue order can never produce.
        let d = dev();
        d.write_at(0, &[1; 1024]).unwrap();
        d.write_at(512, &[2; 1024]).unwrap();
        let outcomes = |reorder: bool| -> std::collections::HashSet<[u8; 3]> {
            (0..64)
                .map(|seed| {
                    let img = d.crash_image(
                        2,
                        Survivors::Random {
                            seed,
                            torn: false,
                            reorder,
                        },
                    );
                    [img[0], img[512], img[1024]]
                })
                .collect()
        };
        let in_order = outcomes(false);
        assert_eq!(in_order.len(), 4);
        assert!(!in_order.contains(&[1, 1, 2]));
        let shuffled = outcomes(true);
        assert!(shuffled.contains(&[1, 1, 2]));
        assert!(shuffled.is_superset(&in_order));
    }
}
