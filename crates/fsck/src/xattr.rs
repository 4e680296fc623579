//! Extended attributes in pass 1 (`attributes.rst`): the in-inode area
//! after `i_extra_isize`, and the external block `i_file_acl` with its
//! header, entries, checksum and reference count (`h_refcount` must equal
//! the number of inodes pointing at the block). Values kept in `ea_inode`s
//! are charged to the owning inode's `i_blocks`, as e2fsck counts them, and
//! their references are counted for pass 4 ([`crate::ea_refs`]).
//!
//! Repairs, as e2fsck's `check_ea_in_inode` and `check_ext_attr`: a faulty
//! in-inode area is emptied (its magic zeroed); a faulty block is dropped
//! from the inode; a block whose only fault is its checksum is rewritten;
//! a wrong `h_refcount` is set to the references found.

use std::collections::HashMap;

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::inode::{flags, mode};
use ext4kit_format::xattr::{self as fx, XATTR_MAGIC};

use crate::ea_walk::{self, Entry, Fault};
use crate::inode_edit::InodeEdit;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// One external xattr block, as pass 1 met it.
#[derive(Clone, Copy)]
struct Seen {
    /// `h_refcount` as stored.
    refcount: u32,
    /// Inodes pointing at it so far.
    users: u32,
    /// Sectors of its `ea_inode` values.
    sectors: u64,
    /// Its `ea_inode` values.
    ea_inodes: u32,
}

/// External xattr blocks seen in pass 1. Bounded by the number of inodes.
#[derive(Default)]
pub struct EaBlocks {
    seen: HashMap<u64, Seen>,
}

/// What the xattrs of one inode charge it: sectors of its `i_blocks`, and
/// value inodes (counted with the inode by quota).
#[derive(Debug, Default, Clone, Copy)]
pub struct Charge {
    /// 512-byte sectors.
    pub sectors: u64,
    /// `ea_inode` values.
    pub ea_inodes: u32,
}

/// 512-byte sectors a value of `size` bytes in an `ea_inode` is charged:
/// whole clusters (e2fsck's `size_to_quota_blocks`).
fn value_sectors(ctx: &Ctx, size: u32) -> u64 {
    let bs = u64::from(ctx.fs.geo.block_size);
    let bigalloc = ctx.fs.geo.features.ro_compat.contains(RoCompatFeatures::BIGALLOC);
    let cluster = if bigalloc {
        1024u64 << ctx.fs.sb.s_log_cluster_size.get().min(20)
    } else {
        bs
    };
    u64::from(size).div_ceil(cluster.max(bs)) * (cluster.max(bs) / 512)
}

/// The pass-1 flag check of e2fsck: EA_INODE_FL on anything but a regular
/// file is cleared; a regular file carrying it is tracked for pass 4.
pub fn note_ea_inode_flag(ctx: &mut Ctx, ed: &mut InodeEdit) {
    if !ed.raw.has_flag(flags::EA_INODE) {
        return;
    }
    if ed.raw.i_mode.get() & mode::S_IFMT != mode::S_IFREG {
        let f = Finding::new(
            p::P1_EA_INODE_NONREG,
            "inode has the ea_inode flag set but is not a regular file",
            "clear the flag",
        );
        if ctx.fix(f.ino(ed.ino)) {
            ed.raw.i_flags.set(ed.raw.flags() & !flags::EA_INODE);
            ed.dirty = true;
            return;
        }
    }
    ctx.ea_inode.set(u64::from(ed.ino));
}

/// Judges one `ea_inode` reference of inode `owner` (e2fsck's
/// `check_large_ea_inode`). Returns the sectors to charge, or the problem
/// that clears the attributes. A value inode lacking EA_INODE_FL whose
/// hash matches gets the flag.
fn ea_inode_ref(ctx: &mut Ctx, owner: u32, owner_gen: u32, e: &Entry) -> Result<u64, Finding> {
    let inum = e.value_inum;
    let illegal = |n: u32| {
        Finding::new(
            p::P1_ATTR_VALUE_EA_INODE,
            format!("illegal extended attribute value inode {n}"),
            "clear the attributes",
        )
    };
    if inum < ctx.fs.geo.first_ino || inum > ctx.fs.geo.inodes_count {
        return Err(illegal(inum));
    }
    let rec = ctx.fs.inode_record(inum).map_err(|_| illegal(inum))?;
    let raw = crate::pass1::decode(&rec);
    if e.value_size == 0 || u64::from(e.value_size) != raw.size() {
        let msg = format!(
            "extended attribute has a value size ({}) which is invalid",
            e.value_size
        );
        return Err(Finding::new(p::P1_ATTR_VALUE_SIZE, msg, "clear the attributes"));
    }
    let own = raw.i_atime.get();
    let hashed = [false, true]
        .into_iter()
        .any(|s| fx::entry_hash_ea_inode(e.name, own, s) == e.hash);
    let sectors = if hashed {
        value_sectors(ctx, e.value_size)
    } else if raw.i_mtime.get() == owner && raw.i_generation.get() == owner_gen {
        // An old Lustre-style reference: no hash, not charged.
        0
    } else if !raw.has_flag(flags::EA_INODE) {
        return Err(illegal(inum));
    } else {
        let msg = format!("extended attribute has a hash ({}) which is invalid", e.hash);
        return Err(Finding::new(p::P1_ATTR_HASH, msg, "clear the attributes"));
    };
    if !raw.has_flag(flags::EA_INODE) {
        set_ea_inode_flag(ctx, owner, inum)?;
    }
    Ok(sectors)
}

