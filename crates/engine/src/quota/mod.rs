//! Disk quotas (ro_compat `quota`, and `project` for `i_projid`): usage
//! and limits per user, group and project, kept in the hidden quota files
//! the superblock names (`s_usr_quota_inum` 3, `s_grp_quota_inum` 4,
//! `s_prj_quota_inum`), in the kernel's v2 tree format
//! ([`ext4kit_format::quota`]).
//!
//! A writable open loads the files ([`Filesystem::load_quotas`]). Usage is
//! not charged at each allocation site: at commit, every inode the
//! transaction wrote is charged as it is now minus as it was before
//! ([`charge`]) — space `i_blocks` × 512 (data, extent and xattr blocks,
//! as the kernel counts them), one inode while its bitmap bit is set —
//! so create, release, writes, truncates, xattr blocks, chown/chgrp and
//! project changes all move usage exactly, in the same transaction. The
//! changed quota blocks are written through the transaction (journaled,
//! as the kernel journals quota files). Limits are checked there too: a
//! transaction that would pass a hard limit, or a soft limit whose grace
//! time has run out, fails whole with EDQUOT, unless the caller is exempt
//! ([`set_caller_uid`]: root, or no caller named).

mod charge;
mod create;
mod file;
mod project;
mod switch;

use std::cell::Cell;
use std::collections::BTreeMap;

use ext4kit_format::quota::{Dquot, Info, QuotaType};

use crate::error::{Error, Result};
use crate::fs::Filesystem;

pub(crate) use charge::Pending;
pub use project::PROJINHERIT;
pub use switch::QuotaSwitch;

thread_local! {
    static CALLER_UID: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Names the user on whose behalf this thread's next operations run, for
/// quota enforcement: `Some(0)` (root, CAP_SYS_RESOURCE) and `None` (the
/// library itself, an administrator's tool) are exempt from limits, as the
/// kernel exempts a caller with CAP_SYS_RESOURCE. The FUSE adapter names
/// each request's uid.
pub fn set_caller_uid(uid: Option<u32>) {
    CALLER_UID.with(|c| c.set(uid));
}

fn caller_exempt() -> bool {
    CALLER_UID.with(Cell::get).is_none_or(|u| u == 0)
}

/// One quota file held in memory: its inode, info and entries by id.
#[derive(Debug, Clone)]
pub(crate) struct QuotaFile {
    pub(crate) ino: u32,
    pub(crate) info: Info,
    pub(crate) dquots: BTreeMap<u32, Dquot>,
    /// The bytes last written (or read): only blocks that differ are
    /// rewritten.
    pub(crate) image: Vec<u8>,
}

/// The quota files of a writable session (`None`: that type is off).
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    pub(crate) files: [Option<QuotaFile>; 3],
}

impl Quotas {
    pub(crate) fn enabled(&self) -> bool {
        self.files.iter().any(Option::is_some)
    }
}

/// New limits for one id ([`Filesystem::set_quota_limits`]): block limits
/// in KiB (the quota format's unit), inode limits in inodes; 0 = none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Block soft limit, KiB.
    pub blocks_soft: u64,
    /// Block hard limit, KiB.
    pub blocks_hard: u64,
    /// Inode soft limit.
    pub inodes_soft: u64,
    /// Inode hard limit.
    pub inodes_hard: u64,
}

impl Filesystem {
    /// Reads the quota files into memory at a writable open. A file that
    /// cannot be read leaves the file system read-only, saying why, as
    /// usage could not be kept.
    pub(crate) fn load_quotas(&self) {
        if self.read_only_reason.is_some() || !self.quota_feature() {
            return;
        }
        let mut q = Quotas::default();
        for t in QuotaType::ALL {
            match self.read_quota_file(t) {
                Ok(f) => q.files[t as usize] = f,
                Err(e) => {
                    self.read_only_reason
                        .set(format!("the {} quota file cannot be read: {e}", t.name()));
                    return;
                }
            }
        }
        *self.quota.lock() = q;
    }

    /// True when this thread's caller is held to limits: its writes
    /// allocate at once, so that the limit is met where blocks are taken
    /// rather than at a later write-back.
    pub(crate) fn quota_binds_caller(&self) -> bool {
        !caller_exempt() && self.quota.lock().enabled()
    }

    /// Whether writes on behalf of `uid` can meet a limit here: quotas are
    /// kept, `uid` is not root and some id has a limit. A front end that
    /// caches writes and sends them later without their writer (FUSE's
    /// write-back cache) sends such a writer's data straight instead, so
    /// that EDQUOT reaches `write(2)`.
    pub fn quota_limits_bind(&self, uid: u32) -> bool {
        uid != 0
            && self
                .quota
                .lock()
                .files
                .iter()
                .flatten()
                .any(|f| f.dquots.values().any(Dquot::has_limits))
    }

    fn quota_feature(&self) -> bool {
        use ext4kit_format::features::RoCompatFeatures;
        self.geo.features.ro_compat.contains(RoCompatFeatures::QUOTA)
    }

    /// The quota inode of type `t` the superblock names (0: none).
    pub(crate) fn quota_ino(&self, t: QuotaType) -> u32 {
        if !self.quota_feature() {
            return 0;
        }
        let sb = self.sb.read();
        match t {
            QuotaType::User => sb.s_usr_quota_inum.get(),
            QuotaType::Group => sb.s_grp_quota_inum.get(),
            QuotaType::Project => sb.s_prj_quota_inum.get(),
        }
    }

    /// Every entry of the `t` quota file (usage in bytes and inodes,
    /// limits, grace deadlines), and the file's grace periods; `None` when
    /// the file system keeps no such quota.
    ///
    /// # Errors
    /// A quota file that does not decode ([`Error::Corrupt`]).
    pub fn quota_entries(&self, t: QuotaType) -> Result<Option<(Info, Vec<Dquot>)>> {
        if let Some(f) = &self.quota.lock().files[t as usize] {
            return Ok(Some((f.info, f.dquots.values().copied().collect())));
        }
        let f = self.read_quota_file(t)?;
        Ok(f.map(|f| (f.info, f.dquots.into_values().collect())))
    }

    /// Sets the limits of `id` in the `t` quota file (one transaction).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the file system keeps no `t` quota or the
    /// session does not hold it (read-only); what the commit meets.
    pub fn set_quota_limits(&self, t: QuotaType, id: u32, limits: QuotaLimits) -> Result<()> {
        if self.quota.lock().files[t as usize].is_none() {
            return Err(Error::Unsupported(format!("no {} quota on this file system", t.name())));
        }
        self.in_txn(|txn| {
            txn.quota.limits.push((t, id, limits));
            Ok(())
        })
    }
}
