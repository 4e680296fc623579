//! The files of a new file system: the root directory (inode 2),
//! `lost+found` (inode 11), the resize inode (7) with its double-indirect
//! block listing the reserved GDT blocks and each reserved block listing its
//! backups, the journal (inode 8) with an empty jbd2 v2 superblock, and
//! the multi-mount protection block. Blocks are allocated in mke2fs's order
//! (root, lost+found, resize, journal, MMP, orphan file) from mke2fs's
//! goals, so placements match on the same geometry.
//!
//! See `Documentation/filesystems/ext4/special_inodes.rst`, `directory.rst`,
//! `ifork.rst`, `journal.rst` and `mmp.rst`.

use ext4kit_format::dir_entry::{TAIL_SIZE, encode_entry, set_block_checksum};
use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::inode::{RawInode, flags, mode, set_inode_checksum};
use ext4kit_format::mmp::{
    EXT4_MMP_MAX_UPDATE_INTERVAL, EXT4_MMP_MIN_CHECK_INTERVAL, EXT4_MMP_UPDATE_INTERVAL, MMP_SIZE, RawMmp,
};

use super::Build;
use super::filemap::{FileMap, FileShape, map_file, put_word};
use super::journal::{GroupLayout, empty_superblock_block, midpoint_group};
use super::write::Writer;
use crate::error::{Error, Result};

const ROOT_INO: u32 = 2;
const RESIZE_INO: u32 = 7;
const JOURNAL_INO: u32 = 8;
const LPF_INO: u32 = 11;
const ORPHAN_INO: u32 = 12;
/// `ob_magic` of an orphan-file block tail.
const ORPHAN_MAGIC: u32 = 0x0B10_CA04;

/// Everything allocated for the initial files.
pub(crate) struct Files {
    root: FileMap,
    lpf: FileMap,
    resize: Option<FileMap>,
    pub journal: Option<FileMap>,
    orphan: Option<FileMap>,
    /// The multi-mount protection block (`s_mmp_block`) and its interval.
    pub mmp: Option<(u64, u16)>,
}

impl Files {
    /// Allocates the blocks of every file in mke2fs's order.
    pub fn allocate(b: &mut Build) -> Result<Self> {
        let extents = b.plan.features.incompat.contains(IncompatFeatures::EXTENTS);
        let first = u64::from(b.plan.first_data_block);
        let root = alloc_file(b, ROOT_INO, first, 1, extents)?;
        // mke2fs grows lost+found a block at a time to 16 KiB (at least two
        // blocks, at most twelve); with inline_data it starts inline, and
        // its first growth only moves it to a block: one block fewer.
        let inline = b.plan.features.incompat.contains(IncompatFeatures::INLINE_DATA);
        let lpf_blocks = (16384 / u64::from(b.plan.block_size)).clamp(2, 12) - u64::from(inline);
        let lpf = alloc_file(b, LPF_INO, first, lpf_blocks, extents)?;
        let resize = if b.plan.features.compat.contains(CompatFeatures::RESIZE_INODE) {
            Some(resize_map(b)?)
        } else {
            None
        };
        let journal = if b.plan.journal_blocks > 0 {
            // The blocks taken so far: directories' data, the resize
            // inode's double-indirect block (its other blocks are the
            // reserved GDT blocks).
            let before: Vec<u64> = data_blocks(&root)
                .chain(data_blocks(&lpf))
                .chain(resize.as_ref().and_then(|r| r.meta.last()).map(|m| m.0))
                .collect();
            let goal = if extents { journal_goal(b, &before) } else { first };
            Some(alloc_file(
                b,
                JOURNAL_INO,
                goal,
                u64::from(b.plan.journal_blocks),
                extents,
            )?)
        } else {
            None
        };
        let mmp = if b.plan.features.incompat.contains(IncompatFeatures::MMP) {
            Some(mmp_block(b)?)
        } else {
            None
        };
        let orphan = if b.plan.features.compat.contains(CompatFeatures::ORPHAN_FILE) {
            Some(alloc_file(
                b,
                ORPHAN_INO,
                first,
                orphan_blocks(b.plan.blocks_count),
                extents,
            )?)
        } else {
            None
        };
        Ok(Self {
            root,
            lpf,
            resize,
            journal,
            orphan,
            mmp,
        })
    }

