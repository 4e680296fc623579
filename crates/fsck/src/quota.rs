//! Quota usage (the `quota` feature: `s_usr_quota_inum`,
//! `s_grp_quota_inum`, `s_prj_quota_inum` name hidden quota files).
//!
//! Pass 1 charges each inode's counted space and one inode (plus its
//! `ea_inode` values) to its user, group and project ([`charge`]), as
//! e2fsck's `quota_data_add` / `quota_data_inodes`. After pass 5 ([`run`])
//! each quota file is read — the kernel's v2 tree format (e2fsprogs
//! `lib/support/quotaio_tree.c`, `quotaio_v2.h`): 1 KiB quota blocks; block 0
//! holds the header (magic, version 1) and info; block 1 is the root of a
//! four-level radix tree of 256 little-endian block numbers indexed by the
//! id's bytes, most significant first; the leaves are data blocks (16-byte
//! header, then 72-byte `v2r1_disk_dqblk` entries; all-zero = unused).
//! Each stored usage is compared with the counted one and reported as
//! e2fsck does (`[QUOTA WARNING] Usage inconsistent…`,
//! PR_6_UPDATE_QUOTAS). The repair rewrites the file from the counted
//! usage, keeping the stored limits and grace times ([`crate::quota_write`]).
//! It runs before pass 5, so blocks a growing file takes are in the
//! bitmaps pass 5 writes.

use std::collections::{BTreeMap, BTreeSet};

use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::inode::{RawInode, flags};

use crate::problem::{self as p, Finding};
use crate::state::Ctx;
use crate::walk::{Event, Walker};

use ext4kit_format::quota::{self, Dquot, Info, MAX_QBLOCKS, QBLK, QuotaType};

/// Counted usage per quota type (user, group, project): id -> (bytes, inodes).
#[derive(Debug, Default)]
pub struct Usage {
    by_type: [BTreeMap<u32, (u64, u64)>; 3],
}

/// The quota file inode of type `t`, 0 when there is none.
fn quota_ino(ctx: &Ctx, t: usize) -> u32 {
    let sb = &ctx.fs.sb;
    match t {
        0 => sb.s_usr_quota_inum.get(),
        1 => sb.s_grp_quota_inum.get(),
        _ => sb.s_prj_quota_inum.get(),
    }
}

/// True when `ino` is one of the quota files the superblock names (the
/// project quota file may be an ordinary inode number, which no directory
/// names: pass 4 leaves it alone).
pub fn is_quota_file(ctx: &Ctx, ino: u32) -> bool {
    enabled(ctx) && ino != 0 && (0..3).any(|t| quota_ino(ctx, t) == ino)
}

fn enabled(ctx: &Ctx) -> bool {
    ctx.fs.geo.features.ro_compat.contains(RoCompatFeatures::QUOTA)
}

/// The inode's project id: `i_projid` when the record holds it
/// (`i_extra_isize` reaches past it), else 0.
fn projid(raw: &RawInode, rec_len: usize) -> u32 {
    if rec_len > 128 && raw.i_extra_isize.get() >= 32 {
        raw.i_projid.get()
    } else {
        0
    }
}

/// Charges inode `ino` (record `raw`, `rec_len` bytes): `sectors` counted
/// 512-byte sectors and `1 + ea_inodes` inodes. Reserved inodes other
/// than the root, the quota files and value inodes are not charged, as in
/// e2fsck.
pub fn charge(ctx: &mut Ctx, ino: u32, raw: &RawInode, rec_len: usize, sectors: u64, ea_inodes: u32) {
    let orphan_file = ino == ctx.fs.sb.s_orphan_file_inum.get();
    if !enabled(ctx)
        || is_quota_file(ctx, ino)
        || orphan_file
        || (ino != 2 && ino < ctx.fs.geo.first_ino)
        || raw.has_flag(flags::EA_INODE)
    {
        return;
    }
    let ids = [raw.uid(), raw.gid(), projid(raw, rec_len)];
    for (t, id) in ids.into_iter().enumerate() {
        if quota_ino(ctx, t) == 0 {
            continue;
        }
        let e = ctx.quota.by_type[t].entry(id).or_default();
        e.0 = e.0.saturating_add(sectors.saturating_mul(512));
        e.1 = e.1.saturating_add(1 + u64::from(ea_inodes));
    }
}

/// One stored entry: its id, usage, and the whole record.
#[derive(Debug, Clone, Copy)]
struct Stored {
    id: u32,
    space: u64,
    inodes: u64,
    raw: Dquot,
}

/// A quota file opened for reading and patching: its block map.
struct QFile {
    /// File block -> physical block.
    map: BTreeMap<u64, u64>,
    bs: u64,
}

impl QFile {
    fn open(ctx: &Ctx, ino: u32) -> Option<Self> {
        let rec = ctx.fs.inode_record(ino).ok()?;
        let raw = crate::pass1::decode(&rec);
        let bs = u64::from(ctx.fs.geo.block_size);
        let cap = u64::from(MAX_QBLOCKS) * QBLK as u64 / bs + 1;
        let mut map = BTreeMap::new();
        let mut visit = |e: Event| {
            if let Event::Data { lblk, pblk, len, .. } = e {
                for i in 0..u64::from(len) {
                    if (map.len() as u64) < cap {
                        map.insert(lblk + i, pblk + i);
                    }
                }
            }
        };
        let mut w = Walker::new(&ctx.fs, ino, &raw, &mut visit);
        w.walk(&raw, raw.has_flag(flags::EXTENTS));
        drop(w);
        Some(Self { map, bs })
    }

