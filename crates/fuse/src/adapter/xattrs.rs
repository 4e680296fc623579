//! Extended attributes, with the size protocol of `getxattr(2)` and
//! `listxattr(2)`: a zero size asks for the length, a short buffer is
//! ERANGE.

use ext4kit_engine::XattrSet;
use fuser::{Errno, INodeNo};

use super::caller::Caller;

use super::{Ext4Fuse, Res};

/// `XATTR_CREATE` / `XATTR_REPLACE`.
const XATTR_CREATE: i32 = 1;
const XATTR_REPLACE: i32 = 2;

/// What a GETXATTR or LISTXATTR answers.
pub(crate) enum Sized {
    /// The length a zero-sized request asks for.
    Len(u32),
    Data(Vec<u8>),
}

pub(crate) fn sized(r: Res<Vec<u8>>, size: u32) -> Res<Sized> {
    match r {
        Ok(v) if size == 0 => u32::try_from(v.len()).map(Sized::Len).map_err(|_| Errno::E2BIG),
        Ok(v) if v.len() > size as usize => Err(Errno::ERANGE),
        Ok(v) => Ok(Sized::Data(v)),
        Err(e) => Err(e),
    }
}

impl Ext4Fuse {
    /// An access ACL sent by a caller outside the file's group clears its
    /// `S_ISGID` (see [`super::caller`]).
    pub(super) fn set_xattr(&self, req: &Caller, ino: INodeNo, name: &[u8], value: &[u8], flags: i32) -> Res<()> {
        self.writable()?;
        let how = match flags & (XATTR_CREATE | XATTR_REPLACE) {
            0 => XattrSet::Any,
            XATTR_CREATE => XattrSet::Create,
            XATTR_REPLACE => XattrSet::Replace,
            _ => return Err(Errno::EINVAL),
        };
        self.check_space()?;
        self.fs()
            .set_xattr_by(self.ino(ino)?, name, value, how, &|gid| self.keeps_sgid(req, gid))
            .map_err(|e| self.errno(e))
    }

    pub(super) fn get_xattr(&self, ino: INodeNo, name: &[u8]) -> Res<Vec<u8>> {
        let inode = self.inode(self.ino(ino)?)?;
        self.fs().xattr(&inode, name).map_err(|e| self.errno(e))
    }

    /// Names, each followed by a NUL, as `listxattr` returns them.
    pub(super) fn list_xattrs(&self, ino: INodeNo) -> Res<Vec<u8>> {
        let inode = self.inode(self.ino(ino)?)?;
        let all = self.fs().xattrs(&inode).map_err(|e| self.errno(e))?;
        let mut out = Vec::new();
        for x in all {
            out.extend_from_slice(&x.name);
            out.push(0);
        }
        Ok(out)
    }

    pub(super) fn remove_xattr(&self, ino: INodeNo, name: &[u8]) -> Res<()> {
        self.writable()?;
        self.fs().remove_xattr(self.ino(ino)?, name).map_err(|e| self.errno(e))
    }
}
