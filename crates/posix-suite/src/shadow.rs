//! The exerciser's in-memory model of one file: its size and its bytes,
//! stored sparsely in 64 KiB chunks so that far-offset writes cost nothing.
//!
//! Invariant: every stored byte at or past `len` is zero, so growing the
//! file (truncate up, fallocate mode 0) only has to move `len`.

use std::collections::BTreeMap;

const CHUNK: u64 = 64 * 1024;

/// A sparse model of a file's contents.
#[derive(Debug, Clone, Default)]
pub struct Shadow {
    len: u64,
    chunks: BTreeMap<u64, Box<[u8]>>,
}

impl Shadow {
    /// The file size.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offsets of the stored 64 KiB chunks (everything else is zero).
    pub fn chunk_offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.keys().map(|k| k * CHUNK)
    }

    /// pwrite(2): stores `data` at `off`, growing the size if needed.
    pub fn write(&mut self, off: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let pos = off + done as u64;
            let (idx, within) = (pos / CHUNK, (pos % CHUNK) as usize);
            let n = (CHUNK as usize - within).min(data.len() - done);
            let chunk = self
                .chunks
                .entry(idx)
                .or_insert_with(|| vec![0; CHUNK as usize].into_boxed_slice());
            chunk[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        self.len = self.len.max(off + data.len() as u64);
    }

    /// Bytes `[off, off+len)` clipped to the size (what pread returns).
    pub fn read(&self, off: u64, len: u64) -> Vec<u8> {
        let end = (off + len).min(self.len);
        if off >= end {
            return Vec::new();
        }
        let mut out = vec![0u8; (end - off) as usize];
        for (&idx, chunk) in self.chunks.range(off / CHUNK..=(end - 1) / CHUNK) {
            let cs = idx * CHUNK;
            let (a, b) = (off.max(cs), end.min(cs + CHUNK));
            out[(a - off) as usize..(b - off) as usize].copy_from_slice(&chunk[(a - cs) as usize..(b - cs) as usize]);
        }
        out
    }

    /// Zeroes `[off, off+len)` (punch hole or zero range; size unchanged).
    pub fn zero(&mut self, off: u64, len: u64) {
        let end = off + len;
        let keys: Vec<u64> = self
            .chunks
            .range(off / CHUNK..end.div_ceil(CHUNK))
            .map(|(&k, _)| k)
            .collect();
        for idx in keys {
            let cs = idx * CHUNK;
            let (a, b) = (off.max(cs), end.min(cs + CHUNK));
            if a == cs && b == cs + CHUNK {
                self.chunks.remove(&idx);
            } else if let Some(c) = self.chunks.get_mut(&idx) {
                c[(a - cs) as usize..(b - cs) as usize].fill(0);
            }
        }
    }

    /// ftruncate(2): bytes past a smaller size are dropped (kept zero).
    pub fn set_len(&mut self, len: u64) {
        if len < self.len {
            self.zero(len, self.len - len);
        }
        self.len = len;
    }
}

#[cfg(test)]
mod tests {
    use super::Shadow;

    #[test]
    fn write_read_truncate_zero() {
        let mut s = Shadow::default();
        s.write(65530, &[1; 20]);
        assert_eq!(s.len(), 65550);
        assert_eq!(s.read(65528, 4), vec![0, 0, 1, 1]);
        s.set_len(65535);
        s.set_len(70000);
        let r = s.read(65530, 10);
        assert_eq!(r, vec![1, 1, 1, 1, 1, 0, 0, 0, 0, 0]);
        s.write(0, &[7; 200_000]);
        s.zero(10, 150_000);
        assert_eq!(s.read(0, 12), vec![7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 0, 0]);
        assert_eq!(s.read(150_009, 2), vec![0, 7]);
        assert!(s.read(300_000, 5).is_empty());
    }
}
