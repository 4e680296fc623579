//! The block set of an image, chosen as e2image's `write_raw_image_file`
//! chooses it: the primary superblock and descriptors (and the backup's,
//! when opened through one), the MMP block, each
//! group's initialised bitmaps and the used part of its inode table, and,
//! per in-use inode (links not zero), the xattr block, then every block of
//! directories, symlinks, the journal, quota and orphan-file inodes, and
//! only the tree (extent or indirect) blocks of other files.

use std::collections::HashSet;

use ext4kit_format::extent::{self, NodeEntries};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use ext4kit_format::inode::{FileType, I_BLOCK_SIZE, RawInode, flags};
use ext4kit_format::superblock::SUPERBLOCK_OFFSET;

use super::{DirBlocks, ImageOptions, MetadataBlocks};
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;

/// Blocks a directory may map (ext4's 2 GiB limit in 1 KiB blocks, and
/// `large_dir`'s 4 GiB ones in 64 KiB blocks, stay well below).
const MAX_DIR_BLOCKS: usize = 1 << 22;

/// Blocks of inode table read at once.
const ITABLE_CHUNK: u64 = 64;

/// What the inode scan keeps, and the inodes whose data is metadata
/// (journal, user and group quota, project quota, orphan file).
struct Scan {
    opts: ImageOptions,
    whole: [u32; 5],
}

/// What the block walk of one inode keeps.
struct Keep {
    /// The inode, for error reports.
    ino: u32,
    /// Data blocks too, not only tree blocks.
    data: bool,
    /// Data blocks as `(logical, physical)`, for a directory to scramble.
    dir: Option<Vec<(u64, u64)>>,
}

impl Filesystem {
    /// The blocks a metadata image of this file system holds.
    ///
    /// # Errors
    /// I/O errors, and corruption of the group descriptors; damage inside
    /// one inode is passed over and named in [`MetadataBlocks::warnings`].
    pub fn metadata_blocks(&self, opts: &ImageOptions) -> Result<MetadataBlocks> {
        let mut out = MetadataBlocks::default();
        let mut runs = self.table_blocks();
        let sb = self.superblock();
        let scan = Scan {
            opts: *opts,
            whole: [
                sb.s_journal_inum.get(),
                3,
                4,
                sb.s_prj_quota_inum.get(),
                sb.s_orphan_file_inum.get(),
            ],
        };
        self.scan_inodes(&scan, &mut runs, &mut out)?;
        let total = self.geo.blocks_count;
        runs.retain(|&(s, n)| n > 0 && s < total);
        // With bigalloc e2image's block map is a cluster map: a block in
        // the set brings its whole cluster.
        let mask = (1u64 << self.geo.cluster_bits) - 1;
        for r in &mut runs {
            let end = r.0.saturating_add(r.1).saturating_add(mask) & !mask;
            r.0 &= !mask;
            r.1 = end.min(total) - r.0;
        }
        runs.sort_unstable();
        for (s, n) in runs {
            match out.runs.last_mut() {
                Some(last) if s <= last.0 + last.1 => last.1 = last.1.max(s + n - last.0),
                _ => out.runs.push((s, n)),
            }
        }
        Ok(out)
    }

    /// `mark_table_blocks`: superblock, descriptors, MMP block, bitmaps and
    /// inode tables up to `bg_itable_unused`.
    fn table_blocks(&self) -> Vec<(u64, u64)> {
        let geo = &self.geo;
        let mut runs = vec![(u64::from(geo.first_data_block), 1)];
        let per = geo.descs_per_block();
        let sb = self.superblock();
        let backup = self.sb_offset != SUPERBLOCK_OFFSET;
        for j in 0..geo.group_count.div_ceil(per) {
            runs.push((self.group_desc_block(j * per), 1));
            if backup {
                runs.push((self.primary_desc_block(j, sb.s_first_meta_bg.get()), 1));
            }
        }
        if backup {
            runs.push((self.sb_offset >> geo.block_size_log2, 1));
        }
        if geo
            .features
            .incompat
            .contains(ext4kit_format::features::IncompatFeatures::MMP)
        {
            runs.push((sb.s_mmp_block.get(), 1));
        }
        let csum = geo.features.has_group_csum();
        let per_block = u64::from(geo.block_size / u32::from(geo.inode_size));
        for d in self.group_descs() {
            let (inode_uninit, block_uninit) = (d.flags() & BG_INODE_UNINIT != 0, d.flags() & BG_BLOCK_UNINIT != 0);
            if !inode_uninit && d.inode_table() != 0 {
                let unused = if csum {
                    u64::from(d.itable_unused()) / per_block
                } else {
                    0
                };
                runs.push((
                    d.inode_table(),
                    u64::from(geo.inode_table_blocks).saturating_sub(unused),
                ));
            }
            if !block_uninit && d.block_bitmap() != 0 {
                runs.push((d.block_bitmap(), 1));
            }
            if !inode_uninit && d.inode_bitmap() != 0 {
                runs.push((d.inode_bitmap(), 1));
            }
        }
        runs
    }

