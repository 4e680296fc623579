//! Where moved blocks go: free blocks below the new end, taken in order
//! from the start of the file system as resize2fs's `get_new_block`
//! takes them, skipping every block the old file system still reads
//! (its used blocks, and the tables of the groups being cut, which stay
//! live until the switch).

use crate::error::{Error, Result};
use crate::mkfs::layout::UsedMap;

/// Free blocks below the new end, handed out in runs.
pub(crate) struct Dest {
    busy: UsedMap,
    cursor: u64,
    end: u64,
    /// Runs handed out, in order.
    pub(crate) taken: Vec<(u64, u64)>,
}

impl Dest {
    /// `busy`: the old file system's used blocks plus the cut groups'
    /// tables; `end`: the new block count.
    pub(crate) fn new(busy: UsedMap, first: u64, end: u64) -> Self {
        Self {
            busy,
            cursor: first,
            end,
            taken: Vec::new(),
        }
    }

    /// Up to `n` free blocks in a row: (start, length).
    ///
    /// # Errors
    /// [`Error::NoSpace`] when no free block is left below the new end.
    pub(crate) fn take(&mut self, n: u64) -> Result<(u64, u64)> {
        while self.cursor < self.end && self.busy.is_used(self.cursor) {
            self.cursor += 1;
        }
        if self.cursor >= self.end {
            return Err(Error::NoSpace);
        }
        let len = self.busy.free_run(self.cursor, n.min(self.end - self.cursor));
        let start = self.cursor;
        self.busy.mark(start, len);
        self.cursor += len;
        match self.taken.last_mut() {
            Some(last) if last.0 + last.1 == start => last.1 += len,
            _ => self.taken.push((start, len)),
        }
        Ok((start, len))
    }
}
