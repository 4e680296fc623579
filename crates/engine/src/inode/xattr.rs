//! Extended attributes: in the inode body after `i_extra_isize` and in the
//! block named by `i_file_acl`. Pending: wired to the format crate's `xattr`.

use crate::error::Result;
use crate::fs::Filesystem;
use crate::inode::Inode;

/// One extended attribute with its full name (`user.foo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xattr {
    /// Full name, prefix included.
    pub name: Vec<u8>,
    /// Value as stored (POSIX ACLs in the ext4 on-disk form).
    pub value: Vec<u8>,
}

impl Filesystem {
    /// Every extended attribute of `inode`: in-inode ones first, then the block's.
    pub fn xattrs(&self, _inode: &Inode) -> Result<Vec<Xattr>> {
        Ok(Vec::new())
    }
}
