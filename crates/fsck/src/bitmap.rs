//! A plain bit set over block or inode numbers: one bit each, the only
//! per-block memory the checker keeps (a 100 GiB image at 4 KiB blocks has
//! 26M blocks, 3.3 MB per bitmap).

/// A fixed-size bit set. A clustered one ([`Bitmap::clustered`]) takes
/// block numbers but keeps one bit per cluster of `2^shift` blocks, as a
/// bigalloc block bitmap does (`bigalloc.rst`): every block of a cluster
/// reads and sets the same bit.
#[derive(Debug, Clone)]
pub struct Bitmap {
    words: Vec<u64>,
    len: u64,
    shift: u32,
}

impl Bitmap {
    /// `len` bits, all clear.
    pub fn new(len: u64) -> Self {
        Self::clustered(len, 0)
    }
    /// Indexes `0..len`, one bit per `2^shift` of them, all clear.
    pub fn clustered(len: u64, shift: u32) -> Self {
        let shift = shift.min(63);
        let bits = len.div_ceil(1 << shift);
        let n = usize::try_from(bits.div_ceil(64)).unwrap_or(usize::MAX);
        Self {
            words: vec![0; n],
            len,
            shift,
        }
    }
    /// Number of indexes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True when it has no bits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn bit(&self, c: u64) -> bool {
        self.words[(c / 64) as usize] & (1 << (c % 64)) != 0
    }
    fn bits(&self) -> u64 {
        self.len.div_ceil(1 << self.shift)
    }
    /// Bit `i`; false past the end.
    pub fn get(&self, i: u64) -> bool {
        i < self.len && self.bit(i >> self.shift)
    }
    /// Sets bit `i` and returns its old value; ignores bits past the end.
    pub fn set(&mut self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let c = i >> self.shift;
        let old = self.bit(c);
        self.words[(c / 64) as usize] |= 1 << (c % 64);
        old
    }
    /// Clears bit `i`; ignores bits past the end.
    pub fn clear(&mut self, i: u64) {
        if i < self.len {
            let c = i >> self.shift;
            self.words[(c / 64) as usize] &= !(1 << (c % 64));
        }
    }
    /// The first index in `[start, end)` whose bit is clear, skipping full
    /// words; in a clustered map, the start of the first clear cluster
    /// (or `start` itself when its cluster is clear).
    pub fn next_clear(&self, start: u64, end: u64) -> Option<u64> {
        let end = end.min(self.len);
        if start >= end {
            return None;
        }
        let last = (end - 1) >> self.shift;
        let mut c = start >> self.shift;
        while c <= last {
            if c.is_multiple_of(64) && self.words[(c / 64) as usize] == u64::MAX {
                c += 64;
                continue;
            }
            if !self.bit(c) {
                return Some((c << self.shift).max(start));
            }
            c += 1;
        }
        None
    }
    /// Number of set bits standing for indexes in `[start, end)`.
    pub fn count_range(&self, start: u64, end: u64) -> u64 {
        let end = end.min(self.len);
        if start >= end {
            return 0;
        }
        let (a, b) = (start >> self.shift, ((end - 1) >> self.shift) + 1);
        (a..b).filter(|&c| self.bit(c)).count() as u64
    }
    /// True when any bit is set.
    pub fn any(&self) -> bool {
        self.words.iter().any(|&w| w != 0)
    }
    /// Indexes of set bits, ascending (the first index of each set cluster).
    pub fn iter_set(&self) -> impl Iterator<Item = u64> + '_ {
        let (bits, shift) = (self.bits(), self.shift);
        self.words.iter().enumerate().flat_map(move |(wi, &w)| {
            (0..64u64)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| wi as u64 * 64 + b)
                .filter(move |&c| c < bits)
                .map(move |c| c << shift)
        })
    }
}

/// Bit `i` of an on-disk bitmap block (little-endian bit order, as ext2's
/// `ext2fs_test_bit`).
pub fn disk_bit(buf: &[u8], i: usize) -> bool {
    buf.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_count() {
        let mut b = Bitmap::new(130);
        assert!(!b.set(3));
        assert!(b.set(3));
        b.set(129);
        b.set(500);
        assert!(b.get(129) && !b.get(500));
        assert_eq!(b.count_range(0, 200), 2);
        assert_eq!(b.iter_set().collect::<Vec<_>>(), vec![3, 129]);
    }

    #[test]
    fn clustered_blocks_share_a_bit() {
        let mut b = Bitmap::clustered(100, 4);
        assert!(!b.set(17));
        assert!(b.set(31) && b.get(16) && !b.get(32));
        assert_eq!(b.count_range(0, 100), 1);
        assert_eq!(b.count_range(20, 21), 1);
        assert_eq!(b.next_clear(16, 100), Some(32));
        assert_eq!(b.next_clear(3, 100), Some(3));
        b.set(99);
        assert_eq!(b.iter_set().collect::<Vec<_>>(), vec![16, 96]);
        assert_eq!(b.next_clear(96, 100), None);
    }
}
