//! Editing an inline directory in place, as the kernel does
//! (`fs/ext4/inline.c`). Its entries live in two regions: the 56 bytes of
//! `i_block` after the parent's number, then the whole `system.data`
//! value. A new entry goes to the first record with room in `i_block`
//! (`ext4_add_dirent_to_inline`), else in `system.data`; when neither has
//! room, `system.data` grows at once to the most the inode body holds
//! (`ext4_update_inline_dir`: the last record takes the new space, `i_size`
//! becomes 60 plus the value's length) if that adds room for the entry;
//! only then does the directory move to a block. (`mke2fs -d`, which
//! [`crate::InlinePolicy::Mke2fs`] follows, stops at `i_block`.) A removed entry's record
//! joins the one before it in its region, or is marked unused when it
//! opens the region, and is wiped (`ext4_delete_inline_entry`); the
//! directory never shrinks back.

use ext4kit_format::dir_entry::{encode_entry, rec_len_for};
use ext4kit_format::inline::{DOTDOT_SIZE, I_BLOCK_SIZE};

use crate::dir::casefold::NameKey;
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

impl Txn<'_> {
    /// Adds `name` → `ino` to inline directory `dir` (in memory; the
    /// caller writes the inode). False, nothing changed, when the entry
    /// fits nowhere inline and the directory must move to a block.
    pub(crate) fn add_inline_entry(&mut self, dir: &mut Inode, name: &[u8], ino: u32, ft: u8) -> Result<bool> {
        self.fs.check_new_casefold_name(dir, name)?;
        let ft = self.entry_ft(ft);
        let need = rec_len_for(name.len());
        let mut region = dir.raw.i_block[DOTDOT_SIZE..].to_vec();
        let mke2fs = self.fs.opts.inline == crate::InlinePolicy::Mke2fs;
        // libext2fs adds to i_block only while system.data holds no entries.
        if mke2fs && !self.system_data_value(dir)?.is_empty() {
            return Ok(false);
        }
        if place(&mut region, need, name, ino, ft) {
            dir.raw.i_block[DOTDOT_SIZE..].copy_from_slice(&region);
            return Ok(true);
        }
        if mke2fs {
            return Ok(false);
        }
        let mut data = self.system_data_value(dir)?;
        if !place(&mut data, need, name, ino, ft) {
            let max = self.max_system_data(dir)?;
            if max < data.len() + need {
                return Ok(false);
            }
            grow(&mut data, max);
            if !place(&mut data, need, name, ino, ft) {
                return Ok(false);
            }
        }
        if !self.put_system_data(dir, &data)? {
            return Ok(false);
        }
        dir.raw.set_size((I_BLOCK_SIZE + data.len()) as u64);
        Ok(true)
    }

    /// Removes `name` from inline directory `dir` (in memory): the inode
    /// it named, or `None` when it is not there.
    pub(crate) fn remove_inline_entry(&mut self, dir: &mut Inode, name: &[u8]) -> Result<Option<u32>> {
        let at = Location::Inode(dir.ino);
        let key = self.fs.name_key(dir, name);
        let mut region = dir.raw.i_block[DOTDOT_SIZE..].to_vec();
        if let Some(ino) = unlink(&mut region, &key, at)? {
            dir.raw.i_block[DOTDOT_SIZE..].copy_from_slice(&region);
            return Ok(Some(ino));
        }
        let mut data = self.system_data_value(dir)?;
        let Some(ino) = unlink(&mut data, &key, at)? else {
            return Ok(None);
        };
        if !self.put_system_data(dir, &data)? {
            return Err(Error::inconsistent(at, "system.data no longer fits its inode"));
        }
        Ok(Some(ino))
    }

    /// Points entry `name` of inline directory `dir` (in memory) at `ino`
    /// of type `ft`; ".." is the parent's number in `i_block`.
    pub(crate) fn set_inline_entry(&mut self, dir: &mut Inode, name: &[u8], ino: u32, ft: u8) -> Result<()> {
        let at = Location::Inode(dir.ino);
        if name == b".." {
            dir.raw.i_block[..DOTDOT_SIZE].copy_from_slice(&ino.to_le_bytes());
            return Ok(());
        }
        let ft = self.entry_ft(ft);
        let key = self.fs.name_key(dir, name);
        let mut region = dir.raw.i_block[DOTDOT_SIZE..].to_vec();
        if repoint(&mut region, &key, ino, ft, at)? {
            dir.raw.i_block[DOTDOT_SIZE..].copy_from_slice(&region);
            return Ok(());
        }
        let mut data = self.system_data_value(dir)?;
        if !repoint(&mut data, &key, ino, ft, at)? {
            return Err(Error::NotFound(String::from_utf8_lossy(name).into_owned()));
        }
        if !self.put_system_data(dir, &data)? {
            return Err(Error::inconsistent(at, "system.data no longer fits its inode"));
        }
        Ok(())
    }

    /// Removes `name` from directory `dir_ino`, inline or in blocks (an
    /// inline directory's inode is written): the inode it named.
    pub(crate) fn remove_dir_name(&mut self, dir_ino: u32, name: &[u8]) -> Result<u32> {
        let mut dir = self.inode(dir_ino)?;
        if !dir.has_inline_data() {
            return self.remove_entry(&dir, name);
        }
        let ino = self
            .remove_inline_entry(&mut dir, name)?
            .ok_or_else(|| Error::NotFound(String::from_utf8_lossy(name).into_owned()))?;
        self.write_inode(&mut dir)?;
        Ok(ino)
    }

    /// Points entry `name` of directory `dir_ino` at `ino`, inline or in
    /// blocks (an inline directory's inode is written).
    pub(crate) fn set_dir_name(&mut self, dir_ino: u32, name: &[u8], ino: u32, ft: u8) -> Result<()> {
        let mut dir = self.inode(dir_ino)?;
        if !dir.has_inline_data() {
            return self.set_entry(&dir, name, ino, ft);
        }
        self.set_inline_entry(&mut dir, name, ino, ft)?;
        self.write_inode(&mut dir)
    }

    /// Adds `name` → `ino` to `dir`: in place while it is inline and the
    /// entry fits, else (moved to a block first) to its blocks. The caller
    /// writes `dir`.
    pub(crate) fn add_dir_name(
        &mut self,
        dir: &mut Inode,
        name: &[u8],
        ino: u32,
        ft: u8,
        spot: Option<crate::dir::htree_insert::HtreeSpot>,
    ) -> Result<()> {
        if dir.has_inline_data() {
            if self.add_inline_entry(dir, name, ino, ft)? {
                return Ok(());
            }
            self.uninline(dir)?;
        }
        self.add_entry_at(dir, name, ino, ft, spot)
    }

    /// The longest `system.data` value `inode`'s body holds beside its
    /// other in-inode attributes (`get_max_inline_xattr_value_size`): a
    /// binary search over trial encodings, as the value is padded to 4.
    fn max_system_data(&mut self, inode: &Inode) -> Result<usize> {
        let (mut lo, mut hi) = (0usize, inode.record.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            let mut probe = inode.clone();
            if self.put_system_data(&mut probe, &vec![0; mid])? {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(lo)
    }
}

/// The records of `region` in order: offset, inode, record length, name
/// length. Stops before a record that does not parse.
fn records(region: &[u8]) -> impl Iterator<Item = (usize, u32, usize, usize)> + '_ {
    let mut off = 0;
    std::iter::from_fn(move || {
        if off + 8 > region.len() {
            return None;
        }
        let ino = u32::from_le_bytes(region[off..off + 4].try_into().ok()?);
        let rec = usize::from(u16::from_le_bytes([region[off + 4], region[off + 5]]));
        let name_len = usize::from(region[off + 6]);
        if rec < 8 || off + rec > region.len() || 8 + name_len > rec {
            return None;
        }
        let r = (off, ino, rec, name_len);
        off += rec;
        Some(r)
    })
}

