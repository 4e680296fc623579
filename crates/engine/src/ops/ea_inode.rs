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
//! The value inode is freed when its count reaches zero. Identical values
//! share one value inode, as `ext4_xattr_inode_lookup_create` makes them:
//! a set whose value equals that of a value inode this session has met
//! ([`super::ea_cache`]) takes a reference on it instead of a new inode.

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
    /// A value inode holding `value` with one more reference: an existing
    /// one with the same contents when the cache knows one, else a new one.
    /// Returns its number and the value hash.
    pub(crate) fn ea_inode_for(&mut self, owner: &Inode, value: &[u8]) -> Result<(u32, u32)> {
        let hash = crc32c_raw(self.fs.csum_seed, value);
        for inum in self.fs.ea_cache.candidates(hash) {
            if self.holds_value(inum, hash, value)? {
                self.ea_inode_ref(owner.ino, inum, 1)?;
                return Ok((inum, hash));
            }
            self.fs.ea_cache.forget(hash, inum);
        }
        self.create_ea_inode(owner, value)
    }

    /// Whether inode `inum` is, as this transaction sees it, a live value
    /// inode of hash `hash` holding exactly `value` (the kernel's
    /// `ext4_xattr_inode_cache_find` compares the bytes too).
    fn holds_value(&self, inum: u32, hash: u32, value: &[u8]) -> Result<bool> {
        if inum < self.fs.geo.first_ino || inum > self.fs.geo.inodes_count {
            return Ok(false);
        }
        let ea = self.inode(inum)?;
        let live = ea.raw.has_flag(flags::EA_INODE) && ea.raw.links() > 0 && refs(&ea.raw) > 0;
        if !live || !ea.uses_extents() || ea.raw.i_atime.get() != hash || ea.size() != value.len() as u64 {
            return Ok(false);
        }
        let bs = u64::from(self.fs.geo.block_size);
        let mut got = vec![0u8; value.len()];
        for e in self.extents(&ea)?.iter().filter(|e| !e.unwritten) {
            let from = u64::from(e.logical) * bs;
            if from >= got.len() as u64 {
                continue;
            }
            let to = (from + u64::from(e.len) * bs).min(got.len() as u64);
            self.read_data(e.physical * bs, &mut got[from as usize..to as usize])?;
        }
        Ok(got == value)
    }

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
        self.fs.ea_cache.note(hash, ino);
        Ok((ino, hash))
    }

    /// The value hash a value inode records (`i_atime`); the inode is
    /// remembered as a candidate for sharing.
    pub(crate) fn ea_inode_hash(&self, owner: u32, inum: u32) -> Result<u32> {
        let hash = self.value_inode(owner, inum)?.raw.i_atime.get();
        self.fs.ea_cache.note(hash, inum);
        Ok(hash)
    }

    /// Adds `delta` (+1 or -1) to a value inode's references; the last
    /// one gone frees it, body and inode.
    pub(crate) fn ea_inode_ref(&mut self, owner: u32, inum: u32, delta: i64) -> Result<()> {
        let mut ea = self.value_inode(owner, inum)?;
        let n = refs(&ea.raw).saturating_add_signed(delta);
        if n == 0 {
            self.fs.ea_cache.forget(ea.raw.i_atime.get(), inum);
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
