//! Pass 3A, rebuilding directories (e2fsck's "Optimizing directories",
//! `rehash.c`), run after pass 3 in a repair:
//!
//! - every directory whose hash index pass 2 dropped ([`Plan::dirs`]) is
//!   indexed again, so a large directory does not stay linear (and slow)
//!   after a repair;
//! - with `-D` ([`Plan::all`]) every directory is rebuilt: packed tight
//!   when linear, re-indexed when indexed or large.
//!
//! A directory is read whole into memory (its names, `.` and `..`), then
//! laid out anew ([`crate::dx_build`]): with the dir_index feature, two or
//! more blocks and more than a block's worth of names, as an htree whose
//! leaves keep a fifth free, hashed with the superblock's default hash
//! (`s_def_hash_version`, its unsigned-char twin when `s_flags` says so)
//! and seed — or, in a casefolded and encrypted directory, by SipHash
//! (version 6) over the hashes its entries store, which are kept, since
//! only the key could compute them; otherwise as a linear directory, `.` and `..` first, then the
//! names by inode number, packed full. The blocks the new layout needs
//! are the directory's own, grown at the end when it needs more; blocks
//! it no longer needs are cut from the mapping and leave `ctx.used`
//! (`/lost+found` keeps them, emptied, for later reconnections).
//! `i_size`, `i_blocks` and INDEX_FL follow. The next run
//! of the repair loop checks the result like any directory.
//!
//! Not rebuilt: inline and itree directories, case-folded ones that are
//! not encrypted (their hash needs Unicode folding), directories whose blocks are not one run
//! from logical block 0 or whose records do not parse, and bigalloc file
//! systems (blocks there are counted in clusters).

use std::collections::{BTreeSet, HashSet};

use ext4kit_format::dir_entry::{TAIL_SIZE, rec_len_for, rec_len_from_disk, rec_len_hashed};
use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::hash::{HashVersion, dx_hash, seed_from_bytes};
use ext4kit_format::inode::{RawInode, flags};

use crate::dir_block::empty_block;
use crate::dx_build::{self, Name, Shape};
use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::{Ctx, DirBlock};
use crate::walk::{Event, Walker};

/// Directories to rebuild this run.
#[derive(Debug, Default)]
pub struct Plan {
    /// Directories whose index pass 2 dropped.
    pub dirs: BTreeSet<u32>,
    /// `-D`: every directory.
    pub all: bool,
}

/// Blocks a directory may have to be rebuilt (its names are held in
/// memory: at most this many blocks' worth).
const MAX_BLOCKS: usize = 1 << 20;

/// Runs pass 3A.
pub fn run(ctx: &mut Ctx) {
    let plan = std::mem::take(&mut ctx.rehash);
    if !ctx.repairing() || ctx.fs.geo.features.ro_compat.contains(RoCompatFeatures::BIGALLOC) {
        return;
    }
    let dirs: Vec<u32> = if plan.all {
        ctx.dirs.keys().copied().collect()
    } else {
        plan.dirs.into_iter().collect()
    };
    if dirs.is_empty() {
        return;
    }
    ctx.report.passes.push("3A".into());
    for ino in dirs {
        if ctx.cancelled() || ctx.halted {
            break;
        }
        if let Err(e) = rebuild(ctx, ino) {
            ctx.report.note(format!("directory {ino} not rebuilt: {e}"));
        }
    }
}

/// What a directory holds: `.` and `..` (inode, file type), its other
/// names, and their minimal record bytes.
struct Scan {
    dot: (u32, u8),
    dotdot: (u32, u8),
    names: Vec<Name>,
    bytes: usize,
}

