//! Inode-order listing from a snapshot: every entry of the directory,
//! taken in one pass over its blocks when a stream reads from position 0,
//! sorted by inode number (`.` and `..` first). Listing then `stat`ing in
//! this order reads the inode table front to back instead of at random
//! (seed 003), with no change to the format.
//!
//! The snapshot is immutable, so a position is simply the index of the
//! entry to resume at; the next read from 0 (`rewinddir`) takes a new one.
//! Names sit in one buffer, 12 bytes of index per entry besides. A
//! directory of more than the limit's entries is not snapshotted: the
//! pass stops at the limit and the stream falls back to hash order.

use super::{fill, scratch};
use crate::dir::DirEntry;
use crate::error::{Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// A sorted, immutable copy of a directory's entries.
#[derive(Default)]
pub(super) struct Snapshot {
    items: Vec<Item>,
    names: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
struct Item {
    ino: u32,
    off: u32,
    len: u8,
    ft: u8,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("entries", &self.items.len())
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    fn name(&self, i: &Item) -> &[u8] {
        let off = i.off as usize;
        &self.names[off..off + usize::from(i.len)]
    }

    fn push(&mut self, ino: u32, ft: u8, name: &[u8]) {
        let len = name.len().min(255);
        self.items.push(Item {
            ino,
            off: u32::try_from(self.names.len()).unwrap_or(u32::MAX),
            len: u8::try_from(len).unwrap_or(u8::MAX),
            ft,
        });
        self.names.extend_from_slice(&name[..len]);
    }

    /// Sorts `.`, `..`, then by inode and name; drops repeats (a leaf split
    /// committed during the pass can show an entry in its old and its new
    /// block, both read).
    fn sort(&mut self) {
        let mut items = std::mem::take(&mut self.items);
        let rank = |s: &Self, i: &Item| match s.name(i) {
            b"." => 0,
            b".." => 1,
            _ => 2,
        };
        items.sort_unstable_by(|a, b| {
            (rank(self, a), a.ino)
                .cmp(&(rank(self, b), b.ino))
                .then_with(|| self.name(a).cmp(self.name(b)))
        });
        items.dedup_by(|a, b| a.ino == b.ino && self.name(a) == self.name(b));
        self.items = items;
    }

    /// Emits entries from index `pos`; entry `i` is followed by position `i + 1`.
    pub(super) fn read_from(&self, pos: u64, mut f: impl FnMut(&DirEntry, u64) -> Result<bool>) -> Result<()> {
        let first = usize::try_from(pos).unwrap_or(usize::MAX);
        let mut entry = scratch();
        for (i, item) in self.items.iter().enumerate().skip(first) {
            let next = i as u64 + 1;
            if !f(fill(&mut entry, item.ino, item.ft, self.name(item)), next)? {
                break;
            }
        }
        Ok(())
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }
}

impl Filesystem {
    /// A sorted snapshot of `dir`, or `None` when it has more than `limit`
    /// entries. Reads every block of `dir` once (stopping at the limit);
    /// holds at most `limit` entries.
    pub(super) fn take_snapshot(&self, dir: &Inode, limit: usize) -> Result<Option<Snapshot>> {
        let mut snap = Snapshot::default();
        let mut over = false;
        if dir.has_inline_data() {
            self.for_each_inline_dir_entry(dir, |e| {
                over = snap.len() >= limit;
                if !over {
                    snap.push(e.ino, e.file_type.map_or(0, |t| t.dirent_code()), &e.name);
                }
                Ok(!over)
            })?;
        } else {
            over = !self.snapshot_blocks(dir, limit, &mut snap)?;
        }
        if over {
            return Ok(None);
        }
        snap.sort();
        Ok(Some(snap))
    }

    /// Adds the entries of every block of `dir`; false past `limit`.
    fn snapshot_blocks(&self, dir: &Inode, limit: usize, snap: &mut Snapshot) -> Result<bool> {
        for run in self.all_runs(dir)? {
            for i in 0..run.len {
                let block = run.physical + i;
                let buf = self.meta_block(block, dir.ino)?;
                let at = Location::Block { block, inode: dir.ino };
                let mut over = false;
                self.scan_dir_block(dir, &buf, run.logical + i, at, |e| {
                    over = snap.len() >= limit;
                    if !over {
                        snap.push(e.inode, e.file_type, e.name);
                    }
                    over
                })?;
                if over {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}
