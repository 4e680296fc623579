//! Moving the blocks in use past the new end of a shrink into free blocks
//! below it, as resize2fs's `blocks_to_move`, `block_mover` and
//! `inode_scan_and_fix` do: every inode in use is read once; the blocks it
//! owns past the end (data, extent tree blocks, indirect blocks, its xattr
//! block) get new homes ([`Dest`]), and the references to them are
//! rewritten:
//! - an extent-mapped inode whose tree touches the cut groups gets a new
//!   tree built from its mapped extents (data past the end split into the
//!   runs it was copied to), in fresh blocks; the old tree blocks below
//!   the end are freed. Tree blocks are summed with the inode's seed
//!   (`ext4_extent_tail`), which the move does not change;
//! - a block-mapped inode has each pointer past the end rewritten: moved
//!   indirect blocks are written at their new place, kept ones that
//!   changed in place;
//! - an xattr block is copied once however many inodes share it, its
//!   checksum (seeded with the block number) recomputed.
//!
//! Copies and new blocks go where the old file system keeps nothing, so
//! they are written before the switch; inode records and kept blocks
//! whose pointers change are part of the switch (`txn`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ext4kit_format::extent::{
    self, EXT4_EXT_MAGIC, Extent, ExtentIdx, ExtentNode, MAX_DEPTH, NodeEntries, RawExtentHeader,
};
use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::inode::{FileType, RawInode, set_inode_checksum};

use super::dest::Dest;
use super::inodes::Renumbered;
use super::plan::Plan;
use super::stage::Stage;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::extent_write::charge_blocks;
use crate::mkfs::layout::UsedMap;

/// `EXT2_BAD_INO` and `EXT2_RESIZE_INO`: their blocks are not file data
/// (the resize inode is rebuilt by [`super::resize_inode`]).
const SKIPPED: [u32; 2] = [1, 7];

/// What moving changed beyond the staged blocks.
pub(crate) struct Moved {
    /// Blocks in use below the new end, afterwards.
    pub(crate) map: UsedMap,
    /// Groups whose block bitmap changed.
    pub(crate) touched: BTreeSet<u32>,
    /// The journal inode's new `i_block` and size, when its blocks moved
    /// (the superblock keeps a copy in `s_jnl_blocks`).
    pub(crate) journal: Option<([u8; 60], u64)>,
}

struct Mover<'a> {
    fs: &'a Filesystem,
    p: &'a Plan,
    /// Inodes renumbered, old → new, and their new numbers.
    renumber: &'a HashMap<u32, u32>,
    /// New number → old number.
    renumbered: HashMap<u32, u32>,
    /// The checksum seed of the directory being walked, if any.
    dir_seed: Option<u32>,
    /// The inode being walked was renumbered.
    current_renumbered: bool,
    dest: Dest,
    /// Blocks that must be vacated: past a shrink's new end, or where a
    /// grow's longer descriptor table and the tables it displaces go.
    gone: UsedMap,
    /// Blocks past the end accounted for.
    moved: u64,
    freed: BTreeSet<u64>,
    xattr: HashMap<u64, u64>,
    before: BTreeMap<u64, Vec<u8>>,
    txn: BTreeMap<u64, Vec<u8>>,
    copies: Vec<(u64, u64, u64)>,
    journal: Option<([u8; 60], u64)>,
    /// Inodes whose rebuilt extent tree took a different number of blocks.
    recharged: u32,
}

