//! Hashed directory index (htree) lookups. Pending: wired to the format
//! crate's `htree`/`hash` modules.

use ext4kit_format::inode::flags;

use crate::error::{Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

impl Filesystem {
    /// True when `buf` (logical block `logical` of `dir`) is an htree index block.
    pub(crate) fn is_dx_block(&self, dir: &Inode, buf: &[u8], logical: u64) -> bool {
        if !dir.raw.has_flag(flags::INDEX) {
            return false;
        }
        if logical == 0 {
            return true;
        }
        let inode = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let rec = ext4kit_format::dir_entry::rec_len_from_disk(
            u16::from_le_bytes([buf[4], buf[5]]),
            buf.len(),
        );
        inode == 0 && rec == buf.len()
    }

    pub(crate) fn verify_dx_block(&self, _dir: &Inode, _buf: &[u8], _at: Location) -> Result<()> {
        Ok(())
    }

    /// `Some(result)` when `dir` is indexed and the index answered.
    pub(crate) fn htree_lookup(&self, _dir: &Inode, _name: &[u8]) -> Result<Option<Option<u32>>> {
        Ok(None)
    }
}
