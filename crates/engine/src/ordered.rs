//! `data=ordered` with the data written outside the writer lock. A
//! [`Filesystem::write`] maps and allocates under the writer lock, publishes
//! the metadata to the write-back cache, releases the writer lock and only
//! then copies the file data to the device, so writers of different files
//! overlap on the device. What keeps this safe:
//!
//! - The metadata is only in memory when the writer lock is released: the
//!   write-back (`Filesystem::write_back`) takes `data_in_flight` exclusive,
//!   and a [`PendingData`] holds it shared from before its metadata is
//!   published until its data is written. Metadata pointing at a new block
//!   thus never reaches the device before the block's data.
//! - Readers of the file take its inode lock shared, the writer holds it
//!   exclusive throughout ([`crate::inode_locks`]): a reader never reads a
//!   newly mapped block before its data is written (which would expose
//!   whatever the block held before).
//! - A transaction that reads, frees or writes data blocks of a file whose
//!   inode lock it does not hold (a batch, an unlink that frees a body)
//!   first waits for all data in flight (`Txn::quiesce_data`), so no
//!   late data write lands on a block after it was freed or reused.
//!
//! If writing the data fails, the metadata is already committed: the
//! blocks hold what the device left there and the error is returned, as
//! the kernel reports a failed write-back of `data=ordered` pages.
//!
//! [`Filesystem::write`]: crate::Filesystem::write

use parking_lot::RwLockReadGuard;

use crate::error::Result;
use crate::fs::Filesystem;

/// File data committed transactions still have to write, and the shared
/// hold on `data_in_flight` that keeps the write-back waiting for it.
#[must_use = "PendingData holds the write-back off until written"]
pub(crate) struct PendingData<'a> {
    fs: &'a Filesystem,
    data: Vec<(u64, Vec<u8>)>,
    _in_flight: Option<RwLockReadGuard<'a, ()>>,
}

impl<'a> PendingData<'a> {
    /// `data` to write, holding the write-back off from now on; call before
    /// the metadata pointing at it is published.
    pub(crate) fn new(fs: &'a Filesystem, data: Vec<(u64, Vec<u8>)>) -> Self {
        let guard = (!data.is_empty()).then(|| fs.data_in_flight.read());
        Self {
            fs,
            data,
            _in_flight: guard,
        }
    }

    /// Nothing left to write.
    pub(crate) fn none(fs: &'a Filesystem) -> Self {
        Self::new(fs, Vec::new())
    }

    /// Writes the data (runs of adjacent pieces in one request, a later
    /// piece winning over an earlier one), releases the write-back, and
    /// writes back if the cache has grown past its budget meanwhile.
    ///
    /// # Errors
    /// [`crate::Error::Io`] when the device cannot write.
    pub(crate) fn write(self) -> Result<()> {
        let Self { fs, data, _in_flight } = self;
        let r = crate::txn::write_runs(fs, data.iter().map(|(off, b)| (*off, b.as_slice())));
        drop(_in_flight);
        r?;
        fs.write_back_if_full()
    }
}