/// PR_1_ATTR_SET_EA_INODE_FL: the value inode gets EA_INODE_FL; declined,
/// the reference is bad (PR_1_ATTR_NO_EA_INODE_FL).
fn set_ea_inode_flag(ctx: &mut Ctx, owner: u32, inum: u32) -> Result<(), Finding> {
    let msg = format!("EA inode {inum} for parent inode {owner} missing EA_INODE flag");
    if ctx.fix(Finding::new(p::P1_ATTR_SET_EA_INODE_FL, msg, "set the flag").ino(inum)) {
        match crate::inode_edit::update(&ctx.fs, inum, |r| r.i_flags.set(r.i_flags.get() | flags::EA_INODE)) {
            Ok(()) => {
                ctx.ea_inode.set(u64::from(inum));
            }
            Err(e) => ctx.not_fixed(e),
        }
        return Ok(());
    }
    let msg = format!("inode has an invalid extended attribute: EA inode {inum} missing EA_INODE flag");
    Err(Finding::new(p::P1_ATTR_NO_EA_INODE_FL, msg, "clear the attributes"))
}

/// The `ea_inode` references among `entries`: what they charge, or the
/// first problem. Turns on the ea_inode feature when it is missing.
fn judge_refs(ctx: &mut Ctx, owner: u32, owner_gen: u32, entries: &[Entry]) -> Result<Charge, Finding> {
    let mut c = Charge::default();
    for e in entries.iter().filter(|e| e.value_inum != 0) {
        feature_check(ctx, owner);
        c.sectors += ea_inode_ref(ctx, owner, owner_gen, e)?;
        c.ea_inodes += 1;
    }
    Ok(c)
}

/// PR_1_EA_INODE_FEATURE: a value inode is referenced, but the superblock
/// lacks the ea_inode feature; it is turned on.
fn feature_check(ctx: &mut Ctx, owner: u32) {
    let f = &ctx.fs.geo.features;
    if f.incompat.contains(IncompatFeatures::EA_INODE) {
        return;
    }
    let msg = "inode references an EA inode but the superblock lacks the ea_inode feature";
    if ctx.fix(Finding::new(p::P1_EA_INODE_FEATURE, msg, "set the feature").ino(owner)) {
        let v = ctx.fs.sb.s_feature_incompat.get() | IncompatFeatures::EA_INODE.0;
        ctx.fs.sb.s_feature_incompat.set(v);
        ctx.fs.geo.features.incompat = IncompatFeatures(v);
        ctx.fs.dirty_sb = true;
    }
}

/// The finding for a structural fault of an in-inode area.
fn ibody_fault(f: Fault) -> Finding {
    let (code, msg) = match f {
        Fault::NameLen(n) => (
            p::P1_ATTR_NAME_LEN,
            format!("extended attribute has a name length ({n}) which is invalid"),
        ),
        Fault::ValueSize(n) => (
            p::P1_ATTR_VALUE_SIZE,
            format!("extended attribute has a value size ({n}) which is invalid"),
        ),
        Fault::Hash(h) => (
            p::P1_ATTR_HASH,
            format!("extended attribute has a hash ({h}) which is invalid"),
        ),
        _ => (
            p::P1_INODE_EA_ALLOC_COLLISION,
            "inode extended attribute is corrupt (allocation collision)".into(),
        ),
    };
    Finding::new(code, msg, "clear them")
}