    /// Writes the files' blocks and inodes 1–11 (reserved ones zeroed with
    /// their checksum, as mke2fs's `write_reserved_inodes`).
    pub fn write(&self, b: &Build, w: &mut Writer<'_>) -> Result<()> {
        let bs = b.plan.block_size as usize;
        let ft = if b.plan.features.incompat.contains(IncompatFeatures::FILETYPE) {
            2
        } else {
            0
        };
        let root_blk = dir_block(
            b,
            ROOT_INO,
            &[(b".", ROOT_INO), (b"..", ROOT_INO), (b"lost+found", LPF_INO)],
            ft,
        );
        w.write_block(b, self.root.runs[0].0, &root_blk)?;
        let inline = self.lpf_was_inline(b);
        for (i, blk) in data_blocks(&self.lpf).enumerate() {
            // A lost+found that began inline keeps the empty record its
            // move to a block left after "..".
            let entries: &[(&[u8], u32)] = match (i, inline) {
                (0, false) => &[(b".", LPF_INO), (b"..", ROOT_INO)],
                (0, true) => &[(b".", LPF_INO), (b"..", ROOT_INO), (b"", 0)],
                _ => &[],
            };
            w.write_block(b, blk, &dir_block(b, LPF_INO, entries, ft))?;
        }
        for f in [
            Some(&self.root),
            Some(&self.lpf),
            self.resize.as_ref(),
            self.journal.as_ref(),
            self.orphan.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            for (blk, data) in &f.meta {
                w.write_block(b, *blk, data)?;
            }
        }
        if let Some(j) = &self.journal {
            let jsb = empty_superblock_block(
                b.plan.block_size,
                b.plan.journal_blocks - b.plan.fc_blocks,
                b.plan.fc_blocks,
                &b.uuid,
            );
            w.write_block(b, j.runs[0].0, &jsb)?;
            if !b.opts.device_zeroed {
                for &(s, n) in &j.runs {
                    w.zero_blocks(b, s, n, Some(j.runs[0].0))?;
                }
            }
        }
        if let Some(o) = &self.orphan {
            for blk in data_blocks(o) {
                w.write_block(b, blk, &orphan_block(b, blk))?;
            }
        }
        if let Some((blk, interval)) = self.mmp {
            w.write_block(b, blk, &mmp_block_bytes(b, interval))?;
        }
        let isz = usize::from(b.plan.inode_size);
        let last = b.plan.used_inodes();
        let mut table = vec![0u8; last as usize * isz];
        for ino in 1..=last {
            let rec = self.inode_record(b, ino);
            table[(ino as usize - 1) * isz..ino as usize * isz].copy_from_slice(&rec);
        }
        let nblocks = table.len().div_ceil(bs);
        table.resize(nblocks * bs, 0);
        w.write_at_block(b.tables[0].inode_table, &table, bs)
    }

    /// With inline_data mke2fs makes lost+found inline, then grows it
    /// into blocks.
    fn lpf_was_inline(&self, b: &Build) -> bool {
        b.plan.features.incompat.contains(IncompatFeatures::INLINE_DATA)
    }

