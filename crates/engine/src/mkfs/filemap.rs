//! Laying out a new file's blocks as mke2fs does: runs of free blocks from
//! a goal, mapped with extents (in the inode, or through one leaf block
//! placed where `ext2fs_fallocate` puts it) or with block-map indirect
//! blocks interleaved with the data. The free space comes from a
//! [`BlockPool`], so the same layout serves mkfs (its [`UsedMap`]) and a
//! checker that recreates a file on an existing file system.
//!
//! See `Documentation/filesystems/ext4/ifork.rst` and `blockmap.rst`.

use ext4kit_format::extent::{
    EXT4_EXT_MAGIC, Extent, ExtentIdx, ExtentNode, NodeEntries, RawExtentHeader, encode_node, node_capacity,
};
use ext4kit_format::inode::I_BLOCK_SIZE;

use super::layout::UsedMap;
use crate::error::{Error, Result};

/// Longest initialized extent (`EXT_INIT_MAX_LEN`).
const MAX_EXTENT_LEN: u64 = 32768;

/// Where new blocks come from.
pub trait BlockPool {
    /// The first free block at or after `goal`, wrapping around.
    ///
    /// # Errors
    /// No free block is left.
    fn new_block(&mut self, goal: u64) -> Result<u64>;
    /// Length of the free run starting at the free block `s`, at most `limit`.
    fn free_run(&mut self, s: u64, limit: u64) -> u64;
    /// Marks `len` blocks from `start` used.
    fn mark(&mut self, start: u64, len: u64);
}

impl BlockPool for UsedMap {
    fn new_block(&mut self, goal: u64) -> Result<u64> {
        UsedMap::new_block(self, goal)
    }

    fn free_run(&mut self, s: u64, limit: u64) -> u64 {
        UsedMap::free_run(self, s, limit)
    }

    fn mark(&mut self, start: u64, len: u64) {
        UsedMap::mark(self, start, len);
    }
}

/// What the mapping blocks of a file depend on.
#[derive(Debug, Clone, Copy)]
pub struct FileShape {
    /// Block size in bytes.
    pub block_size: u32,
    /// Map with extents (else with a block map).
    pub extents: bool,
    /// The inode's checksum seed when metadata_csum is on: extent leaf
    /// blocks carry a tail checksum.
    pub csum_seed: Option<u32>,
}

/// One allocated file: its `i_block`, data runs, mapping blocks.
#[derive(Debug, Clone)]
pub struct FileMap {
    /// The inode's `i_block` (extent root or block map).
    pub i_block: [u8; I_BLOCK_SIZE],
    /// Data blocks in logical order, as (first, count) runs.
    pub runs: Vec<(u64, u64)>,
    /// Mapping blocks (extent leaves, indirect blocks) and their contents.
    pub meta: Vec<(u64, Vec<u8>)>,
}

impl Default for FileMap {
    fn default() -> Self {
        Self {
            i_block: [0; I_BLOCK_SIZE],
            runs: Vec::new(),
            meta: Vec::new(),
        }
    }
}

impl FileMap {
    /// Data and mapping blocks (what `i_blocks` counts).
    pub fn blocks(&self) -> u64 {
        self.data_blocks() + self.meta.len() as u64
    }

    /// Data blocks only.
    pub fn data_blocks(&self) -> u64 {
        self.runs.iter().map(|r| r.1).sum::<u64>()
    }
}

/// Allocates `n` data blocks from `goal` and maps them with extents (an
/// extent leaf block when more than four extents are needed, where
/// `ext2fs_fallocate` places it) or with indirect blocks interleaved.
///
/// # Errors
/// The pool runs out, or the data needs more extents than one leaf holds.
pub fn map_file(pool: &mut dyn BlockPool, shape: &FileShape, goal: u64, n: u64) -> Result<FileMap> {
    if shape.extents {
        map_extents(pool, shape, goal, n)
    } else {
        map_indirect(pool, shape, goal, n)
    }
}

fn map_extents(pool: &mut dyn BlockPool, shape: &FileShape, goal: u64, n: u64) -> Result<FileMap> {
    let mut runs = free_runs(pool, goal, n)?;
    let leaf = if runs.len() > 4 {
        // As ext2fs_fallocate: the fifth extent splits the in-inode root;
        // the leaf goes at the first free block from the one before the
        // data, and the rest of the data follows it.
        runs.truncate(5);
        for &(s, len) in &runs {
            pool.mark(s, len);
        }
        let blk = pool.new_block(runs[0].0.saturating_sub(1))?;
        pool.mark(blk, 1);
        let (s, len) = runs[4];
        let done: u64 = runs.iter().map(|r| r.1).sum();
        runs.extend(free_runs(pool, s + len, n - done)?);
        Some(blk)
    } else {
        None
    };
    for &(s, len) in &runs {
        pool.mark(s, len);
    }
    let mut f = FileMap::default();
    encode_extents(shape, &runs, leaf, &mut f)?;
    f.runs = runs;
    Ok(f)
}

fn extent_header(max: u16) -> RawExtentHeader {
    RawExtentHeader {
        eh_magic: EXT4_EXT_MAGIC.into(),
        eh_entries: 0.into(),
        eh_max: max.into(),
        eh_depth: 0.into(),
        eh_generation: 0.into(),
    }
}

