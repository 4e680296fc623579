//! Pass 2 for a directory stored in its inode (`inline_data`; the kernel's
//! `inline_data.rst`). Such a directory has no `.` record; its `..` is the
//! first four bytes of `i_block` (the parent's inode number), and its
//! records fill the other 56 bytes of `i_block` ("block 0") and then the
//! value of the in-inode `system.data` xattr ("block 1"). e2fsck's
//! `check_dir_block` checks both areas as directory blocks and writes them
//! back into the inode; so does this module, with the same record checks
//! and salvage as a block directory ([`crate::pass2::records`]).

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inline::{SYSTEM_DATA_INDEX, SYSTEM_DATA_NAME};
use ext4kit_format::xattr::{XattrValue, entry_hash, ibody_region, parse_ibody};

use crate::dir_block::DirBuf;
use crate::dirent::{self, bump};
use crate::pass2::{Dir, records};
use crate::state::{Ctx, DirBlock};

/// Offset of `i_block` in the inode record.
const I_BLOCK: usize = 0x28;
/// Bytes of `i_block`.
const I_BLOCK_LEN: usize = 60;
/// The parent's inode number that opens `i_block`.
const DOTDOT: usize = 4;
/// Size of the in-inode xattr header (the magic) before the first entry.
const IBODY_HEADER: usize = 4;

/// Where the `system.data` value lies in the inode record.
struct DataValue {
    /// Its bytes in the record.
    at: Range<usize>,
    /// Offset of its entry's `e_hash` in the record, when the hash is set
    /// (a zero hash is not checked, and stays zero).
    hash_at: Option<usize>,
}

/// Checks (and, when repairing, repairs in place) the inline directory `ino`.
pub fn check(ctx: &mut Ctx, ino: u32) {
    let Ok(mut rec) = ctx.fs.inode_record(ino) else { return };
    if rec.len() < I_BLOCK + I_BLOCK_LEN {
        return;
    }
    let value = system_data(&rec);
    let mut dir = Dir {
        ino,
        seed: 0,
        index: None,
        keys: None,
        names: HashMap::new(),
        clear_index: false,
        hash_bad: HashSet::new(),
        encrypted: None,
        policy: None,
        casefold: None,
    };
    bump(ctx, ino);
    let mut dirty = dotdot(ctx, &mut dir, &mut rec);
    let first = I_BLOCK + DOTDOT..I_BLOCK + I_BLOCK_LEN;
    dirty |= area(ctx, &mut dir, &mut rec, first, 0);
    if let Some(v) = &value
        && area(ctx, &mut dir, &mut rec, v.at.clone(), 1)
    {
        dirty = true;
        rehash(&mut rec, v);
    }
    if dirty && let Err(e) = ctx.fs.write_inode_record(ino, &mut rec) {
        ctx.not_fixed(format!("writing inode {ino}: {e}"));
    }
}

/// The `..` entry, checked as the second record of a block directory's
/// block 0 would be; true when a repair changed it in `rec`.
fn dotdot(ctx: &mut Ctx, dir: &mut Dir, rec: &mut [u8]) -> bool {
    let at = I_BLOCK..I_BLOCK + DOTDOT;
    let parent = u32::from_le_bytes(rec[at.clone()].try_into().unwrap_or([0; 4]));
    let filetype = ctx.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE);
    let mut d = DirBuf {
        buf: vec![0; 12],
        dirty: false,
        filetype,
    };
    d.put(0, parent, 12, if filetype { 2 } else { 0 }, b"..");
    d.dirty = false;
    let Some(e) = d.ent(0, 12) else { return false };
    let b = DirBlock {
        ino: dir.ino,
        lblk: 0,
        pblk: 0,
    };
    dirent::check(ctx, dir, b, &mut d, e, 1, &mut HashMap::new());
    let now = d.buf[..DOTDOT].to_vec();
    if now == rec[at.clone()] {
        return false;
    }
    rec[at].copy_from_slice(&now);
    true
}

/// The records in `rec[range]`, checked as directory block `lblk`; true
/// when a repair changed them (copied back into `rec`).
fn area(ctx: &mut Ctx, dir: &mut Dir, rec: &mut [u8], range: Range<usize>, lblk: u32) -> bool {
    if range.is_empty() {
        return false;
    }
    let filetype = ctx.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE);
    let mut d = DirBuf {
        buf: rec[range.clone()].to_vec(),
        dirty: false,
        filetype,
    };
    let b = DirBlock {
        ino: dir.ino,
        lblk,
        pblk: 0,
    };
    let end = d.bs();
    records(ctx, dir, b, &mut d, end, 2);
    if !d.dirty {
        return false;
    }
    rec[range].copy_from_slice(&d.buf);
    true
}

/// The `system.data` value among the in-inode xattrs, when the region
/// parses and holds it inline.
fn system_data(rec: &[u8]) -> Option<DataValue> {
    let extra = u16::from_le_bytes([*rec.get(128)?, *rec.get(129)?]);
    let region = ibody_region(rec, extra).ok()?;
    let base = 128 + usize::from(extra);
    let entries = parse_ibody(region).ok()?;
    let e = entries
        .iter()
        .find(|e| e.index() == SYSTEM_DATA_INDEX && e.name == SYSTEM_DATA_NAME)?;
    let XattrValue::Inline(v) = e.value else { return None };
    let start = base + IBODY_HEADER + usize::from(e.raw.e_value_offs.get());
    let at = start..start + v.len();
    let hash_at = (e.raw.e_hash.get() != 0).then_some(base + e.offset + 12);
    (at.end <= rec.len()).then_some(DataValue { at, hash_at })
}

/// Recomputes the `system.data` entry's `e_hash` after its value changed
/// (`ext4_xattr_entry.e_hash`, at byte 12 of the entry).
fn rehash(rec: &mut [u8], v: &DataValue) {
    let Some(h) = v.hash_at else { return };
    let padded = v.at.start..(v.at.end + 3) & !3;
    let value = rec.get(padded).unwrap_or(&rec[v.at.clone()]);
    let hash = entry_hash(SYSTEM_DATA_NAME, value, false);
    if let Some(dst) = rec.get_mut(h..h + 4) {
        dst.copy_from_slice(&hash.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_xattr_region_means_no_system_data() {
        let rec = vec![0u8; 256];
        assert!(system_data(&rec).is_none());
    }
}
