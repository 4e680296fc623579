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
use ext4kit_format::quota::Dquot;

use crate::alloc::Pool;
use crate::pass1::decode;
use crate::state::Ctx;
use crate::walk::{Event, Walker};

/// An entry of `id` with `old`'s limits and times and the given usage;
/// `None` when it would hold nothing.
pub fn entry(id: u32, old: Option<&Dquot>, space: u64, inodes: u64) -> Option<Dquot> {
    let d = Dquot {
        id,
        curspace: space,
        curinodes: inodes,
        ..old.copied().unwrap_or_default()
    };
    d.worth_keeping().then_some(d)
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
    fn entries_keep_limits_and_drop_empty_ids() {
        let old = Dquot {
            id: 9,
            bhardlimit: 50,
            btime: 7,
            ..Dquot::default()
        };
        let e = entry(9, Some(&old), 4096, 2).expect("usage");
        assert_eq!((e.bhardlimit, e.btime, e.curspace, e.curinodes), (50, 7, 4096, 2));
        assert!(entry(9, Some(&old), 0, 0).is_some(), "limits keep the entry");
        assert!(entry(5, None, 0, 0).is_none(), "nothing to keep");
    }
}