    fn inode_record(&self, b: &Build, ino: u32) -> Vec<u8> {
        let extents = b.plan.features.incompat.contains(IncompatFeatures::EXTENTS);
        let bs = u64::from(b.plan.block_size);
        let (owner_uid, owner_gid) = b.opts.root_owner;
        let file = match ino {
            ROOT_INO => Some((
                &self.root,
                mode::S_IFDIR | 0o755,
                3,
                bs,
                extents,
                (owner_uid, owner_gid),
            )),
            LPF_INO => Some((
                &self.lpf,
                mode::S_IFDIR | 0o700,
                2,
                self.lpf.blocks() * bs,
                extents,
                (0, 0),
            )),
            RESIZE_INO => self
                .resize
                .as_ref()
                .map(|f| (f, mode::S_IFREG | 0o600, 1, b.plan.resize_inode_size(), false, (0, 0))),
            JOURNAL_INO => self.journal.as_ref().map(|f| {
                let size = f.runs.iter().map(|r| r.1).sum::<u64>() * bs;
                (f, mode::S_IFREG | 0o600, 1, size, extents, (0, 0))
            }),
            ORPHAN_INO => self
                .orphan
                .as_ref()
                .map(|f| (f, mode::S_IFREG | 0o600, 1, f.data_blocks() * bs, extents, (0, 0))),
            _ => None,
        };
        let mut raw = RawInode::parse(&[0u8; 160], 160).expect("a zero inode parses");
        if let Some((f, m, links, size, ext, (uid, gid))) = file {
            raw.i_mode.set(m);
            raw.i_links_count.set(links);
            raw.set_size(size);
            raw.i_uid.set(uid as u16);
            raw.i_uid_high.set((uid >> 16) as u16);
            raw.i_gid.set(gid as u16);
            raw.i_gid_high.set((gid >> 16) as u16);
            let sectors = charged_blocks(b, f, ino) * bs / 512;
            raw.i_blocks_lo.set(sectors as u32);
            raw.i_blocks_high.set((sectors >> 32) as u16);
            raw.i_block = f.i_block;
            if ext {
                raw.i_flags.set(flags::EXTENTS);
            }
            if b.plan.inode_size > 128 {
                raw.i_extra_isize.set(32);
                raw.i_crtime.set(b.now);
            }
        }
        if file.is_some() || ino == 1 {
            raw.i_atime.set(b.now);
            raw.i_ctime.set(b.now);
            raw.i_mtime.set(b.now);
        }
        let mut rec = vec![0u8; usize::from(b.plan.inode_size)];
        raw.encode_into(&mut rec);
        if ino == LPF_INO && self.lpf_was_inline(b) && rec.len() >= 164 {
            // The in-inode xattr header its `system.data` once had stays,
            // empty, as `ext2fs_inline_data_dir_expand` leaves it.
            rec[160..164].copy_from_slice(&XATTR_MAGIC.to_le_bytes());
        }
        if b.plan.features.metadata_csum() {
            set_inode_checksum(&mut rec, b.csum_seed, ino).expect("inode sizes are powers of two");
        }
        rec
    }
}

/// Allocates the MMP block as `ext2fs_mmp_init` does after the journal:
/// the first free block from the start. Returns it with the update
/// interval (0 or none means 5; over 300 is refused).
fn mmp_block(b: &mut Build) -> Result<(u64, u16)> {
    let interval = match b.opts.mmp_update_interval.unwrap_or(0) {
        0 => EXT4_MMP_UPDATE_INTERVAL,
        i if i > EXT4_MMP_MAX_UPDATE_INTERVAL => {
            return Err(Error::InvalidArgument(format!(
                "mmp_update_interval={i}: at most {EXT4_MMP_MAX_UPDATE_INTERVAL} seconds"
            )));
        }
        i => i,
    };
    let blk = b.map.new_block(u64::from(b.plan.first_data_block))?;
    b.map.mark(blk, 1);
    Ok((blk, interval))
}

/// The MMP block of a new file system (`ext2fs_mmp_reset`): clean, this
/// host's name, the device's name, the check interval (at least 5 s), the
/// time (mke2fs stamps the wall clock; this is the build's time, so that
/// the same inputs give the same image) and the rest of the block zero.
fn mmp_block_bytes(b: &Build, interval: u16) -> Vec<u8> {
    let host = crate::mmp::host_nodename();
    let mut rec = RawMmp::clean(
        &host,
        b.device_name.as_bytes(),
        interval.max(EXT4_MMP_MIN_CHECK_INTERVAL),
    );
    rec.mmp_time.set(u64::from(b.now));
    if b.plan.features.metadata_csum() {
        rec.set_checksum(b.csum_seed);
    }
    let mut buf = vec![0u8; b.plan.block_size as usize];
    buf[..MMP_SIZE].copy_from_slice(&rec.encode());
    buf
}

/// The data blocks of `f` in logical order.
fn data_blocks(f: &FileMap) -> impl Iterator<Item = u64> + '_ {
    f.runs.iter().flat_map(|&(s, n)| s..s + n)
}

