//! Rewriting a quota file from the counted usage (e2fsck's "Update quota
//! info for quota type N", which rewrites the whole file): every id with
//! usage or limits gets an entry, the limits and grace times the file
//! held are kept, ids with neither are dropped, as `v2_commit_dquot`
//! drops them.
//!
//! The layout is the kernel's v2 quota tree (e2fsprogs
//! `lib/support/quotaio_tree.c`, `quotaio_v2.h`), built fresh: quota
//! block 0 holds the header (magic, version 1) and `v2_disk_dqinfo`
//! (grace times and flags kept; `dqi_blocks`, `dqi_free_blk`,
//! `dqi_free_entry` recomputed), block 1 is the root of the four-level
//! radix tree indexed by the id's bytes from the most significant, and
//! data blocks hold up to 14 `v2r1_disk_dqblk` entries after a 16-byte
//! header (`dqdh_next_free`, `dqdh_prev_free`, `dqdh_entries`). A data
//! block left partly full heads the free-entry list, as the kernel
//! expects.
//!
//! The file is written over its own blocks when they suffice; otherwise
//! it is moved to newly allocated blocks (run before pass 5, which then
//! accounts for them).

use std::collections::BTreeMap;

use ext4kit_engine::mkfs::filemap::{FileShape, map_file};
use ext4kit_format::inode::flags;

use crate::alloc::Pool;
use crate::pass1::decode;
use crate::state::Ctx;
use crate::walk::{Event, Walker};

/// Quota block size (`QT_BLKSIZE`).
pub const QBLK: usize = 1024;
/// Bytes of a `v2r1_disk_dqblk`.
pub const DQ_SIZE: usize = 72;
/// Bytes of a data block's header (`qt_disk_dqdbheader`).
pub const DQ_HDR: usize = 16;
/// Entries per data block.
const PER_BLOCK: usize = (QBLK - DQ_HDR) / DQ_SIZE;
/// Depth of the radix tree (`QT_TREEDEPTH`).
const DEPTH: u32 = 4;

/// One entry as stored: `dqb_id`, limits, usage and grace times.
pub type Entry = [u8; DQ_SIZE];

/// Byte offsets in an entry of `dqb_curinodes` and `dqb_curspace`.
pub const CURINODES: usize = 24;
/// See [`CURINODES`].
pub const CURSPACE: usize = 48;