/// Rebuilds directory `ino`; `Ok` also when it is one this pass leaves alone.
fn rebuild(ctx: &mut Ctx, ino: u32) -> Result<(), String> {
    let Some(info) = ctx.dirs.get(&ino).cloned() else {
        return Ok(());
    };
    if info.inline || info.itree || !ctx.is_dir(ino) {
        return Ok(());
    }
    let raw = decode(&ctx.fs.inode_record(ino).map_err(|e| e.to_string())?);
    let hashed = raw.has_flag(flags::CASEFOLD) && raw.has_flag(flags::ENCRYPT);
    if raw.has_flag(flags::CASEFOLD) && !hashed && ctx.fs.geo.features.incompat.contains(IncompatFeatures::CASEFOLD) {
        return Err("case-folded names are not hashed here".into());
    }
    let blocks = dir_blocks(ctx, ino);
    let bs = ctx.fs.bs();
    if blocks.is_empty() || blocks.len() > MAX_BLOCKS || raw.size() != (blocks.len() * bs) as u64 {
        return Err("its blocks are not one run from block 0 covering i_size".into());
    }
    let scan = scan(ctx, ino, &blocks, hashed)?;
    let shape = Shape {
        bs,
        csum: ctx.fs.geo.features.metadata_csum(),
        seed: info.csum_seed,
        filetype: ctx.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE),
        large_dir: ctx.fs.geo.features.incompat.contains(IncompatFeatures::LARGEDIR),
        hashed,
    };
    let (new, indexed) = layout(ctx, ino, &shape, &scan, blocks.len(), shape.htree_slack());
    let what = if indexed { "indexed" } else { "packed" };
    let msg = format!("directory rebuilt ({what}): {} blocks, was {}", new.len(), blocks.len());
    if !ctx.fix(Finding::new(p::P3A_OPTIMIZE_DIR, msg, "rebuild it").ino(ino).warning()) {
        return Ok(());
    }
    let done = grow(ctx, ino, new.len()).and_then(|have| {
        let (new, indexed) = if new.len() <= have {
            (new, indexed)
        } else {
            ctx.report.note(format!(
                "directory {ino} cannot grow to {} blocks: its leaves are filled full (or it stays linear)",
                new.len()
            ));
            [blocks.len(), 0]
                .into_iter()
                .map(|n| layout(ctx, ino, &shape, &scan, n, 12))
                .find(|l| l.0.len() <= have)
                .ok_or("no layout fits its blocks")?
        };
        write(ctx, ino, &new, indexed)
    });
    if let Err(e) = done {
        ctx.not_fixed(&e);
    }
    Ok(())
}

/// Grows the directory by empty blocks up to `want` blocks, as far as
/// its mapping can grow; returns the blocks it now has.
fn grow(ctx: &mut Ctx, ino: u32, want: usize) -> Result<usize, String> {
    let (bs, csum) = (ctx.fs.bs(), ctx.fs.geo.features.metadata_csum());
    let seed = ctx.dirs.get(&ino).map_or(0, |d| d.csum_seed);
    loop {
        let have = dir_blocks(ctx, ino).len();
        if have >= want {
            return Ok(have);
        }
        let Ok((_, pblk)) = crate::dir_expand::append_block(ctx, ino) else {
            return Ok(have);
        };
        ctx.fs
            .write_block(pblk, &empty_block(bs, csum, seed))
            .map_err(|e| e.to_string())?;
    }
}

/// The directory's blocks, checked to be logical blocks 0, 1, 2… with
/// none a hole; empty when they are not.
fn dir_blocks(ctx: &Ctx, ino: u32) -> Vec<DirBlock> {
    let a = ctx.dblocks.partition_point(|b| b.ino < ino);
    let z = ctx.dblocks.partition_point(|b| b.ino <= ino);
    let v = &ctx.dblocks[a..z];
    let run = v.iter().enumerate().all(|(i, b)| b.lblk as usize == i && b.pblk != 0);
    if run { v.to_vec() } else { Vec::new() }
}

