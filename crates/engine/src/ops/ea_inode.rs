//! `ea_inode` values (`attributes.rst`, "Extended attribute values in
//! inodes"): with the feature, a value too large for an inode or an xattr
//! block lives in an inode of its own, flagged `EXT4_EA_INODE_FL`, which
//! the entry names in `e_value_inum`. That inode keeps, as the kernel's
//! `ext4_xattr_inode_set_hash`/`_set_ref` and e2fsprogs'
//! `ext2fs_{get,set}_ea_inode_{hash,ref}` agree:
//!
//! - the value's crc32c (seeded with the file system's checksum seed) in
//!   `i_atime`, which the entry's `e_hash` folds in;
//! - its reference count, 64 bits, high half in `i_ctime` and low half in
//!   `i_version_lo` (`osd1`): one per entry in an inode body, one per
//!   entry in an xattr block however many inodes share that block.
//!
//! The value inode is freed when its count reaches zero.

use ext4kit_format::checksum::crc32c_raw;
use ext4kit_format::inode::{FileType, RawInode, flags};

use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::inode::write::NewInode;
use crate::txn::Txn;

/// The reference count of a value inode.
pub(crate) fn refs(raw: &RawInode) -> u64 {
    (u64::from(raw.i_ctime.get()) << 32) | u64::from(raw.i_version_lo.get())
}

fn set_refs(raw: &mut RawInode, n: u64) {
    raw.i_ctime.set((n >> 32) as u32);
    raw.i_ctime_extra.set(0);
    raw.i_version_lo.set(n as u32);
}

impl Txn<'_> {
    /// A new value inode holding `value`, with one reference; returns its
    /// number and the value hash. The owner's group is the goal, as the
    /// kernel's `ext4_xattr_inode_create` asks for `inode->i_ino + 1`.
    pub(crate) fn create_ea_inode(&mut self, owner: &Inode, value: &[u8]) -> Result<(u32, u32)> {
        let ino = self.alloc_inode(owner, None, false)?;
        let n = NewInode {
            file_type: FileType::Regular,
            perm: 0o600,
            uid: 0,
            gid: 0,
        };
        let mut ea = self.fresh_inode(ino, n)?;
        if !ea.uses_extents() {
            return Err(Error::Unsupported("ea_inode values without the extent feature".into()));
        }
        ea.raw.i_flags.set(ea.raw.flags() | flags::EA_INODE);
        self.write_range(&mut ea, 0, value)?;
        ea.raw.set_size(value.len() as u64);
        let hash = crc32c_raw(self.fs.csum_seed, value);
        ea.raw.i_atime.set(hash);
        ea.raw.i_atime_extra.set(0);
        set_refs(&mut ea.raw, 1);
        self.write_inode(&mut ea)?;
        Ok((ino, hash))
    }

    /// The value hash a value inode records (`i_atime`).
    pub(crate) fn ea_inode_hash(&self, owner: u32, inum: u32) -> Result<u32> {
        Ok(self.value_inode(owner, inum)?.raw.i_atime.get())
    }

    /// Adds `delta` (+1 or -1) to a value inode's references; the last
    /// one gone frees it, body and inode.
    pub(crate) fn ea_inode_ref(&mut self, owner: u32, inum: u32, delta: i64) -> Result<()> {
        let mut ea = self.value_inode(owner, inum)?;
        let n = refs(&ea.raw).saturating_add_signed(delta);
        if n == 0 {
            return super::remove::release(self, &mut ea).and_then(|()| self.write_inode(&mut ea));
        }
        set_refs(&mut ea.raw, n);
        self.write_inode(&mut ea)
    }

    /// Inode `inum`, which an entry of `owner` names as its value inode:
    /// corrupt unless it is one.
    fn value_inode(&self, owner: u32, inum: u32) -> Result<Inode> {
        let ea = self.inode(inum)?;
        if !ea.raw.has_flag(flags::EA_INODE) || ea.raw.links() == 0 {
            return Err(Error::inconsistent(
                Location::Inode(owner),
                format!("xattr value inode {inum} is not a live EA inode"),
            ));
        }
        Ok(ea)
    }
}