/// Puts a record for `name` in the first record of `region` with room:
/// an unused one, or the slack of a used one, which is split
/// (`ext4_find_dest_de`, `ext4_insert_dentry`).
fn place(region: &mut [u8], need: usize, name: &[u8], ino: u32, ft: u8) -> bool {
    let slot = records(region).find_map(|(off, i, rec, nl)| {
        let keep = if i == 0 { 0 } else { rec_len_for(nl) };
        (rec >= keep + need).then_some((off, rec, keep))
    });
    let Some((off, rec, keep)) = slot else {
        return false;
    };
    if keep > 0 {
        region[off + 4..off + 6].copy_from_slice(&(keep as u16).to_le_bytes());
    }
    encode_entry(region, off + keep, ino, rec - keep, ft, name, 4096);
    true
}

/// Extends `data` to `len` bytes, the new space joining its last record,
/// or one unused record when it was empty (`ext4_update_final_de`).
fn grow(data: &mut Vec<u8>, len: usize) {
    let last = records(data).last().map(|(off, ..)| off);
    let old = data.len();
    data.resize(len, 0);
    match last {
        Some(off) => {
            let rec = len - off;
            data[off + 4..off + 6].copy_from_slice(&(rec as u16).to_le_bytes());
        }
        None => encode_entry(data, old, 0, len - old, 0, &[], 4096),
    }
}

