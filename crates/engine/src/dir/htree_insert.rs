//! Growing hashed directories (`make_indexed_dir`, `do_split`,
//! `dx_insert_block` in the kernel): a one-block linear directory that fills
//! up becomes an htree (root in block 0, entries moved into two hash-sorted
//! leaves); a full leaf splits at its median hash into a new block whose
//! first hash joins the index (with the continuation bit when equal hashes
//! straddle the split). Full index blocks split upward; a full root moves
//! its entries one level down (a second level, or with `large_dir` a third).
//! A tree that would need more levels than the file system allows is
//! refused with `ENOSPC`, as the kernel does.

use ext4kit_format::dir_entry::{self, DirEntryIter, encode_entry, rec_len_hashed};
use ext4kit_format::extent::Extent;
use ext4kit_format::hash::HashVersion;
use ext4kit_format::htree::{DxEntry, DxNode, DxParams, DxRoot, find, set_dx_checksum};
use ext4kit_format::inode::flags;

use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::inode::extent_write::charge_blocks;
use crate::txn::Txn;

/// A live entry being moved between blocks.
struct Moved {
    hash: u32,
    /// The hash stored after the name, in a casefolded, encrypted directory.
    stored: Option<(u32, u32)>,
    ino: u32,
    ft: u8,
    name: Vec<u8>,
}

impl Moved {
    fn into_itree(self) -> ext4kit_format::itree::LeafEntry {
        ext4kit_format::itree::LeafEntry {
            ino: self.ino,
            hash: self.hash,
            file_type: self.ft,
            name: self.name,
        }
    }
}

/// One index block on the way down: its logical block and entries.
#[derive(Clone)]
pub(crate) struct Frame {
    pub(super) logical: u64,
    pub(super) root: bool,
    pub(super) entries: Vec<DxEntry>,
    pub(super) at: usize,
}

/// Where a name belongs in an htree: the root's hash version code, the
/// name's hash and the index path down to its leaf. A lookup computes it
/// and the insert that follows reuses it, so a create descends once.
pub(crate) struct HtreeSpot {
    pub(super) code: u8,
    pub(super) hash: u32,
    pub(super) path: Vec<Frame>,
}

