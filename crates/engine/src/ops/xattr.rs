//! Setting and removing extended attributes (`ext4_xattr_set`). The
//! attribute list is rebuilt whole: in-inode entries first (after
//! `i_extra_isize`) while they fit, the rest in one block. A block shared by
//! several inodes (`h_refcount` > 1) is never changed in place: the inode
//! takes a private copy and the shared block's count drops by one.
//!
//! With `ea_inode`, a value too large for a block goes to a value inode of
//! its own ([`super::ea_inode`]); entries naming one keep it referenced as
//! they move between the inode body and the block, and release it when
//! they are removed or their file is.

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::xattr::encode::{NewValue, NewXattr, encode_block, encode_ibody, sort_for_block};
use ext4kit_format::xattr::{self, XattrValue};

use crate::clock;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::extent_write::charge_blocks;
use crate::inode::write::touch_ctime;
use crate::txn::Txn;

/// How [`Filesystem::set_xattr`] treats an existing attribute (`setxattr` flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace.
    #[default]
    Any,
    /// Fail with [`Error::Exists`] if it exists (`XATTR_CREATE`).
    Create,
    /// Fail with [`Error::NoAttribute`] if it does not (`XATTR_REPLACE`).
    Replace,
}

/// An attribute as stored: name index, suffix, on-disk value.
pub(crate) type Stored = (u8, Vec<u8>, Val);

/// Where an attribute's value is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Val {
    /// In the entry's region (inode body or block).
    Bytes(Vec<u8>),
    /// In value inode `inum` (`size` bytes, value hash `hash`).
    EaInode {
        /// `e_value_inum`.
        inum: u32,
        /// `e_value_size`.
        size: u32,
        /// The value inode's `i_atime`.
        hash: u32,
    },
}

impl Val {
    /// The bytes, when they are stored in the entry's region.
    pub(crate) fn bytes(&self) -> Option<&Vec<u8>> {
        match self {
            Self::Bytes(b) => Some(b),
            Self::EaInode { .. } => None,
        }
    }
}

/// Largest value the VFS passes to a file system (`XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: usize = 65536;

/// Values larger than this go to a value inode when the file system has
/// `ea_inode` (`EXT4_XATTR_MIN_LARGE_EA_SIZE`: a block less the rounding,
/// one entry and the end marker).
fn large_value(bs: u32) -> usize {
    bs as usize - 3 - 16 - 4
}

impl Filesystem {
    /// Sets attribute `name` of `ino` to `value` (POSIX ACLs in the VFS form).
    ///
    /// # Errors
    /// [`Error::Exists`] / [`Error::NoAttribute`] per `how`,
    /// [`Error::Unsupported`] for an unknown name prefix,
    /// [`Error::NoSpace`] when the attributes fit neither inode nor block
    /// (with `ea_inode`, a large value goes to a value inode instead),
    /// [`Error::NotPermitted`] for an immutable or append-only inode.
    pub fn set_xattr(&self, ino: u32, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        self.set_xattr_by(ino, name, value, how, &|_| true)
    }

    /// [`Filesystem::set_xattr`] for a caller who keeps the set-group-ID
    /// bit of a file of group `g` only when `keeps_sgid(g)` holds: an
    /// access ACL that sets the mode clears `S_ISGID` otherwise, as
    /// `posix_acl_update_mode` does for a caller outside the file's group
    /// without `CAP_FSETID`. The group is read inside the transaction.
    ///
    /// # Errors
    /// As [`Filesystem::set_xattr`].
    pub fn set_xattr_by(
        &self,
        ino: u32,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
        keeps_sgid: &dyn Fn(u32) -> bool,
    ) -> Result<()> {
        let (index, _) = split(name)?;
        let is_acl = index == super::acl::ACCESS || index == super::acl::DEFAULT;
        let r = self.in_txn(|txn| txn.set_xattr_by(ino, name, value, how, keeps_sgid));
        // Corruption met while setting an ACL is not recorded in the
        // superblock (it never was).
        if is_acl { r } else { self.noting_errors("xattr", r) }
    }