/// Takes `name` out of `region`: the inode it named.
fn unlink(region: &mut [u8], name: &NameKey<'_>, at: Location) -> Result<Option<u32>> {
    let mut prev: Option<(usize, usize)> = None;
    for (off, ino, rec, nl) in records(region).collect::<Vec<_>>() {
        if ino != 0 && name.matches(&region[off + 8..off + 8 + nl]) {
            // The removed record is wiped, but for its length when it
            // stays as an unused record (`ext4_generic_delete_entry`).
            match prev {
                Some((poff, prec)) => {
                    let merged =
                        u16::try_from(prec + rec).map_err(|_| Error::inconsistent(at, "inline record length"))?;
                    region[poff + 4..poff + 6].copy_from_slice(&merged.to_le_bytes());
                    region[off..off + rec].fill(0);
                }
                None => {
                    region[off..off + 4].fill(0);
                    region[off + 6..off + rec].fill(0);
                }
            }
            return Ok(Some(ino));
        }
        prev = Some((off, rec));
    }
    Ok(None)
}

/// Points the record of `name` in `region` at `ino`: false when absent.
fn repoint(region: &mut [u8], name: &NameKey<'_>, ino: u32, ft: u8, _at: Location) -> Result<bool> {
    for (off, i, _, nl) in records(region).collect::<Vec<_>>() {
        if i != 0 && name.matches(&region[off + 8..off + 8 + nl]) {
            region[off..off + 4].copy_from_slice(&ino.to_le_bytes());
            region[off + 7] = ft;
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR_REGION: usize = I_BLOCK_SIZE - DOTDOT_SIZE;

    #[test]
    fn entries_are_placed_removed_and_the_region_grows() {
        let mut r = vec![0u8; DIR_REGION];
        encode_entry(&mut r, 0, 0, DIR_REGION, 0, &[], 4096);
        assert!(place(&mut r, rec_len_for(3), b"abc", 12, 1));
        assert!(place(&mut r, rec_len_for(5), b"defgh", 13, 1));
        assert!(!place(&mut r, rec_len_for(40), &[b'x'; 40], 14, 1));
        let at = Location::Inode(2);
        assert_eq!(unlink(&mut r, &NameKey::Exact(b"defgh"), at).unwrap(), Some(13));
        assert_eq!(records(&r).count(), 1, "merged into the first record");
        assert_eq!(unlink(&mut r, &NameKey::Exact(b"abc"), at).unwrap(), Some(12));
        assert_eq!(records(&r).next().unwrap().1, 0, "the first record is unused");
        let mut d = Vec::new();
        grow(&mut d, 68);
        assert_eq!(records(&d).collect::<Vec<_>>(), vec![(0, 0, 68, 0)]);
        assert!(place(&mut d, rec_len_for(6), b"name_1", 20, 1));
        grow(&mut d, 100);
        assert_eq!(records(&d).map(|r| r.2).sum::<usize>(), 100);
    }
}