/// Moves the blocks in use in `gone` (past a shrink's new end, or in
/// the way of a grow's longer descriptor table); `map` is the used map
/// (moved tables' old places left out), `busy` every block the old file
/// system reads or the new one claims (where no copy may go), `past` the
/// number of blocks of `map` in `gone` (each must be found in an inode).
pub(crate) fn move_blocks(
    fs: &Filesystem,
    p: &Plan,
    ren: &Renumbered,
    map: UsedMap,
    (busy, gone, past): (UsedMap, UsedMap, u64),
    st: &mut Stage,
) -> Result<Moved> {
    let end = p.new.blocks_count;
    if past == 0 && ren.map.is_empty() {
        return Ok(Moved {
            map,
            touched: BTreeSet::new(),
            journal: None,
        });
    }
    let first = u64::from(p.new.first_data_block);
    let mut m = Mover {
        fs,
        p,
        renumber: &ren.map,
        renumbered: ren.map.iter().map(|(&o, &n)| (n, o)).collect(),
        dir_seed: None,
        current_renumbered: false,
        dest: Dest::new(busy, first, end),
        gone,
        moved: 0,
        freed: BTreeSet::new(),
        xattr: HashMap::new(),
        before: BTreeMap::new(),
        txn: std::mem::take(&mut st.txn),
        copies: Vec::new(),
        journal: None,
        recharged: 0,
    };
    for &ino in &ren.in_use {
        if !SKIPPED.contains(&ino) {
            m.inode(ino).map_err(|e| no_room(e, past))?;
        }
    }
    if m.moved != past {
        return Err(Error::Unsupported(format!(
            "{} of the {past} blocks in use past the new end belong to no inode whose blocks this resize \
             moves (bad blocks, or blocks marked in use but not owned); run e2fsck -f",
            past.saturating_sub(m.moved)
        )));
    }
    let quota = p.old.features.ro_compat.contains(RoCompatFeatures::QUOTA);
    if quota && m.recharged > 0 {
        return Err(Error::Unsupported(format!(
            "moving would change the blocks charged to {} files (their extent trees rebuilt in another \
             number of blocks), and updating quota usage is not implemented",
            m.recharged
        )));
    }
    let touched = m.touched_groups();
    let map = rebuilt(&map, &m.freed, &m.dest.taken, p);
    st.before.append(&mut m.before);
    st.txn.append(&mut m.txn);
    st.copy = m.copies;
    st.moved = (m.moved, ren.map.len() as u32);
    Ok(Moved {
        map,
        touched,
        journal: m.journal,
    })
}

/// A shrink that runs out of free blocks below the new end says so.
fn no_room(e: Error, past: u64) -> Error {
    match e {
        Error::NoSpace => Error::InvalidArgument(format!(
            "the {past} blocks in use past the new end do not fit in the free blocks below it \
             (resize -P gives the minimum)"
        )),
        e => e,
    }
}

/// `map` without `freed`, with `taken`.
fn rebuilt(map: &UsedMap, freed: &BTreeSet<u64>, taken: &[(u64, u64)], p: &Plan) -> UsedMap {
    let first = u64::from(p.new.first_data_block);
    let size = p.old.blocks_count.max(p.new.blocks_count);
    let mut out = UsedMap::over(size, first);
    map.for_each_in(first, size, |a, b| {
        let mut s = a;
        for &f in freed.range(a..b) {
            if f > s {
                out.mark(s, f - s);
            }
            s = f + 1;
        }
        if b > s {
            out.mark(s, b - s);
        }
    });
    for &(s, n) in taken {
        out.mark(s, n);
    }
    out
}