    /// Where the primary copy of descriptor block `j` lies, for an image
    /// opened through a backup (`-b`): e2image copies both.
    fn primary_desc_block(&self, j: u32, first_meta_bg: u32) -> u64 {
        let meta_bg = self.geo.features.incompat.contains(IncompatFeatures::META_BG);
        if !meta_bg || j < first_meta_bg {
            return self.geo.superblock_block(0) + 1 + u64::from(j);
        }
        let g = j * self.geo.descs_per_block();
        self.geo.superblock_block(g) + u64::from(self.group_has_super(g))
    }

    /// The inode scan (`ext2fs_get_next_inode`, lazy groups skipped) with
    /// each in-use inode's blocks added to `runs`.
    fn scan_inodes(&self, scan: &Scan, runs: &mut Vec<(u64, u64)>, out: &mut MetadataBlocks) -> Result<()> {
        let geo = &self.geo;
        let (ipg, isz, bs) = (
            geo.inodes_per_group,
            usize::from(geo.inode_size),
            u64::from(geo.block_size),
        );
        let csum = geo.features.has_group_csum();
        for (g, d) in (0u32..).zip(self.group_descs()) {
            let used = match () {
                _ if csum && d.flags() & BG_INODE_UNINIT != 0 => 0,
                _ if csum => ipg.saturating_sub(d.itable_unused()),
                _ => ipg,
            };
            let table_bytes = u64::from(used) * isz as u64;
            let mut buf = vec![0u8; (ITABLE_CHUNK * bs) as usize];
            let mut done = 0u64;
            while done < table_bytes {
                let n = (table_bytes - done).min(ITABLE_CHUNK * bs);
                let block = d.inode_table() + done / bs;
                if block + n.div_ceil(bs) > geo.blocks_count {
                    out.warnings
                        .push(format!("group {g}: inode table runs past the end of the file system"));
                    break;
                }
                self.read_bytes(block << geo.block_size_log2, &mut buf[..n as usize])?;
                for (i, rec) in buf[..n as usize].chunks_exact(isz).enumerate() {
                    let ino = g * ipg + (done / isz as u64) as u32 + i as u32 + 1;
                    if let Ok(raw) = RawInode::parse(rec, isz) {
                        self.inode_image_blocks(ino, &raw, scan, runs, out);
                    }
                }
                done += n;
            }
        }
        Ok(())
    }

    /// One in-use inode's share of the image.
    fn inode_image_blocks(
        &self,
        ino: u32,
        raw: &RawInode,
        scan: &Scan,
        runs: &mut Vec<(u64, u64)>,
        out: &mut MetadataBlocks,
    ) {
        if raw.links() == 0 {
            return;
        }
        if raw.file_acl() != 0 {
            runs.push((raw.file_acl(), 1));
        }
        if !self.has_valid_blocks(raw) {
            return;
        }
        let opts = &scan.opts;
        let kind = raw.file_type();
        let whole = matches!(kind, Some(FileType::Directory | FileType::Symlink)) || scan.whole.contains(&ino);
        let ptr = |i: usize| {
            u32::from_le_bytes([
                raw.i_block[i * 4],
                raw.i_block[i * 4 + 1],
                raw.i_block[i * 4 + 2],
                raw.i_block[i * 4 + 3],
            ])
        };
        let extents = raw.has_flag(flags::EXTENTS);
        if !whole && !extents && (12..15).all(|i| ptr(i) == 0) && !opts.all_data {
            return;
        }
        let is_dir = kind == Some(FileType::Directory);
        let mut keep = Keep {
            ino,
            data: whole || opts.all_data,
            dir: (opts.scramble && is_dir).then(Vec::new),
        };
        let r = if extents {
            self.extent_image_blocks(raw, &mut keep, runs)
        } else {
            self.indirect_image_blocks(&ptr, &mut keep, runs)
        };
        if let Err(e) = r {
            out.warnings.push(format!("inode {ino}: {e}"));
        }
        if let Some(blocks) = keep.dir {
            out.dirs.push(DirBlocks {
                ino,
                generation: raw.i_generation.get(),
                htree: raw.has_flag(flags::INDEX),
                blocks,
            });
        }
    }

