//! Set-id bits under `FUSE_HANDLE_KILLPRIV_V2`. With it the kernel stops
//! clearing the set-user-ID and set-group-ID bits itself (a SETATTR of the
//! mode after a GETATTR) and leaves that to the server: a WRITE carries
//! `FUSE_WRITE_KILL_SUIDGID` and a SETATTR `FATTR_KILL_SUIDGID` when the
//! bits must go (a writer or truncater without `CAP_FSETID`; any chown of
//! a non-directory). What goes is what the VFS drops (`should_remove_suid`):
//! set-user-ID always, set-group-ID only with group execute (without it
//! the bit marks mandatory locking, not privilege).
//!
//! The flag also lets the kernel mark an inode `S_NOSEC` once it has
//! looked for `security.capability` and found none, which is what saves a
//! GETXATTR round trip on every `write(2)`: the kernel looks again only
//! after the inode's attributes are refreshed or a `security.*` attribute
//! is set, and still removes a capability it finds itself (REMOVEXATTR).

use ext4kit_engine::SetAttr;
use fuser::INodeNo;

use super::names::Change;
use super::{Ext4Fuse, Res};

/// `perm` without the bits a write, truncate or chown by an unprivileged
/// caller drops.
pub(crate) fn without_suidgid(perm: u16) -> u16 {
    let sgid = if perm & 0o010 != 0 { 0o2000 } else { 0 };
    perm & !(0o4000 | sgid)
}

impl Ext4Fuse {
    /// The mode a SETATTR with `FATTR_KILL_SUIDGID` and no mode of its own
    /// leaves, when that differs (never for a directory, whose set-group-ID
    /// bit is inherited by new entries, not a privilege).
    pub(crate) fn perm_killed(&self, ino: u32, c: &Change) -> Res<Option<u16>> {
        if !c.kill_suidgid || c.mode.is_some() {
            return Ok(None);
        }
        let inode = self.inode(ino)?;
        if inode.raw.file_type() == Some(ext4kit_format::inode::FileType::Directory) {
            return Ok(None);
        }
        let perm = inode.raw.permissions();
        let kept = without_suidgid(perm);
        Ok((kept != perm).then_some(kept))
    }

    /// WRITE with `FUSE_WRITE_KILL_SUIDGID`: drops the bits before the data
    /// is stored, as the VFS does, and tells the kernel the mode changed.
    pub(crate) fn kill_suidgid(&self, ino: INodeNo) -> Res<()> {
        let e4 = self.ino(ino)?;
        let perm = self.inode(e4)?.raw.permissions();
        let kept = without_suidgid(perm);
        if kept == perm {
            return Ok(());
        }
        self.writable()?;
        let set = SetAttr {
            perm: Some(kept),
            ..SetAttr::default()
        };
        self.fs().setattr(e4, &set).map_err(|e| self.errno(e))?;
        if let Some(n) = self.notifier.get()
            && let Err(e) = n.inval_inode(ino, -1, 0)
        {
            log::debug!("ext4kit: invalidating attributes of {ino:?}: {e}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::without_suidgid;

    #[test]
    fn setgid_goes_only_with_group_execute() {
        assert_eq!(without_suidgid(0o6777), 0o777);
        assert_eq!(without_suidgid(0o4755), 0o755);
        assert_eq!(without_suidgid(0o2644), 0o2644);
        assert_eq!(without_suidgid(0o2654), 0o654);
        assert_eq!(without_suidgid(0o1777), 0o1777);
    }
}
