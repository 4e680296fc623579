//! Blocks freed by transactions the journal has not committed yet (the
//! kernel's `ext4_free_data` list, released in `ext4_process_freed_data`
//! once the freeing transaction commits). They read as free in the bitmaps
//! but must not be handed out: new file data is written in place at once,
//! and a crash before the commit would replay the old owner back onto
//! those blocks — one file would then hold another's data. After the
//! commit, replay can no longer give them back to their old owner, and the
//! journal's revoke records keep old logged copies of freed metadata off
//! them.

use std::collections::BTreeMap;

use parking_lot::Mutex;

/// Freed ranges, first block → one past the last.
#[derive(Debug, Default)]
pub(crate) struct BusyBlocks(Mutex<BTreeMap<u64, u64>>);

impl BusyBlocks {
    /// Records `len` blocks from `start` as freed and not yet committed.
    pub(crate) fn add(&self, start: u64, len: u64) {
        let mut m = self.0.lock();
        let end = m.entry(start).or_insert(start);
        *end = (*end).max(start.saturating_add(len));
    }

    /// Everything freed so far is committed.
    pub(crate) fn clear(&self) {
        self.0.lock().clear();
    }

    /// True when no freed block waits for a commit.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }

    /// When `block` waits for a commit, the first block past its range.
    pub(crate) fn end_of(&self, block: u64) -> Option<u64> {
        let m = self.0.lock();
        m.range(..=block)
            .next_back()
            .map(|(_, &end)| end)
            .filter(|&end| end > block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_answer_for_their_blocks_only() {
        let b = BusyBlocks::default();
        b.add(100, 10);
        b.add(200, 1);
        assert_eq!(b.end_of(99), None);
        assert_eq!(b.end_of(100), Some(110));
        assert_eq!(b.end_of(109), Some(110));
        assert_eq!(b.end_of(110), None);
        assert_eq!(b.end_of(200), Some(201));
        b.clear();
        assert!(b.is_empty() && b.end_of(100).is_none());
    }
}
