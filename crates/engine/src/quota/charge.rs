//! Charging at commit: each inode the transaction wrote, as it is against
//! as it was ([`Txn::quota_settle`]); limits checked; the changed files
//! written back in the same transaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use ext4kit_format::inode::{RawInode, flags};
use ext4kit_format::quota::{Dquot, LIMIT_UNIT, QuotaType};

use super::{QuotaFile, QuotaLimits, caller_exempt};
use crate::clock;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::txn::Txn;

/// What a transaction adds to quota work besides the inodes it wrote.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// Limits to set ([`crate::Filesystem::set_quota_limits`]).
    pub(crate) limits: Vec<(QuotaType, u32, QuotaLimits)>,
    /// Writes back blocks held for delayed allocation: their space was
    /// the writer's to take, so no limit is checked.
    pub(crate) exempt: bool,
}

/// One inode's charge: (user, group, project) ids, bytes, inodes.
type Charge = ([u32; 3], u64, u64);

/// The charge of `inode` when `in_use`, as e2fsck counts it: reserved
/// inodes other than the root, the quota files, the orphan file,
/// xattr value inodes (charged to their owners) and inline symlinks are
/// not charged. An owner
/// is charged one inode more for each of its entries whose value lives in
/// a value inode (`ea_refs`); the value's blocks are already in its
/// `i_blocks`.
pub(super) fn charge_of(fs: &Filesystem, inode: &Inode, in_use: bool, ea_refs: u64) -> Option<Charge> {
    let ino = inode.ino;
    let raw = &inode.raw;
    let hidden = QuotaType::ALL.iter().any(|&t| fs.quota_ino(t) == ino)
        || ino == fs.sb.read().s_orphan_file_inum.get()
        || (ino != crate::ROOT_INO && ino < fs.geo.first_ino)
        || raw.has_flag(flags::EA_INODE);
    if !in_use || hidden || raw.i_mode.get() == 0 || inline_symlink(raw) {
        return None;
    }
    let huge = fs
        .geo
        .features
        .ro_compat
        .contains(ext4kit_format::features::RoCompatFeatures::HUGE_FILE);
    let space = raw.blocks_512(huge, fs.geo.block_size).saturating_mul(512);
    Some((
        [raw.uid(), raw.gid(), projid(raw, inode.record.len())],
        space,
        1 + ea_refs,
    ))
}

/// A symlink whose target is in inline data: e2fsck's pass 1 (1.47.0 and
/// later alike) accepts it and moves on without `check_blocks`, so it
/// charges neither the inode nor its blocks; the kernel charges the inode
/// at creation. Usage follows e2fsck, so that its quota check stays clean.
fn inline_symlink(raw: &RawInode) -> bool {
    raw.i_mode.get() & ext4kit_format::inode::mode::S_IFMT == ext4kit_format::inode::mode::S_IFLNK
        && raw.has_flag(flags::INLINE_DATA)
        && !raw.has_flag(flags::EXTENTS)
}

/// How many of `inode`'s xattr entries, in its body and in its xattr block
/// as `block` reads it, keep their value in a value inode: e2fsck pass 1
/// (`check_ea_in_inode`, `check_ext_attr`) adds one inode to the owner's
/// charge for each, and the kernel's `ext4_xattr_inode_alloc_quota`
/// charges one. A shared block charges every inode that names it.
pub(super) fn ea_inode_entries(
    fs: &Filesystem,
    inode: &Inode,
    block: impl FnOnce(u64) -> Result<Arc<[u8]>>,
) -> Result<u64> {
    use ext4kit_format::features::IncompatFeatures;
    use ext4kit_format::xattr::{self, XattrEntry, XattrValue};
    if !fs.geo.features.incompat.contains(IncompatFeatures::EA_INODE) || inode.raw.i_mode.get() == 0 {
        return Ok(0);
    }
    let at = Location::Inode(inode.ino);
    let outside = |es: &[XattrEntry<'_>]| {
        es.iter()
            .filter(|e| matches!(e.value, XattrValue::EaInode { .. }))
            .count() as u64
    };
    let mut n = 0;
    if inode.record.len() > 128 {
        let region =
            xattr::ibody_region(&inode.record, inode.raw.i_extra_isize.get()).map_err(|e| Error::format(at, e))?;
        n += outside(&xattr::parse_ibody(region).map_err(|e| Error::format(at, e))?);
    }
    let blk = inode.raw.file_acl();
    if blk != 0 {
        let buf = block(blk)?;
        let at = Location::Block {
            block: blk,
            inode: inode.ino,
        };
        n += outside(&xattr::parse_block(&buf).map_err(|e| Error::format(at, e))?.entries);
    }
    Ok(n)
}