    /// Removes attribute `name` of `ino`.
    ///
    /// # Errors
    /// [`Error::NoAttribute`] when it does not exist, [`Error::NotPermitted`]
    /// for an immutable or append-only inode.
    pub fn remove_xattr(&self, ino: u32, name: &[u8]) -> Result<()> {
        split(name)?;
        self.noting_errors("xattr", self.in_txn(|txn| txn.remove_xattr(ino, name)))
    }
}

impl Txn<'_> {
    /// The body of [`Filesystem::set_xattr`] inside this transaction.
    pub(crate) fn set_xattr(&mut self, ino: u32, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        self.set_xattr_by(ino, name, value, how, &|_| true)
    }

    /// The body of [`Filesystem::set_xattr_by`] inside this transaction.
    pub(crate) fn set_xattr_by(
        &mut self,
        ino: u32,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
        keeps_sgid: &dyn Fn(u32) -> bool,
    ) -> Result<()> {
        let (index, suffix) = split(name)?;
        // The VFS refuses longer values (`XATTR_SIZE_MAX`, E2BIG) before
        // ext4 sees them; a value inode holds at most that much.
        if value.len() > XATTR_SIZE_MAX {
            return Err(Error::InvalidArgument(format!(
                "xattr value of {} bytes exceeds {XATTR_SIZE_MAX}",
                value.len()
            )));
        }
        if index == super::acl::ACCESS || index == super::acl::DEFAULT {
            return self.set_acl(ino, index, name, value, how, keeps_sgid);
        }
        let ea = self.fs.geo.features.incompat.contains(IncompatFeatures::EA_INODE);
        let outside = ea && value.len().next_multiple_of(4) > large_value(self.fs.geo.block_size);
        match self.set_xattr_as(ino, index, suffix, value, how, outside) {
            Err(Error::NoSpace) if ea && !outside => self.set_xattr_as(ino, index, suffix, value, how, true),
            r => r,
        }
    }

    /// Sets one attribute, its value in a value inode when `outside`.
    pub(crate) fn set_xattr_as(
        &mut self,
        ino: u32,
        index: u8,
        suffix: &[u8],
        value: &[u8],
        how: XattrSet,
        outside: bool,
    ) -> Result<()> {
        let shown = || String::from_utf8_lossy(suffix).into_owned();
        self.change_xattrs(ino, |txn, inode, ibody, block| {
            let mut gone = remove_from(ibody, index, suffix);
            gone.extend(remove_from(block, index, suffix));
            match how {
                XattrSet::Create if !gone.is_empty() => return Err(Error::Exists(shown())),
                XattrSet::Replace if gone.is_empty() => return Err(Error::NoAttribute(shown())),
                _ => {}
            }
            let val = if outside {
                let (inum, hash) = txn.ea_inode_for(inode, value)?;
                Val::EaInode {
                    inum,
                    size: value.len() as u32,
                    hash,
                }
            } else {
                Val::Bytes(value.to_vec())
            };
            ibody.push((index, suffix.to_vec(), val));
            Ok(gone)
        })
    }

    /// The body of [`Filesystem::remove_xattr`] inside this transaction.
    pub(crate) fn remove_xattr(&mut self, ino: u32, name: &[u8]) -> Result<()> {
        let (index, suffix) = split(name)?;
        self.change_xattrs(ino, |_, _, ibody, block| {
            let mut gone = remove_from(ibody, index, suffix);
            gone.extend(remove_from(block, index, suffix));
            if gone.is_empty() {
                return Err(Error::NoAttribute(String::from_utf8_lossy(name).into_owned()));
            }
            Ok(gone)
        })
    }

    /// Edits the attribute lists of `ino`; `edit` returns the entries it
    /// removed, whose value inodes lose the reference once the lists are
    /// stored.
    fn change_xattrs(
        &mut self,
        ino: u32,
        edit: impl FnOnce(&mut Self, &Inode, &mut Vec<Stored>, &mut Vec<Stored>) -> Result<Vec<Stored>>,
    ) -> Result<()> {
        let mut inode = self.inode(ino)?;
        // xattr_permission: no attribute changes on immutable or
        // append-only inodes.
        super::flags::require_changeable(&inode)?;
        let (mut ibody, mut block) = self.stored_xattrs(&inode)?;
        let bs = self.fs.geo.block_size;
        let cb = self.fs.geo.cluster_bits;
        let before = value_blocks(&ibody, bs, cb) + value_blocks(&block, bs, cb);
        let gone = edit(self, &inode, &mut ibody, &mut block)?;
        let after = value_blocks(&ibody, bs, cb) + value_blocks(&block, bs, cb);
        // The owner is charged for its values' blocks, as the kernel's
        // quota charge (`ext4_xattr_inode_alloc_quota`) adds them to i_blocks.
        charge_blocks(&mut inode.raw, after - before, bs);
        self.place_xattrs(&mut inode, ibody, block)?;
        touch_ctime(&mut inode.raw, clock::now());
        self.write_inode(&mut inode)?;
        self.drop_value_inodes(ino, &gone)
    }

    /// Releases the value inodes `entries` referenced.
    pub(crate) fn drop_value_inodes(&mut self, owner: u32, entries: &[Stored]) -> Result<()> {
        for (_, _, v) in entries {
            if let Val::EaInode { inum, .. } = v {
                self.ea_inode_ref(owner, *inum, -1)?;
            }
        }
        Ok(())
    }

    /// Before `inode` is freed: the value inodes its body's entries
    /// reference, and its block's when this is the block's last user.
    pub(crate) fn release_value_inodes(&mut self, inode: &Inode) -> Result<()> {
        if !self.fs.geo.features.incompat.contains(IncompatFeatures::EA_INODE) {
            return Ok(());
        }
        let (ibody, block) = self.stored_xattrs(inode)?;
        self.drop_value_inodes(inode.ino, &ibody)?;
        let blk = inode.raw.file_acl();
        if blk != 0 && self.xattr_refcount(inode, blk)? <= 1 {
            self.drop_value_inodes(inode.ino, &block)?;
        }
        Ok(())
    }
}

