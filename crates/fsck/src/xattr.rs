//! Extended attributes in pass 1 (`attributes.rst`): the in-inode area
//! after `i_extra_isize`, and the external block `i_file_acl` with its
//! header, entries, checksum and reference count (`h_refcount` must equal
//! the number of inodes pointing at the block). Values kept in `ea_inode`s
//! are charged to the owning inode's `i_blocks`, as e2fsck counts them.

use std::collections::HashMap;

use ext4kit_format::features::CompatFeatures;
use ext4kit_format::xattr::{self as fx, XattrEntry, XattrValue};

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
fn ea_inode_sectors(ctx: &Ctx, entries: &[XattrEntry]) -> u64 {
    let bs = u64::from(ctx.fs.geo.block_size);
    entries
        .iter()
        .map(|e| match e.value {
            XattrValue::EaInode { size, .. } => u64::from(size).div_ceil(bs) * (bs / 512),
            XattrValue::Inline(_) => 0,
        })
        .sum()
}

/// Each `ea_inode` value must name an inode in use, a regular file carrying
/// EA_INODE_FL (e2fsck's `check_large_ea_inode`).
fn check_ea_inodes(ctx: &mut Ctx, ino: u32, entries: &[XattrEntry]) {
    for e in entries {
        let XattrValue::EaInode { inum, .. } = e.value else {
            continue;
        };
        let bad = |ctx: &mut Ctx, code, msg: String| ctx.add(Finding::new(code, msg, "clear the attribute").ino(ino));
        if inum < ctx.fs.geo.first_ino || inum > ctx.fs.geo.inodes_count {
            bad(
                ctx,
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
                ctx,
                p::P1_ATTR_VALUE_EA_INODE,
                format!("illegal extended attribute value inode {inum}"),
            );
        } else if !raw.has_flag(ext4kit_format::inode::flags::EA_INODE) {
            bad(
                ctx,
                p::P1_ATTR_SET_EA_INODE_FL,
                format!("EA inode {inum} lacks EA_INODE_FL"),
            );
        }
    }
}

/// Checks the in-inode xattr area of `rec` (a whole inode record whose
/// `i_extra_isize` is known valid). Returns the `system.data` value's
/// length when there is one (inline data), and the sectors of `ea_inode`
/// values.
pub fn check_ibody(ctx: &mut Ctx, ino: u32, rec: &[u8], extra: u16) -> (Option<usize>, u64) {
    let Ok(region) = fx::ibody_region(rec, extra) else {
        return (None, 0);
    };
    let entries = match fx::parse_ibody(region) {
        Ok(e) => e,
        Err(e) => {
            let f = Finding::new(
                code_for(e.field),
                format!("in-inode extended attribute is corrupt: {e}"),
                "clear them",
            );
            ctx.add(f.ino(ino));
            return (None, 0);
        }
    };
    let bad_hash = entries
        .iter()
        .any(|e| matches!(e.value, XattrValue::Inline(_)) && e.raw.e_hash.get() != 0 && e.verify_hash().is_err());
    if bad_hash {
        ctx.add(
            Finding::new(
                p::P1_ATTR_HASH,
                "in-inode extended attribute has a bad hash",
                "clear it",
            )
            .ino(ino),
        );
    }
    check_ea_inodes(ctx, ino, &entries);
    let q = ea_inode_sectors(ctx, &entries);
    (ext4kit_format::inline::system_data(&entries).map(<[u8]>::len), q)
}

/// Checks the external xattr block `blk` of `ino`. Returns the sectors it
/// charges to the inode (the block and its `ea_inode` values) when valid.
pub fn check_block(ctx: &mut Ctx, ea: &mut EaBlocks, ino: u32, blk: u64) -> Option<u64> {
    if !ctx.fs.valid_block(blk) {
        let f = Finding::new(
            p::P2_FILE_ACL_BAD,
            format!("i_file_acl {blk} is not a valid block"),
            "clear i_file_acl",
        );
        ctx.add(f.ino(ino).blk(blk));
        return None;
    }
    if !ctx.fs.geo.features.compat.contains(CompatFeatures::EXT_ATTR) {
        let f = Finding::new(
            p::P2_FILE_ACL_ZERO,
            format!("i_file_acl is {blk} without ext_attr"),
            "clear i_file_acl",
        );
        ctx.add(f.ino(ino).blk(blk));
        return None;
    }
    let bs512 = u64::from(ctx.fs.geo.block_size / 512);
    if let Some(e) = ea.seen.get_mut(&blk) {
        e.1 += 1;
        return (e.0 != u32::MAX).then_some(bs512 + e.2);
    }
    let fail = |ctx: &mut Ctx, ea: &mut EaBlocks, code, msg: String| {
        ctx.add(Finding::new(code, msg, "clear i_file_acl").ino(ino).blk(blk));
        ea.seen.insert(blk, (u32::MAX, 1, 0));
        None
    };
    let buf = match ctx.fs.read_block(blk) {
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
            check_ea_inodes(ctx, ino, &b.entries);
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
        ctx.add(
            Finding::new(p::P1_EA_BLOCK_ONLY_CSUM_INVALID, msg, "recompute it")
                .ino(ino)
                .blk(blk),
        );
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
