//! The write operations of the library API, one file per operation. Each
//! runs in one transaction ([`crate::txn::Txn`]): it either commits whole
//! or, on any error (no space, a name that exists, an unsupported layout),
//! leaves the image untouched. The body of each is a `Txn` method
//! (`Txn::create`, `Txn::write`…) that the public method wraps in a
//! transaction of its own and a [`crate::Batch`] runs in a shared one.

mod acl;
mod attr;
pub(crate) mod create;
mod defrag;
pub(crate) mod ea_cache;
mod ea_inode;
mod fallocate;
pub(crate) mod flags;
mod open;
pub(crate) mod remove;
mod remove_tree;
mod rename;
mod seek;
mod shift_range;
mod tmpfile;
mod truncate;
mod write;
mod xattr;

pub use attr::SetAttr;
pub use create::{Attr, NodeKind};
pub use defrag::{DEFAULT_CHUNK_BLOCKS, DefragOptions, DefragOutcome, DefragSkip};
pub use fallocate::FallocMode;
pub use flags::{AtimePolicy, USER_MODIFIABLE, USER_VISIBLE};
pub use remove_tree::RemoveTreeError;
pub use rename::RenameFlags;
pub use xattr::XattrSet;

pub(crate) use remove::release as release_inode;

use crate::error::{Error, Result};

/// [`Error::NotFound`] for an inode with no links left: a directory
/// removed while open takes no new names (`IS_DEADDIR`), an unlinked file
/// no new link.
pub(crate) fn require_live(inode: &crate::inode::Inode) -> Result<()> {
    if inode.raw.links() == 0 {
        return Err(Error::NotFound(format!("inode {} has been removed", inode.ino)));
    }
    Ok(())
}

/// Checks a name for a new directory entry.
pub(crate) fn check_new_name(name: &[u8]) -> Result<()> {
    if name.len() > 255 {
        return Err(Error::NameTooLong(String::from_utf8_lossy(name).into_owned()));
    }
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(Error::InvalidArgument(format!(
            "invalid file name {:?}",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}
