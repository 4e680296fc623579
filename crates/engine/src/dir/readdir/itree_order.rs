//! Inode order from a directory's itree ([`crate::dir::itree`]): the
//! order seed 003 built the tree for. A position is derived from the key
//! of the entry to resume after: keys are `inode << 32 | hash` with bit 0
//! of the hash clear, so `key / 2 + 1` is below 2^63 and above the
//! positions of `.` (1) and `..` (2). Keys do not move when the tree
//! splits or merges, so positions stay valid while the directory changes.

use ext4kit_format::itree::LeafEntry;

use super::{fill, scratch};
use crate::dir::DirEntry;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// The position after the entry with `key`.
fn after(key: u64) -> u64 {
    key / 2 + 1
}

impl Filesystem {
    /// Lists `dir` (which has an itree) in inode order from `pos`.
    pub(super) fn itree_from(
        &self,
        dir: &Inode,
        pos: u64,
        mut f: impl FnMut(&DirEntry, u64) -> Result<bool>,
    ) -> Result<()> {
        let mut entry = scratch();
        if pos < 2 {
            let dots = self.dots(dir)?;
            for (i, (ino, name)) in dots.iter().enumerate().skip(pos as usize) {
                if !f(fill(&mut entry, *ino, 2, name), i as u64 + 1)? {
                    return Ok(());
                }
            }
        }
        // After the entry with key k the position is k / 2 + 1: keys are
        // even, so the next one is at least k + 2, twice the position.
        let from = if pos <= 2 { 0 } else { pos.saturating_mul(2) };
        self.itree_walk(dir, from, |e: &LeafEntry| {
            f(fill(&mut entry, e.ino, e.file_type, &e.name), after(e.key()))
        })
    }

    /// "." and ".." of an indexed directory, from its htree root.
    fn dots(&self, dir: &Inode) -> Result<[(u32, &'static [u8]); 2]> {
        let block = self.dir_root_block(dir)?;
        let buf = self.meta_block(block, dir.ino)?;
        let at = Location::Block { block, inode: dir.ino };
        let mut parent = None;
        for e in self.dir_block_entries(dir, &buf, 0, at)? {
            if e.name == b".." {
                parent = Some(e.ino);
            }
        }
        let parent = parent.ok_or_else(|| Error::inconsistent(at, "htree root without \"..\""))?;
        Ok([(dir.ino, b"."), (parent, b"..")])
    }
}
