//! Quota files in the kernel's v2 tree format (`QFMT_VFS_V1`), the content
//! of the hidden quota inodes the `quota` feature names (`s_usr_quota_inum`,
//! `s_grp_quota_inum`, `s_prj_quota_inum`).
//!
//! A file is a sequence of 1 KiB quota blocks ([`QBLK`]): block 0 holds the
//! header (`v2_disk_dqheader`: magic per type, version 1) and the info
//! (`v2_disk_dqinfo`: grace times, flags, block count, free lists); block 1
//! is the root of a four-level radix tree of 256 little-endian block
//! numbers indexed by the id's bytes, most significant first; the depth-3
//! references name data blocks, which hold a 16-byte header
//! (`qt_disk_dqdbheader`) and fourteen 72-byte `v2r1_disk_dqblk` entries
//! (all zero = unused). See e2fsprogs `lib/support/quotaio_v2.h` and
//! `quotaio_tree.h`.
//!
//! Block limits are in 1 KiB units, space usage in bytes.

mod tree;

pub use tree::{Located, MAX_QBLOCKS, build, first_write_order, read_entries};

use crate::error::{FormatError, Result};

/// Quota block size (`QT_BLKSIZE`).
pub const QBLK: usize = 1024;
/// Bytes of a `v2r1_disk_dqblk`.
pub const DQ_SIZE: usize = 72;
/// Bytes of a data block's header.
pub const DQ_HDR: usize = 16;
/// Entries per data block.
pub const PER_BLOCK: usize = (QBLK - DQ_HDR) / DQ_SIZE;
/// Depth of the radix tree (`QT_TREEDEPTH`).
pub const DEPTH: u32 = 4;
/// The unit of the block limits (`QIF_DQBLKSIZE`).
pub const LIMIT_UNIT: u64 = 1024;
/// Grace period mke2fs and the kernel start with (`MAX_DQ_TIME`,
/// `MAX_IQ_TIME`): one week, in seconds.
pub const DEFAULT_GRACE: u32 = 604_800;

/// A quota type, in the order of the superblock's quota inode fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaType {
    /// Charged to the inode's `i_uid`.
    User = 0,
    /// Charged to `i_gid`.
    Group = 1,
    /// Charged to `i_projid`.
    Project = 2,
}

impl QuotaType {
    /// The three types, in index order.
    pub const ALL: [QuotaType; 3] = [QuotaType::User, QuotaType::Group, QuotaType::Project];

    /// The header magic of this type's file (`INITQMAGICS`).
    pub fn magic(self) -> u32 {
        [0xd9c0_1f11, 0xd9c0_1927, 0xd9c0_3f14][self as usize]
    }

    /// The name e2fsprogs and the kernel use (`user`, `group`, `project`).
    pub fn name(self) -> &'static str {
        ["user", "group", "project"][self as usize]
    }

    /// The type called `name` (as [`QuotaType::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Block 0: header and `v2_disk_dqinfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// Which file this is (from the magic).
    pub qtype: QuotaType,
    /// `dqi_bgrace`: seconds over the block soft limit before it binds.
    pub bgrace: u32,
    /// `dqi_igrace`: the same for the inode soft limit.
    pub igrace: u32,
    /// `dqi_flags`.
    pub flags: u32,
    /// `dqi_blocks`: quota blocks in the file.
    pub blocks: u32,
    /// `dqi_free_blk`: head of the list of free quota blocks.
    pub free_blk: u32,
    /// `dqi_free_entry`: head of the list of data blocks with room.
    pub free_entry: u32,
}

impl Info {
    /// The info of a new, empty file of `qtype` (header and root blocks).
    pub fn new(qtype: QuotaType) -> Self {
        Info {
            qtype,
            bgrace: DEFAULT_GRACE,
            igrace: DEFAULT_GRACE,
            flags: 0,
            blocks: 2,
            free_blk: 0,
            free_entry: 0,
        }
    }