    /// `ext2fs_inode_has_valid_blocks2`: only directories, regular files and
    /// slow symlinks map blocks, and never with inline data.
    fn has_valid_blocks(&self, raw: &RawInode) -> bool {
        match raw.file_type() {
            Some(FileType::Directory | FileType::Regular) => {}
            Some(FileType::Symlink) => {
                let i_block1 = raw.i_block[4..8].iter().any(|&b| b != 0);
                let slow = if raw.file_acl() == 0 {
                    raw.i_blocks_lo.get() != 0 || raw.i_blocks_high.get() != 0
                } else {
                    raw.size() >= I_BLOCK_SIZE as u64 || (raw.size() > 4 && !i_block1)
                };
                if !slow {
                    return false;
                }
            }
            _ => return false,
        }
        !raw.has_flag(flags::INLINE_DATA)
    }

    /// Tree blocks (and data blocks as `keep` says) of an extent-mapped
    /// inode; each node is read once and must be one level below its parent.
    fn extent_image_blocks(&self, raw: &RawInode, keep: &mut Keep, runs: &mut Vec<(u64, u64)>) -> Result<()> {
        let root = extent::parse_node(&raw.i_block[..I_BLOCK_SIZE], true)
            .map_err(|e| Error::format(Location::Inode(keep.ino), e))?;
        let mut todo = vec![root];
        let mut seen = HashSet::new();
        let mut buf = vec![0u8; self.block_size()];
        while let Some(node) = todo.pop() {
            match node.entries {
                NodeEntries::Leaf(v) if keep.data => {
                    for e in v {
                        if let Some(d) = &mut keep.dir {
                            if d.len() + usize::from(e.len) > MAX_DIR_BLOCKS {
                                return Err(Error::inconsistent(
                                    Location::Inode(keep.ino),
                                    "directory maps more blocks than one can hold",
                                ));
                            }
                            d.extend((0..u64::from(e.len)).map(|i| (u64::from(e.logical) + i, e.physical + i)));
                        }
                        runs.push((e.physical, e.len.into()));
                    }
                }
                NodeEntries::Leaf(_) => {}
                NodeEntries::Index(v) => {
                    for k in v {
                        if k.child >= self.geo.blocks_count || !seen.insert(k.child) {
                            return Err(bad_pointer(
                                keep.ino,
                                k.child,
                                "extent index points outside or twice to",
                            ));
                        }
                        runs.push((k.child, 1));
                        self.read_bytes(k.child << self.geo.block_size_log2, &mut buf)?;
                        let at = Location::Block {
                            block: k.child,
                            inode: keep.ino,
                        };
                        let child = extent::parse_node(&buf, false).map_err(|e| Error::format(at, e))?;
                        if child.depth + 1 != node.depth {
                            return Err(Error::inconsistent(
                                at,
                                "extent node depth is not one below its parent's",
                            ));
                        }
                        todo.push(child);
                    }
                }
            }
        }
        Ok(())
    }

    /// Pointer blocks (and data blocks as `keep` says) of a block-mapped
    /// inode: `i_block[0..12]` direct, then one, two and three levels.
    fn indirect_image_blocks(
        &self,
        ptr: &dyn Fn(usize) -> u32,
        keep: &mut Keep,
        runs: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        let per = u64::from(self.geo.block_size / 4);
        let mut seen = HashSet::new();
        let mut buf = vec![0u8; self.block_size()];
        // (block, level, first logical block it maps)
        let mut todo: Vec<(u32, u32, u64)> = vec![
            (ptr(14), 3, 12 + per + per * per),
            (ptr(13), 2, 12 + per),
            (ptr(12), 1, 12),
        ];
        todo.extend((0..12).rev().map(|i| (ptr(i), 0, i as u64)));
        while let Some((p, level, logical)) = todo.pop() {
            let p64 = u64::from(p);
            if p == 0 {
                continue;
            }
            if p64 >= self.geo.blocks_count {
                return Err(bad_pointer(keep.ino, p64, "block pointer outside the file system:"));
            }
            if level == 0 {
                if keep.data {
                    runs.push((p64, 1));
                    if let Some(d) = keep.dir.as_mut().filter(|d| d.len() < MAX_DIR_BLOCKS) {
                        d.push((logical, p64));
                    }
                }
                continue;
            }
            if !seen.insert(p) {
                return Err(bad_pointer(keep.ino, p64, "indirect block listed twice:"));
            }
            runs.push((p64, 1));
            if level == 1 && !keep.data {
                continue;
            }
            self.read_bytes(p64 << self.geo.block_size_log2, &mut buf)?;
            let span = per.pow(level - 1);
            for (i, c) in buf.chunks_exact(4).enumerate().rev() {
                let child = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                todo.push((child, level - 1, logical + i as u64 * span));
            }
        }
        Ok(())
    }
}

fn bad_pointer(ino: u32, block: u64, what: &str) -> Error {
    Error::inconsistent(Location::Inode(ino), format!("{what} block {block}"))
}