fn split(name: &[u8]) -> Result<(u8, &[u8])> {
    match xattr::split_name(name) {
        Some((i, s)) if !s.is_empty() && s.len() <= 255 || (i == 2 || i == 3) => Ok((i, s)),
        _ => Err(Error::Unsupported(format!(
            "attribute name {:?}",
            String::from_utf8_lossy(name)
        ))),
    }
}

/// The blocks the owner is charged for its value inodes: each value's size
/// in whole clusters (e2fsck's `size_to_quota_blocks`; one cluster is one
/// block without bigalloc).
fn value_blocks(list: &[Stored], bs: u32, cluster_bits: u32) -> i64 {
    list.iter()
        .map(|(_, _, v)| match v {
            Val::EaInode { size, .. } => i64::from(size.div_ceil(bs << cluster_bits)) << cluster_bits,
            Val::Bytes(_) => 0,
        })
        .sum()
}

/// Takes the entries named `index`/`name` out of `list`.
fn remove_from(list: &mut Vec<Stored>, index: u8, name: &[u8]) -> Vec<Stored> {
    let (gone, kept) = std::mem::take(list)
        .into_iter()
        .partition(|(i, n, _)| *i == index && n == name);
    *list = kept;
    gone
}

fn as_new(list: &[Stored]) -> Vec<NewXattr<'_>> {
    list.iter()
        .map(|(i, n, v)| NewXattr {
            index: *i,
            name: n,
            value: match v {
                Val::Bytes(b) => NewValue::Bytes(b),
                &Val::EaInode { inum, size, hash } => NewValue::EaInode {
                    inum,
                    size,
                    value_hash: hash,
                },
            },
        })
        .collect()
}

