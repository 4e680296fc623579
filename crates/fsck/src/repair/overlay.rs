//! The repair's scratch copy of the image: every write a fix makes lands in
//! memory, page by page, and every read sees it. Nothing reaches the image
//! until [`super::commit`] writes the whole repair out in a safe order, so
//! a fix that later turns out to be wrong, a cancelled run or a crash in
//! the middle of the checking leaves the image as it was.
//!
//! Memory is one page per page changed: a repair rewrites metadata only
//! (inode tables, directory and mapping blocks, bitmaps, descriptors).

use std::collections::BTreeMap;
use std::io;
use std::sync::Mutex;

use ext4kit_engine::BlockDevice;

/// Unit of the copy: any block size down to 1 KiB lies within one page or
/// covers several whole ones.
pub const PAGE: u64 = 4096;

/// A device whose writes stay in memory over a base device read as is.
pub struct Overlay<'a> {
    base: &'a dyn BlockDevice,
    pages: Mutex<BTreeMap<u64, Vec<u8>>>,
}

impl<'a> Overlay<'a> {
    /// An empty overlay on `base`.
    pub fn new(base: &'a dyn BlockDevice) -> Self {
        Self {
            base,
            pages: Mutex::new(BTreeMap::new()),
        }
    }

    /// The device underneath.
    pub fn base(&self) -> &'a dyn BlockDevice {
        self.base
    }

    /// Changed pages, by page number, in order.
    pub fn pages(&self) -> BTreeMap<u64, Vec<u8>> {
        self.lock().clone()
    }

    /// How many pages differ from the base.
    pub fn dirty_pages(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Vec<u8>>> {
        self.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Length of page `p` (the last page of an odd-sized device is short).
    fn page_len(&self, p: u64) -> usize {
        (self.base.len() - p * PAGE).min(PAGE) as usize
    }

    fn check(&self, offset: u64, len: usize) -> io::Result<()> {
        if offset.checked_add(len as u64).is_none_or(|end| end > self.base.len()) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("access of {len} bytes at {offset} is past the end of the image"),
            ));
        }
        Ok(())
    }
}

impl BlockDevice for Overlay<'_> {
    fn len(&self) -> u64 {
        self.base.len()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check(offset, buf.len())?;
        self.base.read_at(offset, buf)?;
        let pages = self.lock();
        let end = offset + buf.len() as u64;
        for (&p, data) in pages.range(offset / PAGE..end.div_ceil(PAGE)) {
            let (ps, pe) = (p * PAGE, p * PAGE + data.len() as u64);
            let (s, e) = (ps.max(offset), pe.min(end));
            if s < e {
                buf[(s - offset) as usize..(e - offset) as usize]
                    .copy_from_slice(&data[(s - ps) as usize..(e - ps) as usize]);
            }
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.check(offset, buf.len())?;
        let end = offset + buf.len() as u64;
        for p in offset / PAGE..end.div_ceil(PAGE) {
            let ps = p * PAGE;
            let mut page = match self.lock().get(&p) {
                Some(d) => d.clone(),
                None => {
                    let mut d = vec![0u8; self.page_len(p)];
                    self.base.read_at(ps, &mut d)?;
                    d
                }
            };
            let (s, e) = (ps.max(offset), (ps + page.len() as u64).min(end));
            page[(s - ps) as usize..(e - ps) as usize]
                .copy_from_slice(&buf[(s - offset) as usize..(e - offset) as usize]);
            self.lock().insert(p, page);
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn read_only(&self) -> bool {
        false
    }

    fn name(&self) -> String {
        self.base.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ext4kit_engine::device::MemDevice;

    #[test]
    fn writes_stay_in_memory_and_reads_see_them() {
        let base = MemDevice::new(vec![7u8; 3 * PAGE as usize + 100]);
        let o = Overlay::new(&base);
        o.write_at(PAGE - 2, &[1, 2, 3, 4]).unwrap();
        o.write_at(3 * PAGE + 98, &[9, 9]).unwrap();
        let mut b = vec![0u8; 8];
        o.read_at(PAGE - 4, &mut b).unwrap();
        assert_eq!(b, [7, 7, 1, 2, 3, 4, 7, 7]);
        let mut tail = [0u8; 2];
        o.read_at(3 * PAGE + 98, &mut tail).unwrap();
        assert_eq!(tail, [9, 9]);
        base.read_at(PAGE - 4, &mut b).unwrap();
        assert_eq!(b, [7; 8], "the base is untouched");
        assert_eq!(o.dirty_pages(), 3);
        assert!(o.write_at(3 * PAGE + 99, &[1, 2]).is_err(), "past the end");
    }
}
