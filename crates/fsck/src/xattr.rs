//! Extended attributes in pass 1 (`attributes.rst`): the in-inode area
//! after `i_extra_isize`, and the external block `i_file_acl` with its
//! header, entries, checksum and reference count (`h_refcount` must equal
//! the number of inodes pointing at the block). Values kept in `ea_inode`s
//! are charged to the owning inode's `i_blocks`, as e2fsck counts them.

use std::collections::HashMap;

use ext4kit_format::features::CompatFeatures;
use ext4kit_format::xattr::{self as fx, XattrEntry, XattrValue};

use crate::inode_edit::InodeEdit;
use crate::problem::{self as p, Code, Finding};
use crate::state::Ctx;

/// External xattr blocks seen in pass 1. Bounded by the number of inodes.
#[derive(Default)]
pub struct EaBlocks {
    /// Block -> (stored `h_refcount`, or `u32::MAX` when invalid; inodes
    /// seen; sectors of its `ea_inode` values).
    seen: HashMap<u64, (u32, u32, u64)>,
}

fn code_for(field: &str) -> Code {
    match field {
        "e_name_len" => p::P1_ATTR_NAME_LEN,
        "e_value_size" => p::P1_ATTR_VALUE_SIZE,
        "e_value_inum" => p::P1_ATTR_VALUE_BLOCK,
        "e_hash" => p::P1_ATTR_HASH,
        _ => p::P1_ATTR_VALUE_OFFSET,
    }
}

/// 512-byte sectors charged for the `ea_inode` values among `entries`:
/// e2fsck charges each value's size rounded up to whole blocks.
/// Only a value whose entry hash matches its inode's is charged (an old
/// Lustre-style reference, with another hash, is not).
fn ea_inode_sectors(ctx: &Ctx, entries: &[XattrEntry]) -> u64 {
    let bs = u64::from(ctx.fs.geo.block_size);
    entries
        .iter()
        .map(|e| match e.value {
            XattrValue::EaInode { size, inum } if hash_matches(ctx, e, inum) => {
                u64::from(size).div_ceil(bs) * (bs / 512)
            }
            _ => 0,
        })
        .sum()
}

/// The entry's `e_hash` is the one its value inode gives (its own hash is
/// kept in `i_atime`), with either name-byte signedness.
fn hash_matches(ctx: &Ctx, e: &XattrEntry, inum: u32) -> bool {
    let Ok(rec) = ctx.fs.inode_record(inum) else {
        return false;
    };
    let own = crate::pass1::decode(&rec).i_atime.get();
    let stored = e.raw.e_hash.get();
    [false, true]
        .into_iter()
        .any(|signed| fx::entry_hash_ea_inode(e.name, own, signed) == stored)
}

/// Each `ea_inode` value must name an inode in use, a regular file carrying
/// EA_INODE_FL (e2fsck's `check_large_ea_inode`).
/// Returns the problems found.
fn check_ea_inodes(ctx: &Ctx, ino: u32, entries: &[XattrEntry]) -> Vec<Finding> {
    let mut out = Vec::new();
    for e in entries {
        let XattrValue::EaInode { inum, .. } = e.value else {
            continue;
        };
        let mut bad = |code, msg: String| out.push(Finding::new(code, msg, "clear the attribute").ino(ino));
        if inum < ctx.fs.geo.first_ino || inum > ctx.fs.geo.inodes_count {
            bad(
                p::P1_ATTR_VALUE_EA_INODE,
                format!("illegal extended attribute value inode {inum}"),
            );
            continue;
        }
        let Ok(rec) = ctx.fs.inode_record(inum) else { continue };
        let raw = crate::pass1::decode(&rec);
        let regular = raw.i_mode.get() & ext4kit_format::inode::mode::S_IFMT == ext4kit_format::inode::mode::S_IFREG;
        if raw.links() == 0 || !regular {
            bad(
                p::P1_ATTR_VALUE_EA_INODE,
                format!("illegal extended attribute value inode {inum}"),
            );
        } else if !raw.has_flag(ext4kit_format::inode::flags::EA_INODE) {
            bad(p::P1_ATTR_SET_EA_INODE_FL, format!("EA inode {inum} lacks EA_INODE_FL"));
        }
    }
    out
}

/// Checks the in-inode xattr area of `ed` (whose `i_extra_isize` is known
/// valid). Returns the `system.data` value's length when there is one
/// (inline data), and the sectors of `ea_inode` values. A corrupt area is
/// emptied, as e2fsck's `check_ea_in_inode` does (its magic is zeroed).
pub fn check_ibody(ctx: &mut Ctx, ed: &mut InodeEdit) -> (Option<usize>, u64) {
    let extra = ed.raw.i_extra_isize.get();
    let ino = ed.ino;
    let Ok(region) = fx::ibody_region(&ed.rec, extra) else {
        return (None, 0);
    };
    let (found, result) = match fx::parse_ibody(region) {
        Ok(entries) => {
            let mut found = Vec::new();
            let bad_hash = entries.iter().any(|e| {
                matches!(e.value, XattrValue::Inline(_)) && e.raw.e_hash.get() != 0 && e.verify_hash().is_err()
            });
            if bad_hash {
                let f = Finding::new(
                    p::P1_ATTR_HASH,
                    "in-inode extended attribute has a bad hash",
                    "clear it",
                );
                found.push(f.ino(ino));
            }
            found.extend(check_ea_inodes(ctx, ino, &entries));
            let q = ea_inode_sectors(ctx, &entries);
            (
                found,
                (ext4kit_format::inline::system_data(&entries).map(<[u8]>::len), q),
            )
        }
        Err(e) => {
            let f = Finding::new(
                code_for(e.field),
                format!("in-inode extended attribute is corrupt: {e}"),
                "clear them",
            );
            (vec![f.ino(ino)], (None, 0))
        }
    };
    for f in found {
        if ctx.fix(f) {
            let at = 128 + usize::from(extra);
            ed.rec[at..at + 4].fill(0);
            ed.dirty = true;
            return (None, 0);
        }
    }
    result
}

