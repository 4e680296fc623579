//! Reading a quota file whole and writing back the blocks a transaction
//! changed.

use std::collections::BTreeMap;

use ext4kit_format::quota::{self, Info, MAX_QBLOCKS, QBLK, QuotaType};

use super::QuotaFile;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::txn::Txn;

impl Filesystem {
    /// The `t` quota file, read and decoded; `None` when there is none.
    pub(crate) fn read_quota_file(&self, t: QuotaType) -> Result<Option<QuotaFile>> {
        let ino = self.quota_ino(t);
        if ino == 0 {
            return Ok(None);
        }
        let inode = self.inode_on_disk(ino)?;
        let image = self.read_all_unlocked(&inode, u64::from(MAX_QBLOCKS) * QBLK as u64)?;
        let bad = |e| Error::format(Location::Inode(ino), e);
        let info = Info::parse(image.get(..QBLK).unwrap_or(&image), t).map_err(bad)?;
        let read = |q: u32| {
            image
                .get(q as usize * QBLK..(q as usize + 1) * QBLK)
                .map(<[u8]>::to_vec)
        };
        let found = quota::read_entries(&info, read).map_err(bad)?;
        let dquots: BTreeMap<_, _> = found.into_iter().map(|l| (l.dquot.id, l.dquot)).collect();
        Ok(Some(QuotaFile {
            ino,
            info,
            dquots,
            image,
        }))
    }
}

impl Txn<'_> {
    /// Writes `f` (whose entries changed) into its inode: blocks already
    /// mapped through this transaction's copies (journaled), new blocks at
    /// the end through the file's ordinary write path; `i_size` grows to
    /// the new length.
    pub(crate) fn write_quota_file(&mut self, f: &mut QuotaFile) -> Result<()> {
        let new = quota::build(&f.info, &f.dquots);
        let bs = self.fs.geo.block_size as usize;
        let mut inode = self.inode(f.ino)?;
        let nblocks = new.len().div_ceil(bs) as u64;
        let runs = self.runs_in(&inode, 0, nblocks)?;
        let mut tail = None;
        for l in 0..nblocks {
            let lo = l as usize * bs;
            let piece = &new[lo..(lo + bs).min(new.len())];
            let old = f.image.get(lo..(lo + bs).min(f.image.len()));
            let hit = runs
                .iter()
                .find(|e| u64::from(e.logical) <= l && l < u64::from(e.logical) + u64::from(e.len));
            match hit {
                Some(e) if !e.unwritten => {
                    if old != Some(piece) {
                        let pblk = e.physical + (l - u64::from(e.logical));
                        let buf = self.block_mut(pblk, f.ino)?;
                        buf[..piece.len()].copy_from_slice(piece);
                        buf[piece.len()..].fill(0);
                    }
                }
                _ => {
                    tail.get_or_insert(lo);
                }
            }
        }
        if let Some(lo) = tail {
            self.write_range(&mut inode, lo as u64, &new[lo..])?;
        }
        if inode.size() < new.len() as u64 || tail.is_some() {
            inode.raw.set_size(inode.size().max(new.len() as u64));
            self.write_inode(&mut inode)?;
        }
        f.info.blocks = (new.len() / QBLK) as u32;
        f.image = new;
        Ok(())
    }
}
