//! Pass 1B–1D: blocks claimed more than once. Pass 1 only knows which
//! blocks are claimed twice; this pass rescans the inodes in use to learn
//! which inodes share them, and whether they share with file-system
//! metadata, as e2fsck's passes 1B (rescan) and 1D (reconcile) report.

use std::collections::{BTreeMap, BTreeSet};

use crate::Progress;
use crate::clone::{self, Shares};
use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::{Ctx, KIND_FREE};
use crate::walk::{Event, Walker};

/// The bad-blocks inode.
const BAD_INO: u32 = 1;

/// Inodes with shared blocks listed at most (each with up to 10,000 blocks).
const MAX_OWNERS: usize = 10_000;

/// Runs pass 1B.
pub fn run(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    let n = ctx.fs.geo.inodes_count;
    let mut owners: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut shares = Shares::new();
    for ino in 1..=n {
        if ino % 4096 == 0 {
            if ctx.cancelled() {
                return;
            }
            progress(Progress {
                pass: 1,
                done: u64::from(ino),
                total: u64::from(n),
            });
        }
        if ctx.kind[ino as usize] == KIND_FREE || ino == 7 {
            continue;
        }
        let mut dups = dup_blocks_of(ctx, ino);
        for k in claimed_clusters(ctx, &dups) {
            *shares.entry(k).or_insert(0) += 1;
        }
        dups.dedup();
        if !dups.is_empty() {
            owners.insert(ino, dups);
        }
        if owners.len() >= MAX_OWNERS {
            ctx.report.note(format!(
                "more than {MAX_OWNERS} inodes share blocks; the rest are not listed"
            ));
            break;
        }
    }
    bad_blocks_on_metadata(ctx, &mut owners, &shares);
    let mut by_block: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for (&ino, blocks) in &owners {
        for &b in blocks {
            by_block.entry(clone::cluster_key(ctx, b)).or_default().insert(ino);
        }
    }
    for (&ino, blocks) in &owners {
        let list = ranges(blocks);
        ctx.add(
            Finding::new(
                p::P1B_DUP_BLOCK,
                format!("multiply-claimed block(s) in inode {ino}: {list}"),
                "clone the shared blocks",
            )
            .ino(ino)
            .blk(blocks[0]),
        );
    }
    for (&ino, blocks) in &owners {
        reconcile(ctx, &mut shares, &by_block, ino, blocks);
    }
}

/// An inode table block on the bad-block list is not claimed twice: the
/// bad-blocks inode is meant to list it, and e2fsck's pass 1 expects it
/// there (the inodes in it are dealt with by pass 2). Other metadata on
/// the list is another problem (e2fsck's "primary superblock is on the bad
/// block list"), left reported.
fn bad_blocks_on_metadata(ctx: &mut Ctx, owners: &mut BTreeMap<u32, Vec<u64>>, shares: &Shares) {
    let Some(list) = owners.get_mut(&BAD_INO) else {
        return;
    };
    let itb = u64::from(ctx.fs.geo.inode_table_blocks);
    let in_itable = |b: u64| {
        ctx.fs.groups.iter().any(|gd| {
            let it = gd.inode_table();
            it != 0 && b >= it && b < it + itb
        })
    };
    let alone = |b: &u64| ctx.meta.get(*b) && shares.get(&clone::cluster_key(ctx, *b)) == Some(&1) && in_itable(*b);
    let gone: Vec<u64> = list.iter().copied().filter(alone).collect();
    list.retain(|b| !gone.contains(b));
    if list.is_empty() {
        owners.remove(&BAD_INO);
    }
    for b in gone {
        ctx.dup.clear(b);
    }
}