/// Writes the extent root into `f.i_block`, and the leaf block into
/// `f.meta` when there is one.
fn encode_extents(shape: &FileShape, runs: &[(u64, u64)], leaf: Option<u64>, f: &mut FileMap) -> Result<()> {
    let mut logical = 0u32;
    let exts: Vec<Extent> = runs
        .iter()
        .map(|&(s, len)| {
            let e = Extent {
                logical,
                len: len as u16,
                physical: s,
                unwritten: false,
            };
            logical += len as u32;
            e
        })
        .collect();
    let root_max = 4;
    let Some(blk) = leaf else {
        let node = ExtentNode {
            header: extent_header(root_max),
            depth: 0,
            entries: NodeEntries::Leaf(exts),
        };
        encode_node(&node, &mut f.i_block);
        return Ok(());
    };
    let bs = shape.block_size as usize;
    let cap = node_capacity(bs, false);
    if exts.len() > usize::from(cap) {
        return Err(Error::Unsupported(format!("a file of {} extents", exts.len())));
    }
    let exts4 = exts[..4].to_vec();
    let mut buf = vec![0u8; bs];
    let node = ExtentNode {
        header: extent_header(cap),
        depth: 0,
        entries: NodeEntries::Leaf(exts),
    };
    encode_node(&node, &mut buf);
    if let Some(seed) = shape.csum_seed {
        ext4kit_format::extent::set_block_checksum(&mut buf, seed)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    }
    let root = ExtentNode {
        header: extent_header(root_max),
        depth: 1,
        entries: NodeEntries::Index(vec![ExtentIdx { logical: 0, child: blk }]),
    };
    // libext2fs splits a full root: slots 1–3 keep the first four
    // extents' bytes behind the new index entry.
    let first4 = ExtentNode {
        header: extent_header(root_max),
        depth: 0,
        entries: NodeEntries::Leaf(exts4),
    };
    encode_node(&first4, &mut f.i_block);
    encode_node(&root, &mut f.i_block[..24]);
    f.meta.push((blk, buf));
    Ok(())
}

/// Free runs from `goal` covering `n` blocks, each at most one extent long.
fn free_runs(pool: &mut dyn BlockPool, goal: u64, n: u64) -> Result<Vec<(u64, u64)>> {
    let mut runs = Vec::new();
    let (mut cursor, mut left) = (goal, n);
    while left > 0 {
        let s = pool.new_block(cursor)?;
        let len = pool.free_run(s, left.min(MAX_EXTENT_LEN));
        if len == 0 {
            return Err(Error::InvalidArgument(format!(
                "block {s} was offered as free but is not"
            )));
        }
        runs.push((s, len));
        left -= len;
        cursor = s + len;
    }
    Ok(runs)
}

/// Block-mapped allocation: data blocks in order with each indirect block
/// allocated just before the first data block it maps.
fn map_indirect(pool: &mut dyn BlockPool, shape: &FileShape, goal: u64, n: u64) -> Result<FileMap> {
    let apb = u64::from(shape.block_size / 4);
    let mut f = FileMap::default();
    let mut words = [0u32; 15];
    let mut cursor = goal;
    let mut next = |pool: &mut dyn BlockPool| -> Result<u64> {
        let blk = pool.new_block(cursor)?;
        pool.mark(blk, 1);
        cursor = blk + 1;
        Ok(blk)
    };
    // Index into f.meta of the current node at each height (1 = IND).
    let mut cur = [usize::MAX; 4];
    for i in 0..n {
        let path = block_path(i, apb);
        let depth = path.len() - 1;
        for h in (1..=depth).rev() {
            if path[depth - h + 1..].iter().any(|&x| x != 0) {
                continue;
            }
            let blk = next(pool)?;
            if h == depth {
                words[path[0] as usize] = blk as u32;
            } else {
                put_word(&mut f.meta[cur[h]].1, path[depth - h] as usize, blk as u32);
            }
            f.meta.push((blk, vec![0u8; shape.block_size as usize]));
            cur[h - 1] = f.meta.len() - 1;
        }
        let data = next(pool)?;
        if depth == 0 {
            words[path[0] as usize] = data as u32;
        } else {
            put_word(&mut f.meta[cur[0]].1, path[depth] as usize, data as u32);
        }
        match f.runs.last_mut() {
            Some((s, len)) if *s + *len == data => *len += 1,
            _ => f.runs.push((data, 1)),
        }
    }
    for (i, w) in words.iter().enumerate() {
        f.i_block[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    Ok(f)
}

/// `[i_block slot, index in the top node, …, index in the IND node]`.
fn block_path(i: u64, apb: u64) -> Vec<u64> {
    if i < 12 {
        return vec![i];
    }
    let i = i - 12;
    if i < apb {
        return vec![12, i];
    }
    let i = i - apb;
    if i < apb * apb {
        return vec![13, i / apb, i % apb];
    }
    let i = i - apb * apb;
    vec![14, i / (apb * apb), (i / apb) % apb, i % apb]
}

/// Stores the little-endian block number `v` in slot `idx` of a block map block.
pub(crate) fn put_word(buf: &mut [u8], idx: usize, v: u32) {
    buf[idx * 4..idx * 4 + 4].copy_from_slice(&v.to_le_bytes());
}
