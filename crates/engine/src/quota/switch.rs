//! Turning quota types on and off on an existing file system, as tune2fs
//! does (`handle_quota_options`): a type turned on gets its file made from
//! a scan of every inode in use (`quota_compute_usage`, then
//! `quota_write_inode`); a type turned off loses its file
//! (`quota_remove_inode`: the blocks freed, the first 128 bytes of the
//! inode cleared, a non-reserved inode freed) and its superblock field.
//! The ro_compat `quota` bit follows whether any file is left, `project`
//! follows the project file. All of it is one transaction.

use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::quota::QuotaType;

use super::Quotas;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::txn::Txn;

/// What [`Filesystem::switch_quotas`] did, per type (user, group, project).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaSwitch {
    /// Files made.
    pub created: [bool; 3],
    /// Files removed.
    pub removed: [bool; 3],
}

impl Filesystem {
    /// Makes the quota file of each type whose `want` is `Some(true)` and
    /// has none, removes the file of each `Some(false)`, and sets the
    /// `quota` and `project` features to match, in one transaction.
    /// Quota is not kept for the rest of this session (the caller closes
    /// the file system): the switch itself changes only hidden inodes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for project quota on 128-byte inodes,
    /// which have no `i_projid`; what the scan and the commit meet.
    pub fn switch_quotas(&self, want: [Option<bool>; 3]) -> Result<QuotaSwitch> {
        if want[QuotaType::Project as usize] == Some(true) && self.geo.inode_size <= 128 {
            return Err(Error::InvalidArgument(
                "cannot turn on project quota: the inodes are 128 bytes, too small for i_projid (make the \
                 image with -I 256)"
                    .into(),
            ));
        }
        let inum = |t| inum_of(&self.superblock(), t);
        let create: Vec<QuotaType> = QuotaType::ALL
            .into_iter()
            .filter(|&t| want[t as usize] == Some(true) && inum(t) == 0)
            .collect();
        let remove: Vec<QuotaType> = QuotaType::ALL
            .into_iter()
            .filter(|&t| want[t as usize] == Some(false) && inum(t) != 0)
            .collect();
        let usage = if create.is_empty() {
            super::charge::Deltas::new()
        } else {
            self.usage_of_all_inodes()?
        };
        *self.quota.lock() = Quotas::default();
        let mut out = QuotaSwitch::default();
        self.in_txn(|txn| {
            for &t in &remove {
                txn.remove_quota_file(t)?;
                out.removed[t as usize] = true;
            }
            for &t in &create {
                txn.clear_reserved_quota_inode(t)?;
                txn.create_quota_file(t, &usage)?;
                out.created[t as usize] = true;
            }
            txn.set_quota_features(want);
            Ok(())
        })?;
        Ok(out)
    }
}

fn inum_of(sb: &ext4kit_format::superblock::RawSuperblock, t: QuotaType) -> u32 {
    match t {
        QuotaType::User => sb.s_usr_quota_inum.get(),
        QuotaType::Group => sb.s_grp_quota_inum.get(),
        QuotaType::Project => sb.s_prj_quota_inum.get(),
    }
}

impl Txn<'_> {
    /// `quota_remove_inode`: the file's blocks freed, the base 128 bytes
    /// of its inode zeroed (the extra fields stay, as libext2fs writes a
    /// small inode), the inode freed unless reserved, the field cleared.
    fn remove_quota_file(&mut self, t: QuotaType) -> Result<()> {
        let ino = inum_of(&self.superblock(), t);
        let mut inode = self.inode(ino)?;
        if inode.raw.i_mode.get() != 0 {
            self.free_body(&mut inode)?;
        }
        inode.record[..128].fill(0);
        inode.raw = ext4kit_format::inode::RawInode::parse(&inode.record, inode.record.len())
            .map_err(|e| Error::format(crate::error::Location::Inode(ino), e))?;
        self.write_inode(&mut inode)?;
        if ino >= self.fs.geo.first_ino && self.inode_in_use(ino)? {
            self.free_inode(ino, false)?;
        }
        let sb = self.sb_mut();
        match t {
            QuotaType::User => sb.s_usr_quota_inum.set(0),
            QuotaType::Group => sb.s_grp_quota_inum.set(0),
            QuotaType::Project => sb.s_prj_quota_inum.set(0),
        }
        Ok(())
    }

    /// Frees what an old user or group quota file left in its reserved
    /// inode (3 or 4) before a new one is made there, as
    /// `quota_inode_truncate` does.
    fn clear_reserved_quota_inode(&mut self, t: QuotaType) -> Result<()> {
        if t == QuotaType::Project {
            return Ok(());
        }
        let mut inode = self.inode(t as u32 + 3)?;
        let has_blocks = inode.raw.i_blocks_lo.get() != 0 || inode.raw.i_blocks_high.get() != 0;
        if inode.raw.i_mode.get() != 0 && has_blocks && !inode.has_inline_data() {
            self.free_body(&mut inode)?;
            self.write_inode(&mut inode)?;
        }
        Ok(())
    }

    /// ro_compat `quota` on while any quota file is named, `project` on
    /// when project quota was asked for, off when it was turned off.
    fn set_quota_features(&mut self, want: [Option<bool>; 3]) {
        let sb = self.superblock();
        let any = QuotaType::ALL.iter().any(|&t| inum_of(&sb, t) != 0);
        let mut ro = sb.s_feature_ro_compat.get();
        ro = if any {
            ro | RoCompatFeatures::QUOTA.0
        } else {
            ro & !RoCompatFeatures::QUOTA.0
        };
        match want[QuotaType::Project as usize] {
            Some(true) => ro |= RoCompatFeatures::PROJECT.0,
            Some(false) => ro &= !RoCompatFeatures::PROJECT.0,
            None => {}
        }
        if ro != sb.s_feature_ro_compat.get() {
            self.sb_mut().s_feature_ro_compat.set(ro);
        }
    }
}