/// Checks the in-inode xattr area of `ed` (whose `i_extra_isize` is known
/// valid). Returns the `system.data` value's length when there is one
/// (inline data), and what the area charges. A faulty area is emptied,
/// as e2fsck's `check_ea_in_inode` does (its magic is zeroed).
pub fn check_ibody(ctx: &mut Ctx, ed: &mut InodeEdit) -> (Option<usize>, Charge) {
    let at = 128 + usize::from(ed.raw.i_extra_isize.get());
    let Some(region) = ed.rec.get(at..).map(<[u8]>::to_vec) else {
        return (None, Charge::default());
    };
    if region.len() < 4 || region[..4] != XATTR_MAGIC.to_le_bytes() {
        return (None, Charge::default());
    }
    let ino = ed.ino;
    let walk = ea_walk::ibody(&region);
    let judged = judge_refs(ctx, ino, ed.raw.i_generation.get(), &walk.entries);
    let problem = match (judged, walk.fault) {
        (Err(f), _) => Some(f),
        (Ok(_), Some(fault)) => Some(ibody_fault(fault)),
        (Ok(_), None) => None,
    };
    if let Some(f) = problem
        && ctx.fix(f.ino(ino))
    {
        ed.rec[at..at + 4].fill(0);
        ed.dirty = true;
        return (None, Charge::default());
    }
    let charge = judge_quiet(ctx, &walk.entries);
    count_refs(ctx, &walk.entries);
    (ea_walk::system_data(&walk.entries), charge)
}

/// What valid `ea_inode` entries charge, without asking anything again.
fn judge_quiet(ctx: &Ctx, entries: &[Entry]) -> Charge {
    let mut c = Charge::default();
    for e in entries.iter().filter(|e| e.value_inum != 0) {
        let Ok(rec) = ctx.fs.inode_record(e.value_inum) else {
            continue;
        };
        let own = crate::pass1::decode(&rec).i_atime.get();
        if [false, true]
            .into_iter()
            .any(|s| fx::entry_hash_ea_inode(e.name, own, s) == e.hash)
        {
            c.sectors += value_sectors(ctx, e.value_size);
        }
        c.ea_inodes += 1;
    }
    c
}

/// Counts the value inodes `entries` reference, for pass 4.
fn count_refs(ctx: &mut Ctx, entries: &[Entry]) {
    for e in entries.iter().filter(|e| e.value_inum != 0) {
        ctx.ea.add_ref(e.value_inum);
    }
}

