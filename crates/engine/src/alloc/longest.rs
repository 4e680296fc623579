//! The search a defrag's destination needs: the first free run of the
//! wanted length from the goal's group on, or failing that the longest
//! free run anywhere. mballoc's passes stop after `mb_max_to_scan` free
//! extents of a group (`ext4_mb_complex_scan_group`), which is right for
//! a write that must not stall but can miss the one long run behind a
//! crowd of one-block holes — exactly what a fragmented file leaves
//! around itself. This search reads every group's bitmap (as the
//! allocator sees it: windows, uncommitted frees and holds taken) once
//! per request until it finds the length, so it is meant for planning a
//! move, not for every write.

use super::bitmap::{find_zero, test_bit};
use crate::error::Result;
use crate::txn::Txn;

/// The first run of `want` free bits in `view` (`limit` bits), else the
/// longest: (start, length).
fn first_fit_or_longest(view: &[u8], limit: u32, want: u32) -> Option<(u32, u32)> {
    let (mut best, mut at) = (None::<(u32, u32)>, 0);
    while let Some(s) = find_zero(view, at, limit) {
        let len = (s..limit).take_while(|&b| !test_bit(view, b)).count() as u32;
        if len >= want {
            return Some((s, len));
        }
        if best.is_none_or(|(_, l)| len > l) {
            best = Some((s, len));
        }
        at = s + len;
    }
    best
}

impl Txn<'_> {
    /// A free run of `want` blocks (or the longest there is, shorter),
    /// searched group by group from `goal`'s group, wrapping; `None` when
    /// nothing is free. Takes nothing.
    pub(crate) fn find_free_run(&mut self, goal: u64, want: u32) -> Result<Option<(u64, u32)>> {
        let geo = self.fs.geo.clone();
        let g0 = self.group_of(goal.clamp(u64::from(geo.first_data_block), geo.blocks_count - 1));
        let mut best: Option<(u64, u32)> = None;
        for step in 0..geo.group_count {
            let g = (g0 + step) % geo.group_count;
            let free = self.group(g)?.free_blocks();
            if free == 0 || best.is_some_and(|(_, l)| free <= l) {
                continue;
            }
            let view = self.alloc_view(g)?;
            let Some((s, len)) = first_fit_or_longest(&view, geo.blocks_in_group(g), want) else {
                continue;
            };
            let start = geo.group_first_block(g) + u64::from(s);
            if len >= want {
                return Ok(Some((start, want)));
            }
            if best.is_none_or(|(_, l)| len > l) {
                best = Some((start, len));
            }
        }
        Ok(best)
    }

    /// [`Txn::alloc_exact`], with the buddies of the groups told (an exact
    /// allocation goes around them).
    pub(crate) fn take_exact(&mut self, start: u64, len: u64) -> Result<bool> {
        let took = self.alloc_exact(start, len)?;
        if took {
            self.fs.mb_forget(start, len);
        }
        Ok(took)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use crate::fs::{Filesystem, OpenOptions};
    use crate::mkfs::{MkfsOptions, mkfs};

    fn fresh() -> Filesystem {
        let dev = MemDevice::new(vec![0; 16 << 20]);
        let opts = MkfsOptions {
            device_zeroed: true,
            ..MkfsOptions::default()
        };
        mkfs(&dev, &opts).unwrap();
        Filesystem::open(Box::new(MemDevice::new(dev.snapshot())), OpenOptions::default()).unwrap()
    }

    /// A held range is invisible to every allocation path while its
    /// transaction lasts (even with the group's buddy built before the
    /// hold), and free again for the next transaction.
    #[test]
    fn held_ranges_are_not_handed_out_until_the_transaction_ends() {
        let fs = fresh();
        let mut txn = Txn::begin(&fs).unwrap();
        let (s, n) = txn.find_free_run(0, 64).unwrap().unwrap();
        assert_eq!(n, 64);
        // Builds the buddy with the range free.
        assert!(txn.mb_alloc(s, 1, 1).unwrap().is_some());
        txn.hold_off(&[(s + 1, 63)]);
        let inside = |b: u64| (s + 1..s + 64).contains(&b);
        for _ in 0..8 {
            let (b, k) = txn.alloc_blocks(s + 1, 1).unwrap();
            assert!(!inside(b) && k == 1, "got held block {b}");
        }
        assert_eq!(txn.free_run_at(s + 1, 8).unwrap(), 0);
        assert!(!txn.take_exact(s + 1, 1).unwrap());
        let (f, _) = txn.find_free_run(s + 1, 64).unwrap().unwrap();
        assert!(!inside(f), "{f}");
        drop(txn);
        let mut txn = Txn::begin(&fs).unwrap();
        assert_eq!(txn.alloc_blocks(s + 1, 4).unwrap(), (s + 1, 4));
    }

    #[test]
    fn first_long_enough_run_else_the_longest() {
        // Bits set = used: 0b0101_0101 then free bytes.
        let mut map = vec![0x55u8, 0x00, 0x00, 0xFF];
        assert_eq!(first_fit_or_longest(&map, 32, 4), Some((7, 17)));
        assert_eq!(first_fit_or_longest(&map, 32, 20), Some((7, 17)));
        map[1] = 0x10;
        assert_eq!(first_fit_or_longest(&map, 32, 8), Some((13, 11)));
        assert_eq!(first_fit_or_longest(&[0xFF; 4], 32, 1), None);
    }
}