/// A directory block holding `entries`, the last one stretched to the end
/// (or one empty entry when there are none), with a checksum tail under
/// metadata_csum.
fn dir_block(b: &Build, ino: u32, entries: &[(&[u8], u32)], ft: u8) -> Vec<u8> {
    let bs = b.plan.block_size as usize;
    let csum = b.plan.features.metadata_csum();
    let end = if csum { bs - TAIL_SIZE } else { bs };
    let mut buf = vec![0u8; bs];
    if entries.is_empty() {
        encode_entry(&mut buf, 0, 0, end, 0, b"", bs);
    }
    let mut off = 0;
    for (i, (name, target)) in entries.iter().enumerate() {
        let len = if i + 1 == entries.len() { end - off } else { 12 };
        let ft = if *target == 0 { 0 } else { ft };
        encode_entry(&mut buf, off, *target, len, ft, name, bs);
        off += len;
    }
    if csum {
        set_block_checksum(&mut buf, inode_seed(b, ino));
    }
    buf
}

/// `h_magic` of an in-inode xattr area (`EXT4_XATTR_MAGIC`).
const XATTR_MAGIC: u32 = 0xEA02_0000;

/// The checksum seed of inode `ino` (generation 0).
fn inode_seed(b: &Build, ino: u32) -> u32 {
    let seed = ext4kit_format::checksum::crc32c_raw(b.csum_seed, &ino.to_le_bytes());
    ext4kit_format::checksum::crc32c_raw(seed, &0u32.to_le_bytes())
}

/// Allocates `n` blocks for inode `ino` from `goal` ([`map_file`]).
fn alloc_file(b: &mut Build, ino: u32, goal: u64, n: u64, extents: bool) -> Result<FileMap> {
    let shape = FileShape {
        block_size: b.plan.block_size,
        extents,
        csum_seed: b.plan.features.metadata_csum().then(|| inode_seed(b, ino)),
    };
    map_file(&mut b.map, &shape, goal, n)
}

/// The resize inode: a double-indirect block whose entries (from
/// `desc_blocks` on, modulo the block's capacity) are the primary reserved
/// GDT blocks; each of those lists the same block in every backup group.
fn resize_map(b: &mut Build) -> Result<FileMap> {
    let p = &b.plan;
    let bs = p.block_size as usize;
    let apb = u64::from(p.addr_per_block());
    let sb_blk = p.superblock_block();
    let goal = sb_blk + u64::from(p.desc_blocks + p.reserved_gdt) + 2 + u64::from(p.inode_blocks_per_group);
    let backups: Vec<u32> = (1..p.group_count).filter(|&g| p.has_super(g)).collect();
    let mut dind = vec![0u8; bs];
    let mut f = FileMap::default();
    for k in 0..u64::from(p.reserved_gdt) {
        let gdt_blk = sb_blk + 1 + u64::from(p.desc_blocks) + k;
        put_word(
            &mut dind,
            ((u64::from(p.desc_blocks) + k) % apb) as usize,
            gdt_blk as u32,
        );
        let mut list = vec![0u8; bs];
        for (i, &g) in backups.iter().enumerate().take(apb as usize) {
            put_word(
                &mut list,
                i,
                (gdt_blk + u64::from(g) * u64::from(p.blocks_per_group)) as u32,
            );
        }
        f.meta.push((gdt_blk, list));
    }
    // The backups are charged to the inode (i_blocks) though not data.
    let charged = u64::from(p.reserved_gdt) * backups.len() as u64;
    f.runs = vec![(0, charged)];
    let blk = b.map.new_block(goal)?;
    b.map.mark(blk, 1);
    f.meta.push((blk, dind));
    f.i_block[13 * 4..14 * 4].copy_from_slice(&(blk as u32).to_le_bytes());
    Ok(f)
}

/// The blocks `i_blocks` charges to `f`: each block it maps, or with
/// bigalloc each cluster it touches, whole. The resize inode is charged
/// a cluster per block it lists (`ext2fs_iblk_add_blocks` for each
/// reserved GDT block and backup, as `ext2fs_create_resize_inode` counts
/// them), though several share a cluster.
fn charged_blocks(b: &Build, f: &FileMap, ino: u32) -> u64 {
    let bits = b.plan.cluster_bits;
    if bits == 0 || ino == RESIZE_INO {
        return f.blocks() << bits;
    }
    let mut spans: Vec<(u64, u64)> = f
        .runs
        .iter()
        .filter(|r| r.1 > 0)
        .map(|&(s, n)| (s >> bits, (s + n - 1) >> bits))
        .chain(f.meta.iter().map(|(blk, _)| (blk >> bits, blk >> bits)))
        .collect();
    spans.sort_unstable();
    let mut clusters = 0;
    let mut end = None::<u64>;
    for (lo, hi) in spans {
        let lo = end.map_or(lo, |e| lo.max(e + 1));
        if lo <= hi {
            clusters += hi - lo + 1;
        }
        end = Some(end.map_or(hi, |e| e.max(hi)));
    }
    clusters << bits
}

