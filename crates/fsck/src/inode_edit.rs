//! Pass 1's repairs to one inode record (`inodes.rst`, `struct ext4_inode`):
//! the record is decoded once, the checks change the decoded copy, and the
//! record is written back once at the end of the inode (through
//! [`crate::fs::RawFs::write_inode_record`], which sets its checksum), as
//! e2fsck writes an inode after it fixes a field.
//!
//! Clearing an inode is e2fsck's `e2fsck_clear_inode`: no flags, no links,
//! a deletion time, and (for a reserved inode) no block pointers; the
//! checker then treats it as free and claims none of its blocks.
//!
//! Later passes change one record at a time with [`update`]: read it, let
//! the repair change the decoded fields, write it back with its checksum.
//! Fields past `i_extra_isize` and the in-inode xattrs are left as they were.

use std::io;

use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::inode::{RawInode, flags};

use crate::fs::RawFs;
use crate::pass1::decode;
use crate::state::{Ctx, KIND_FREE};

/// One inode being checked and, when repairs are allowed, changed.
pub struct InodeEdit {
    /// The inode number.
    pub ino: u32,
    /// The decoded record, with any repairs made so far.
    pub raw: RawInode,
    /// The on-disk record (`s_inode_size` bytes), for the in-inode xattr
    /// area that [`RawInode`] does not cover.
    pub rec: Vec<u8>,
    /// A repair changed `raw` or `rec`: write the record back.
    pub dirty: bool,
    /// The inode was cleared: it is free from now on.
    pub cleared: bool,
}

impl InodeEdit {
    /// The record `rec` of inode `ino`.
    pub fn new(ino: u32, rec: &[u8]) -> Self {
        Self {
            ino,
            raw: crate::pass1::decode(rec),
            rec: rec.to_vec(),
            dirty: false,
            cleared: false,
        }
    }

    /// Writes the record back (the fields of `raw` over the record's
    /// first bytes, then the checksum). Returns false if the write failed.
    pub fn write(&mut self, ctx: &mut Ctx) -> bool {
        let n = self
            .rec
            .len()
            .min(128 + usize::from(self.raw.i_extra_isize.get()).min(32));
        let bytes = zerocopy::IntoBytes::as_bytes(&self.raw);
        self.rec[..n].copy_from_slice(&bytes[..n]);
        self.dirty = false;
        ctx.fs.write_inode_record(self.ino, &mut self.rec).is_ok()
    }
}

/// A deletion time for a cleared inode: now, but never below
/// `s_inodes_count`, so it cannot be taken for an orphan-list link
/// (`ext2fs_set_dtime`).
pub fn dtime_now(ctx: &Ctx) -> u32 {
    ctx.now.max(ctx.fs.geo.inodes_count)
}

/// Clears the inode in `ed` (e2fsck's `e2fsck_clear_inode`) and forgets
/// what pass 1 learnt of it: it is free, and owns no blocks.
pub fn clear(ctx: &mut Ctx, ed: &mut InodeEdit) {
    ed.raw.i_flags.set(0);
    ed.raw.i_links_count.set(0);
    ed.raw.i_dtime.set(dtime_now(ctx));
    if ed.ino < ctx.fs.geo.first_ino {
        ed.raw.i_block = [0; 60];
    }
    if !ed.write(ctx) {
        ctx.not_fixed("the inode could not be written");
    }
    ed.cleared = true;
    forget(ctx, ed.ino);
}

/// Drops pass 1's facts about `ino`, now free.
pub fn forget(ctx: &mut Ctx, ino: u32) {
    let i = ino as usize;
    if let Some(k) = ctx.kind.get_mut(i) {
        *k = KIND_FREE;
    }
    if let Some(l) = ctx.links.get_mut(i) {
        *l = 0;
    }
    ctx.dirs.remove(&ino);
    ctx.ea_inode.clear(u64::from(ino));
    ctx.empty.clear(u64::from(ino));
    // Pass 1 records an inode's directory blocks last, while it walks it.
    while ctx.dblocks.last().is_some_and(|d| d.ino == ino) {
        ctx.dblocks.pop();
    }
}

/// Blocks one inode's walk newly claimed, as runs, so that clearing the
/// inode afterwards can give them back (e2fsck restarts pass 1 instead).
#[derive(Debug, Default)]
pub struct Claims {
    used: Vec<(u64, u64)>,
    dup: Vec<(u64, u64)>,
}

fn push_run(runs: &mut Vec<(u64, u64)>, blk: u64) {
    match runs.last_mut() {
        Some((start, len)) if *start + *len == blk => *len += 1,
        _ => runs.push((blk, 1)),
    }
}

impl Claims {
    /// Claims `blk` in `used`, marking `dup` on a second claim, and
    /// remembers what changed.
    pub fn claim(&mut self, used: &mut crate::bitmap::Bitmap, dup: &mut crate::bitmap::Bitmap, blk: u64) {
        if !used.set(blk) {
            push_run(&mut self.used, blk);
        } else if !dup.set(blk) {
            push_run(&mut self.dup, blk);
        }
    }

    /// Gives back every claim made through `self`.
    pub fn undo(&self, ctx: &mut Ctx) {
        for &(s, n) in &self.used {
            (s..s + n).for_each(|b| ctx.used.clear(b));
        }
        for &(s, n) in &self.dup {
            (s..s + n).for_each(|b| ctx.dup.clear(b));
        }
    }
}

/// Reads inode `ino`, applies `f` to it, and writes it back.
pub fn update(fs: &RawFs, ino: u32, f: impl FnOnce(&mut RawInode)) -> io::Result<()> {
    let mut rec = fs.inode_record(ino)?;
    let mut raw = decode(&rec);
    f(&mut raw);
    raw.encode_into(&mut rec);
    fs.write_inode_record(ino, &mut rec)
}

/// The inode's `i_blocks` as a count of the unit it is stored in (512-byte
/// sectors, or file-system blocks with `HUGE_FILE_FL`), 48 bits with
/// huge_file.
fn iblocks_raw(fs: &RawFs, raw: &RawInode) -> u64 {
    let lo = u64::from(raw.i_blocks_lo.get());
    if fs.geo.features.ro_compat.contains(RoCompatFeatures::HUGE_FILE) {
        lo | (u64::from(raw.i_blocks_high.get()) << 32)
    } else {
        lo
    }
}

/// Adds (or with a negative `blocks`, takes away) whole file-system blocks
/// to `i_blocks`, in the unit the inode stores it in.
pub fn add_blocks(fs: &RawFs, raw: &mut RawInode, blocks: i64) {
    let unit = if raw.has_flag(flags::HUGE_FILE) {
        1
    } else {
        i64::from(fs.geo.block_size / 512)
    };
    let now = iblocks_raw(fs, raw) as i64;
    let n = now.saturating_add(blocks.saturating_mul(unit)).max(0) as u64;
    raw.i_blocks_lo.set(n as u32);
    if fs.geo.features.ro_compat.contains(RoCompatFeatures::HUGE_FILE) {
        raw.i_blocks_high.set((n >> 32) as u16);
    }
}
