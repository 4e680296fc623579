//! Giving an inode its own copy of the blocks it shares (pass 1D's "clone
//! multiply-claimed blocks", e2fsck's `clone_file`), or deleting it when no
//! copy can be made (`delete_file`).
//!
//! A clone rewrites the inode's mapping in place: in a block map
//! (`ifork.rst`, "Direct/Indirect Block Addressing") each shared data or
//! indirect block gets a new block and the pointer to it is changed; in an
//! extent tree (`struct ext4_extent`, `struct ext4_extent_idx`) each shared
//! tree node gets a new block, and an extent holding a shared block is
//! moved whole to a free run of its length, so no extent has to be split.
//! The blocks an extent leaves that nobody else claims become free. The
//! number of blocks the inode holds does not change, so `i_blocks` stays.
//!
//! [`Shares`] counts the claims on each shared block; when a copy leaves a
//! block with one owner and no metadata on it, it is no longer shared.

use std::collections::{HashMap, HashSet};

use ext4kit_format::extent::{EXT_INIT_MAX_LEN, EXT4_EXT_MAGIC, node_capacity, set_block_checksum};
use ext4kit_format::group_desc::BG_BLOCK_UNINIT;
use ext4kit_format::inode::flags;

use crate::pass1::decode;
use crate::state::Ctx;
use crate::walk::{Event, Walker};

/// Claims (by inodes, one per mapping reference) on each shared cluster,
/// keyed by [`cluster_key`].
pub type Shares = HashMap<u64, u32>;

/// The first block of `b`'s cluster: the unit blocks are shared in on a
/// bigalloc file system (`b` itself without bigalloc).
pub fn cluster_key(ctx: &Ctx, b: u64) -> u64 {
    let bits = ctx.fs.geo.cluster_bits;
    (b >> bits) << bits
}

/// True when a block of `b`'s cluster holds file-system metadata.
fn meta_in_cluster(ctx: &Ctx, b: u64) -> bool {
    let k = cluster_key(ctx, b);
    ctx.meta.count_range(k, k + u64::from(ctx.fs.geo.cluster_ratio())) > 0
}

/// Indirect levels at most (triple indirect).
const MAX_LEVEL: u8 = 3;
/// Extent tree levels followed at most (the walker's bound).
const MAX_EXTENT_DEPTH: u16 = 20;

/// One inode's clone in progress.
struct Cloner<'s, 'a> {
    ctx: &'s mut Ctx<'a>,
    shares: &'s mut Shares,
    csum_seed: u32,
    visited: HashSet<u64>,
    /// Why the clone stopped (no space, an unreadable block).
    failed: Option<String>,
    /// (old, new, len) of every moved data run, for the directory list.
    moved: Vec<(u64, u64, u64)>,
}

/// Gives `ino` its own copy of every block it shares.
///
/// # Errors
/// Why a copy could not be made; the blocks copied so far stay the
/// inode's (its mapping on disk is whole either way).
pub fn clone_inode(ctx: &mut Ctx, shares: &mut Shares, ino: u32) -> Result<(), String> {
    let mut rec = ctx.fs.inode_record(ino).map_err(|e| e.to_string())?;
    let raw = decode(&rec);
    let extents = raw.has_flag(flags::EXTENTS);
    let csum_seed = raw.csum_seed(ctx.fs.seed, ino);
    let mut c = Cloner {
        ctx,
        shares,
        csum_seed,
        visited: HashSet::new(),
        failed: None,
        moved: Vec::new(),
    };
    let mut i_block = raw.i_block;
    let changed = if extents {
        c.extent_node(&mut i_block, true, MAX_EXTENT_DEPTH)
    } else {
        c.block_map(&mut i_block)
    };
    let (failed, moved) = (c.failed.take(), std::mem::take(&mut c.moved));
    if changed {
        // i_block is bytes 40..100 of the inode record.
        rec[40..100].copy_from_slice(&i_block);
        ctx.fs
            .write_inode_record(ino, &mut rec)
            .map_err(|e| format!("writing inode {ino}: {e}"))?;
    }
    update_dir_blocks(ctx, ino, &moved);
    failed.map_or(Ok(()), Err)
}

