//! The set of blocks a tune changes, built in memory before anything is
//! written: each block is read once from the device (the state at open),
//! edited in place, and kept only if its bytes changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;

/// Blocks read for editing: (contents at open, contents now).
pub(crate) struct Rewrite<'a> {
    pub(crate) fs: &'a Filesystem,
    blocks: BTreeMap<u64, (Arc<[u8]>, Vec<u8>)>,
}

impl<'a> Rewrite<'a> {
    pub(crate) fn new(fs: &'a Filesystem) -> Self {
        Self {
            fs,
            blocks: BTreeMap::new(),
        }
    }

    /// Block `b` as edited so far, read from the device the first time.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a block outside the file system; I/O errors.
    pub(crate) fn block(&mut self, b: u64) -> Result<&mut Vec<u8>> {
        if !self.blocks.contains_key(&b) {
            if b >= self.fs.geo.blocks_count {
                return Err(Error::inconsistent(
                    Location::Block { block: b, inode: 0 },
                    "block lies past the end of the file system",
                ));
            }
            let mut buf = vec![0u8; self.fs.geo.block_size as usize];
            self.fs.read_bytes(b << self.fs.geo.block_size_log2, &mut buf)?;
            self.blocks.insert(b, (Arc::from(&buf[..]), buf));
        }
        Ok(&mut self.blocks.get_mut(&b).expect("inserted above").1)
    }

    /// Block `b` as it was at open (read-only use).
    pub(crate) fn original(&mut self, b: u64) -> Result<Arc<[u8]>> {
        self.block(b)?;
        Ok(self.blocks[&b].0.clone())
    }

    /// The blocks whose contents differ from what was read.
    pub(crate) fn changed(self) -> BTreeMap<u64, Arc<[u8]>> {
        self.blocks
            .into_iter()
            .filter(|(_, (old, new))| old[..] != new[..])
            .map(|(b, (_, new))| (b, Arc::from(new)))
            .collect()
    }
}