/// Pass 1D for one inode: says whom it shares with, and unless every block
/// it shared is now its own, clones them (or, failing that, deletes it).
/// The bad-blocks inode keeps its blocks: the files give them up.
fn reconcile(ctx: &mut Ctx, shares: &mut Shares, by_block: &BTreeMap<u64, BTreeSet<u32>>, ino: u32, blocks: &[u64]) {
    if ino == BAD_INO {
        return;
    }
    let bits = ctx.fs.geo.cluster_bits;
    let key = move |b: &u64| (*b >> bits) << bits;
    let mut sharers: BTreeSet<u32> = blocks.iter().flat_map(|b| by_block[&key(b)].iter().copied()).collect();
    sharers.remove(&ino);
    let meta = blocks.iter().any(|&b| ctx.meta.get(b));
    let mut clusters: Vec<u64> = blocks.iter().map(key).collect();
    clusters.dedup();
    let msg = format!(
        "inode {ino} has {} multiply-claimed block(s), shared with {} file(s)",
        clusters.len(),
        sharers.len() + usize::from(meta)
    );
    ctx.add(Finding::new(p::P1D_DUP_FILE, msg, "clone the shared blocks").ino(ino));
    if meta {
        let msg = format!("inode {ino} shares blocks with file-system metadata");
        ctx.add(Finding::new(p::P1D_SHARE_METADATA, msg, "clone the shared blocks").ino(ino));
    }
    let still_shared = blocks
        .iter()
        .any(|&b| ctx.dup.get(b) && (ctx.meta.get(b) || shares.get(&key(&b)).copied().unwrap_or(0) > 1));
    if !still_shared {
        ctx.report
            .note(format!("inode {ino}: its shared blocks were dealt with"));
        return;
    }
    let f = Finding::new(
        p::P1D_CLONE_QUESTION,
        format!("inode {ino} shares blocks"),
        "clone them",
    );
    if !ctx.fix(f.ino(ino)) {
        return;
    }
    let Err(why) = clone::clone_inode(ctx, shares, ino) else {
        return;
    };
    ctx.not_fixed(&why);
    let f = Finding::new(
        p::P1D_DELETE_QUESTION,
        format!("inode {ino}: cannot clone ({why})"),
        "delete the file",
    );
    if ctx.fix(f.ino(ino)) {
        let now = crate::inode_edit::dtime_now(ctx);
        if let Err(e) = clone::delete_inode(ctx, shares, ino, now) {
            ctx.not_fixed(e);
        }
    }
}

/// The blocks of `ino` that pass 1 saw claimed twice (at most 10,000 kept),
/// sorted, once per reference (a block the inode maps twice comes twice).
fn dup_blocks_of(ctx: &Ctx, ino: u32) -> Vec<u64> {
    let Ok(rec) = ctx.fs.inode_record(ino) else {
        return Vec::new();
    };
    let raw = decode(&rec);
    let mut out = Vec::new();
    let dup = &ctx.dup;
    let mut visit = |e: Event| {
        let (start, len) = match e {
            Event::Data { pblk, len, .. } => (pblk, u64::from(len)),
            Event::Meta { pblk, .. } => (pblk, 1),
        };
        for b in start..start + len {
            if dup.get(b) && out.len() < 10_000 {
                out.push(b);
            }
        }
    };
    let m = raw.i_mode.get() & ext4kit_format::inode::mode::S_IFMT;
    let walkable =
        matches!(m, 0o100000 | 0o040000) || (m == 0o120000 && raw.size() >= 60) || ino < ctx.fs.geo.first_ino;
    if walkable && !raw.has_flag(ext4kit_format::inode::flags::INLINE_DATA) {
        let extents = raw.has_flag(ext4kit_format::inode::flags::EXTENTS);
        let mut w = Walker::new(&ctx.fs, ino, &raw, &mut visit);
        w.walk(&raw, extents);
    }
    let acl = raw.file_acl();
    if acl != 0 && ctx.dup.get(acl) && ctx.fs.valid_block(acl) {
        // A shared xattr block is legitimately claimed once; only count it
        // when something else than xattrs claims it too.
    }
    out.sort_unstable();
    out
}

/// The shared clusters `blocks` (sorted, once per reference) stand for,
/// once per reference: with bigalloc an inode's blocks in one cluster are
/// one claim on it (e2fsck's pass 1B counts a cluster once per logical
/// cluster); without, every block reference is a claim.
fn claimed_clusters(ctx: &Ctx, blocks: &[u64]) -> Vec<u64> {
    let mut keys: Vec<u64> = blocks.iter().map(|&b| clone::cluster_key(ctx, b)).collect();
    if ctx.fs.geo.cluster_bits > 0 {
        keys.dedup();
    }
    keys
}

/// "25-26 30" style list of block ranges.
fn ranges(blocks: &[u64]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < blocks.len() {
        let mut j = i;
        while j + 1 < blocks.len() && blocks[j + 1] == blocks[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            format!("{}", blocks[i])
        } else {
            format!("{}-{}", blocks[i], blocks[j])
        });
        i = j + 1;
    }
    out.join(" ")
}
