//! Extended attributes in pass 1 (`attributes.rst`): the in-inode area
//! after `i_extra_isize`, and the external block `i_file_acl` with its
//! header, entries, checksum and reference count (`h_refcount` must equal
//! the number of inodes pointing at the block).

use std::collections::HashMap;

use ext4kit_format::xattr::{self as fx, XattrValue};

use crate::problem::{self as p, Code, Finding};
use crate::state::Ctx;

/// External xattr blocks seen in pass 1: stored `h_refcount` and inodes
/// that point at it. Bounded by the number of inodes.
#[derive(Default)]
pub struct EaBlocks {
    seen: HashMap<u64, (u32, u32)>,
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

/// Checks the in-inode xattr area of `rec` (a whole inode record whose
/// `i_extra_isize` is already known valid). Returns the `system.data`
/// value's length when there is one (inline data).
pub fn check_ibody(ctx: &mut Ctx, ino: u32, rec: &[u8], extra: u16) -> Option<usize> {
    let region = fx::ibody_region(rec, extra).ok()?;
    match fx::parse_ibody(region) {
        Ok(entries) => {
            for e in &entries {
                if let XattrValue::Inline(_) = e.value
                    && e.raw.e_hash.get() != 0
                    && e.verify_hash().is_err()
                {
                    ctx.add(
                        Finding::new(
                            p::P1_ATTR_HASH,
                            "in-inode extended attribute has a bad hash",
                            "clear the attributes",
                        )
                        .ino(ino),
                    );
                }
            }
            ext4kit_format::inline::system_data(&entries).map(<[u8]>::len)
        }
        Err(e) => {
            ctx.add(
                Finding::new(
                    code_for(e.field),
                    format!("in-inode extended attribute is corrupt: {e}"),
                    "clear the in-inode attributes",
                )
                .ino(ino),
            );
            None
        }
    }
}

/// Checks the external xattr block `blk` of `ino`. Returns true when the
/// block is valid and counts toward the inode's `i_blocks`.
pub fn check_block(ctx: &mut Ctx, ea: &mut EaBlocks, ino: u32, blk: u64) -> bool {
    if !ctx.fs.valid_block(blk) {
        ctx.add(
            Finding::new(
                p::P2_FILE_ACL_BAD,
                format!("i_file_acl {blk} is not a valid block"),
                "clear i_file_acl",
            )
            .ino(ino)
            .blk(blk),
        );
        return false;
    }
    if let Some(e) = ea.seen.get_mut(&blk) {
        e.1 += 1;
        return e.0 != u32::MAX;
    }
    let buf = match ctx.fs.read_block(blk) {
        Ok(b) => b,
        Err(e) => {
            ctx.add(
                Finding::new(
                    p::P1_READ_EA_BLOCK,
                    format!("cannot read extended attribute block {blk}: {e}"),
                    "clear i_file_acl",
                )
                .ino(ino)
                .blk(blk),
            );
            ea.seen.insert(blk, (u32::MAX, 1));
            return false;
        }
    };
    let refcount = match fx::parse_block(&buf) {
        Ok(b) => b.header.h_refcount.get(),
        Err(e) => {
            let code = if e.field == "h_blocks" {
                p::P1_EA_MULTI_BLOCK
            } else {
                p::P1_BAD_EA_BLOCK
            };
            ctx.add(
                Finding::new(
                    code,
                    format!("extended attribute block {blk} is invalid: {e}"),
                    "clear i_file_acl",
                )
                .ino(ino)
                .blk(blk),
            );
            ea.seen.insert(blk, (u32::MAX, 1));
            return false;
        }
    };
    if ctx.fs.geo.features.metadata_csum() && fx::verify_block_checksum(ctx.fs.seed, blk, &buf).is_err() {
        ctx.add(
            Finding::new(
                p::P1_EA_BLOCK_ONLY_CSUM_INVALID,
                format!("extended attribute block {blk} checksum does not match"),
                "recompute it",
            )
            .ino(ino)
            .blk(blk),
        );
    }
    ctx.claim(blk);
    ea.seen.insert(blk, (refcount, 1));
    true
}

/// After the scan: every valid block's `h_refcount` must equal the inodes
/// that point at it.
pub fn check_refcounts(ctx: &mut Ctx, ea: &EaBlocks) {
    let mut v: Vec<_> = ea.seen.iter().filter(|(_, (r, _))| *r != u32::MAX).collect();
    v.sort();
    for (&blk, &(stored, seen)) in v {
        if stored != seen {
            ctx.add(
                Finding::new(
                    p::P1_EXTATTR_REFCOUNT,
                    format!("extended attribute block {blk} has reference count {stored}, should be {seen}"),
                    "set the count",
                )
                .blk(blk),
            );
        }
    }
}
