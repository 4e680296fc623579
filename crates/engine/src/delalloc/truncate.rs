//! Truncating a file with held pages: pages wholly past the new size are
//! dropped without ever being allocated (a rewrite that truncates to 0
//! costs no blocks), the page holding the new end is cut there, and what
//! remains is written back so that the transaction that truncates sees the
//! whole file on disk.

use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::fs::Filesystem;

impl Filesystem {
    /// Prepares `ino`'s held pages for a truncate to `size`; the caller
    /// holds the inode lock.
    ///
    /// # Errors
    /// Writing back the pages below `size`.
    pub(crate) fn truncate_held(&self, ino: u32, size: u64) -> Result<()> {
        if !self.delalloc.holds(ino) {
            return Ok(());
        }
        let bs = u64::from(self.geo.block_size);
        {
            let d = &self.delalloc;
            let mut st = d.state.lock();
            let Some(file) = st.files.get_mut(&ino) else {
                return Ok(());
            };
            let dropped: usize = file.pages.split_off(&size.div_ceil(bs)).values().map(|p| p.len()).sum();
            if !size.is_multiple_of(bs)
                && let Some(page) = file.pages.get_mut(&(size / bs))
            {
                page[(size % bs) as usize..].fill(0);
            }
            file.size = file.size.min(size);
            let want = file.settle(file.shape, self.geo.block_size);
            let give_back = file.reserved.saturating_sub(want);
            file.reserved -= give_back;
            let empty = file.pages.is_empty();
            st.reserved -= give_back;
            st.bytes -= dropped;
            if empty {
                let f = st.files.remove(&ino).expect("present");
                st.release(&f);
            }
            d.files.store(st.files.len(), Ordering::Release);
        }
        self.flush_locked(ino)
    }
}
