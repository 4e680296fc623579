//! Renumbering the inodes in use in the groups a shrink cuts, as
//! resize2fs's `inode_scan_and_fix` does: each gets the first free inode
//! of the kept groups (from group 0 on, as `ext2fs_new_inode` without a
//! goal), its record copied there with the checksum of its new number;
//! the kept groups' inode bitmaps, free and directory counts,
//! `bg_itable_unused` and `INODE_UNINIT` follow. The directory entries
//! that name a moved inode, and the checksums seeded with a moved
//! inode's number (its extent tree and directory blocks), are rewritten
//! by [`super::moves`], which walks every inode afterwards.
//!
//! Inline data and `ea_inode` hold inode numbers this does not rewrite:
//! moving inodes there is refused, named.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::{BG_INODE_UNINIT, RawGroupDesc, bitmap_checksum};
use ext4kit_format::inode::{FileType, set_inode_checksum};

use super::plan::Plan;
use super::stage::Stage;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;

/// The inodes after renumbering.
pub(crate) struct Renumbered {
    /// Old number → new number.
    pub(crate) map: HashMap<u32, u32>,
    /// Every inode in use in the kept groups, moved ones by their new number.
    pub(crate) in_use: Vec<u32>,
}

/// Renumbers the inodes of the cut groups into `kept` (the kept groups'
/// descriptors, updated); their records and the changed inode bitmaps go
/// to `st.txn`.
pub(crate) fn renumber(
    fs: &Filesystem,
    p: &Plan,
    old: &[RawGroupDesc],
    kept: &mut [RawGroupDesc],
    st: &mut Stage,
) -> Result<Renumbered> {
    let keep = kept.len();
    let mut in_use = Vec::new();
    for (g, d) in old.iter().enumerate().take(keep) {
        in_use.extend(inodes_in_use(fs, p, d, g as u32)?);
    }
    let mut moving = Vec::new();
    for (g, d) in old.iter().enumerate().skip(keep) {
        moving.extend(inodes_in_use(fs, p, d, g as u32)?);
    }
    let mut map = HashMap::new();
    if moving.is_empty() {
        return Ok(Renumbered { map, in_use });
    }
    let inc = p.old.features.incompat;
    for (on, name) in [
        (inc.contains(IncompatFeatures::INLINE_DATA), "inline_data"),
        (inc.contains(IncompatFeatures::EA_INODE), "ea_inode"),
    ] {
        if on {
            return Err(Error::Unsupported(format!(
                "shrinking would renumber {} inodes, which this resize does not do with {name}",
                moving.len()
            )));
        }
    }
    let mut alloc = Alloc::new(fs, p);
    for &ino in &moving {
        let (new, g) = alloc.take(kept)?;
        let is_dir = move_record(fs, p, ino, new, st)?;
        let d = &mut kept[g as usize];
        d.set_free_inodes(d.free_inodes().saturating_sub(1));
        if is_dir {
            d.set_used_dirs(d.used_dirs() + 1);
        }
        map.insert(ino, new);
        in_use.push(new);
    }
    alloc.stage(p, kept, st);
    Ok(Renumbered { map, in_use })
}

/// Copies inode `ino`'s record to slot `new`; returns whether it is a
/// directory.
fn move_record(fs: &Filesystem, p: &Plan, ino: u32, new: u32, st: &mut Stage) -> Result<bool> {
    let inode = fs.inode_on_disk(ino)?;
    let mut rec = inode.record.to_vec();
    if p.old.features.metadata_csum() {
        set_inode_checksum(&mut rec, fs.csum_seed, new).map_err(|e| Error::format(Location::Inode(ino), e))?;
    }
    let slot = fs.inode_slot(new)?;
    let block = match st.txn.entry(slot.block) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => {
            let mut buf = vec![0u8; p.old.block_size as usize];
            fs.read_bytes(slot.block << p.old.block_size_log2, &mut buf)?;
            e.insert(buf)
        }
    };
    block[slot.offset..slot.offset + rec.len()].copy_from_slice(&rec);
    Ok(inode.raw.file_type() == Some(FileType::Directory))
}