impl Txn<'_> {
    pub(super) fn dx_params(&self) -> DxParams {
        let f = self.fs.geo.features;
        DxParams {
            block_size: self.fs.geo.block_size,
            metadata_csum: f.metadata_csum(),
            large_dir: f
                .incompat
                .contains(ext4kit_format::features::IncompatFeatures::LARGEDIR),
        }
    }

    pub(super) fn name_hash(&self, dir: &Inode, name: &[u8], code: u8) -> Result<u32> {
        let unsigned = self.fs.sb.read().s_flags.get() & 2 != 0;
        let v = HashVersion::from_code(code)
            .filter(|v| *v != HashVersion::SipHash || self.fs.hash_in_dirent(dir))
            .ok_or_else(|| Error::Unsupported(format!("directory hash version {code}")))?
            .with_unsigned(unsigned);
        Ok(self.fs.name_dx_hash(dir, name, v)?.major)
    }

    pub(super) fn phys_of(&self, dir: &Inode, logical: u64) -> Result<u64> {
        let hit = if dir.uses_extents() && !dir.has_inline_data() {
            self.extent_at(dir, logical)?
        } else {
            let covers =
                |e: &Extent| u64::from(e.logical) <= logical && logical < u64::from(e.logical) + u64::from(e.len);
            self.body_runs(dir)?.into_iter().find(covers)
        };
        hit.map(|e| e.physical + (logical - u64::from(e.logical)))
            .ok_or_else(|| {
                Error::inconsistent(
                    Location::Inode(dir.ino),
                    format!("directory block {logical} is not mapped"),
                )
            })
    }

    /// Live entries of a leaf with their hashes.
    fn leaf_entries(&self, dir: &Inode, block: u64, code: u8) -> Result<Vec<Moved>> {
        let buf = self.block(block, dir.ino)?;
        let used = if dir_entry::has_tail(&buf) {
            buf.len() - dir_entry::TAIL_SIZE
        } else {
            buf.len()
        };
        let at = Location::Block { block, inode: dir.ino };
        let hashed = self.fs.hash_in_dirent(dir);
        let mut out = Vec::new();
        for e in DirEntryIter::new(&buf[..used], buf.len(), true) {
            let e = e.map_err(|err| Error::format(at, err))?;
            if e.inode != 0 && e.name != b"." && e.name != b".." {
                // A stored hash is the entry's hash (`dx_make_map`); one too
                // short to hold it sorts at 0, as the kernel reads it.
                let stored = hashed.then(|| dir_entry::stored_hash(&buf, &e).unwrap_or((0, 0)));
                out.push(Moved {
                    hash: match stored {
                        Some((h, _)) => h,
                        None => self.name_hash(dir, e.name, code)?,
                    },
                    stored,
                    ino: e.inode,
                    ft: e.file_type,
                    name: e.name.to_vec(),
                });
            }
        }
        Ok(out)
    }

    /// Writes `entries` as the whole content of leaf `block`.
    fn write_leaf_entries(&mut self, dir: &Inode, block: u64, entries: &[Moved], fresh: bool) -> Result<()> {
        let bs = self.fs.block_size();
        let csum = self.fs.geo.features.metadata_csum();
        let used = if csum { bs - dir_entry::TAIL_SIZE } else { bs };
        let seed = self.fs.inode_csum_seed(dir);
        let buf = if fresh {
            self.new_block(block)
        } else {
            self.block_mut(block, dir.ino)?
        };
        buf.fill(0);
        let mut off = 0;
        for (i, e) in entries.iter().enumerate() {
            let rec = if i + 1 == entries.len() {
                used - off
            } else {
                rec_len_hashed(e.name.len(), e.stored.is_some())
            };
            encode_entry(buf, off, e.ino, rec, e.ft, &e.name, bs);
            if let Some(h) = e.stored {
                dir_entry::encode_hash(buf, off, e.name.len(), h);
            }
            off += rec;
        }
        if entries.is_empty() {
            encode_entry(buf, 0, 0, used, 0, b"", bs);
        }
        if csum {
            dir_entry::set_block_checksum(buf, seed);
        }
        Ok(())
    }

    /// Appends a block to `dir` (logical = current size); returns (logical, physical).
    fn grow_dir(&mut self, dir: &mut Inode) -> Result<(u64, u64)> {
        let bs = u64::from(self.fs.geo.block_size);
        let logical = dir.size() / bs;
        self.check_dir_growth(dir, logical)?;
        let goal = self.phys_of(dir, logical.saturating_sub(1)).map_or(0, |p| p + 1);
        let (block, charge) = self.alloc_file_block(dir, logical, goal)?;
        self.map_run(
            dir,
            Extent {
                logical: logical as u32,
                len: 1,
                physical: block,
                unwritten: false,
            },
        )?;
        charge_blocks(&mut dir.raw, charge, self.fs.geo.block_size);
        dir.raw.set_size((logical + 1) * bs);
        Ok((logical, block))
    }

    /// Turns the full one-block directory `dir` into an htree, then adds
    /// the entry. Returns false (nothing done) when `dir` is not one block.
    pub(crate) fn make_indexed(&mut self, dir: &mut Inode, name: &[u8], ino: u32, ft: u8) -> Result<bool> {
        let bs = u64::from(self.fs.geo.block_size);
        if dir.size() != bs {
            return Ok(false);
        }
        // A casefolded, encrypted directory is always indexed by the
        // hashes its entries carry (`make_indexed_dir`).
        let code = match self.fs.sb.read().s_def_hash_version {
            _ if self.fs.hash_in_dirent(dir) => HashVersion::SipHash.code(),
            c @ 0..=2 => c,
            _ => 1,
        };
        let root_phys = self.phys_of(dir, 0)?;
        let parent = self.dotdot(dir, root_phys)?;
        let (moved, upper, split) = split_by_hash(self.leaf_entries(dir, root_phys, code)?);
        let (l1, p1) = self.grow_dir(dir)?;
        let (l2, p2) = self.grow_dir(dir)?;
        self.write_leaf_entries(dir, p1, &moved, true)?;
        self.write_leaf_entries(dir, p2, &upper, true)?;
        let params = self.dx_params();
        let version = HashVersion::from_code(code).unwrap_or(HashVersion::HalfMd4);
        let mut root = DxRoot::new(dir.ino, parent, version, l1 as u32, &params);
        root.header.dot.file_type = self.entry_ft(root.header.dot.file_type);
        root.header.dotdot.file_type = self.entry_ft(root.header.dotdot.file_type);
        root.entries.push(DxEntry {
            hash: split,
            block: l2 as u32,
        });
        self.store_index(dir, root_phys, Index::Root(root), true)?;
        dir.raw.i_flags.set(dir.raw.flags() | flags::INDEX);
        if self.fs.itree_enabled() {
            let names = moved.into_iter().chain(upper).map(Moved::into_itree).collect();
            self.itree_build(dir, names)?;
        }
        self.htree_add(dir, name, ino, ft, None)?;
        Ok(true)
    }

    /// The ".." entry of the one-block directory `dir`, read through this
    /// transaction (the block may exist only here so far).
    pub(super) fn dotdot(&self, dir: &Inode, block: u64) -> Result<u32> {
        let at = Location::Block { block, inode: dir.ino };
        let buf = self.block(block, dir.ino)?;
        for e in DirEntryIter::new(&buf, buf.len(), true) {
            let e = e.map_err(|err| Error::format(at, err))?;
            if e.inode != 0 && e.name == b".." {
                return Ok(e.inode);
            }
        }
        Err(Error::inconsistent(at, "directory block without a \"..\" entry"))
    }

    /// Adds an entry to the indexed `dir`, splitting the leaf if it is
    /// full; `spot` is where a lookup in this transaction found the name
    /// belongs (descended again when `None`).
    pub(crate) fn htree_add(
        &mut self,
        dir: &mut Inode,
        name: &[u8],
        ino: u32,
        ft: u8,
        spot: Option<HtreeSpot>,
    ) -> Result<()> {
        let HtreeSpot { code, hash, path } = match spot {
            Some(s) => s,
            None => self.descend(dir, name)?,
        };
        let leaf = path.last().map_or(0, |f| f.entries[f.at].block);
        let phys = self.phys_of(dir, leaf.into())?;
        // A split moves names only into the new block past the end.
        self.fs
            .dir_drain
            .refilled(dir.ino, dir.raw.i_generation.get(), leaf.into());
        if !self.insert_in_block(dir, phys, name, ino, ft)? {
            self.check_index_room(dir, &path)?;
            let (split_hash, new_phys) = self.split_leaf(dir, phys, code, path)?;
            let target = if hash >= split_hash & !1 { new_phys } else { phys };
            if !self.insert_in_block(dir, target, name, ino, ft)? {
                return Err(Error::Unsupported("a directory leaf with no room after a split".into()));
            }
        }
        self.itree_add(dir, ino, hash, ft, name)
    }

    /// Reads the root once, hashes `name` with the root's hash version and
    /// walks down to the bottom index block.
    pub(super) fn descend(&self, dir: &Inode, name: &[u8]) -> Result<HtreeSpot> {
        let params = self.dx_params();
        let phys = self.phys_of(dir, 0)?;
        let buf = self.block(phys, dir.ino)?;
        let at = |block| Location::Block { block, inode: dir.ino };
        let root = DxRoot::parse(&buf, &params).map_err(|e| Error::format(at(phys), e))?;
        let code = root.header.info.hash_version;
        let hash = self.name_hash(dir, name, code)?;
        let levels = root.indirect_levels();
        let mut path = vec![Frame {
            logical: 0,
            root: true,
            at: find(&root.entries, hash),
            entries: root.entries,
        }];
        for _ in 0..levels {
            let logical = path.last().map_or(0, |f| u64::from(f.entries[f.at].block));
            let phys = self.phys_of(dir, logical)?;
            let buf = self.block(phys, dir.ino)?;
            let node = DxNode::parse(&buf, &params).map_err(|e| Error::format(at(phys), e))?;
            path.push(Frame {
                logical,
                root: false,
                at: find(&node.entries, hash),
                entries: node.entries,
            });
        }
        Ok(HtreeSpot { code, hash, path })
    }
}