impl Mover<'_> {
    fn gone(&self, b: u64) -> bool {
        self.gone.is_used(b)
    }

    /// The run at `b` (at most `n` blocks) that is all kept or all gone:
    /// (gone, length).
    fn run(&self, b: u64, n: u64) -> (bool, u64) {
        if !self.gone(b) {
            return (false, self.gone.free_run(b, n));
        }
        let mut len = 0;
        self.gone.for_each_in(b, b + n, |a, e| {
            if a == b {
                len = e - a;
            }
        });
        (true, len)
    }

    fn read(&self, b: u64) -> Result<Vec<u8>> {
        if b >= self.p.old.blocks_count {
            return Err(Error::inconsistent(
                Location::Block { block: b, inode: 0 },
                "block lies past the end of the file system",
            ));
        }
        let mut buf = vec![0u8; self.p.old.block_size as usize];
        self.fs.read_bytes(b << self.p.old.block_size_log2, &mut buf)?;
        Ok(buf)
    }

    fn copy(&mut self, from: u64, to: u64, n: u64) {
        self.moved += n;
        match self.copies.last_mut() {
            Some(c) if c.0 + c.2 == from && c.1 + c.2 == to => c.2 += n,
            _ => self.copies.push((from, to, n)),
        }
    }

    /// Inode `ino` as staged (a renumbered one is only there).
    fn staged_inode(&self, ino: u32) -> Result<Inode> {
        let slot = self.fs.inode_slot(ino)?;
        match self.txn.get(&slot.block) {
            Some(b) => self
                .fs
                .decode_inode(ino, &b[slot.offset..slot.offset + usize::from(self.p.old.inode_size)]),
            None => self.fs.inode_on_disk(ino),
        }
    }

    fn inode(&mut self, ino: u32) -> Result<()> {
        let inode = self.staged_inode(ino)?;
        let mut raw = inode.raw;
        let mut changed = false;
        let acl = raw.file_acl();
        if acl != 0 && self.gone(acl) {
            let to = self.xattr_block(acl)?;
            raw.i_file_acl_lo.set(to as u32);
            raw.i_file_acl_high.set((to >> 32) as u16);
            changed = true;
        }
        if self.has_body(&inode) {
            let dir = inode.raw.file_type() == Some(FileType::Directory);
            let fix = dir && !self.renumber.is_empty();
            self.dir_seed = fix.then(|| raw.csum_seed(self.fs.csum_seed, ino));
            self.current_renumbered = self.renumbered.contains_key(&ino);
            changed |= if inode.uses_extents() {
                self.extents(&inode, &mut raw)?
            } else {
                self.block_map(&mut raw)?
            };
            self.dir_seed = None;
        }
        if !changed {
            return Ok(());
        }
        if ino == self.p.old_sb.s_journal_inum.get() {
            self.journal = Some((raw.i_block, raw.size()));
        }
        let mut rec = inode.record.to_vec();
        raw.encode_into(&mut rec);
        if self.p.old.features.metadata_csum() {
            set_inode_checksum(&mut rec, self.fs.csum_seed, ino).map_err(|e| Error::format(Location::Inode(ino), e))?;
        }
        let slot = self.fs.inode_slot(ino)?;
        if !self.txn.contains_key(&slot.block) {
            let buf = self.read(slot.block)?;
            self.txn.insert(slot.block, buf);
        }
        let block = self.txn.get_mut(&slot.block).expect("inserted above");
        block[slot.offset..slot.offset + rec.len()].copy_from_slice(&rec);
        Ok(())
    }

    /// Whether `i_block` maps blocks (not inline data, a fast symlink's
    /// text or a device number).
    fn has_body(&self, inode: &Inode) -> bool {
        let t = inode.raw.file_type();
        matches!(t, Some(FileType::Regular | FileType::Directory | FileType::Symlink))
            && !inode.has_inline_data()
            && !self.fs.is_fast_symlink(inode)
    }

    fn xattr_block(&mut self, b: u64) -> Result<u64> {
        if let Some(&to) = self.xattr.get(&b) {
            return Ok(to);
        }
        let mut buf = self.read(b)?;
        let (to, _) = self.dest.take(1)?;
        if self.p.old.features.metadata_csum() {
            ext4kit_format::xattr::set_block_checksum(self.fs.csum_seed, to, &mut buf)
                .map_err(|e| Error::format(Location::Block { block: b, inode: 0 }, e))?;
        }
        self.before.insert(to, buf);
        self.moved += 1;
        self.xattr.insert(b, to);
        Ok(to)
    }

    /// Rebuilds the extent tree of an inode with anything past the end.
    fn extents(&mut self, inode: &Inode, raw: &mut RawInode) -> Result<bool> {
        // Tree blocks are still summed with the number the inode had.
        let mut old = inode.clone();
        old.ino = self.renumbered.get(&inode.ino).copied().unwrap_or(inode.ino);
        let nodes = self.fs.extent_tree(&old)?;
        let tree: Vec<u64> = nodes.iter().filter_map(|(b, _)| *b).collect();
        let leaves: Vec<Extent> = nodes
            .iter()
            .filter_map(|(_, n)| match &n.entries {
                NodeEntries::Leaf(v) => Some(v.iter().copied()),
                NodeEntries::Index(_) => None,
            })
            .flatten()
            .collect();
        // A renumbered inode's tree blocks are summed with its new number.
        let resum = !tree.is_empty() && self.renumbered.contains_key(&inode.ino);
        let clear = |e: &Extent| self.gone.used_in(e.physical, e.physical + u64::from(e.len)) == 0;
        if !resum && tree.iter().all(|&b| !self.gone(b)) && leaves.iter().all(clear) {
            for e in leaves.iter().filter(|e| !e.unwritten) {
                self.fix_dir_run(e.physical, e.physical, u64::from(e.len))?;
            }
            return Ok(false);
        }
        let mut out = Vec::with_capacity(leaves.len());
        for e in leaves {
            let len = u64::from(e.len);
            let mut done = 0;
            while done < len {
                let at = e.physical + done;
                let (gone, run) = self.run(at, len - done);
                let (to, n) = if gone {
                    let (to, n) = self.dest.take(run)?;
                    self.copy(at, to, n);
                    (to, n)
                } else {
                    (at, run)
                };
                if !e.unwritten {
                    self.fix_dir_run(at, to, n)?;
                }
                out.push(Extent {
                    logical: e.logical + done as u32,
                    len: n as u16,
                    physical: to,
                    unwritten: e.unwritten,
                });
                done += n;
            }
        }
        for &b in &tree {
            if self.gone(b) {
                self.moved += 1;
            } else {
                self.freed.insert(b);
            }
        }
        let seed = raw.csum_seed(self.fs.csum_seed, inode.ino);
        let made = self.build_tree(out, seed, &mut raw.i_block)?;
        if made != tree.len() as u64 {
            self.recharged += 1;
            charge_blocks(raw, made as i64 - tree.len() as i64, self.p.old.block_size);
        }
        Ok(true)
    }

    /// Writes `exts` as a tree under the 60-byte `root`, its blocks in
    /// fresh places; returns how many blocks it took.
    fn build_tree(&mut self, exts: Vec<Extent>, seed: u32, root: &mut [u8]) -> Result<u64> {
        let bs = self.p.old.block_size as usize;
        let cap = usize::from(extent::node_capacity(bs, false));
        let root_cap = usize::from(extent::node_capacity(root.len(), true));
        let mut entries = NodeEntries::Leaf(exts);
        let (mut depth, mut made) = (0u16, 0u64);
        loop {
            if len_of(&entries) <= root_cap {
                let node = ExtentNode {
                    header: header(root_cap, depth),
                    depth,
                    entries,
                };
                extent::encode_node(&node, root);
                return Ok(made);
            }
            if depth >= MAX_DEPTH {
                return Err(Error::Unsupported("an extent tree deeper than five levels".into()));
            }
            let mut index = Vec::new();
            for chunk in split(entries, cap) {
                let (b, _) = self.dest.take(1)?;
                index.push(ExtentIdx {
                    logical: first_logical(&chunk),
                    child: b,
                });
                let node = ExtentNode {
                    header: header(cap, depth),
                    depth,
                    entries: chunk,
                };
                let mut buf = vec![0u8; bs];
                extent::encode_node(&node, &mut buf);
                if self.p.old.features.metadata_csum() {
                    extent::set_block_checksum(&mut buf, seed)
                        .map_err(|e| Error::format(Location::Block { block: b, inode: 0 }, e))?;
                }
                self.before.insert(b, buf);
                made += 1;
            }
            entries = NodeEntries::Index(index);
            depth += 1;
        }
    }

    /// Rewrites the pointers of a block-mapped inode (`i_block`: twelve
    /// direct, then single, double and triple indirect).
    fn block_map(&mut self, raw: &mut RawInode) -> Result<bool> {
        let mut changed = false;
        for slot in 0..15 {
            let at = slot * 4;
            let ptr = u32::from_le_bytes(raw.i_block[at..at + 4].try_into().expect("4 bytes"));
            let level = slot.saturating_sub(11) as u32;
            let new = self.remap(ptr, level)?;
            if new != ptr {
                raw.i_block[at..at + 4].copy_from_slice(&new.to_le_bytes());
                changed = true;
            }
        }
        Ok(changed)
    }

    /// The new number of block `ptr`, an indirect block of `level` (0 for
    /// data), whose own pointers are rewritten first.
    fn remap(&mut self, ptr: u32, level: u32) -> Result<u32> {
        let b = u64::from(ptr);
        if ptr == 0 {
            return Ok(0);
        }
        if level == 0 {
            if !self.gone(b) {
                self.fix_dir_run(b, b, 1)?;
                return Ok(ptr);
            }
            let (to, _) = self.dest.take(1)?;
            self.copy(b, to, 1);
            self.fix_dir_run(b, to, 1)?;
            return Ok(to as u32);
        }
        let mut buf = self.read(b)?;
        let mut dirty = false;
        for i in 0..buf.len() / 4 {
            let p = u32::from_le_bytes(buf[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
            let n = self.remap(p, level - 1)?;
            if n != p {
                buf[i * 4..i * 4 + 4].copy_from_slice(&n.to_le_bytes());
                dirty = true;
            }
        }
        if self.gone(b) {
            let (to, _) = self.dest.take(1)?;
            self.moved += 1;
            self.before.insert(to, buf);
            return Ok(to as u32);
        }
        if dirty {
            self.txn.insert(b, buf);
        }
        Ok(ptr)
    }

    /// Rewrites the directory blocks `from..from + n`, to be found at
    /// `to..` afterwards, when walking a directory: entries naming a
    /// renumbered inode get its new number, and checksums are taken with
    /// the directory's (possibly new) seed.
    fn fix_dir_run(&mut self, from: u64, to: u64, n: u64) -> Result<()> {
        let Some(seed) = self.dir_seed else {
            return Ok(());
        };
        for i in 0..n {
            let mut buf = self.read(from + i)?;
            let named = self.rename_entries(&mut buf, from + i)?;
            if !named && !self.renumbered_dir() {
                continue;
            }
            if self.p.old.features.metadata_csum() {
                if is_dx_block(&buf) {
                    let at = Location::Block {
                        block: from + i,
                        inode: 0,
                    };
                    let bs = self.p.old.block_size;
                    ext4kit_format::htree::set_dx_checksum(&mut buf, bs, seed).map_err(|e| Error::format(at, e))?;
                } else {
                    ext4kit_format::dir_entry::set_block_checksum(&mut buf, seed);
                }
            } else if !named {
                continue;
            }
            if to + i == from + i {
                self.txn.insert(to + i, buf);
            } else {
                self.before.insert(to + i, buf);
            }
        }
        Ok(())
    }

    /// Whether the directory being walked was itself renumbered.
    fn renumbered_dir(&self) -> bool {
        self.current_renumbered
    }

    /// Gives the renumbered inodes named in directory block `buf` their
    /// new numbers; true when one was named.
    fn rename_entries(&self, buf: &mut [u8], block: u64) -> Result<bool> {
        let bs = buf.len();
        let (mut off, mut named) = (0usize, false);
        while off + 8 <= bs {
            let ino = u32::from_le_bytes(buf[off..off + 4].try_into().expect("4 bytes"));
            let raw_len = u16::from_le_bytes(buf[off + 4..off + 6].try_into().expect("2 bytes"));
            let len = ext4kit_format::dir_entry::rec_len_from_disk(raw_len, bs);
            if len < 8 || off + len > bs {
                return Err(Error::inconsistent(
                    Location::Block { block, inode: 0 },
                    format!("directory entry at {off} has record length {len}"),
                ));
            }
            if let Some(&new) = self.renumber.get(&ino) {
                buf[off..off + 4].copy_from_slice(&new.to_le_bytes());
                named = true;
            }
            off += len;
        }
        Ok(named)
    }

    /// Groups (of the new layout) holding blocks taken or freed.
    fn touched_groups(&self) -> BTreeSet<u32> {
        let first = u64::from(self.p.new.first_data_block);
        let bpg = u64::from(self.p.new.blocks_per_group);
        let group = |b: u64| ((b - first) / bpg) as u32;
        let mut out: BTreeSet<u32> = self.freed.iter().map(|&b| group(b)).collect();
        for &(s, n) in &self.dest.taken {
            out.extend(group(s)..=group(s + n - 1));
        }
        out
    }
}

/// Whether a directory block of a `metadata_csum` file system is an htree
/// index block: a node is one empty entry spanning the block, a root
/// `.` (12 bytes) then `..` to the end. A leaf always ends in its 12-byte
/// checksum entry, so no entry of a leaf reaches the end (the last 12
/// bytes of a root may still look like that tail: the kernel leaves
/// `dt_reserved` as it found it).
fn is_dx_block(buf: &[u8]) -> bool {
    let bs = buf.len();
    let rec = |off: usize| {
        let raw = u16::from_le_bytes([buf[off + 4], buf[off + 5]]);
        ext4kit_format::dir_entry::rec_len_from_disk(raw, bs)
    };
    let ino0 = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
    (ino0 == 0 && rec(0) == bs) || (rec(0) == 12 && rec(12) == bs - 12)
}

fn header(max: usize, depth: u16) -> RawExtentHeader {
    RawExtentHeader {
        eh_magic: EXT4_EXT_MAGIC.into(),
        eh_entries: 0.into(),
        eh_max: (max as u16).into(),
        eh_depth: depth.into(),
        eh_generation: 0.into(),
    }
}

fn len_of(e: &NodeEntries) -> usize {
    match e {
        NodeEntries::Leaf(v) => v.len(),
        NodeEntries::Index(v) => v.len(),
    }
}

fn first_logical(e: &NodeEntries) -> u32 {
    match e {
        NodeEntries::Leaf(v) => v.first().map_or(0, |x| x.logical),
        NodeEntries::Index(v) => v.first().map_or(0, |x| x.logical),
    }
}

fn split(e: NodeEntries, cap: usize) -> Vec<NodeEntries> {
    match e {
        NodeEntries::Leaf(v) => v.chunks(cap).map(|c| NodeEntries::Leaf(c.to_vec())).collect(),
        NodeEntries::Index(v) => v.chunks(cap).map(|c| NodeEntries::Index(c.to_vec())).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::is_dx_block;

    fn entry(buf: &mut [u8], off: usize, ino: u32, rec_len: u16) {
        buf[off..off + 4].copy_from_slice(&ino.to_le_bytes());
        buf[off + 4..off + 6].copy_from_slice(&rec_len.to_le_bytes());
    }

    #[test]
    fn htree_blocks_are_told_from_leaves() {
        let mut root = vec![0u8; 4096];
        entry(&mut root, 0, 2, 12);
        entry(&mut root, 12, 2, 4096 - 12);
        // What a leaf's tail left behind where the root keeps dt_reserved.
        entry(&mut root, 4084, 0, 12);
        root[4091] = 0xDE;
        assert!(is_dx_block(&root));
        let mut node = vec![0u8; 4096];
        entry(&mut node, 0, 0, 4096);
        assert!(is_dx_block(&node));
        let mut leaf = vec![0u8; 4096];
        entry(&mut leaf, 0, 2, 12);
        entry(&mut leaf, 12, 2, 4096 - 24);
        entry(&mut leaf, 4084, 0, 12);
        assert!(!is_dx_block(&leaf));
        let mut empty = vec![0u8; 4096];
        entry(&mut empty, 0, 0, 4096 - 12);
        entry(&mut empty, 4084, 0, 12);
        assert!(!is_dx_block(&empty));
    }
}