/// The journal's goal: the first block of [`midpoint_group`].
fn journal_goal(b: &Build, before: &[u64]) -> u64 {
    let p = &b.plan;
    let free = |g: u32| {
        let (lo, hi) = (p.group_first_block(g), p.group_last_block(g) + 1);
        if p.cluster_bits > 0 {
            return bigalloc_free_count(b, g, before);
        }
        (hi - lo) - b.map.used_in(lo, hi)
    };
    let layout = GroupLayout {
        blocks_count: p.blocks_count,
        first_data_block: p.first_data_block,
        blocks_per_group: p.blocks_per_group,
        group_count: p.group_count,
        log_groups_per_flex: p.log_groups_per_flex,
    };
    p.group_first_block(midpoint_group(&layout, &free))
}

/// `bg_free_blocks_count` of group `g` as mke2fs holds it when it picks
/// the journal's group on a bigalloc file system, before its final count
/// in clusters (`fix_cluster_bg_counts`): the group's blocks less its
/// superblock and descriptor blocks, less a block per bitmap and a
/// cluster per cluster's worth of inode table placed in it (the whole
/// `2 + inode table` without flex_bg), less a cluster per cluster the
/// files made before the journal take there — all stored in the
/// descriptor's 16 bits, or 32 with 64-byte descriptors.
fn bigalloc_free_count(b: &Build, g: u32, before: &[u64]) -> u64 {
    let p = &b.plan;
    let (lo, hi) = (p.group_first_block(g), p.group_last_block(g) + 1);
    let bits = p.cluster_bits;
    let inside = |blk: u64| (lo..hi).contains(&blk);
    let mut used =
        super::layout::group_base(p, g).used() + u64::from(g == 0 && p.first_data_block == 0) * p.superblock_block();
    let itb = u64::from(p.inode_blocks_per_group);
    if p.log_groups_per_flex == 0 {
        used += 2 + itb;
    } else {
        for t in &b.tables {
            used += u64::from(inside(t.block_bitmap)) + u64::from(inside(t.inode_bitmap));
            let (s, e) = (t.inode_table.max(lo), (t.inode_table + itb).min(hi));
            used += e.saturating_sub(s) >> bits;
        }
    }
    let mut clusters: Vec<u64> = before
        .iter()
        .filter(|&&blk| inside(blk))
        .map(|blk| blk >> bits)
        .collect();
    clusters.sort_unstable();
    clusters.dedup();
    let v = (hi - lo).wrapping_sub(used).wrapping_sub(clusters.len() as u64);
    if p.desc_size >= 64 { v & 0xFFFF_FFFF } else { v & 0xFFFF }
}

/// `ext2fs_default_orphan_file_blocks`: 32 blocks below 128 Ki blocks, one
/// per 4096 blocks below 2 Mi blocks, else 512.
fn orphan_blocks(blocks: u64) -> u64 {
    match blocks {
        _ if blocks < 128 * 1024 => 32,
        _ if blocks < 2 * 1024 * 1024 => blocks / 4096,
        _ => 512,
    }
}

/// An empty orphan-file block: zero slots and the tail (`ob_magic`, and
/// under metadata_csum `ob_checksum` over the logical block number and the
/// slots, seeded by the inode; the kernel's `ext4_orphan_file_block_csum`
/// takes the physical block number).
fn orphan_block(b: &Build, blk: u64) -> Vec<u8> {
    let bs = b.plan.block_size as usize;
    let mut buf = vec![0u8; bs];
    buf[bs - 8..bs - 4].copy_from_slice(&ORPHAN_MAGIC.to_le_bytes());
    if b.plan.features.metadata_csum() {
        let c = ext4kit_format::checksum::crc32c_raw(inode_seed(b, ORPHAN_INO), &blk.to_le_bytes());
        let c = ext4kit_format::checksum::crc32c_raw(c, &buf[..bs - 8]);
        buf[bs - 4..].copy_from_slice(&c.to_le_bytes());
    }
    buf
}
