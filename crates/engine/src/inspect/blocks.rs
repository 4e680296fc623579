//! Block and inode ownership (`icheck`, `ncheck`), record locations
//! (`imap`) and first-free searches in the group bitmaps (`ffb`, `ffi`).

use std::collections::{BTreeMap, HashSet};

use ext4kit_format::extent::NodeEntries;
use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use ext4kit_format::inode::FileType;

use super::InodeRecordAt;
use crate::error::Result;
use crate::fs::Filesystem;
use crate::inode::{Inode, ROOT_INO};

impl Filesystem {
    /// Where inode `ino`'s record lies in the inode table.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for a number out of range.
    pub fn inode_record_at(&self, ino: u32) -> Result<InodeRecordAt> {
        let slot = self.inode_slot(ino)?;
        let group = (ino - 1) / self.geo.inodes_per_group;
        Ok(InodeRecordAt {
            group,
            block: slot.block,
            offset: slot.offset,
        })
    }

    /// The in-use inodes as an inode scan sees them (`ext2fs_get_next_inode`
    /// with lazy tables skipped): records never initialised (`INODE_UNINIT`,
    /// past `bg_itable_unused`) are not read; records that do not decode are
    /// passed over, as debugfs reports and continues.
    fn live_inodes(&self, mut f: impl FnMut(Inode) -> Result<()>) -> Result<()> {
        let ipg = self.geo.inodes_per_group;
        let csum = self.geo.features.has_group_csum();
        for (g, d) in (0u32..).zip(self.group_descs()) {
            let used = match () {
                _ if csum && d.flags() & BG_INODE_UNINIT != 0 => 0,
                _ if csum => ipg.saturating_sub(d.itable_unused()),
                _ => ipg,
            };
            for i in 0..used {
                let Ok(inode) = self.inode_on_disk(g * ipg + i + 1) else {
                    continue;
                };
                if inode.raw.links() != 0 && inode.raw.i_dtime.get() == 0 {
                    f(inode)?;
                }
            }
        }
        Ok(())
    }

    /// The inode owning each of `blocks` (`debugfs icheck`): data blocks,
    /// extent-tree and indirect blocks, and the xattr block; `None` for a
    /// block no inode claims (free, or file-system metadata).
    ///
    /// # Errors
    /// I/O errors reading the inode tables.
    pub fn block_owners(&self, blocks: &[u64]) -> Result<Vec<Option<u32>>> {
        let mut want: BTreeMap<u64, Option<u32>> = blocks.iter().map(|&b| (b, None)).collect();
        let mut left = want.len();
        self.live_inodes(|inode| {
            if left == 0 {
                return Ok(());
            }
            let mut claim = |start: u64, len: u64| {
                for (_, owner) in want.range_mut(start..start.saturating_add(len)) {
                    if owner.is_none() {
                        *owner = Some(inode.ino);
                        left -= 1;
                    }
                }
            };
            if let Ok(runs) = self.owned_runs(&inode) {
                for (start, len) in runs {
                    claim(start, len);
                }
            }
            Ok(())
        })?;
        Ok(blocks.iter().map(|b| want.get(b).copied().flatten()).collect())
    }