/// An entry of `id` with `old`'s limits and times and the given usage;
/// `None` when it would hold nothing.
pub fn entry(id: u32, old: Option<&Entry>, space: u64, inodes: u64) -> Option<Entry> {
    let mut e = old.copied().unwrap_or([0; DQ_SIZE]);
    e[0..4].copy_from_slice(&id.to_le_bytes());
    e[4..8].fill(0);
    e[CURINODES..CURINODES + 8].copy_from_slice(&inodes.to_le_bytes());
    e[CURSPACE..CURSPACE + 8].copy_from_slice(&space.to_le_bytes());
    let limits = [8, 16, 32, 40].iter().any(|&o| e[o..o + 8] != [0; 8]);
    (space != 0 || inodes != 0 || limits).then_some(e)
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The whole quota file for `entries`, whose header block was `head`
/// (its magic, version and grace times are kept).
pub fn build(head: &[u8], entries: &BTreeMap<u32, Entry>) -> Vec<u8> {
    let mut blocks: Vec<Vec<u8>> = vec![head[..QBLK].to_vec(), vec![0; QBLK]];
    let mut data: Option<(usize, usize)> = None;
    for (&id, e) in entries {
        let (blk, slot) = match data {
            Some((b, n)) if n < PER_BLOCK => (b, n),
            _ => {
                blocks.push(vec![0; QBLK]);
                (blocks.len() - 1, 0)
            }
        };
        data = Some((blk, slot + 1));
        let mut at = 1;
        for depth in 0..DEPTH {
            let idx = ((id >> (8 * (DEPTH - 1 - depth))) & 0xff) as usize * 4;
            let r = get32(&blocks[at], idx) as usize;
            let next = if depth == DEPTH - 1 {
                blk
            } else if r == 0 {
                blocks.push(vec![0; QBLK]);
                blocks.len() - 1
            } else {
                r
            };
            put32(&mut blocks[at], idx, next as u32);
            at = next;
        }
        let b = &mut blocks[blk];
        b[DQ_HDR + slot * DQ_SIZE..DQ_HDR + (slot + 1) * DQ_SIZE].copy_from_slice(e);
        b[8..10].copy_from_slice(&((slot + 1) as u16).to_le_bytes());
    }
    let free_entry = data.filter(|&(_, n)| n < PER_BLOCK).map_or(0, |(b, _)| b as u32);
    let n = blocks.len() as u32;
    let h = &mut blocks[0];
    // v2_disk_dqinfo after the 8-byte header: bgrace, igrace, flags kept.
    put32(h, 8 + 12, n);
    put32(h, 8 + 16, 0);
    put32(h, 8 + 20, free_entry);
    blocks.concat()
}

/// Writes `file` as the content of quota inode `ino`, whose blocks are
/// `map` (file block -> physical block).
pub fn store(ctx: &mut Ctx, ino: u32, file: &[u8], map: &BTreeMap<u64, u64>) -> Result<(), String> {
    let bs = ctx.fs.bs();
    let need = file.len().div_ceil(bs) as u64;
    let io = |e: std::io::Error| format!("writing the quota file: {e}");
    let in_place = (0..need).all(|l| map.contains_key(&l));
    let (phys, new_map) = if in_place {
        ((0..need).map(|l| map[&l]).collect::<Vec<_>>(), None)
    } else {
        let m = reallocate(ctx, ino, need)?;
        let p = m.runs.iter().flat_map(|&(s, n)| s..s + n).collect();
        (p, Some(m))
    };
    for (i, &pblk) in phys.iter().enumerate() {
        let mut buf = vec![0u8; bs];
        let part = &file[(i * bs).min(file.len())..((i + 1) * bs).min(file.len())];
        buf[..part.len()].copy_from_slice(part);
        ctx.fs.write_block(pblk, &buf).map_err(io)?;
    }
    let mut rec = ctx.fs.inode_record(ino).map_err(io)?;
    let mut raw = decode(&rec);
    if let Some(m) = &new_map {
        for (b, data) in &m.meta {
            ctx.fs.write_block(*b, data).map_err(io)?;
        }
        raw.i_block = m.i_block;
        let sectors = m.blocks() * bs as u64 / 512;
        raw.i_blocks_lo.set(sectors as u32);
        raw.i_blocks_high.set(0);
        raw.i_flags.set(raw.i_flags.get() & !flags::HUGE_FILE);
    }
    let size = file.len() as u64;
    if new_map.is_some() || raw.size() < size {
        raw.set_size(size);
    }
    raw.encode_into(&mut rec);
    ctx.fs.write_inode_record(ino, &mut rec).map_err(io)
}

/// Frees the quota file's blocks and allocates `need` new ones from
/// where it began.
fn reallocate(ctx: &mut Ctx, ino: u32, need: u64) -> Result<ext4kit_engine::mkfs::filemap::FileMap, String> {
    let rec = ctx.fs.inode_record(ino).map_err(|e| e.to_string())?;
    let raw = decode(&rec);
    let extents = raw.has_flag(flags::EXTENTS);
    let mut old = Vec::new();
    let mut visit = |e: Event| match e {
        Event::Data { pblk, len, .. } => old.extend(pblk..pblk + u64::from(len)),
        Event::Meta { pblk, .. } => old.push(pblk),
    };
    let mut w = Walker::new(&ctx.fs, ino, &raw, &mut visit);
    w.walk(&raw, extents);
    drop(w);
    let goal = old.first().copied().unwrap_or(0);
    for &b in &old {
        ctx.free_block(b);
    }
    let shape = FileShape {
        block_size: ctx.fs.geo.block_size,
        extents,
        csum_seed: ctx
            .fs
            .geo
            .features
            .metadata_csum()
            .then(|| raw.csum_seed(ctx.fs.seed, ino)),
    };
    let mut pool = Pool::new(ctx);
    let m = map_file(&mut pool, &shape, goal, need);
    let Pool { ctx, taken } = pool;
    m.map_err(|e| {
        for (s, n) in taken {
            (s..s + n).for_each(|b| ctx.free_block(b));
        }
        for &b in &old {
            ctx.used.set(b);
        }
        format!("allocating the quota file: {e}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_has_four_levels_and_shared_data_blocks() {
        let mut head = vec![0u8; QBLK];
        put32(&mut head, 0, 0xd9c0_1f11);
        put32(&mut head, 4, 1);
        put32(&mut head, 8, 604_800);
        let mut es = BTreeMap::new();
        for id in [0u32, 1000, 1001, 70_000] {
            es.insert(id, entry(id, None, 4096, 1).expect("usage"));
        }
        let f = build(&head, &es);
        let blk = |q: usize| &f[q * QBLK..(q + 1) * QBLK];
        // Header, root, then for id 0 a data block, L1, L2 and L3; 1000
        // and 1001 share L1, L2 and the data block (new L3); 70000 needs
        // a new L2 and L3.
        assert_eq!(get32(blk(0), 8), 604_800, "grace kept");
        assert_eq!(get32(blk(0), 20) as usize, f.len() / QBLK);
        assert_eq!(f.len() / QBLK, 9);
        assert_eq!(get32(blk(0), 28), 2, "the partial data block heads the free list");
        assert_eq!(u16::from_le_bytes([blk(2)[8], blk(2)[9]]), 4);
        assert_eq!(get32(blk(1), 0), 3);
        assert_eq!(get32(blk(5), 0), 2, "L3 of id 0 points at the data block");
        assert!(entry(5, None, 0, 0).is_none(), "nothing to keep");
    }
}
