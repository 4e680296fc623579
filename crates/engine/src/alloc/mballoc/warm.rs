//! Building buddies ahead of need (seed 001 §2.5: "a thread started at
//! mount time to scan the groups and do buddy initialization
//! asynchronously"): the group lists of `mb_optimize_scan` only hold
//! groups whose buddy is built, so until then a request falls back to
//! the linear passes. [`Filesystem::warm_buddies`] builds every missing
//! buddy, one group per transaction so a writer waits for one group's
//! bitmap at most; the mount runs it on a thread of its own.

use crate::error::Result;
use crate::fs::Filesystem;
use crate::txn::Txn;

use super::super::BlockAllocator;

impl Filesystem {
    /// Builds the buddy of every group with free blocks that has none,
    /// until `stop` says to stop; returns how many it built. Does nothing
    /// on a read-only file system or under the ext3 allocator.
    ///
    /// # Errors
    /// A bitmap that cannot be read or fails its checksum.
    pub fn warm_buddies(&self, stop: &dyn Fn() -> bool) -> Result<u32> {
        if self.read_only_reason.is_some() || self.opts.alloc.blocks != BlockAllocator::Mballoc {
            return Ok(0);
        }
        let mut built = 0;
        for g in 0..self.geo.group_count {
            if stop() {
                break;
            }
            if self.mb.lock().cache.get(g).is_some() {
                continue;
            }
            let mut txn = Txn::begin(self)?;
            txn.mb_sync();
            if txn.group(g)?.free_blocks() == 0 {
                continue;
            }
            txn.with_buddy(g, |_| ())?;
            built += 1;
        }
        Ok(built)
    }
}
