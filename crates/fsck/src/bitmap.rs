//! A plain bit set over block or inode numbers: one bit each, the only
//! per-block memory the checker keeps (a 100 GiB image at 4 KiB blocks has
//! 26M blocks, 3.3 MB per bitmap).

/// A fixed-size bit set.
#[derive(Debug, Clone)]
pub struct Bitmap {
    words: Vec<u64>,
    len: u64,
}

impl Bitmap {
    /// `len` bits, all clear.
    pub fn new(len: u64) -> Self {
        let n = usize::try_from(len.div_ceil(64)).unwrap_or(usize::MAX);
        Self { words: vec![0; n], len }
    }
    /// Number of bits.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True when it has no bits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bit `i`; false past the end.
    pub fn get(&self, i: u64) -> bool {
        i < self.len && self.words[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
    /// Sets bit `i` and returns its old value; ignores bits past the end.
    pub fn set(&mut self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let w = &mut self.words[(i / 64) as usize];
        let old = *w & (1 << (i % 64)) != 0;
        *w |= 1 << (i % 64);
        old
    }
    /// Clears bit `i`; ignores bits past the end.
    pub fn clear(&mut self, i: u64) {
        if i < self.len {
            self.words[(i / 64) as usize] &= !(1 << (i % 64));
        }
    }
    /// The first clear bit in `[start, end)`, skipping full words.
    pub fn next_clear(&self, start: u64, end: u64) -> Option<u64> {
        let end = end.min(self.len);
        let mut i = start;
        while i < end {
            if i.is_multiple_of(64) && self.words[(i / 64) as usize] == u64::MAX {
                i += 64;
                continue;
            }
            if !self.get(i) {
                return Some(i);
            }
            i += 1;
        }
        None
    }
    /// Number of set bits in `[start, end)`.
    pub fn count_range(&self, start: u64, end: u64) -> u64 {
        (start..end.min(self.len)).filter(|&i| self.get(i)).count() as u64
    }
    /// True when any bit is set.
    pub fn any(&self) -> bool {
        self.words.iter().any(|&w| w != 0)
    }
    /// Indexes of set bits, ascending.
    pub fn iter_set(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().enumerate().flat_map(move |(wi, &w)| {
            (0..64u64)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| wi as u64 * 64 + b)
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
}
