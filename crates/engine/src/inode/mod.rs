//! Inodes: reading a record from its group's inode table, verifying it, and
//! the file-body machinery below (extent trees, ext2/3 block maps, inline
//! data, extended attributes).

pub(crate) mod block_map;
pub(crate) mod block_map_punch;
pub(crate) mod block_map_write;
pub(crate) mod body_lookup;
pub(crate) mod extent_edit;
pub(crate) mod extent_write;
pub(crate) mod extents;
pub mod inline;
mod inline_dir;
mod inline_write;
pub mod map;
pub(crate) mod max_size;
pub(crate) mod read;
mod uninline;
pub(crate) mod write;
pub mod xattr;

use ext4kit_format::inode::{FileType, RawInode, Timestamp, flags, verify_inode_checksum};

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;

/// Inode-table blocks read in one request on a cache miss (the kernel's
/// default `inode_readahead_blks`).
const INODE_READAHEAD_BLOCKS: u64 = 32;

/// The root directory's inode number.
pub const ROOT_INO: u32 = 2;

/// An inode as read from disk: its number, the decoded core and the whole
/// on-disk record (in-inode xattrs live past the core).
#[derive(Clone)]
pub struct Inode {
    /// Inode number.
    pub ino: u32,
    /// Decoded fields.
    pub raw: RawInode,
    /// The `s_inode_size`-byte record.
    pub record: Box<[u8]>,
}

impl std::fmt::Debug for Inode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inode")
            .field("ino", &self.ino)
            .field("mode", &format_args!("{:o}", self.raw.i_mode.get()))
            .finish_non_exhaustive()
    }
}

/// The block and byte offset of an inode record, and the end of its table.
pub(crate) struct InodeSlot {
    pub(crate) block: u64,
    pub(crate) offset: usize,
    pub(crate) table_end: u64,
}

/// What `stat` shows for an inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// Inode number.
    pub ino: u32,
    /// File type.
    pub file_type: FileType,
    /// Permission bits (07777).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Hard links.
    pub nlink: u32,
    /// 512-byte sectors charged.
    pub blocks: u64,
    /// Access time.
    pub atime: Timestamp,
    /// Modification time.
    pub mtime: Timestamp,
    /// Change time.
    pub ctime: Timestamp,
    /// Creation time, with large inodes.
    pub crtime: Option<Timestamp>,
    /// Device (major, minor) for device nodes.
    pub rdev: (u32, u32),
    /// `i_flags`.
    pub flags: u32,
    /// `i_generation`.
    pub generation: u32,
}

impl Inode {
    /// The file type, or a corruption error for a mode with no valid type.
    pub fn file_type(&self) -> Result<FileType> {
        self.raw.file_type().ok_or_else(|| {
            Error::inconsistent(
                Location::Inode(self.ino),
                format!("invalid file type in i_mode {:#o}", self.raw.i_mode.get()),
            )
        })
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.raw.size()
    }

    /// True when this is a directory.
    pub fn is_dir(&self) -> bool {
        self.raw.file_type() == Some(FileType::Directory)
    }

    /// True when the body is stored inline (`EXT4_INLINE_DATA_FL`).
    pub fn has_inline_data(&self) -> bool {
        self.raw.has_flag(flags::INLINE_DATA)
    }

    /// Errors unless this is a regular file ([`Error::IsDir`] for a directory).
    pub(crate) fn require_regular(&self) -> Result<()> {
        match self.file_type()? {
            FileType::Regular => Ok(()),
            FileType::Directory => Err(Error::IsDir(format!("inode {}", self.ino))),
            _ => Err(Error::InvalidArgument(format!(
                "inode {} is not a regular file",
                self.ino
            ))),
        }
    }

    /// True when the body is an extent tree.
    pub fn uses_extents(&self) -> bool {
        self.raw.has_flag(flags::EXTENTS)
    }
}

impl Filesystem {
    /// Reads inode `ino`.
    ///
    /// One cached block read (the inode-table block). The checksum is verified
    /// with `metadata_csum` unless the record is all zeros (never used).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a number outside `1..=s_inodes_count`;
    /// [`Error::BadChecksum`] / [`Error::Corrupt`] at [`Location::Inode`].
    ///
    /// A file with data held for delayed allocation ([`crate::delalloc`])
    /// shows the size, times and block count it will have once written
    /// back; the record itself ([`Inode::record`]) is as on disk.
    pub fn inode(&self, ino: u32) -> Result<Inode> {
        let mut inode = self.inode_on_disk(ino)?;
        self.delalloc.overlay(&mut inode, self.geo.block_size);
        Ok(inode)
    }

    /// Inode `ino` as the image holds it, without held pages.
    pub(crate) fn inode_on_disk(&self, ino: u32) -> Result<Inode> {
        self.reading("inode", || self.inode_unrecorded(ino))
    }

