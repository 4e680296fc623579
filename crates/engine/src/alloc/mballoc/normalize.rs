//! Request normalization (`ext4_mb_normalize_request`, seed 001 §2.3):
//! a growing file's request is widened to a size class of the file, so
//! the buddy search looks for room the file will fill rather than for
//! the few blocks one write needs, and the free-extent map is not cut
//! into odd pieces. Classes up to 1 MiB cover the file from its start;
//! past that, 2, 4 or 8 MiB aligned on their own size around the
//! request (the kernel's `NRL_CHECK_SIZE` chain, which for 4 KiB blocks
//! always ends at 8 MiB and for 1 KiB blocks at 2 MiB).

/// The logical range `(start, len)` to look for when logical blocks
/// `lblk..lblk + len` of a file of `size` bytes are requested, on a file
/// system of `1 << bits`-byte blocks; `left` is the file's last mapped
/// block before `lblk` and `right` its first mapped block after, which
/// the range never covers.
pub(crate) fn normalize(
    lblk: u64,
    len: u32,
    size: u64,
    bits: u32,
    left: Option<u64>,
    right: Option<u64>,
) -> (u64, u32) {
    let end_bytes = ((lblk + u64::from(len)) << bits).max(size);
    let (start_bytes, class) = size_class(lblk, end_bytes, bits);
    let mut start = start_bytes >> bits;
    let mut end = start + (class >> bits).max(1);
    if let Some(l) = left.filter(|&l| l >= start) {
        start = l + 1;
    }
    if let Some(r) = right.filter(|&r| r < end) {
        end = r;
    }
    // The request itself always fits: a class never ends before it, and
    // the neighbours lie outside it.
    start = start.min(lblk);
    end = end.max(lblk + u64::from(len));
    let len = (end - start).min(u64::from(MAX_LEN));
    (start, len as u32)
}

/// Longest normalized request: one initialized extent.
pub(crate) const MAX_LEN: u32 = 32768;

/// (start in bytes, class in bytes) for a file that will end at `end`
/// bytes with a request at block `lblk`.
fn size_class(lblk: u64, end: u64, bits: u32) -> (u64, u64) {
    const K: u64 = 1024;
    const M: u64 = 1024 * K;
    for class in [16 * K, 32 * K, 64 * K, 128 * K, 256 * K, 512 * K, M] {
        if end <= class {
            return (0, class);
        }
    }
    // `max` in the kernel: two blocks, compared with chunk sizes in KiB.
    let max = 2u64 << bits;
    let aligned = |class: u64| ((lblk << bits) / class * class, class);
    if end <= 4 * M || max <= 2 * K {
        return aligned(2 * M);
    }
    if end <= 8 * M || max <= 4 * K {
        return aligned(4 * M);
    }
    aligned(8 * M)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_files_get_their_size_class_from_the_start() {
        // 4 KiB blocks: a 12 KiB file asking for block 2 gets 16 KiB.
        assert_eq!(normalize(2, 1, 8192, 12, Some(1), None), (2, 2));
        assert_eq!(normalize(0, 3, 0, 12, None, None), (0, 4));
        assert_eq!(
            normalize(20, 1, 80 << 10, 12, Some(19), None),
            (20, 12),
            "128 KiB class"
        );
        assert_eq!(
            normalize(100, 1, 400 << 10, 12, Some(99), None),
            (100, 28),
            "512 KiB class"
        );
    }

    #[test]
    fn large_files_get_aligned_windows_of_2_4_or_8_mib() {
        // 3 MiB file, 4 KiB blocks: a 2 MiB window around block 600.
        assert_eq!(normalize(600, 1, 3 << 20, 12, Some(599), None), (600, 424));
        // 6 MiB: 4 MiB windows; 100 MiB: 8 MiB.
        assert_eq!(normalize(1500, 1, 6 << 20, 12, None, None), (1024, 1024));
        assert_eq!(normalize(5000, 1, 100 << 20, 12, None, None), (4096, 2048));
        // 1 KiB blocks always stop at 2 MiB.
        assert_eq!(normalize(5000, 1, 100 << 20, 10, None, None), (4096, 2048));
    }

    #[test]
    fn the_range_never_covers_mapped_neighbours_and_always_covers_the_request() {
        let (s, l) = normalize(5000, 10, 100 << 20, 12, Some(5003), Some(5005));
        assert!(s <= 5000 && s + u64::from(l) >= 5010, "{s}+{l}");
        let (s, l) = normalize(4100, 4, 100 << 20, 12, Some(4099), Some(4200));
        assert_eq!((s, l), (4100, 100));
    }
}
