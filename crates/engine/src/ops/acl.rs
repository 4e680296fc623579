//! Setting POSIX ACLs (`ext4_set_acl`): an access ACL also sets the
//! permission bits it implies, and one that says no more than those bits
//! is not stored at all (`posix_acl_update_mode`); a default ACL belongs
//! to directories only. Values arrive in the VFS form and are stored in
//! ext4's compact form.

use ext4kit_format::xattr::acl;

use crate::clock;
use crate::error::{Error, Result};
use crate::inode::Inode;
use crate::inode::write::touch_ctime;
use crate::txn::Txn;

use super::XattrSet;
use super::xattr::Val;

/// `e_name_index` of `system.posix_acl_access` and `system.posix_acl_default`.
pub(crate) const ACCESS: u8 = 2;
pub(crate) const DEFAULT: u8 = 3;

/// The set-group-ID bit of `i_mode`.
const S_ISGID: u16 = 0o2000;

impl Txn<'_> {
    /// Sets (or, with an empty value, removes) the ACL of kind `index`.
    /// Setting an access ACL clears `S_ISGID` unless `keeps_sgid` holds
    /// for the file's group (`posix_acl_update_mode`).
    pub(crate) fn set_acl(
        &mut self,
        ino: u32,
        index: u8,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
        keeps_sgid: &dyn Fn(u32) -> bool,
    ) -> Result<()> {
        let entries = match value {
            [] => None,
            v => Some(acl::from_vfs(v).map_err(|e| Error::InvalidArgument(format!("bad POSIX ACL: {e}")))?),
        };
        let mut inode = self.inode(ino)?;
        let mut keep = entries.clone();
        if index == ACCESS {
            if let Some(e) = &entries {
                let (mode, equivalent) = acl::equiv_mode(e, inode.raw.permissions())
                    .map_err(|e| Error::InvalidArgument(format!("bad POSIX ACL: {e}")))?;
                let r = &mut inode.raw;
                let mut mode = mode;
                if !keeps_sgid(r.gid()) {
                    mode &= !S_ISGID;
                }
                r.i_mode.set((r.i_mode.get() & 0o170000) | mode);
                if equivalent {
                    keep = None;
                }
            }
        } else if !inode.is_dir() {
            return match entries {
                Some(_) => Err(Error::AccessDenied("default ACLs belong to directories".into())),
                None => Ok(()),
            };
        }
        let (mut ibody, mut block) = self.stored_xattrs(&inode)?;
        let before = ibody.len() + block.len();
        ibody.retain(|(i, _, _)| *i != index);
        block.retain(|(i, _, _)| *i != index);
        let existed = ibody.len() + block.len() != before;
        let shown = || String::from_utf8_lossy(name).into_owned();
        match how {
            XattrSet::Create if existed => return Err(Error::Exists(shown())),
            XattrSet::Replace if !existed && entries.is_some() => return Err(Error::NoAttribute(shown())),
            _ => {}
        }
        if let Some(e) = keep {
            let disk = acl::to_disk(&e).map_err(|e| Error::InvalidArgument(format!("bad POSIX ACL: {e}")))?;
            ibody.push((index, Vec::new(), Val::Bytes(disk)));
        }
        self.place_xattrs(&mut inode, ibody, block)?;
        touch_ctime(&mut inode.raw, clock::now());
        self.write_inode(&mut inode)
    }

    /// Gives a new inode the ACLs its directory's default ACL implies
    /// (`posix_acl_create`), or applies `umask` when there is none. The
    /// directory's attributes are read through this transaction.
    pub(crate) fn inherit_acl(&mut self, dir: &Inode, inode: &mut Inode, umask: u16) -> Result<()> {
        let perm = inode.raw.permissions();
        let at = crate::error::Location::Inode(dir.ino);
        let default = match self.default_acl(dir)? {
            Some(v) => acl::from_disk(&v).map_err(|e| Error::format(at, e))?,
            None => {
                let r = &mut inode.raw;
                r.i_mode.set((r.i_mode.get() & 0o170000) | (perm & !(umask & 0o777)));
                return Ok(());
            }
        };
        let mut access = default.clone();
        let (mode, equivalent) = acl::create_masq(&mut access, perm);
        let r = &mut inode.raw;
        r.i_mode.set((r.i_mode.get() & 0o170000) | mode);
        let to_disk =
            |e: &[acl::AclEntry]| acl::to_disk(e).map_err(|e| Error::format(crate::error::Location::Inode(dir.ino), e));
        let mut ibody = Vec::new();
        if !equivalent {
            ibody.push((ACCESS, Vec::new(), Val::Bytes(to_disk(&access)?)));
        }
        if inode.is_dir() {
            ibody.push((DEFAULT, Vec::new(), Val::Bytes(to_disk(&default)?)));
        }
        if !ibody.is_empty() {
            self.place_xattrs(inode, ibody, Vec::new())?;
        }
        Ok(())
    }

    /// The stored (disk-form) `system.posix_acl_default` of `dir`, if any.
    fn default_acl(&self, dir: &Inode) -> Result<Option<Vec<u8>>> {
        if dir.record.len() <= 128 && dir.raw.file_acl() == 0 {
            return Ok(None);
        }
        let (ibody, block) = self.stored_xattrs(dir)?;
        match ibody.into_iter().chain(block).find(|(i, _, _)| *i == DEFAULT) {
            None => Ok(None),
            Some((_, _, Val::Bytes(v))) => Ok(Some(v)),
            // A value in an EA inode: read the attribute as stored.
            Some((_, _, Val::EaInode { .. })) => {
                let v = self.fs.xattr(dir, b"system.posix_acl_default")?;
                acl::vfs_to_disk(&v)
                    .map(Some)
                    .map_err(|e| Error::format(crate::error::Location::Inode(dir.ino), e))
            }
        }
    }
    /// Keeps an access ACL in step with a `chmod` of `inode` (ext4's
    /// `ext4_setattr` → `posix_acl_chmod`).
    pub(crate) fn chmod_acl(&mut self, inode: &mut Inode) -> Result<()> {
        let (mut ibody, mut block) = self.stored_xattrs(inode)?;
        let perm = inode.raw.permissions();
        let at = crate::error::Location::Inode(inode.ino);
        let mut changed = false;
        for (index, _, val) in ibody.iter_mut().chain(block.iter_mut()) {
            if let (&mut ACCESS, Val::Bytes(value)) = (index, val) {
                let mut e = acl::from_disk(value).map_err(|e| Error::format(at, e))?;
                acl::chmod_masq(&mut e, perm);
                *value = acl::to_disk(&e).map_err(|e| Error::format(at, e))?;
                changed = true;
            }
        }
        if changed {
            self.place_xattrs(inode, ibody, block)?;
        }
        Ok(())
    }
}