    fn inode_unrecorded(&self, ino: u32) -> Result<Inode> {
        let slot = self.inode_slot(ino)?;
        let buf = self.meta_block_ahead(
            slot.block,
            (slot.table_end - slot.block).min(INODE_READAHEAD_BLOCKS),
            ino,
        )?;
        self.decode_inode(ino, &buf[slot.offset..slot.offset + usize::from(self.geo.inode_size)])
    }

    /// Where inode `ino`'s record lives.
    pub(crate) fn inode_slot(&self, ino: u32) -> Result<InodeSlot> {
        let (group, index) = self
            .geo
            .inode_location(ino)
            .ok_or_else(|| Error::InvalidArgument(format!("inode number {ino} is out of range")))?;
        let desc = self.group_desc(group)?;
        let byte = u64::from(index) * u64::from(self.geo.inode_size);
        Ok(InodeSlot {
            block: desc.inode_table() + (byte >> self.geo.block_size_log2),
            offset: (byte & (u64::from(self.geo.block_size) - 1)) as usize,
            table_end: desc.inode_table() + u64::from(self.geo.inode_table_blocks),
        })
    }

    /// Decodes and verifies a record read from the inode table.
    pub(crate) fn decode_inode(&self, ino: u32, record: &[u8]) -> Result<Inode> {
        let isz = usize::from(self.geo.inode_size);
        let mut raw = RawInode::parse(record, isz).map_err(|e| Error::format(Location::Inode(ino), e))?;
        if self.geo.features.metadata_csum() && record.iter().any(|&b| b != 0) {
            let r = verify_inode_checksum(record, self.csum_seed, ino);
            self.check(Location::Inode(ino), r)?;
        }
        if raw.links() != 0
            && let Some(why) = raw.flag_conflict(&self.geo.features)
        {
            return Err(Error::inconsistent(Location::Inode(ino), why));
        }
        self.directory_size_rule(&mut raw);
        Ok(Inode {
            ino,
            raw,
            record: record.into(),
        })
    }

    /// A directory's size is 32-bit unless the file system has `large_dir`:
    /// the kernel's `ext4_isize` reads only `i_size_lo` of a directory
    /// there, because `i_size_high` was once `i_dir_acl` and may hold
    /// anything. The high word is dropped as the kernel drops it, so the
    /// next write of the inode stores it as 0 (what e2fsck's "i_size_high
    /// ... should be zero" asks for); the record keeps the disk's bytes.
    fn directory_size_rule(&self, raw: &mut RawInode) {
        let large_dir = self
            .geo
            .features
            .incompat
            .contains(ext4kit_format::features::IncompatFeatures::LARGEDIR);
        if !large_dir && raw.i_size_high.get() != 0 && raw.file_type() == Some(FileType::Directory) {
            raw.i_size_high.set(0);
        }
    }

    /// `stat` information of an inode.
    pub fn metadata(&self, inode: &Inode) -> Result<Metadata> {
        self.reading("metadata", || self.metadata_unrecorded(inode))
    }

    fn metadata_unrecorded(&self, inode: &Inode) -> Result<Metadata> {
        let r = &inode.raw;
        let huge = self
            .geo
            .features
            .ro_compat
            .contains(ext4kit_format::features::RoCompatFeatures::HUGE_FILE);
        let file_type = inode.file_type()?;
        let nlink = u32::from(r.links());
        Ok(Metadata {
            ino: inode.ino,
            file_type,
            perm: r.permissions(),
            uid: r.uid(),
            gid: r.gid(),
            size: r.size(),
            // dir_nlink: a directory with more than 65,000 subdirectories stores 1.
            nlink,
            blocks: r.blocks_512(huge, self.geo.block_size) + inline_sectors(inode),
            atime: r.atime(),
            mtime: r.mtime(),
            ctime: r.ctime(),
            crtime: r.crtime(),
            rdev: if matches!(file_type, FileType::CharDevice | FileType::BlockDevice) {
                r.device()
            } else {
                (0, 0)
            },
            flags: r.flags(),
            generation: r.i_generation.get(),
        })
    }

    /// The checksum seed of `inode`'s metadata blocks.
    pub(crate) fn inode_csum_seed(&self, inode: &Inode) -> u32 {
        inode.raw.csum_seed(self.csum_seed, inode.ino)
    }
}

/// The sectors `stat` adds for a regular file's inline body, as the
/// kernel's `ext4_file_getattr` does so that `du` does not skip small files
/// that hold data without a block (directories get nothing added).
fn inline_sectors(inode: &Inode) -> u64 {
    if inode.has_inline_data() && inode.raw.file_type() == Some(FileType::Regular) {
        inode.raw.size().div_ceil(512)
    } else {
        0
    }
}