impl Txn<'_> {
    /// The in-inode and block attributes of `inode` as stored.
    pub(crate) fn stored_xattrs(&self, inode: &Inode) -> Result<(Vec<Stored>, Vec<Stored>)> {
        let at = Location::Inode(inode.ino);
        let collect = |entries: Vec<xattr::XattrEntry<'_>>| -> Result<Vec<Stored>> {
            entries
                .iter()
                .map(|e| match e.value {
                    XattrValue::Inline(v) => Ok((e.index(), e.name.to_vec(), Val::Bytes(v.to_vec()))),
                    XattrValue::EaInode { inum, size } => {
                        let hash = self.ea_inode_hash(inode.ino, inum)?;
                        Ok((e.index(), e.name.to_vec(), Val::EaInode { inum, size, hash }))
                    }
                })
                .collect()
        };
        let ibody = if inode.record.len() > 128 {
            let region =
                xattr::ibody_region(&inode.record, inode.raw.i_extra_isize.get()).map_err(|e| Error::format(at, e))?;
            collect(xattr::parse_ibody(region).map_err(|e| Error::format(at, e))?)?
        } else {
            Vec::new()
        };
        let blk = inode.raw.file_acl();
        let block = if blk == 0 {
            Vec::new()
        } else {
            let buf = self.block(blk, inode.ino)?;
            let at = Location::Block {
                block: blk,
                inode: inode.ino,
            };
            collect(xattr::parse_block(&buf).map_err(|e| Error::format(at, e))?.entries)?
        };
        Ok((ibody, block))
    }

    /// The `system.data` value of an inline-data inode (empty when none).
    pub(crate) fn system_data_value(&self, inode: &Inode) -> Result<Vec<u8>> {
        let (ibody, block) = self.stored_xattrs(inode)?;
        Ok(ibody
            .into_iter()
            .chain(block)
            .find(|(i, n, _)| *i == 7 && n == b"data")
            .and_then(|(_, _, v)| v.bytes().cloned())
            .unwrap_or_default())
    }

    /// Removes the `system.data` attribute (the inline body's tail).
    pub(crate) fn drop_system_data(&mut self, inode: &mut Inode) -> Result<()> {
        let (mut ibody, mut block) = self.stored_xattrs(inode)?;
        remove_from(&mut ibody, 7, b"data");
        remove_from(&mut block, 7, b"data");
        self.place_xattrs(inode, ibody, block)
    }

    /// Sets `system.data` to `value` in the inode body, the other in-inode
    /// attributes kept there: false, nothing changed, when they do not all
    /// fit (the inline body then has to move to blocks).
    pub(crate) fn put_system_data(&mut self, inode: &mut Inode, value: &[u8]) -> Result<bool> {
        let (mut ibody, _) = self.stored_xattrs(inode)?;
        remove_from(&mut ibody, 7, b"data");
        ibody.insert(0, (7, b"data".to_vec(), Val::Bytes(value.to_vec())));
        let start = 128 + usize::from(inode.raw.i_extra_isize.get());
        let region_len = inode.record.len().saturating_sub(start);
        if region_len == 0 {
            return Ok(false);
        }
        let Ok(bytes) = encode_ibody(&as_new(&ibody), region_len) else {
            return Ok(false);
        };
        inode.record[start..].copy_from_slice(&bytes);
        Ok(true)
    }

    /// Stores the lists: in-inode entries while they fit, the rest in the block.
    pub(crate) fn place_xattrs(
        &mut self,
        inode: &mut Inode,
        mut ibody: Vec<Stored>,
        mut block: Vec<Stored>,
    ) -> Result<()> {
        // An inode record in a fast commit stops at i_extra_isize: the
        // attributes would be lost (EXT4_FC_REASON_XATTR).
        self.fc_ineligible("xattr");
        let start = 128 + usize::from(inode.raw.i_extra_isize.get());
        let region_len = inode.record.len().saturating_sub(start);
        while !ibody.is_empty() && (region_len == 0 || encode_ibody(&as_new(&ibody), region_len).is_err()) {
            // Keep inline data's system.data in the inode; move others out.
            let pos = ibody
                .iter()
                .rposition(|(i, n, _)| !(*i == 7 && n == b"data"))
                .unwrap_or(ibody.len() - 1);
            block.push(ibody.remove(pos));
        }
        if region_len > 0 {
            let bytes = encode_ibody(&as_new(&ibody), region_len).map_err(|_| Error::NoSpace)?;
            inode.record[start..].copy_from_slice(&bytes);
        }
        self.store_xattr_block(inode, block)
    }

    fn store_xattr_block(&mut self, inode: &mut Inode, mut attrs: Vec<Stored>) -> Result<()> {
        let old = inode.raw.file_acl();
        if attrs.is_empty() {
            if old != 0 {
                self.release_xattr_block(inode)?;
            }
            return Ok(());
        }
        let bs = self.fs.block_size();
        attrs.sort_by(|a, b| (a.0, a.1.len(), &a.1).cmp(&(b.0, b.1.len(), &b.1)));
        let mut new = as_new(&attrs);
        sort_for_block(&mut new);
        let mut bytes = encode_block(&new, bs, 1).map_err(|_| Error::NoSpace)?;
        let private = old != 0 && self.xattr_refcount(inode, old)? == 1;
        let target = if private {
            old
        } else {
            if old != 0 {
                // The shared block keeps its own references.
                for (_, _, v) in &attrs {
                    if let Val::EaInode { inum, .. } = v {
                        self.ea_inode_ref(inode.ino, *inum, 1)?;
                    }
                }
                self.release_xattr_block(inode)?;
            }
            let goal = self
                .fs
                .geo
                .group_first_block((inode.ino - 1) / self.fs.geo.inodes_per_group);
            let (b, _) = self.alloc_blocks(goal, 1)?;
            charge_blocks(&mut inode.raw, self.meta_charge(1), self.fs.geo.block_size);
            b
        };
        if self.fs.geo.features.metadata_csum() {
            xattr::set_block_checksum(self.fs.csum_seed, target, &mut bytes).map_err(|e| {
                Error::format(
                    Location::Block {
                        block: target,
                        inode: inode.ino,
                    },
                    e,
                )
            })?;
        }
        self.put_block(target, bytes.into());
        inode.raw.i_file_acl_lo.set(target as u32);
        inode.raw.i_file_acl_high.set((target >> 32) as u16);
        Ok(())
    }

    fn xattr_refcount(&self, inode: &Inode, block: u64) -> Result<u32> {
        let buf = self.block(block, inode.ino)?;
        let h = xattr::parse_block(&buf).map_err(|e| {
            Error::format(
                Location::Block {
                    block,
                    inode: inode.ino,
                },
                e,
            )
        })?;
        Ok(h.header.h_refcount.get())
    }

    /// Drops `inode`'s reference to its xattr block: frees it with the last
    /// reference, else counts one off (`ext4_xattr_release_block`).
    pub(crate) fn release_xattr_block(&mut self, inode: &mut Inode) -> Result<()> {
        let block = inode.raw.file_acl();
        let refs = self.xattr_refcount(inode, block)?;
        if refs <= 1 {
            self.free_blocks(block, 1)?;
        } else {
            let seed = self.fs.csum_seed;
            let csum = self.fs.geo.features.metadata_csum();
            let buf = self.block_mut(block, inode.ino)?;
            buf[4..8].copy_from_slice(&(refs - 1).to_le_bytes());
            if csum {
                xattr::set_block_checksum(seed, block, buf).map_err(|e| {
                    Error::format(
                        Location::Block {
                            block,
                            inode: inode.ino,
                        },
                        e,
                    )
                })?;
            }
        }
        charge_blocks(&mut inode.raw, -self.meta_charge(1), self.fs.geo.block_size);
        inode.raw.i_file_acl_lo.set(0);
        inode.raw.i_file_acl_high.set(0);
        Ok(())
    }
}
