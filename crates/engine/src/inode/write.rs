//! Writing inodes inside a transaction: reading one as the transaction sees
//! it, storing it back with a fresh checksum, and initialising a new one.

use ext4kit_format::inode::{FileType, RawInode, flags, set_inode_checksum};

use crate::clock;
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::txn::Txn;

/// Largest `i_size` without `large_file` (2 GiB - 1).
const LARGE_FILE_SIZE: u64 = 0x7FFF_FFFF;

/// What a new inode starts as.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewInode {
    pub(crate) file_type: FileType,
    pub(crate) perm: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl Txn<'_> {
    /// Inode `ino` as this transaction sees it.
    pub(crate) fn inode(&self, ino: u32) -> Result<Inode> {
        let slot = self.fs.inode_slot(ino)?;
        let end = slot.offset + usize::from(self.fs.geo.inode_size);
        self.with_block(slot.block, ino, |buf| self.fs.decode_inode(ino, &buf[slot.offset..end]))?
    }

    /// Stores `inode` (its `raw` fields over its record) with a fresh checksum.
    pub(crate) fn write_inode(&mut self, inode: &mut Inode) -> Result<()> {
        if inode.raw.size() > LARGE_FILE_SIZE {
            self.need_large_file();
        }
        inode.raw.encode_into(&mut inode.record);
        if self.fs.geo.features.metadata_csum() {
            set_inode_checksum(&mut inode.record, self.fs.csum_seed, inode.ino)
                .map_err(|e| Error::format(Location::Inode(inode.ino), e))?;
        }
        let slot = self.fs.inode_slot(inode.ino)?;
        let isz = inode.record.len();
        let buf = self.block_mut(slot.block, inode.ino)?;
        buf[slot.offset..slot.offset + isz].copy_from_slice(&inode.record);
        self.inode_written(inode.ino);
        Ok(())
    }

    /// Turns `large_file` on, as the kernel does when it writes an inode
    /// of 2 GiB or more (`ext4_do_update_inode`): without the feature,
    /// e2fsck reports such an inode and older readers ignore `i_size_high`.
    /// A revision 0 superblock, which has no feature fields, is first made
    /// dynamic as `ext4_update_dynamic_rev` does.
    fn need_large_file(&mut self) {
        let large = ext4kit_format::features::RoCompatFeatures::LARGE_FILE.0;
        let sb = self.superblock();
        if sb.s_feature_ro_compat.get() & large != 0 && sb.s_rev_level.get() > 0 {
            return;
        }
        let sb = self.sb_mut();
        if sb.s_rev_level.get() == 0 {
            sb.s_rev_level.set(1);
            sb.s_first_ino.set(11);
            sb.s_inode_size.set(128);
        }
        sb.s_feature_ro_compat.set(sb.s_feature_ro_compat.get() | large);
    }

    /// A fresh in-memory inode `ino` (not yet written): mode, owner, all
    /// four times now, one link, extents on when the file system has them.
    pub(crate) fn fresh_inode(&self, ino: u32, n: NewInode) -> Result<Inode> {
        let geo = &self.fs.geo;
        let isz = usize::from(geo.inode_size);
        let mut record = vec![0u8; isz];
        if isz > 128 {
            let want = self.fs.sb.read().s_want_extra_isize.get().clamp(32, (isz - 128) as u16);
            record[0x80..0x82].copy_from_slice(&want.to_le_bytes());
        }
        let mut raw = RawInode::parse(&record, isz).map_err(|e| Error::format(Location::Inode(ino), e))?;
        let type_bits = match n.file_type {
            FileType::Regular => 0o100000,
            FileType::Directory => 0o040000,
            FileType::Symlink => 0o120000,
            FileType::CharDevice => 0o020000,
            FileType::BlockDevice => 0o060000,
            FileType::Fifo => 0o010000,
            FileType::Socket => 0o140000,
        };
        raw.i_mode.set(type_bits | (n.perm & 0o7777));
        raw.i_uid.set(n.uid as u16);
        raw.i_uid_high.set((n.uid >> 16) as u16);
        raw.i_gid.set(n.gid as u16);
        raw.i_gid_high.set((n.gid >> 16) as u16);
        raw.i_links_count.set(1);
        raw.i_generation.set(generation(ino));
        let now = clock::now();
        set_times(&mut raw, now, true);
        let extents = geo
            .features
            .incompat
            .contains(ext4kit_format::features::IncompatFeatures::EXTENTS);
        if extents && matches!(n.file_type, FileType::Regular | FileType::Directory) {
            raw.i_flags.set(flags::EXTENTS);
            crate::inode::extent_write::init_root(&mut raw);
        }
        Ok(Inode {
            ino,
            raw,
            record: record.into(),
        })
    }
}

/// Sets ctime and mtime (and atime and crtime for a new inode) to `t`.
pub(crate) fn set_times(raw: &mut RawInode, t: ext4kit_format::inode::Timestamp, new: bool) {
    let (s, e) = clock::encode(t);
    raw.i_ctime.set(s);
    raw.i_ctime_extra.set(e);
    raw.i_mtime.set(s);
    raw.i_mtime_extra.set(e);
    if new {
        raw.i_atime.set(s);
        raw.i_atime_extra.set(e);
        raw.i_crtime.set(s);
        raw.i_crtime_extra.set(e);
    }
}

/// Sets ctime alone (a link count changed).
pub(crate) fn touch_ctime(raw: &mut RawInode, t: ext4kit_format::inode::Timestamp) {
    let (s, e) = clock::encode(t);
    raw.i_ctime.set(s);
    raw.i_ctime_extra.set(e);
}

/// A generation number: distinct per inode and call, no randomness source needed.
fn generation(ino: u32) -> u32 {
    let t = clock::now();
    let mut x = (t.secs as u64) ^ (u64::from(t.nsecs) << 20) ^ (u64::from(ino) << 40);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    (x ^ (x >> 33)) as u32
}