/// `i_projid` when the record holds it (`i_extra_isize` reaches past it).
pub(crate) fn projid(raw: &RawInode, rec_len: usize) -> u32 {
    if rec_len > 128 && raw.i_extra_isize.get() >= 32 {
        raw.i_projid.get()
    } else {
        0
    }
}

impl Filesystem {
    /// Whether `ino`'s bit is set in the committed inode bitmap.
    fn committed_in_use(&self, ino: u32) -> Result<bool> {
        let Some((g, i)) = self.geo.inode_location(ino) else {
            return Ok(false);
        };
        let d = self.groups.read()[g as usize];
        let uninit = d.flags() & ext4kit_format::group_desc::BG_INODE_UNINIT != 0;
        if uninit && self.geo.features.has_group_csum() {
            return Ok(false);
        }
        let map = self.meta_block(d.inode_bitmap(), 0)?;
        Ok(map[(i / 8) as usize] & (1 << (i % 8)) != 0)
    }
}

/// Per (type, id): bytes and inodes added (negative: released).
pub(super) type Deltas = BTreeMap<(QuotaType, u32), (i64, i64)>;

pub(super) fn add(d: &mut Deltas, c: Option<Charge>, sign: i64) {
    if let Some((ids, space, inodes)) = c {
        for t in QuotaType::ALL {
            let e = d.entry((t, ids[t as usize])).or_default();
            e.0 += sign * space as i64;
            e.1 += sign * inodes as i64;
        }
    }
}

impl Txn<'_> {
    /// Charges what this transaction changed, checks limits and writes the
    /// changed quota files into the transaction. Runs first at commit.
    ///
    /// # Errors
    /// [`Error::QuotaExceeded`] when a non-exempt caller would pass a hard
    /// limit or an expired soft limit: the transaction must be dropped.
    pub(crate) fn quota_settle(&mut self) -> Result<()> {
        if !self.fs.quota.lock().enabled() {
            return Ok(());
        }
        let fs = self.fs;
        let mut inos = self.written_inodes().to_vec();
        inos.sort_unstable();
        inos.dedup();
        let mut deltas = Deltas::new();
        for ino in inos {
            let before = fs.inode_on_disk(ino)?;
            let used = fs.committed_in_use(ino)?;
            let refs = if used {
                ea_inode_entries(fs, &before, |b| fs.meta_block(b, ino))?
            } else {
                0
            };
            add(&mut deltas, charge_of(fs, &before, used, refs), -1);
            let after = self.inode(ino)?;
            let used = self.inode_in_use(ino)?;
            let refs = if used {
                ea_inode_entries(fs, &after, |b| self.block(b, ino))?
            } else {
                0
            };
            add(&mut deltas, charge_of(fs, &after, used, refs), 1);
        }
        let limits = std::mem::take(&mut self.quota.limits);
        if deltas.values().all(|&d| d == (0, 0)) && limits.is_empty() {
            return Ok(());
        }
        let mut files = fs.quota.lock().files.clone();
        let now = u64::from(clock::encode(clock::now()).0);
        let check = !self.quota.exempt && !caller_exempt();
        for ((t, id), (ds, di)) in deltas {
            let Some(f) = files[t as usize].as_mut() else { continue };
            apply(f, id, (ds, di), now, check)
                .map_err(|why| Error::QuotaExceeded(format!("{} quota of id {id}: {why}", t.name())))?;
        }
        for (t, id, l) in limits {
            if let Some(f) = files[t as usize].as_mut() {
                set_limits(f, id, l, now);
            }
        }
        for f in files.iter_mut().flatten() {
            let live = fs.quota.lock().files[f.info.qtype as usize]
                .as_ref()
                .map(|o| o.dquots.clone());
            if live.as_ref() != Some(&f.dquots) {
                self.write_quota_file(f)?;
            }
        }
        fs.quota.lock().files = files;
        Ok(())
    }
}

