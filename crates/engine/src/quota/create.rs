//! Making the quota files of a file system that has none yet, as mke2fs's
//! `create_quota_inodes` does (`lib/support/mkquota.c`): the user and
//! group files in the reserved inodes 3 and 4, the project file in the
//! first free inode (`ext2fs_new_inode` from the root's group), each a
//! regular 0600 file flagged immutable, holding the v2 tree of the usage
//! of every inode in use, no limits and a week's grace.

use std::collections::BTreeMap;

use ext4kit_format::extent::Extent;
use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::group_desc::BG_INODE_UNINIT;
use ext4kit_format::inode::{FileType, flags};
use ext4kit_format::quota::{Dquot, Info, QBLK, QuotaType, first_write_order};

use super::QuotaFile;
use super::charge::{Deltas, add, charge_of, ea_inode_entries};
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::extent_write::charge_blocks;
use crate::inode::write::NewInode;
use crate::txn::Txn;

/// `EXT4_USR_QUOTA_INO`, `EXT4_GRP_QUOTA_INO`.
const RESERVED: [u32; 2] = [3, 4];

impl Filesystem {
    /// Creates the quota files of `types` (one transaction) with the usage
    /// of every inode now in use, names them in the superblock and keeps
    /// them from then on. Needs ro_compat `quota` (and `project` for
    /// project quota) and no quota files yet.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when a feature is missing or a file exists;
    /// what reading the inodes or the commit meets.
    pub fn create_quota_files(&self, types: &[QuotaType]) -> Result<()> {
        let ro = self.geo.features.ro_compat;
        for &t in types {
            let feature = ro.contains(RoCompatFeatures::QUOTA)
                && (t != QuotaType::Project || ro.contains(RoCompatFeatures::PROJECT));
            if !feature || self.quota_ino(t) != 0 {
                return Err(Error::Unsupported(format!(
                    "cannot create the {} quota file: feature off or file present",
                    t.name()
                )));
            }
        }
        let usage = self.usage_of_all_inodes()?;
        self.in_txn(|txn| {
            for &t in types {
                txn.create_quota_file(t, &usage)?;
            }
            Ok(())
        })?;
        self.load_quotas();
        Ok(())
    }

    /// Every in-use inode's charge, summed per type and id, as e2fsck's
    /// pass 1 counts it.
    pub(super) fn usage_of_all_inodes(&self) -> Result<Deltas> {
        let mut d = Deltas::new();
        let ipg = self.geo.inodes_per_group;
        let csum = self.geo.features.has_group_csum();
        for g in 0..self.geo.group_count {
            let desc = self.groups.read()[g as usize];
            if csum && desc.flags() & BG_INODE_UNINIT != 0 {
                continue;
            }
            let map = self.meta_block(desc.inode_bitmap(), 0)?;
            for i in (0..ipg).filter(|i| map[(i / 8) as usize] & (1 << (i % 8)) != 0) {
                let ino = g * ipg + i + 1;
                let inode = self.inode_on_disk(ino)?;
                let refs = ea_inode_entries(self, &inode, |b| self.meta_block(b, ino))?;
                add(&mut d, charge_of(self, &inode, true, refs), 1);
            }
        }
        Ok(d)
    }
}

impl Txn<'_> {
    /// One quota file: its inode (3, 4, or a new one for projects) made
    /// afresh as `quota_inode_init_new` makes it, its entries written, the
    /// superblock pointed at it.
    pub(super) fn create_quota_file(&mut self, t: QuotaType, usage: &Deltas) -> Result<()> {
        let ino = match t {
            QuotaType::User | QuotaType::Group => RESERVED[t as usize],
            QuotaType::Project => {
                let root = self.inode(crate::ROOT_INO)?;
                self.alloc_inode(&root, None, false)?
            }
        };
        let n = NewInode {
            file_type: FileType::Regular,
            perm: 0o600,
            uid: 0,
            gid: 0,
        };
        let mut inode = self.fresh_inode(ino, n)?;
        inode.raw.i_flags.set(inode.raw.flags() | flags::IMMUTABLE);
        inode.raw.i_generation.set(0);
        self.write_inode(&mut inode)?;
        let dquots: BTreeMap<u32, Dquot> = usage
            .iter()
            .filter(|((qt, _), _)| *qt == t)
            .map(|(&(_, id), &(space, inodes))| {
                let d = Dquot {
                    id,
                    curspace: space.max(0) as u64,
                    curinodes: inodes.max(0) as u64,
                    ..Dquot::default()
                };
                (id, d)
            })
            .collect();
        let mut f = QuotaFile {
            ino,
            info: Info::new(t),
            dquots,
            image: Vec::new(),
        };
        self.place_as_e2fsprogs(&mut inode, ext4kit_format::quota::build(&f.info, &f.dquots).len())?;
        self.write_quota_file(&mut f)?;
        let sb = self.sb_mut();
        match t {
            QuotaType::User => sb.s_usr_quota_inum.set(ino),
            QuotaType::Group => sb.s_grp_quota_inum.set(ino),
            QuotaType::Project => sb.s_prj_quota_inum.set(ino),
        }
        Ok(())
    }

    /// Maps the blocks of a new quota file of `len` bytes where mke2fs
    /// and tune2fs put them: each fs block, in the order the quota code
    /// first writes it ([`first_write_order`]), takes the first free
    /// block from the start of the inode's flex group
    /// (`ext2fs_find_inode_goal` for a file with no block at that
    /// offset). Extent-mapped, non-bigalloc files only; others are
    /// left to the ordinary write path.
    fn place_as_e2fsprogs(&mut self, inode: &mut Inode, len: usize) -> Result<()> {
        let geo = &self.fs.geo;
        if !inode.raw.has_flag(flags::EXTENTS) || geo.cluster_bits != 0 {
            return Ok(());
        }
        let per = geo.block_size as usize / QBLK;
        let mut group = (inode.ino - 1) / geo.inodes_per_group;
        group -= group % geo.groups_per_flex.max(1);
        let goal = geo.group_first_block(group);
        let mut seen = Vec::new();
        for q in first_write_order(len.div_ceil(QBLK)) {
            let l = (q / per) as u32;
            if seen.contains(&l) {
                continue;
            }
            seen.push(l);
            let (physical, _) = self.scan_alloc(goal, 1)?;
            let e = Extent {
                logical: l,
                len: 1,
                physical,
                unwritten: false,
            };
            self.insert_extent(inode, e)?;
            charge_blocks(&mut inode.raw, 1, geo.block_size);
        }
        self.write_inode(inode)
    }
}