/// Reads every record of the directory (a tail, an index node's fake
/// dirent and a root's hidden `dx_root_info` are records naming inode 0,
/// or inside one). In a `hashed` directory (casefolded and encrypted)
/// each name keeps the hash stored after it: SipHash of the plaintext,
/// which only the key could recompute (e2fsck's rehash keeps them too).
/// Fails on a record chain that does not parse.
fn scan(ctx: &Ctx, ino: u32, blocks: &[DirBlock], hashed: bool) -> Result<Scan, String> {
    let mc = ctx.fs.geo.features.metadata_csum();
    let filetype = ctx.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE);
    let bs = ctx.fs.bs();
    let mut s = Scan {
        dot: (0, 0),
        dotdot: (0, 0),
        names: Vec::new(),
        bytes: 0,
    };
    for b in blocks {
        let buf = ctx
            .fs
            .read_block(b.pblk)
            .map_err(|e| format!("block {}: {e}", b.lblk))?;
        let mut pos = 0;
        while pos < bs {
            if pos + 8 > bs {
                return Err(format!("block {} ends in a partial record", b.lblk));
            }
            let h = &buf[pos..];
            let inode = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            let rec_len = rec_len_from_disk(u16::from_le_bytes([h[4], h[5]]), bs);
            let (mut name_len, mut ft) = (usize::from(h[6]), h[7]);
            if !filetype {
                name_len |= usize::from(ft) << 8;
                ft = 0;
            }
            // `.`, `..` and the checksum tail never hold a hash (e2fsck's `is_fake_entry`).
            let fake = (b.lblk == 0 && pos <= 12) || (mc && pos == bs - TAIL_SIZE);
            let min = rec_len_hashed(0, hashed && !fake);
            if rec_len < min || !rec_len.is_multiple_of(4) || pos + rec_len > bs || name_len + min > rec_len {
                return Err(format!("block {} is corrupt at offset {pos}", b.lblk));
            }
            let hash = (hashed && !fake).then(|| {
                let at = rec_len_for(name_len);
                let w = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
                (w(at), w(at + 4))
            });
            pos += rec_len;
            if inode == 0 {
                continue;
            }
            let name = h[8..8 + name_len].to_vec();
            take(&mut s, ino, inode, ft, name, hash)?;
        }
    }
    if s.dot.0 == 0 || s.dotdot.0 == 0 {
        return Err("no '.' or '..'".into());
    }
    Ok(s)
}

/// Files one record: the first `.` and `..` are kept apart, any later
/// one dropped (pass 2 clears them).
fn take(s: &mut Scan, ino: u32, inode: u32, ft: u8, name: Vec<u8>, hash: Option<(u32, u32)>) -> Result<(), String> {
    match name.as_slice() {
        [] => Err("a record names an inode with an empty name".into()),
        b"." if s.dot.0 == 0 => {
            s.dot = (ino, ft);
            Ok(())
        }
        b".." if s.dotdot.0 == 0 => {
            s.dotdot = (inode, ft);
            Ok(())
        }
        b"." | b".." => Ok(()),
        _ => {
            s.bytes += rec_len_hashed(name.len(), hash.is_some());
            let (hash, minor) = hash.unwrap_or((0, 0));
            s.names.push(Name {
                hash,
                minor,
                name,
                inode,
                ft,
            });
            Ok(())
        }
    }
}

/// The new blocks, in logical order, and whether they are an htree
/// (whose leaves keep `slack` bytes free).
fn layout(ctx: &Ctx, ino: u32, s: &Shape, scan: &Scan, nblocks: usize, slack: usize) -> (Vec<Vec<u8>>, bool) {
    let f = ctx.fs.geo.features;
    let version = if s.hashed {
        Some(HashVersion::SipHash)
    } else {
        HashVersion::effective(ctx.fs.sb.s_def_hash_version, ctx.fs.sb.s_flags.get())
            .filter(|v| *v != HashVersion::SipHash)
    };
    let big = scan.bytes >= s.bs - 24;
    if let Some(v) = version.filter(|_| f.compat.contains(CompatFeatures::DIR_INDEX) && nblocks >= 2 && big) {
        let seed = hash_seed(ctx);
        let mut names = scan.names.clone();
        // A hashed directory's names keep the hashes they store.
        for n in names.iter_mut().filter(|_| !s.hashed) {
            (n.hash, n.minor) = dx_hash(&n.name, v, &seed).map_or((0, 0), |h| (h.major, h.minor));
        }
        names.sort_unstable();
        let (leaves, hashes) = dx_build::leaves(s, &names, slack);
        let stored = match v {
            HashVersion::SipHash => v,
            _ => HashVersion::from_code(ctx.fs.sb.s_def_hash_version).unwrap_or(v),
        };
        if let Some((root, nodes)) = dx_build::index(s, ino, scan.dotdot.0, stored, &hashes) {
            let mut out = vec![root];
            out.extend(leaves);
            out.extend(nodes);
            return (out, true);
        }
    }
    let mut all = vec![dot_name(b".", scan.dot), dot_name(b"..", scan.dotdot)];
    let at = all.len();
    all.extend(scan.names.iter().cloned());
    all[at..].sort_unstable_by(|a, b| (a.inode, &a.name).cmp(&(b.inode, &b.name)));
    (dx_build::leaves(s, &all, 12).0, false)
}

fn dot_name(name: &[u8], (inode, ft): (u32, u8)) -> Name {
    Name {
        hash: 0,
        minor: 0,
        name: name.to_vec(),
        inode,
        ft,
    }
}