/// Sorts `entries` by hash and splits them near the middle, keeping equal
/// hashes together where possible; returns both halves and the index hash of
/// the upper one, with the continuation bit set when its first hash also
/// ends the lower half (`do_split`'s `continued`).
fn split_by_hash(mut entries: Vec<Moved>) -> (Vec<Moved>, Vec<Moved>, u32) {
    entries.sort_by_key(|m| m.hash);
    let mut mid = entries.len() / 2;
    while mid > 1 && mid + 1 < entries.len() && entries[mid].hash == entries[mid - 1].hash {
        mid += 1;
    }
    let upper = entries.split_off(mid.min(entries.len()));
    let first = upper.first().map_or(!1, |m| m.hash);
    let cont = u32::from(entries.last().is_some_and(|m| m.hash == first));
    (entries, upper, first | cont)
}

/// An index block to store.
enum Index {
    Root(DxRoot),
    Node(DxNode),
}

impl Txn<'_> {
    fn store_index(&mut self, dir: &Inode, block: u64, index: Index, fresh: bool) -> Result<()> {
        let bs = self.fs.geo.block_size;
        let seed = self.fs.inode_csum_seed(dir);
        let csum = self.fs.geo.features.metadata_csum();
        let at = Location::Block { block, inode: dir.ino };
        let buf = if fresh {
            self.new_block(block)
        } else {
            self.block_mut(block, dir.ino)?
        };
        match index {
            Index::Root(r) => r.encode(buf, bs),
            Index::Node(n) => n.encode(buf, bs),
        }
        .map_err(|e| Error::format(at, e))?;
        if csum {
            set_dx_checksum(buf, bs, seed).map_err(|e| Error::format(at, e))?;
        }
        Ok(())
    }

    /// Splits the leaf at `phys` at its median hash; returns the new block's
    /// first hash (with the continuation bit) and its physical block.
    fn split_leaf(&mut self, dir: &mut Inode, phys: u64, code: u8, mut path: Vec<Frame>) -> Result<(u32, u64)> {
        let (lower, upper, split) = split_by_hash(self.leaf_entries(dir, phys, code)?);
        let (new_logical, new_phys) = self.grow_dir(dir)?;
        self.write_leaf_entries(dir, phys, &lower, false)?;
        self.write_leaf_entries(dir, new_phys, &upper, true)?;
        self.index_insert(
            dir,
            &mut path,
            DxEntry {
                hash: split,
                block: new_logical as u32,
            },
        )?;
        Ok((split, new_phys))
    }

    /// Inserts `entry` after the taken slot of the bottom index block. A
    /// block that overflows splits in two and its upper half's first hash
    /// goes one level up, as far as needed; an overflowing root moves its
    /// entries one level down, so the tree grows at the top and every leaf
    /// stays at the same depth (`ext4_dx_add_entry`). The caller has checked
    /// with [`Self::check_index_room`] that the tree may grow.
    fn index_insert(&mut self, dir: &mut Inode, path: &mut [Frame], entry: DxEntry) -> Result<()> {
        let mut entry = entry;
        for level in (0..path.len()).rev() {
            let frame = &mut path[level];
            frame.entries.insert(frame.at + 1, entry);
            let entries = std::mem::take(&mut frame.entries);
            let (logical, root) = (frame.logical, frame.root);
            if entries.len() <= self.index_limit(dir, root) {
                return self.rewrite_index(dir, logical, root, entries);
            }
            if root {
                return self.grow_root(dir, entries);
            }
            entry = self.split_node(dir, logical, entries)?;
        }
        Err(Error::inconsistent(
            Location::Inode(dir.ino),
            "htree path without a root block",
        ))
    }

    /// Entries one index block holds: `dx_root_limit` or `dx_node_limit`.
    fn index_limit(&self, dir: &Inode, root: bool) -> usize {
        let p = self.dx_params();
        usize::from(if root && super::itree::has_itree(dir) {
            ext4kit_format::itree::root_limit_with_link(p.block_size, p.metadata_csum)
        } else if root {
            ext4kit_format::htree::root_limit(p.block_size, p.metadata_csum)
        } else {
            ext4kit_format::htree::node_limit(p.block_size, p.metadata_csum)
        })
    }

    /// Refuses a leaf split the index could not record: every index block on
    /// `path` is full and the tree already has the most levels the file
    /// system allows (`ext4_dir_htree_level`: 2, or 3 with `large_dir`).
    /// The kernel returns `ENOSPC` here; checked before anything changes.
    fn check_index_room(&self, dir: &Inode, path: &[Frame]) -> Result<()> {
        let full = path.iter().all(|f| f.entries.len() >= self.index_limit(dir, f.root));
        let params = self.dx_params();
        let max = usize::from(ext4kit_format::htree::max_indirect_levels(params.large_dir)) + 1;
        if !full || path.len() < max {
            return Ok(());
        }
        let hint = if params.large_dir {
            ""
        } else {
            " (the large_dir feature allows 3)"
        };
        Err(Error::DirIndexFull(format!(
            "directory inode {} has reached the maximum htree depth of {max} levels{hint}",
            dir.ino
        )))
    }

    /// The root overflowed (`entries` is one over its limit): its entries
    /// move into two new index nodes one level down, the root keeps one
    /// entry for each, and `dx_root_info.indirect_levels` grows by one.
    fn grow_root(&mut self, dir: &mut Inode, entries: Vec<DxEntry>) -> Result<()> {
        let params = self.dx_params();
        let root_phys = self.phys_of(dir, 0)?;
        let buf = self.block(root_phys, dir.ino)?;
        let at = Location::Block {
            block: root_phys,
            inode: dir.ino,
        };
        let mut root = DxRoot::parse(&buf, &params).map_err(|e| Error::format(at, e))?;
        let levels = root.header.info.indirect_levels + 1;
        if levels > ext4kit_format::htree::max_indirect_levels(params.large_dir) {
            return Err(Error::DirIndexFull(format!(
                "directory inode {} cannot grow its htree past {levels} levels",
                dir.ino
            )));
        }
        let mut left = entries;
        let right = left.split_off(left.len() / 2);
        let right_hash = right[0].hash;
        let (left_logical, left_phys) = self.grow_dir(dir)?;
        let (right_logical, right_phys) = self.grow_dir(dir)?;
        self.store_index(dir, left_phys, Index::Node(DxNode::new(left, &params)), true)?;
        self.store_index(dir, right_phys, Index::Node(DxNode::new(right, &params)), true)?;
        root.entries = vec![
            DxEntry {
                hash: 0,
                block: left_logical as u32,
            },
            DxEntry {
                hash: right_hash,
                block: right_logical as u32,
            },
        ];
        root.header.info.indirect_levels = levels;
        self.store_index(dir, root_phys, Index::Root(root), false)
    }

    /// Splits the overflowing index node at `logical` (holding `entries`,
    /// one over its limit) in two: the lower half stays, the upper half
    /// goes to a new node. Returns the entry the parent must take for it.
    fn split_node(&mut self, dir: &mut Inode, logical: u64, entries: Vec<DxEntry>) -> Result<DxEntry> {
        let params = self.dx_params();
        let mut left = entries;
        let right = left.split_off(left.len() / 2);
        let hash = right[0].hash;
        let (right_logical, right_phys) = self.grow_dir(dir)?;
        self.store_index(dir, right_phys, Index::Node(DxNode::new(right, &params)), true)?;
        self.rewrite_index(dir, logical, false, left)?;
        Ok(DxEntry {
            hash,
            block: right_logical as u32,
        })
    }

    fn rewrite_index(&mut self, dir: &Inode, logical: u64, root: bool, entries: Vec<DxEntry>) -> Result<()> {
        let params = self.dx_params();
        let phys = self.phys_of(dir, logical)?;
        let buf = self.block(phys, dir.ino)?;
        let at = Location::Block {
            block: phys,
            inode: dir.ino,
        };
        if root {
            let mut r = DxRoot::parse(&buf, &params).map_err(|e| Error::format(at, e))?;
            r.entries = entries;
            self.store_index(dir, phys, Index::Root(r), false)
        } else {
            let mut n = DxNode::parse(&buf, &params).map_err(|e| Error::format(at, e))?;
            n.entries = entries;
            self.store_index(dir, phys, Index::Node(n), false)
        }
    }
}