/// Forgets the inode's xattr block (e2fsck's `clear_extattr`) when `f` is
/// to be repaired.
fn drop_acl(ctx: &mut Ctx, ed: &mut InodeEdit, f: Finding) {
    if ctx.fix(f) {
        ed.raw.i_file_acl_lo.set(0);
        ed.raw.i_file_acl_high.set(0);
        ed.dirty = true;
    }
}

/// Checks the external xattr block `blk` of `ed`. Returns the sectors it
/// charges to the inode (the block and its `ea_inode` values) when valid.
/// An unusable block is dropped from the inode; one whose only fault is
/// its checksum is rewritten.
pub fn check_block(ctx: &mut Ctx, ea: &mut EaBlocks, ed: &mut InodeEdit, blk: u64) -> Option<u64> {
    let ino = ed.ino;
    if !ctx.fs.valid_block(blk) {
        let f = Finding::new(
            p::P2_FILE_ACL_BAD,
            format!("i_file_acl {blk} is not a valid block"),
            "clear i_file_acl",
        );
        drop_acl(ctx, ed, f.ino(ino).blk(blk));
        return None;
    }
    if !ctx.fs.geo.features.compat.contains(CompatFeatures::EXT_ATTR) {
        let f = Finding::new(
            p::P2_FILE_ACL_ZERO,
            format!("i_file_acl is {blk} without ext_attr"),
            "clear i_file_acl",
        );
        drop_acl(ctx, ed, f.ino(ino).blk(blk));
        return None;
    }
    let bs512 = u64::from(ctx.fs.geo.block_size / 512);
    if let Some(e) = ea.seen.get_mut(&blk) {
        e.1 += 1;
        return (e.0 != u32::MAX).then_some(bs512 + e.2);
    }
    let mut fail = |ctx: &mut Ctx, ea: &mut EaBlocks, code, msg: String| {
        drop_acl(ctx, ed, Finding::new(code, msg, "clear i_file_acl").ino(ino).blk(blk));
        ea.seen.insert(blk, (u32::MAX, 1, 0));
        None
    };
    let mut buf = match ctx.fs.read_block(blk) {
        Ok(b) => b,
        Err(e) => {
            return fail(
                ctx,
                ea,
                p::P1_READ_EA_BLOCK,
                format!("cannot read extended attribute block {blk}: {e}"),
            );
        }
    };
    let (refcount, quota) = match fx::parse_block(&buf) {
        Ok(b) => {
            for f in check_ea_inodes(ctx, ino, &b.entries) {
                ctx.add(f);
            }
            (b.header.h_refcount.get(), ea_inode_sectors(ctx, &b.entries))
        }
        Err(e) => {
            let code = if e.field == "h_blocks" {
                p::P1_EA_MULTI_BLOCK
            } else {
                p::P1_BAD_EA_BLOCK
            };
            return fail(ctx, ea, code, format!("extended attribute block {blk} is invalid: {e}"));
        }
    };
    if ctx.fs.geo.features.metadata_csum() && fx::verify_block_checksum(ctx.fs.seed, blk, &buf).is_err() {
        let msg = format!("extended attribute block {blk} checksum does not match");
        let f = Finding::new(p::P1_EA_BLOCK_ONLY_CSUM_INVALID, msg, "recompute it");
        if ctx.fix(f.ino(ino).blk(blk)) {
            let ok =
                fx::set_block_checksum(ctx.fs.seed, blk, &mut buf).is_ok() && ctx.fs.write_block(blk, &buf).is_ok();
            if !ok {
                ctx.not_fixed("the block could not be written");
            }
        }
    }
    ctx.claim(blk);
    ea.seen.insert(blk, (refcount, 1, quota));
    Some(bs512 + quota)
}

/// After the scan: every valid block's `h_refcount` must equal the inodes
/// that point at it.
pub fn check_refcounts(ctx: &mut Ctx, ea: &EaBlocks) {
    let mut v: Vec<_> = ea.seen.iter().filter(|(_, (r, _, _))| *r != u32::MAX).collect();
    v.sort();
    for (&blk, &(stored, seen, _)) in v {
        if stored != seen {
            let msg = format!("extended attribute block {blk} has reference count {stored}, should be {seen}");
            ctx.add(Finding::new(p::P1_EXTATTR_REFCOUNT, msg, "set the count").blk(blk));
        }
    }
}
