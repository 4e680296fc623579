//! Setting POSIX ACLs (`ext4_set_acl`): an access ACL also sets the
//! permission bits it implies, and one that says no more than those bits
//! is not stored at all (`posix_acl_update_mode`); a default ACL belongs
//! to directories only. Values arrive in the VFS form and are stored in
//! ext4's compact form.

use ext4kit_format::xattr::acl;

use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::write::touch_ctime;
use crate::txn::Txn;

use super::XattrSet;

/// `e_name_index` of `system.posix_acl_access` and `system.posix_acl_default`.
pub(crate) const ACCESS: u8 = 2;
pub(crate) const DEFAULT: u8 = 3;

impl Filesystem {
    /// Sets (or, with an empty value, removes) the ACL of kind `index`.
    pub(crate) fn set_acl(&self, ino: u32, index: u8, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        let entries = match value {
            [] => None,
            v => Some(acl::from_vfs(v).map_err(|e| Error::InvalidArgument(format!("bad POSIX ACL: {e}")))?),
        };
        let mut txn = Txn::begin(self)?;
        let mut inode = txn.inode(ino)?;
        let mut keep = entries.clone();
        if index == ACCESS {
            if let Some(e) = &entries {
                let (mode, equivalent) = acl::equiv_mode(e, inode.raw.permissions())
                    .map_err(|e| Error::InvalidArgument(format!("bad POSIX ACL: {e}")))?;
                let r = &mut inode.raw;
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
        let (mut ibody, mut block) = txn.stored_xattrs(&inode)?;
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
            ibody.push((index, Vec::new(), disk));
        }
        txn.place_xattrs(&mut inode, ibody, block)?;
        touch_ctime(&mut inode.raw, clock::now());
        txn.write_inode(&mut inode)?;
        txn.commit()
    }
}