/// Adds `(space, inodes)` to `id` in `f`, starting or ending grace times;
/// with `check`, refuses an increase past a hard limit or an expired soft
/// one (`check_bdq`, `check_idq`).
fn apply(f: &mut QuotaFile, id: u32, (ds, di): (i64, i64), now: u64, check: bool) -> std::result::Result<(), String> {
    let info = f.info;
    let d = f.dquots.entry(id).or_insert(Dquot { id, ..Dquot::default() });
    let space = d.curspace.saturating_add_signed(ds);
    let inodes = d.curinodes.saturating_add_signed(di);
    let bsoft = d.bsoftlimit.saturating_mul(LIMIT_UNIT);
    let bhard = d.bhardlimit.saturating_mul(LIMIT_UNIT);
    if check && ds > 0 {
        if bhard != 0 && space > bhard {
            return Err(format!("{space} bytes would pass the hard limit of {bhard}"));
        }
        if bsoft != 0 && space > bsoft && d.btime != 0 && now >= d.btime {
            return Err(format!("over the soft limit of {bsoft} bytes past its grace time"));
        }
    }
    if check && di > 0 {
        if d.ihardlimit != 0 && inodes > d.ihardlimit {
            return Err(format!("{inodes} inodes would pass the hard limit of {}", d.ihardlimit));
        }
        if d.isoftlimit != 0 && inodes > d.isoftlimit && d.itime != 0 && now >= d.itime {
            return Err(format!(
                "over the soft limit of {} inodes past its grace time",
                d.isoftlimit
            ));
        }
    }
    d.curspace = space;
    d.curinodes = inodes;
    d.btime = grace(d.btime, bsoft != 0 && space > bsoft, now, info.bgrace);
    d.itime = grace(d.itime, d.isoftlimit != 0 && inodes > d.isoftlimit, now, info.igrace);
    if !d.worth_keeping() {
        f.dquots.remove(&id);
    }
    Ok(())
}

/// A soft limit's deadline: started when usage first passes it, kept while
/// over, cleared when back under.
fn grace(deadline: u64, over: bool, now: u64, period: u32) -> u64 {
    match (over, deadline) {
        (false, _) => 0,
        (true, 0) => now + u64::from(period),
        (true, t) => t,
    }
}

fn set_limits(f: &mut QuotaFile, id: u32, l: QuotaLimits, now: u64) {
    let info = f.info;
    let d = f.dquots.entry(id).or_insert(Dquot { id, ..Dquot::default() });
    d.bsoftlimit = l.blocks_soft;
    d.bhardlimit = l.blocks_hard;
    d.isoftlimit = l.inodes_soft;
    d.ihardlimit = l.inodes_hard;
    let bsoft = d.bsoftlimit.saturating_mul(LIMIT_UNIT);
    d.btime = grace(d.btime, bsoft != 0 && d.curspace > bsoft, now, info.bgrace);
    d.itime = grace(
        d.itime,
        d.isoftlimit != 0 && d.curinodes > d.isoftlimit,
        now,
        info.igrace,
    );
    if !d.worth_keeping() {
        f.dquots.remove(&id);
    }
}