/// `s_hash_seed` as the hash functions take it.
fn hash_seed(ctx: &Ctx) -> [u32; 4] {
    let mut bytes = [0u8; 16];
    for (i, w) in ctx.fs.sb.s_hash_seed.iter().enumerate() {
        bytes[i * 4..i * 4 + 4].copy_from_slice(&w.get().to_le_bytes());
    }
    seed_from_bytes(&bytes)
}

/// Puts `new` in place of the directory's first blocks (it has at least
/// as many), cuts what is left over (empties it in `/lost+found`), and
/// sets `i_size` and INDEX_FL.
fn write(ctx: &mut Ctx, ino: u32, new: &[Vec<u8>], indexed: bool) -> Result<(), String> {
    let bs = ctx.fs.bs();
    let (csum, seed) = (
        ctx.fs.geo.features.metadata_csum(),
        ctx.dirs.get(&ino).map_or(0, |d| d.csum_seed),
    );
    let blocks = dir_blocks(ctx, ino);
    let keep_all = ctx.lost_found == Some(ino);
    for (i, b) in blocks.iter().enumerate() {
        let empty;
        let data = match new.get(i) {
            Some(d) => d,
            None if keep_all => {
                empty = empty_block(bs, csum, seed);
                &empty
            }
            None => break,
        };
        ctx.fs.write_block(b.pblk, data).map_err(|e| e.to_string())?;
    }
    let keep = if keep_all { blocks.len() } else { new.len() };
    if keep < blocks.len() {
        shrink(ctx, ino, keep)?;
    }
    finish_inode(ctx, ino, (keep * bs) as u64, indexed)
}

/// Cuts the directory's mapping after `keep` blocks; the data and
/// mapping blocks no longer mapped leave `ctx.used`.
fn shrink(ctx: &mut Ctx, ino: u32, keep: usize) -> Result<(), String> {
    let mut rec = ctx.fs.inode_record(ino).map_err(|e| e.to_string())?;
    let mut raw = decode(&rec);
    let was = mapped(ctx, ino, &raw);
    let (lo, hi) = (raw.i_blocks_lo, raw.i_blocks_high);
    crate::truncate::truncate(&ctx.fs, ino, &mut raw, keep as u64, 0)?;
    let now = mapped(ctx, ino, &raw);
    let gone: Vec<u64> = was.difference(&now).copied().collect();
    (raw.i_blocks_lo, raw.i_blocks_high) = (lo, hi);
    crate::inode_edit::add_blocks(&ctx.fs, &mut raw, -(gone.len() as i64));
    raw.encode_into(&mut rec);
    ctx.fs.write_inode_record(ino, &mut rec).map_err(|e| e.to_string())?;
    for b in gone {
        ctx.free_block(b);
    }
    let a = ctx.dblocks.partition_point(|b| b.ino < ino);
    let z = ctx.dblocks.partition_point(|b| b.ino <= ino);
    ctx.dblocks.drain(a + keep..z);
    Ok(())
}

/// Every block the inode's mapping holds: data and mapping blocks.
fn mapped(ctx: &Ctx, ino: u32, raw: &RawInode) -> HashSet<u64> {
    let mut set = HashSet::new();
    let mut visit = |e: Event| match e {
        Event::Data { pblk, len, .. } => set.extend(pblk..pblk + u64::from(len)),
        Event::Meta { pblk, .. } => {
            set.insert(pblk);
        }
    };
    Walker::new(&ctx.fs, ino, raw, &mut visit).walk(raw, raw.has_flag(flags::EXTENTS));
    set
}

/// The inode after the rebuild: its size and INDEX_FL. (Its quota
/// usage is counted afresh by the next run, which a rebuild always
/// causes.)
fn finish_inode(ctx: &mut Ctx, ino: u32, size: u64, indexed: bool) -> Result<(), String> {
    let mut rec = ctx.fs.inode_record(ino).map_err(|e| e.to_string())?;
    let mut raw = decode(&rec);
    raw.set_size(size);
    let fl = raw.i_flags.get();
    raw.i_flags
        .set(if indexed { fl | flags::INDEX } else { fl & !flags::INDEX });
    raw.encode_into(&mut rec);
    ctx.fs.write_inode_record(ino, &mut rec).map_err(|e| e.to_string())?;
    if let Some(d) = ctx.dirs.get_mut(&ino) {
        d.size = size;
        d.htree = indexed;
    }
    Ok(())
}