/// Pass 2 reads directories through the list pass 1 made: moved blocks
/// are looked for at their new places.
fn update_dir_blocks(ctx: &mut Ctx, ino: u32, moved: &[(u64, u64, u64)]) {
    if moved.is_empty() || !ctx.is_dir(ino) {
        return;
    }
    for d in ctx.dblocks.iter_mut().filter(|d| d.ino == ino) {
        if let Some(&(old, new, _)) = moved.iter().find(|&&(o, _, n)| d.pblk >= o && d.pblk < o + n) {
            d.pblk = new + (d.pblk - old);
        }
    }
}

fn le32(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}
fn le16(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

impl Cloner<'_, '_> {
    fn shared(&self, b: u64) -> bool {
        self.ctx.dup.get(b)
    }

    /// This inode gives up its claim on shared block `b`.
    fn release(&mut self, b: u64) {
        release(self.ctx, self.shares, b);
    }

    /// A new block near `goal`, or the reason there is none.
    fn alloc(&mut self, goal: u64) -> Option<u64> {
        if self.failed.is_some() {
            return None;
        }
        let b = self.ctx.alloc_block(goal);
        if b.is_none() {
            self.failed = Some("no free block for a copy".into());
        }
        b
    }

    /// Copies `old` to a new block; `None` when the clone has stopped.
    fn copy_of(&mut self, old: u64) -> Option<u64> {
        let data = match self.ctx.fs.read_block(old) {
            Ok(d) => d,
            Err(e) => {
                self.failed = Some(format!("reading block {old}: {e}"));
                return None;
            }
        };
        let new = self.alloc(old)?;
        self.write(new, &data);
        self.release(old);
        Some(new)
    }

    fn write(&mut self, blk: u64, data: &[u8]) {
        if let Err(e) = self.ctx.fs.write_block(blk, data) {
            self.failed.get_or_insert(format!("writing block {blk}: {e}"));
        }
    }

    /// The twelve direct pointers and the three indirect trees; true when
    /// a pointer in `i_block` changed.
    fn block_map(&mut self, i_block: &mut [u8]) -> bool {
        let mut changed = false;
        for slot in 0..15usize {
            let level = slot.saturating_sub(11).min(3) as u8;
            changed |= self.pointer(i_block, slot * 4, level);
        }
        changed
    }

    /// The pointer at byte `at` of `parent`, to a block of `level` (0 data);
    /// true when it changed.
    fn pointer(&mut self, parent: &mut [u8], at: usize, level: u8) -> bool {
        let b = u64::from(le32(parent, at));
        if b == 0 || !self.ctx.fs.valid_block(b) {
            return false;
        }
        let new = if level == 0 {
            if !self.shared(b) {
                return false;
            }
            self.copy_of(b)
        } else {
            self.indirect(b, level)
        };
        match new {
            Some(n) => {
                parent[at..at + 4].copy_from_slice(&(n as u32).to_le_bytes());
                true
            }
            None => false,
        }
    }

    /// An indirect block: its pointers first, then the block itself, which
    /// moves when shared. The new place, if it moved.
    fn indirect(&mut self, b: u64, level: u8) -> Option<u64> {
        if level > MAX_LEVEL || !self.visited.insert(b) {
            return None;
        }
        let mut buf = self.ctx.fs.read_block(b).ok()?;
        let mut changed = false;
        for i in 0..buf.len() / 4 {
            changed |= self.pointer(&mut buf, i * 4, level - 1);
        }
        if self.shared(b)
            && let Some(new) = self.alloc(b)
        {
            self.write(new, &buf);
            self.release(b);
            return Some(new);
        }
        if changed {
            self.write(b, &buf);
        }
        None
    }

    /// An extent tree node (`buf` is `i_block` for the root); true when
    /// an entry of it changed.
    fn extent_node(&mut self, buf: &mut [u8], is_root: bool, depth_left: u16) -> bool {
        let (magic, entries, max, depth) = (le16(buf, 0), le16(buf, 2), le16(buf, 4), le16(buf, 6));
        if magic != EXT4_EXT_MAGIC || entries > max || max > node_capacity(buf.len(), is_root) || depth > depth_left {
            return false;
        }
        let mut changed = false;
        for i in 0..usize::from(entries) {
            let o = 12 + i * 12;
            changed |= if depth == 0 {
                self.leaf(buf, o)
            } else {
                self.index(buf, o, depth)
            };
        }
        changed
    }

    /// A leaf extent holding a shared block moves whole.
    fn leaf(&mut self, buf: &mut [u8], o: usize) -> bool {
        let raw_len = le16(buf, o + 4);
        let len = u64::from(if raw_len > EXT_INIT_MAX_LEN {
            raw_len - EXT_INIT_MAX_LEN
        } else {
            raw_len
        });
        let pblk = (u64::from(le16(buf, o + 6)) << 32) | u64::from(le32(buf, o + 8));
        if len == 0 || !self.ctx.fs.valid_block(pblk) || pblk + len > self.ctx.fs.geo.blocks_count {
            return false;
        }
        if !(pblk..pblk + len).any(|b| self.shared(b)) || self.failed.is_some() {
            return false;
        }
        let Some(new) = alloc_run(self.ctx, len, pblk) else {
            self.failed = Some(format!("no free run of {len} blocks for a copy"));
            return false;
        };
        let mut last_cluster = None;
        for k in 0..len {
            match self.ctx.fs.read_block(pblk + k) {
                Ok(d) => self.write(new + k, &d),
                Err(e) => {
                    self.failed.get_or_insert(format!("reading block {}: {e}", pblk + k));
                }
            }
            // Once per cluster, decided before the release changes it.
            let key = cluster_key(self.ctx, pblk + k);
            if last_cluster.replace(key) == Some(key) {
                continue;
            }
            if self.shared(pblk + k) {
                self.release(pblk + k);
            } else {
                self.ctx.free_block(pblk + k);
            }
        }
        buf[o + 6..o + 8].copy_from_slice(&((new >> 32) as u16).to_le_bytes());
        buf[o + 8..o + 12].copy_from_slice(&(new as u32).to_le_bytes());
        self.moved.push((pblk, new, len));
        true
    }

    /// An index entry: the child node first, then the child block itself,
    /// which moves when shared.
    fn index(&mut self, buf: &mut [u8], o: usize, depth: u16) -> bool {
        let child = (u64::from(le16(buf, o + 8)) << 32) | u64::from(le32(buf, o + 4));
        if !self.ctx.fs.valid_block(child) || !self.visited.insert(child) {
            return false;
        }
        let Ok(mut node) = self.ctx.fs.read_block(child) else {
            return false;
        };
        let changed = self.extent_node(&mut node, false, depth - 1);
        let moved = if self.shared(child) { self.alloc(child) } else { None };
        if changed || moved.is_some() {
            if self.ctx.fs.geo.features.metadata_csum() {
                let _ = set_block_checksum(&mut node, self.csum_seed);
            }
            self.write(moved.unwrap_or(child), &node);
        }
        let Some(new) = moved else {
            return false;
        };
        self.release(child);
        buf[o + 4..o + 8].copy_from_slice(&(new as u32).to_le_bytes());
        buf[o + 8..o + 10].copy_from_slice(&((new >> 32) as u16).to_le_bytes());
        true
    }
}

/// An owner gives up its claim on shared block `b`: with one claim left
/// and no file-system metadata on it, the block is no longer shared.
fn release(ctx: &mut Ctx, shares: &mut Shares, b: u64) {
    let n = shares.entry(cluster_key(ctx, b)).or_insert(1);
    *n = n.saturating_sub(1);
    if *n <= 1 && !meta_in_cluster(ctx, b) {
        ctx.dup.clear(b);
    }
}

/// `n` free contiguous blocks, searched from `goal` then from the start,
/// outside groups whose block bitmap is uninitialized; marked in use.
/// With bigalloc the run lies in whole free clusters at `goal`'s offset
/// within its cluster, so a moved extent keeps its logical blocks at
/// their offsets in the physical clusters (`bigalloc.rst`).
fn alloc_run(ctx: &mut Ctx, n: u64, goal: u64) -> Option<u64> {
    let bits = ctx.fs.geo.cluster_bits;
    if n == 1 && bits == 0 {
        return ctx.alloc_block(goal);
    }
    if !ctx.blocks_known {
        return None;
    }
    let off = goal - cluster_key(ctx, goal);
    let want = n + off;
    let end = ctx.fs.geo.blocks_count;
    let first = u64::from(ctx.fs.geo.first_data_block);
    for (lo, hi) in [(goal, end), (first, goal.saturating_add(n).min(end))] {
        let mut from = (lo >> bits) << bits;
        while let Some(at) = ctx.free_run(from, hi, want) {
            match (at..at + want).find(|&b| block_uninit(ctx, b)) {
                Some(b) => from = b + 1,
                None => {
                    for b in at..at + want {
                        ctx.used.set(b);
                    }
                    return Some(at + off);
                }
            }
        }
    }
    None
}

fn block_uninit(ctx: &Ctx, b: u64) -> bool {
    let geo = &ctx.fs.geo;
    let g = (b - u64::from(geo.first_data_block)) / u64::from(geo.blocks_per_group);
    geo.features.has_group_csum()
        && ctx
            .fs
            .groups
            .get(g as usize)
            .is_some_and(|d| d.flags() & BG_BLOCK_UNINIT != 0)
}

/// Deletes `ino` (e2fsck's `delete_file` after a failed clone): the blocks
/// only it claims become free, its claims on shared ones are given up, and
/// the inode is marked deleted (no links, `i_dtime` set); pass 2 then
/// removes the entries that name it.
pub fn delete_inode(ctx: &mut Ctx, shares: &mut Shares, ino: u32, now: u32) -> Result<(), String> {
    let mut rec = ctx.fs.inode_record(ino).map_err(|e| e.to_string())?;
    let raw = decode(&rec);
    let mut blocks = Vec::new();
    let mut visit = |e: Event| match e {
        Event::Data { pblk, len, .. } => blocks.extend(pblk..pblk + u64::from(len)),
        Event::Meta { pblk, .. } => blocks.push(pblk),
    };
    if !raw.has_flag(flags::INLINE_DATA) {
        let mut w = Walker::new(&ctx.fs, ino, &raw, &mut visit);
        w.walk(&raw, raw.has_flag(flags::EXTENTS));
    }
    let mut keys: Vec<u64> = blocks.iter().map(|&b| cluster_key(ctx, b)).collect();
    if ctx.fs.geo.cluster_bits > 0 {
        keys.sort_unstable();
        keys.dedup();
    }
    for b in keys {
        if ctx.dup.get(b) {
            release(ctx, shares, b);
        } else if !meta_in_cluster(ctx, b) {
            ctx.free_block(b);
        }
    }
    // i_links_count at 26, i_dtime at 20.
    rec[26..28].copy_from_slice(&0u16.to_le_bytes());
    rec[20..24].copy_from_slice(&now.max(1).to_le_bytes());
    ctx.fs
        .write_inode_record(ino, &mut rec)
        .map_err(|e| format!("writing inode {ino}: {e}"))?;
    ctx.kind[ino as usize] = crate::state::KIND_FREE;
    ctx.links[ino as usize] = 0;
    ctx.dirs.remove(&ino);
    ctx.dblocks.retain(|d| d.ino != ino);
    Ok(())
}