/// Inodes marked in use in group `g` (none in an uninitialised table).
pub(crate) fn inodes_in_use(fs: &Filesystem, p: &Plan, d: &RawGroupDesc, g: u32) -> Result<Vec<u32>> {
    let csum = p.old.features.has_group_csum();
    if csum && d.flags() & BG_INODE_UNINIT != 0 {
        return Ok(Vec::new());
    }
    let ipg = p.old.inodes_per_group;
    let limit = if csum { ipg - d.itable_unused().min(ipg) } else { ipg };
    let mut bits = vec![0u8; p.old.block_size as usize];
    fs.read_bytes(d.inode_bitmap() << p.old.block_size_log2, &mut bits)?;
    Ok((0..limit)
        .filter(|i| bits[(i / 8) as usize] & (1 << (i % 8)) != 0)
        .map(|i| g * ipg + i + 1)
        .collect())
}

/// Free inodes of the kept groups, first group first.
struct Alloc<'a> {
    fs: &'a Filesystem,
    p: &'a Plan,
    group: u32,
    /// Index in `group` to look from.
    next: u32,
    /// Inode bitmaps read or changed, by group.
    bitmaps: BTreeMap<u32, Vec<u8>>,
}

impl<'a> Alloc<'a> {
    fn new(fs: &'a Filesystem, p: &'a Plan) -> Self {
        Self {
            fs,
            p,
            group: 0,
            next: 0,
            bitmaps: BTreeMap::new(),
        }
    }

    fn bitmap(&mut self, d: &RawGroupDesc, g: u32) -> Result<&mut Vec<u8>> {
        if !self.bitmaps.contains_key(&g) {
            let p = self.p;
            let bits = if p.old.features.has_group_csum() && d.flags() & BG_INODE_UNINIT != 0 {
                super::usage::empty_inode_bitmap(p)
            } else {
                let mut b = vec![0u8; p.old.block_size as usize];
                self.fs.read_bytes(d.inode_bitmap() << p.old.block_size_log2, &mut b)?;
                b
            };
            self.bitmaps.insert(g, bits);
        }
        Ok(self.bitmaps.get_mut(&g).expect("inserted above"))
    }

    /// The next free inode: (number, group).
    fn take(&mut self, kept: &mut [RawGroupDesc]) -> Result<(u32, u32)> {
        let ipg = self.p.old.inodes_per_group;
        let first = self.p.old_sb.s_first_ino.get();
        while (self.group as usize) < kept.len() {
            let (g, next, csum) = (self.group, self.next, self.p.old.features.has_group_csum());
            let d = &mut kept[g as usize];
            let bits = self.bitmap(d, g)?;
            let free = (next..ipg).find(|&i| g * ipg + i + 1 >= first && bits[(i / 8) as usize] & (1 << (i % 8)) == 0);
            if let Some(i) = free {
                bits[(i / 8) as usize] |= 1 << (i % 8);
                self.next = i + 1;
                d.bg_flags.set(d.flags() & !BG_INODE_UNINIT);
                if csum {
                    d.set_itable_unused(d.itable_unused().min(ipg - i - 1));
                }
                return Ok((g * ipg + i + 1, g));
            }
            self.group += 1;
            self.next = 0;
        }
        Err(Error::InvalidArgument(
            "the inodes in use in the groups cut do not fit in the free inodes of the groups kept".into(),
        ))
    }

    /// Stages the changed inode bitmaps, their checksums in `kept`.
    fn stage(self, p: &Plan, kept: &mut [RawGroupDesc], st: &mut Stage) {
        for (g, bits) in self.bitmaps {
            let d = &mut kept[g as usize];
            if p.new.features.metadata_csum() {
                let len = (p.new.inodes_per_group / 8) as usize;
                d.set_inode_bitmap_csum(bitmap_checksum(p.new_sb.csum_seed(), &bits, len, p.new.desc_size));
            }
            st.txn.insert(d.inode_bitmap(), bits);
        }
    }
}