    /// Quota block `q`: the fs block holding it and its offset there.
    fn locate(&self, q: u32) -> Option<(u64, usize)> {
        let byte = u64::from(q) * QBLK as u64;
        let pblk = *self.map.get(&(byte / self.bs))?;
        Some((pblk, (byte % self.bs) as usize))
    }

    fn read(&self, ctx: &Ctx, q: u32) -> Option<Vec<u8>> {
        let (pblk, off) = self.locate(q)?;
        let b = ctx.fs.read_block(pblk).ok()?;
        b.get(off..off + QBLK).map(<[u8]>::to_vec)
    }
}

/// Every used entry of the file, or why it cannot be read.
fn read_entries(ctx: &Ctx, qf: &QFile, t: usize) -> Result<(Info, Vec<Stored>), String> {
    let head = qf.read(ctx, 0).ok_or("the header block is not mapped")?;
    let info = Info::parse(&head, QuotaType::ALL[t]).map_err(|e| format!("not a v2 quota file: {e}"))?;
    let found = quota::read_entries(&info, |q| qf.read(ctx, q)).map_err(|e| e.to_string())?;
    let stored = found
        .into_iter()
        .map(|l| Stored {
            id: l.dquot.id,
            space: l.dquot.curspace,
            inodes: l.dquot.curinodes,
            raw: l.dquot,
        })
        .collect();
    Ok((info, stored))
}

/// Before pass 5: each quota file against the usage pass 1 counted. In a
/// repair run that already repaired something the count may be stale (a
/// later pass cleared inodes), so the comparison waits for the next run.
pub fn run(ctx: &mut Ctx) {
    if !enabled(ctx) || (ctx.repairing() && ctx.report.fixed() > 0) {
        return;
    }
    for t in 0..3 {
        let ino = quota_ino(ctx, t);
        if ino == 0 || !ctx.in_use(ino) && ino >= ctx.fs.geo.first_ino {
            continue;
        }
        check_type(ctx, t, ino);
    }
}

/// Compares the file of quota type `t` (inode `ino`) and rewrites it.
fn check_type(ctx: &mut Ctx, t: usize, ino: u32) {
    let Some(qf) = QFile::open(ctx, ino) else { return };
    let (info, stored) = match read_entries(ctx, &qf, t) {
        Ok(s) => s,
        Err(why) => {
            ctx.report
                .note(format!("quota type {t}: cannot read the quota file: {why}"));
            return;
        }
    };
    let usage = std::mem::take(&mut ctx.quota.by_type[t]);
    let mut lines = Vec::new();
    let mut ids = BTreeSet::new();
    for s in &stored {
        ids.insert(s.id);
        let (space, inodes) = usage.get(&s.id).copied().unwrap_or_default();
        if (space, inodes) != (s.space, s.inodes) {
            lines.push(format!(
                "[QUOTA WARNING] Usage inconsistent for ID {}:actual ({space}, {inodes}) != expected ({}, {})",
                s.id, s.space, s.inodes
            ));
        }
    }
    let missing: Vec<u32> = usage.keys().copied().filter(|id| !ids.contains(id)).collect();
    lines.extend(
        missing
            .iter()
            .map(|id| format!("[QUOTA WARNING] Missing quota entry ID {id}")),
    );
    if !lines.is_empty() {
        update(ctx, t, (&qf, &info), &stored, &usage, &lines);
    }
    ctx.quota.by_type[t] = usage;
}

/// PR_6_UPDATE_QUOTAS: the file is rewritten with the counted usage of
/// every id and the stored limits.
fn update(
    ctx: &mut Ctx,
    t: usize,
    (qf, info): (&QFile, &Info),
    stored: &[Stored],
    usage: &BTreeMap<u32, (u64, u64)>,
    lines: &[String],
) {
    for l in lines {
        ctx.report.note(l.clone());
    }
    let ino = quota_ino(ctx, t);
    let f = Finding::new(
        p::P6_UPDATE_QUOTAS,
        format!("update quota info for quota type {t}"),
        "rewrite the usage",
    );
    if !ctx.fix(f.ino(ino)) {
        return;
    }
    let old: BTreeMap<u32, &Dquot> = stored.iter().map(|s| (s.id, &s.raw)).collect();
    let ids: BTreeSet<u32> = old.keys().chain(usage.keys()).copied().collect();
    let entries: BTreeMap<u32, Dquot> = ids
        .into_iter()
        .filter_map(|id| {
            let (space, inodes) = usage.get(&id).copied().unwrap_or_default();
            crate::quota_write::entry(id, old.get(&id).copied(), space, inodes).map(|e| (id, e))
        })
        .collect();
    let file = quota::build(info, &entries);
    if let Err(e) = crate::quota_write::store(ctx, ino, &file, &qf.map) {
        ctx.not_fixed(e);
    }
}
