//! Extended attributes (`attributes.rst`): entries in the inode body after
//! `i_extra_isize` and in the block named by `i_file_acl`, values inline or
//! (with `ea_inode`) in a separate inode. Listed as the kernel's `listxattr`
//! shows them: POSIX ACLs converted to the VFS form, `system.data` (inline
//! data) and unknown name indexes hidden.

use ext4kit_format::inode::flags;
use ext4kit_format::xattr::{self, XattrEntry, XattrValue, acl};

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// One extended attribute with its full name (`user.foo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xattr {
    /// Full name, prefix included.
    pub name: Vec<u8>,
    /// Value as the VFS presents it (POSIX ACLs in the `xattr` v2 form).
    pub value: Vec<u8>,
}

/// Largest value the VFS accepts (`XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: u32 = 65536;

impl Filesystem {
    /// Every visible extended attribute of `inode`: in-inode ones first, then
    /// the block's. Cost: the inode (already read) plus one cached block.
    ///
    /// # Errors
    /// Corruption of the in-inode area or the block, a bad block checksum,
    /// or an `ea_inode` value inode that is not one.
    pub fn xattrs(&self, inode: &Inode) -> Result<Vec<Xattr>> {
        self.reading("xattrs", || self.xattrs_unrecorded(inode))
    }

    fn xattrs_unrecorded(&self, inode: &Inode) -> Result<Vec<Xattr>> {
        let mut out = Vec::new();
        let at = Location::Inode(inode.ino);
        if inode.record.len() > 128 {
            let region =
                xattr::ibody_region(&inode.record, inode.raw.i_extra_isize.get()).map_err(|e| Error::format(at, e))?;
            let entries = xattr::parse_ibody(region).map_err(|e| Error::format(at, e))?;
            self.collect(&entries, at, &mut out)?;
        }
        let blk = inode.raw.file_acl();
        if blk != 0 {
            let at = Location::Block {
                block: blk,
                inode: inode.ino,
            };
            let buf = self.meta_block(blk, inode.ino)?;
            if self.geo.features.metadata_csum() {
                let r = xattr::verify_block_checksum(self.csum_seed, blk, &buf);
                self.check(at, r)?;
            }
            let block = xattr::parse_block(&buf).map_err(|e| Error::format(at, e))?;
            self.collect(&block.entries, at, &mut out)?;
        }
        Ok(out)
    }

    /// The value of attribute `name`.
    pub fn xattr(&self, inode: &Inode, name: &[u8]) -> Result<Vec<u8>> {
        self.xattrs(inode)?
            .into_iter()
            .find(|x| x.name == name)
            .map(|x| x.value)
            .ok_or_else(|| Error::NoAttribute(String::from_utf8_lossy(name).into_owned()))
    }

    fn collect(&self, entries: &[XattrEntry<'_>], at: Location, out: &mut Vec<Xattr>) -> Result<()> {
        for e in entries {
            let idx = e.index();
            // system.data (inline data), richacl and unknown indexes have no
            // VFS handler in the kernel, so listxattr never shows them.
            if idx == 7 || idx == 8 || xattr::prefix(idx).is_none() {
                continue;
            }
            let mut value = match e.value {
                XattrValue::Inline(v) => v.to_vec(),
                XattrValue::EaInode { inum, size } => self.ea_inode_value(inum, size, at)?,
            };
            if idx == 2 || idx == 3 {
                value = acl::disk_to_vfs(&value).map_err(|err| Error::format(at, err))?;
            }
            out.push(Xattr {
                name: e.full_name(),
                value,
            });
        }
        Ok(())
    }

    fn ea_inode_value(&self, inum: u32, size: u32, at: Location) -> Result<Vec<u8>> {
        if size > XATTR_SIZE_MAX {
            return Err(Error::inconsistent(
                at,
                format!("xattr value of {size} bytes exceeds the VFS limit"),
            ));
        }
        let ea = self.inode(inum)?;
        if !ea.raw.has_flag(flags::EA_INODE) || ea.size() != u64::from(size) {
            return Err(Error::inconsistent(
                at,
                format!("xattr value inode {inum} is not an EA inode of {size} bytes"),
            ));
        }
        self.ea_cache.note(ea.raw.i_atime.get(), inum);
        self.read_all_unlocked(&ea, u64::from(XATTR_SIZE_MAX))
    }
}