/// A symlink kept in inline data that e2fsck accepts (`i_size` is the
/// 60 bytes of `i_block` plus `system.data`, no EXTENTS_FL): e2fsck's pass 1
/// then skips `check_blocks`, so its xattr block is not counted as a
/// reference and its usage is not charged to quota.
pub fn inline_symlink(raw: &ext4kit_format::inode::RawInode, inline_len: Option<usize>) -> bool {
    raw.i_mode.get() & mode::S_IFMT == mode::S_IFLNK
        && raw.has_flag(flags::INLINE_DATA)
        && !raw.has_flag(flags::EXTENTS)
        && inline_len.is_some_and(|n| raw.size() == 60 + n as u64)
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

/// The finding for a structural fault of block `blk`.
fn block_fault(f: Fault, blk: u64) -> Finding {
    let (code, msg) = match f {
        Fault::Hash(h) => (
            p::P1_ATTR_HASH,
            format!("extended attribute has a hash ({h}) which is invalid"),
        ),
        Fault::BadName => (
            p::P1_EA_BAD_NAME,
            format!("extended attribute block {blk} is corrupt (invalid name)"),
        ),
        Fault::BadValue | Fault::ValueSize(_) => (
            p::P1_EA_BAD_VALUE,
            format!("extended attribute block {blk} is corrupt (invalid value)"),
        ),
        _ => (
            p::P1_EA_ALLOC_COLLISION,
            format!("extended attribute block {blk} is corrupt (allocation collision)"),
        ),
    };
    Finding::new(code, msg, "clear i_file_acl").blk(blk)
}

/// Checks the external xattr block `blk` of `ed`. Returns what it charges
/// the inode (the block and its `ea_inode` values) when valid.
/// An unusable block is dropped from the inode; one whose only fault is
/// its checksum is rewritten.
pub fn check_block(ctx: &mut Ctx, ea: &mut EaBlocks, ed: &mut InodeEdit, blk: u64, counts: bool) -> Option<Charge> {
    let ino = ed.ino;
    let users = u32::from(counts);
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
    let bs512 = u64::from(ctx.fs.geo.block_size / 512) << ctx.fs.geo.cluster_bits;
    if let Some(s) = ea.seen.get_mut(&blk) {
        s.users += users;
        let s = *s;
        return Some(Charge {
            sectors: bs512 + s.sectors,
            ea_inodes: s.ea_inodes,
        });
    }
    match read_block(ctx, ed, blk) {
        // Not remembered: the next inode naming it is asked again, as e2fsck does.
        Err(f) => {
            drop_acl(ctx, ed, f.ino(ino).blk(blk));
            None
        }
        Ok((refcount, c)) => {
            ctx.claim(blk);
            let seen = Seen {
                refcount,
                users,
                sectors: c.sectors,
                ea_inodes: c.ea_inodes,
            };
            ea.seen.insert(blk, seen);
            Some(Charge {
                sectors: bs512 + c.sectors,
                ea_inodes: c.ea_inodes,
            })
        }
    }
}

/// Reads and judges block `blk` the first time an inode names it: its
/// stored `h_refcount` and what its values charge, or the problem that
/// drops it from the inode. Counts its value inodes' references.
fn read_block(ctx: &mut Ctx, ed: &InodeEdit, blk: u64) -> Result<(u32, Charge), Finding> {
    let mut buf = ctx.fs.read_block(blk).map_err(|e| {
        Finding::new(
            p::P1_READ_EA_BLOCK,
            format!("cannot read extended attribute block {blk}: {e}"),
            "clear i_file_acl",
        )
    })?;
    let (magic, refcount, nblocks) = (le32(&buf, 0), le32(&buf, 4), le32(&buf, 8));
    if magic != XATTR_MAGIC {
        let msg = format!("inode has a bad extended attribute block {blk}");
        return Err(Finding::new(p::P1_BAD_EA_BLOCK, msg, "clear i_file_acl"));
    }
    if nblocks != 1 {
        let msg = format!("extended attribute block {blk} has h_blocks > 1");
        return Err(Finding::new(p::P1_EA_MULTI_BLOCK, msg, "clear i_file_acl"));
    }
    let walk = ea_walk::block(&buf);
    let charge = judge_refs(ctx, ed.ino, ed.raw.i_generation.get(), &walk.entries)?;
    if let Some(f) = walk.fault {
        return Err(block_fault(f, blk));
    }
    count_refs(ctx, &walk.entries);
    drop(walk);
    csum_check(ctx, ed.ino, blk, &mut buf);
    Ok((refcount, charge))
}

/// A block sound but for its checksum gets its checksum recomputed
/// (PR_1_EA_BLOCK_ONLY_CSUM_INVALID).
fn csum_check(ctx: &mut Ctx, ino: u32, blk: u64, buf: &mut [u8]) {
    if ctx.fs.geo.features.metadata_csum() && fx::verify_block_checksum(ctx.fs.seed, blk, buf).is_err() {
        let msg = format!("extended attribute block {blk} passes checks, but checksum does not match");
        let f = Finding::new(p::P1_EA_BLOCK_ONLY_CSUM_INVALID, msg, "recompute it");
        if ctx.fix(f.ino(ino).blk(blk)) {
            let ok = fx::set_block_checksum(ctx.fs.seed, blk, buf).is_ok() && ctx.fs.write_block(blk, buf).is_ok();
            if !ok {
                ctx.not_fixed("the block could not be written");
            }
        }
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// After the scan: every valid block's `h_refcount` must equal the inodes
/// that point at it (PR_1_EXTATTR_REFCOUNT); it is set to that.
pub fn check_refcounts(ctx: &mut Ctx, ea: &EaBlocks) {
    let mut v: Vec<_> = ea.seen.iter().map(|(&b, s)| (b, s.refcount, s.users)).collect();
    v.sort_unstable();
    for (blk, stored, users) in v {
        if stored == users {
            continue;
        }
        let msg = format!("extended attribute block {blk} has reference count {stored}, should be {users}");
        if ctx.fix(Finding::new(p::P1_EXTATTR_REFCOUNT, msg, "set the count").blk(blk))
            && let Err(e) = set_refcount(ctx, blk, users)
        {
            ctx.not_fixed(e);
        }
    }
}

/// Rewrites `h_refcount` of block `blk`, with its checksum.
fn set_refcount(ctx: &mut Ctx, blk: u64, n: u32) -> std::io::Result<()> {
    let mut buf = ctx.fs.read_block(blk)?;
    buf[4..8].copy_from_slice(&n.to_le_bytes());
    if ctx.fs.geo.features.metadata_csum() {
        fx::set_block_checksum(ctx.fs.seed, blk, &mut buf)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    }
    ctx.fs.write_block(blk, &buf)
}