    /// Decodes block 0 of a file expected to be of `qtype`.
    pub fn parse(b: &[u8], qtype: QuotaType) -> Result<Self> {
        if b.len() < 32 {
            return Err(FormatError::truncated("v2_disk_dqheader", 32, b.len()));
        }
        let magic = le32(b, 0);
        if magic != qtype.magic() {
            return Err(FormatError::bad_magic("v2_disk_dqheader", "dqh_magic", 0, magic.into()));
        }
        let version = le32(b, 4);
        if version != 1 {
            return Err(FormatError::invalid(
                "v2_disk_dqheader",
                "dqh_version",
                4,
                version.into(),
            ));
        }
        Ok(Info {
            qtype,
            bgrace: le32(b, 8),
            igrace: le32(b, 12),
            flags: le32(b, 16),
            blocks: le32(b, 20),
            free_blk: le32(b, 24),
            free_entry: le32(b, 28),
        })
    }

    /// Encodes block 0.
    pub fn to_block(&self) -> [u8; QBLK] {
        let mut b = [0u8; QBLK];
        let words = [
            self.qtype.magic(),
            1,
            self.bgrace,
            self.igrace,
            self.flags,
            self.blocks,
            self.free_blk,
            self.free_entry,
        ];
        for (i, w) in words.into_iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }
}

/// One `v2r1_disk_dqblk`: an id's limits, usage and grace deadlines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dquot {
    /// `dqb_id`.
    pub id: u32,
    /// `dqb_ihardlimit`: inodes.
    pub ihardlimit: u64,
    /// `dqb_isoftlimit`.
    pub isoftlimit: u64,
    /// `dqb_curinodes`.
    pub curinodes: u64,
    /// `dqb_bhardlimit`, in [`LIMIT_UNIT`]s.
    pub bhardlimit: u64,
    /// `dqb_bsoftlimit`, in [`LIMIT_UNIT`]s.
    pub bsoftlimit: u64,
    /// `dqb_curspace`, in bytes.
    pub curspace: u64,
    /// `dqb_btime`: when the block soft limit starts to bind (0: not over).
    pub btime: u64,
    /// `dqb_itime`: the same for inodes.
    pub itime: u64,
}

impl Dquot {
    /// Decodes a 72-byte entry.
    pub fn parse(e: &[u8]) -> Result<Self> {
        if e.len() < DQ_SIZE {
            return Err(FormatError::truncated("v2r1_disk_dqblk", DQ_SIZE, e.len()));
        }
        Ok(Dquot {
            id: le32(e, 0),
            ihardlimit: le64(e, 8),
            isoftlimit: le64(e, 16),
            curinodes: le64(e, 24),
            bhardlimit: le64(e, 32),
            bsoftlimit: le64(e, 40),
            curspace: le64(e, 48),
            btime: le64(e, 56),
            itime: le64(e, 64),
        })
    }

    /// Encodes the entry. An entry that would be all zero (id 0, nothing
    /// set) gets `dqb_itime` 1, as the kernel marks it, so it does not read
    /// as unused.
    pub fn to_bytes(&self) -> [u8; DQ_SIZE] {
        let mut e = [0u8; DQ_SIZE];
        e[0..4].copy_from_slice(&self.id.to_le_bytes());
        let words = [
            self.ihardlimit,
            self.isoftlimit,
            self.curinodes,
            self.bhardlimit,
            self.bsoftlimit,
            self.curspace,
            self.btime,
            self.itime,
        ];
        for (i, w) in words.into_iter().enumerate() {
            e[8 + i * 8..16 + i * 8].copy_from_slice(&w.to_le_bytes());
        }
        if e.iter().all(|&x| x == 0) {
            e[64] = 1;
        }
        e
    }

    /// True when the entry holds a limit (kept even without usage).
    pub fn has_limits(&self) -> bool {
        self.ihardlimit | self.isoftlimit | self.bhardlimit | self.bsoftlimit != 0
    }

    /// True when the file should keep this entry: usage or limits
    /// (`v2_commit_dquot` drops the rest).
    pub fn worth_keeping(&self) -> bool {
        self.curspace != 0 || self.curinodes != 0 || self.has_limits()
    }
}

#[cfg(test)]
mod tests;