    /// Every block `inode` holds as `(first, count)` runs: xattr block,
    /// then [`Filesystem::inode_blocks`].
    fn owned_runs(&self, inode: &Inode) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let acl = inode.raw.file_acl();
        if acl != 0 {
            out.push((acl, 1));
        }
        out.extend(self.inode_blocks(inode)?);
        Ok(out)
    }

    /// The blocks of `inode`'s body as `(first, count)` runs (`debugfs
    /// blocks`): extent-tree node blocks (each before the extents it
    /// holds) or indirect blocks, and data blocks.
    ///
    /// # Errors
    /// Corruption of the tree.
    pub fn inode_blocks(&self, inode: &Inode) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        if inode.has_inline_data() || self.is_fast_symlink(inode) {
            return Ok(out);
        }
        let kind = inode.file_type()?;
        if matches!(
            kind,
            FileType::CharDevice | FileType::BlockDevice | FileType::Fifo | FileType::Socket
        ) {
            return Ok(out);
        }
        if inode.uses_extents() {
            for (block, node) in self.extent_tree(inode)? {
                if let Some(b) = block {
                    out.push((b, 1));
                }
                if let NodeEntries::Leaf(v) = node.entries {
                    out.extend(v.iter().map(|e| (e.physical, u64::from(e.len))));
                }
            }
            return Ok(out);
        }
        self.indirect_blocks(inode, &mut out)?;
        out.extend(self.all_runs(inode)?.iter().map(|r| (r.physical, r.len)));
        Ok(out)
    }

    /// The indirect blocks of a block-mapped inode (`i_block[12..15]` and
    /// the pointer blocks below them), depth at most three.
    fn indirect_blocks(&self, inode: &Inode, out: &mut Vec<(u64, u64)>) -> Result<()> {
        let ptr = |i: usize| u32::from_le_bytes(inode.raw.i_block[i * 4..i * 4 + 4].try_into().unwrap_or([0; 4]));
        let mut todo: Vec<(u32, u32)> = (1..=3).map(|level| (ptr(11 + level as usize), level)).collect();
        while let Some((p, level)) = todo.pop() {
            if p == 0 || u64::from(p) >= self.geo.blocks_count {
                continue;
            }
            out.push((p.into(), 1));
            if level > 1 {
                let buf = self.meta_block(p.into(), inode.ino)?;
                for c in buf.chunks_exact(4) {
                    todo.push((u32::from_le_bytes([c[0], c[1], c[2], c[3]]), level - 1));
                }
            }
        }
        Ok(())
    }

    /// Every name of each of `inos` below the root, as `(ino, path)`
    /// (`debugfs ncheck`): every hard link, directories by their one name.
    /// Each directory is read once, so a looping tree cannot hang the walk.
    ///
    /// # Errors
    /// Corruption of a directory on the way.
    pub fn names_of(&self, inos: &[u32]) -> Result<Vec<(u32, String)>> {
        let want: HashSet<u32> = inos.iter().copied().collect();
        let (mut out, mut seen, mut todo) = (Vec::new(), HashSet::new(), vec![(String::new(), ROOT_INO)]);
        while let Some((path, ino)) = todo.pop() {
            if !seen.insert(ino) {
                continue;
            }
            for e in self.read_dir(&self.inode(ino)?)? {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                if want.contains(&e.ino) {
                    out.push((e.ino, p.clone()));
                }
                if self.inode(e.ino).is_ok_and(|i| i.is_dir()) {
                    todo.push((p, e.ino));
                }
            }
        }
        Ok(out)
    }

    /// Up to `count` free blocks from `goal` upward, wrapping once to
    /// `s_first_data_block` (`debugfs ffb`, `ext2fs_new_block2`).
    ///
    /// # Errors
    /// I/O errors reading a bitmap.
    pub fn first_free_blocks(&self, count: usize, goal: u64) -> Result<Vec<u64>> {
        let first = u64::from(self.geo.first_data_block);
        let total = self.geo.blocks_count;
        let goal = if goal < first || goal >= total { first } else { goal };
        let mut out = Vec::new();
        let mut maps: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        for b in (goal..total).chain(first..goal) {
            if out.len() >= count {
                break;
            }
            let g = ((b - first) / u64::from(self.geo.blocks_per_group)) as u32;
            if let std::collections::btree_map::Entry::Vacant(v) = maps.entry(g) {
                v.insert(self.block_bitmap_view(g)?);
            }
            let bit = ((b - self.geo.group_first_block(g)) >> self.geo.cluster_bits) as usize;
            if maps[&g].get(bit / 8).is_some_and(|m| m & (1 << (bit % 8)) == 0) {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// Group `g`'s block bitmap; a `BLOCK_UNINIT` group's is built as its
    /// free count says (metadata at the start, the rest free), as
    /// [`Filesystem::free_space`] reads it.
    pub(super) fn block_bitmap_view(&self, g: u32) -> Result<Vec<u8>> {
        let d = self.group_desc(g)?;
        if d.flags() & BG_BLOCK_UNINIT == 0 || !self.geo.features.has_group_csum() {
            return Ok(self.meta_block(d.block_bitmap(), 0)?.to_vec());
        }
        let n = self.geo.clusters_in_group(g) as usize;
        let used = n.saturating_sub(d.free_blocks() as usize);
        let mut map = vec![0u8; self.geo.block_size as usize];
        for i in (0..used).chain(n..map.len() * 8) {
            map[i / 8] |= 1 << (i % 8);
        }
        Ok(map)
    }

    /// The first free inode at or after the first inode of `dir`'s group,
    /// wrapping to `s_first_ino` (`debugfs ffi`, `ext2fs_new_inode`).
    ///
    /// # Errors
    /// I/O errors reading a bitmap.
    pub fn first_free_inode(&self, dir: u32) -> Result<Option<u32>> {
        let (ipg, count, first_ino) = (self.geo.inodes_per_group, self.geo.inodes_count, self.geo.first_ino);
        let start = if dir > 0 { (dir - 1) / ipg * ipg + 1 } else { 1 }.max(first_ino);
        let mut maps: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        for ino in (start..=count).chain(first_ino..start) {
            let g = (ino - 1) / ipg;
            if let std::collections::btree_map::Entry::Vacant(v) = maps.entry(g) {
                let d = self.group_desc(g)?;
                let map = if d.flags() & BG_INODE_UNINIT != 0 && self.geo.features.has_group_csum() {
                    vec![0u8; self.geo.block_size as usize]
                } else {
                    self.meta_block(d.inode_bitmap(), 0)?.to_vec()
                };
                v.insert(map);
            }
            let bit = ((ino - 1) % ipg) as usize;
            if maps[&g].get(bit / 8).is_some_and(|m| m & (1 << (bit % 8)) == 0) {
                return Ok(Some(ino));
            }
        }
        Ok(None)
    }
}
