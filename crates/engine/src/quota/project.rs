//! Project ids (ro_compat `project`): `i_projid`, and the PROJINHERIT
//! inode flag by which a directory hands its project to what is created
//! in it (`ext4_set_projid`, `EXT4_PROJINHERIT_FL`).

use ext4kit_format::features::RoCompatFeatures;

use super::charge::projid;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::txn::Txn;

/// `EXT4_PROJINHERIT_FL`.
pub const PROJINHERIT: u32 = 0x2000_0000;

fn holds_projid(inode: &Inode) -> bool {
    inode.record.len() > 128 && inode.raw.i_extra_isize.get() >= 32
}

impl Filesystem {
    /// `ino`'s project id and whether it has PROJINHERIT.
    ///
    /// # Errors
    /// What reading the inode meets.
    pub fn project(&self, ino: u32) -> Result<(u32, bool)> {
        let inode = self.inode(ino)?;
        Ok((projid(&inode.raw, inode.record.len()), inode.raw.has_flag(PROJINHERIT)))
    }

    /// Sets `ino`'s project id (when `id` is given) and PROJINHERIT (when
    /// `inherit` is given), moving its usage between projects in the same
    /// transaction (FS_IOC_FSSETXATTR).
    ///
    /// # Errors
    /// [`Error::Unsupported`] without the `project` feature or with an
    /// inode too small to hold `i_projid` (128-byte inodes, or
    /// `i_extra_isize` under 32); [`Error::InvalidArgument`] for
    /// PROJINHERIT on a non-directory.
    pub fn set_project(&self, ino: u32, id: Option<u32>, inherit: Option<bool>) -> Result<()> {
        if !self.geo.features.ro_compat.contains(RoCompatFeatures::PROJECT) {
            return Err(Error::Unsupported(
                "project ids need the project feature (tune -O project)".into(),
            ));
        }
        self.in_txn(|txn| {
            let mut inode = txn.inode(ino)?;
            if !holds_projid(&inode) {
                return Err(Error::Unsupported(format!(
                    "inode {ino} has no room for i_projid (needs 256-byte inodes with i_extra_isize of 32 or more)"
                )));
            }
            if let Some(id) = id {
                inode.raw.i_projid.set(id);
            }
            if let Some(on) = inherit {
                if on && !inode.is_dir() {
                    return Err(Error::InvalidArgument("PROJINHERIT applies to directories".into()));
                }
                let f = inode.raw.i_flags.get();
                inode
                    .raw
                    .i_flags
                    .set(if on { f | PROJINHERIT } else { f & !PROJINHERIT });
            }
            txn.write_inode(&mut inode)
        })
    }
}

impl Txn<'_> {
    /// Gives a new inode its parent's project when the parent has
    /// PROJINHERIT (a new directory inherits the flag too).
    pub(crate) fn inherit_project(&self, dir: &Inode, inode: &mut Inode) {
        if !dir.raw.has_flag(PROJINHERIT) || !holds_projid(inode) {
            return;
        }
        inode.raw.i_projid.set(projid(&dir.raw, dir.record.len()));
        if inode.is_dir() {
            inode.raw.i_flags.set(inode.raw.i_flags.get() | PROJINHERIT);
        }
    }

    /// EXDEV, as the kernel refuses a link or rename into a PROJINHERIT
    /// directory of another project (usage could not follow the tree).
    pub(crate) fn check_project_move(&self, target_dir: &Inode, inode: &Inode) -> Result<()> {
        let dir_proj = projid(&target_dir.raw, target_dir.record.len());
        if target_dir.raw.has_flag(PROJINHERIT) && dir_proj != projid(&inode.raw, inode.record.len()) {
            return Err(Error::CrossProject(format!(
                "inode {} is not in project {dir_proj} of its new directory",
                inode.ino
            )));
        }
        Ok(())
    }
}
