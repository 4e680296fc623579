//! Pass 2, hash-indexed directories (`directory.rst`, "Hash Tree
//! Directories"): the dx root (header fields, limit, count, depth against
//! large_dir), interior nodes, hash order, every leaf referenced exactly
//! once, checksum tails; and each leaf's hash range for pass 2 to check
//! names against.

use std::collections::{HashMap, HashSet};

use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::hash::{HashVersion, seed_from_bytes};
use ext4kit_format::htree::{DxEntry, DxNode, DxParams, DxRoot, verify_dx_checksum};
use ext4kit_format::inode::flags::{self, INDEX};

use crate::pass1::decode;
use crate::problem::{self as p, Code, Finding};
use crate::state::{Ctx, DirBlock};

/// What pass 2 needs from a valid index.
pub struct Index {
    /// Logical blocks that are index nodes (the root included).
    pub nodes: HashSet<u32>,
    /// Per leaf block: the lowest and highest hash its parent allows.
    pub ranges: HashMap<u32, (u32, u32)>,
    /// Effective hash version.
    pub version: HashVersion,
    /// Hash seed words.
    pub seed: [u32; 4],
}

fn root_code(field: &str) -> Code {
    match field {
        "hash_version" => p::P1_HTREE_HASHV,
        "indirect_levels" => p::P1_HTREE_DEPTH,
        "unused_flags" => p::P1_HTREE_INCOMPAT,
        "dx_countlimit.limit" | "limit" => p::P2_HTREE_BAD_LIMIT,
        "dx_countlimit.count" | "count" => p::P2_HTREE_BAD_COUNT,
        _ => p::P1_HTREE_BADROOT,
    }
}

struct Walk<'b, 'a> {
    fs: &'b crate::fs::RawFs<'a>,
    ino: u32,
    seed: u32,
    params: DxParams,
    blocks: &'b [DirBlock],
    nblocks: u32,
    idx: Index,
    problems: Vec<Finding>,
}

/// Checks the index of directory `ino` whose blocks are `blocks` (sorted by
/// logical block). The index is `None` when the root is unusable
/// (reported): pass 2 then reads the directory as linear, as e2fsck does
/// after clearing the index. The flag says a problem was found whose
/// repair is to drop the index ([`clear_index`]).
pub fn check(ctx: &mut Ctx, ino: u32, csum_seed: u32, blocks: &[DirBlock]) -> (Option<Index>, bool) {
    match check_index(ctx, ino, csum_seed, blocks) {
        Ok((idx, problems)) => {
            let mut bad = false;
            for f in problems {
                bad |= ctx.fix(f);
            }
            (Some(idx), bad)
        }
        Err(Some(f)) => (None, ctx.fix(f)),
        Err(None) => (None, false),
    }
}

/// The walk of [`check`]: the index and its problems, or the problem that
/// makes the root unusable (`None` when the directory has no block 0 or an
/// unknown hash, which pass 2 reports otherwise).
fn check_index(
    ctx: &Ctx,
    ino: u32,
    csum_seed: u32,
    blocks: &[DirBlock],
) -> Result<(Index, Vec<Finding>), Option<Finding>> {
    let f = ctx.fs.geo.features;
    let params = DxParams {
        block_size: ctx.fs.geo.block_size,
        metadata_csum: f.metadata_csum(),
        large_dir: f.incompat.contains(IncompatFeatures::LARGEDIR),
    };
    let root_blk = blocks.first().filter(|b| b.lblk == 0).ok_or(None)?;
    let buf = ctx.fs.read_block(root_blk.pblk).map_err(|_| None)?;
    let root = DxRoot::parse(&buf, &params).map_err(|e| {
        Some(
            Finding::new(
                root_code(e.field),
                format!("htree root is invalid: {e}"),
                "clear the index",
            )
            .ino(ino)
            .blk(root_blk.pblk),
        )
    })?;
    let version = HashVersion::effective(root.header.info.hash_version, ctx.fs.sb.s_flags.get()).ok_or(None)?;
    siphash_matches(ctx, ino, version).map_err(|f| Some(f.blk(root_blk.pblk)))?;
    let seed_bytes: Vec<u8> = ctx
        .fs
        .sb
        .s_hash_seed
        .iter()
        .flat_map(|w| w.get().to_le_bytes())
        .collect();
    let seed = seed_from_bytes(seed_bytes.as_slice().try_into().unwrap_or(&[0; 16]));
    let mut w = Walk {
        fs: &ctx.fs,
        ino,
        seed: csum_seed,
        params,
        blocks,
        nblocks: blocks.last().map_or(0, |b| b.lblk + 1),
        idx: Index {
            nodes: HashSet::from([0]),
            ranges: HashMap::new(),
            version,
            seed,
        },
        problems: Vec::new(),
    };
    if params.metadata_csum && verify_dx_checksum(&buf, params.block_size, csum_seed).is_err() {
        w.problems.push(
            Finding::new(
                p::P2_HTREE_ROOT_CSUM_INVALID,
                "htree root checksum does not match",
                "rebuild the index",
            )
            .ino(ino)
            .blk(root_blk.pblk),
        );
    }
    let levels = root.indirect_levels();
    // A name's hash has bit 0 clear: the last leaf ends at 0xfffffffe (e2fsck's).
    w.entries(&root.entries, levels, 0, 0xffff_fffe);
    w.unreferenced();
    Ok((w.idx, w.problems))
}

/// A directory whose entries store their hashes (casefolded and
/// encrypted, by its flags as in e2fsck's `ext4_hash_in_dirent`) is
/// indexed by SipHash (6), and only such a directory is: any other
/// pairing makes the index unusable.
fn siphash_matches(ctx: &Ctx, ino: u32, version: HashVersion) -> Result<(), Finding> {
    let fl = ctx.fs.inode_record(ino).map_or(0, |r| decode(&r).i_flags.get());
    let stored = fl & flags::ENCRYPT != 0 && fl & flags::CASEFOLD != 0;
    let sip = version == HashVersion::SipHash;
    let (code, msg) = match (stored, sip) {
        (true, false) => (
            p::P1_HTREE_NEEDS_SIPHASH,
            format!(
                "htree uses hash version {}, but a casefolded, encrypted directory needs SipHash (6)",
                version.code()
            ),
        ),
        (false, true) => (
            p::P1_HTREE_CANNOT_SIPHASH,
            "htree uses SipHash, but only a casefolded, encrypted directory may".to_string(),
        ),
        _ => return Ok(()),
    };
    Err(Finding::new(code, msg, "clear the index").ino(ino))
}

/// Drops the index of directory `ino` (e2fsck's `clear_htree`): INDEX_FL
/// and the itree's ITREE_FL (whose link lives in the root) come off the
/// inode, and the index blocks become what a linear directory holds — the
/// root keeps `.` and `..` with the rest of the block free, interior nodes
/// become empty blocks — with dirent checksum tails under metadata_csum.
/// Pass 3A ([`crate::rehash`]) then indexes it again, as e2fsck's does,
/// when the file system has dir_index; until then, or if that fails, the
/// directory is linear and complete.
pub fn clear_index(ctx: &mut Ctx, ino: u32, seed: u32, blocks: &[DirBlock], index: Option<&Index>) {
    let Ok(mut rec) = ctx.fs.inode_record(ino) else {
        return ctx.not_fixed("cannot read the directory inode");
    };
    let fl = u32::from_le_bytes([rec[0x20], rec[0x21], rec[0x22], rec[0x23]]);
    let fl = fl & !(INDEX | ext4kit_format::itree::ITREE_FL);
    rec[0x20..0x24].copy_from_slice(&fl.to_le_bytes());
    if let Err(e) = ctx.fs.write_inode_record(ino, &mut rec) {
        return ctx.not_fixed(format!("writing inode {ino}: {e}"));
    }
    if let Some(d) = ctx.dirs.get_mut(&ino) {
        d.htree = false;
        d.itree = false;
    }
    let mc = ctx.fs.geo.features.metadata_csum();
    let bs = ctx.fs.bs();
    for b in blocks {
        let node = b.lblk == 0 || index.is_some_and(|x| x.nodes.contains(&b.lblk));
        let Ok(old) = ctx
            .fs
            .read_block(b.pblk)
            .map_err(|_| ())
            .and_then(|o| if node { Ok(o) } else { Err(()) })
        else {
            continue;
        };
        let mut new = crate::dir_block::empty_block(bs, mc, seed);
        if b.lblk == 0 {
            linear_root(&mut new, &old, ino, mc, seed);
        }
        if let Err(e) = ctx.fs.write_block(b.pblk, &new) {
            return ctx.not_fixed(format!("writing directory block {}: {e}", b.lblk));
        }
    }
    if ctx.fs.geo.features.compat.contains(CompatFeatures::DIR_INDEX) {
        ctx.rehash.dirs.insert(ino);
    }
}

/// Block 0 of a directory whose index was dropped: `.`, and `..` as the
/// old root had it, over the whole block.
fn linear_root(new: &mut [u8], old: &[u8], ino: u32, mc: bool, seed: u32) {
    let bs = new.len();
    let end = if mc {
        bs - ext4kit_format::dir_entry::TAIL_SIZE
    } else {
        bs
    };
    let mut d = crate::dir_block::DirBuf {
        buf: new.to_vec(),
        dirty: false,
        filetype: true,
    };
    let ft = old.get(7).copied().unwrap_or(2);
    let parent = u32::from_le_bytes([old[12], old[13], old[14], old[15]]);
    d.put(0, ino, 12, ft, b".");
    d.put(12, parent, end - 12, ft, b"..");
    if mc {
        ext4kit_format::dir_entry::set_block_checksum(&mut d.buf, seed);
    }
    new.copy_from_slice(&d.buf);
}

impl Walk<'_, '_> {
    fn add(&mut self, code: Code, msg: String) {
        if self.problems.len() < 64 {
            self.problems
                .push(Finding::new(code, msg, "rebuild the index").ino(self.ino));
        }
    }

    fn pblk(&self, lblk: u32) -> Option<u64> {
        let i = self.blocks.binary_search_by_key(&lblk, |b| b.lblk).ok()?;
        Some(self.blocks[i].pblk)
    }

    /// Entries of one node covering hashes `[lo, hi]`; `levels` index levels remain below.
    fn entries(&mut self, entries: &[DxEntry], levels: u8, lo: u32, hi: u32) {
        for (i, e) in entries.iter().enumerate() {
            let start = if i == 0 { lo } else { e.hash & !1 };
            if i > 0 && e.hash < entries[i - 1].hash.max(if i == 1 { 0 } else { 1 }) {
                self.add(
                    p::P2_HTREE_HASH_ORDER,
                    format!("htree node has out-of-order hashes at entry {i}"),
                );
            }
            let end = entries.get(i + 1).map_or(hi, |n| (n.hash & !1).max(start));
            if e.block >= self.nblocks || e.block == 0 {
                self.add(
                    p::P2_HTREE_BADBLK,
                    format!("htree entry points at logical block {}", e.block),
                );
                continue;
            }
            if levels == 0 {
                if self.idx.ranges.insert(e.block, (start, end)).is_some() || self.idx.nodes.contains(&e.block) {
                    self.add(
                        p::P2_HTREE_DUPREF,
                        format!("htree block {} is referenced twice", e.block),
                    );
                }
            } else {
                self.node(e.block, levels - 1, start, end);
            }
        }
    }

    fn node(&mut self, lblk: u32, levels: u8, lo: u32, hi: u32) {
        if !self.idx.nodes.insert(lblk) || self.idx.ranges.contains_key(&lblk) {
            self.add(p::P2_HTREE_DUPREF, format!("htree node {lblk} is referenced twice"));
            return;
        }
        let Some(pblk) = self.pblk(lblk) else {
            self.add(p::P2_HTREE_BADBLK, format!("htree node {lblk} is a hole"));
            return;
        };
        let buf = match self.fs.read_block(pblk) {
            Ok(b) => b,
            Err(e) => {
                self.add(p::P2_HTREE_BADBLK, format!("cannot read htree node {lblk}: {e}"));
                return;
            }
        };
        let node = match DxNode::parse(&buf, &self.params) {
            Ok(n) => n,
            Err(e) => {
                let code = match e.field {
                    "limit" | "dx_countlimit.limit" => p::P2_HTREE_BAD_LIMIT,
                    "count" | "dx_countlimit.count" => p::P2_HTREE_BAD_COUNT,
                    _ => p::P2_HTREE_BADBLK,
                };
                self.add(code, format!("htree node {lblk} is invalid: {e}"));
                return;
            }
        };
        if self.params.metadata_csum && verify_dx_checksum(&buf, self.params.block_size, self.seed).is_err() {
            self.add(
                p::P2_HTREE_NODE_CSUM_INVALID,
                format!("htree node {lblk} checksum does not match"),
            );
        }
        self.entries(&node.entries, levels, lo, hi);
    }

    /// Every directory block other than index nodes must be a referenced leaf.
    fn unreferenced(&mut self) {
        let missing: Vec<u32> = self
            .blocks
            .iter()
            .map(|b| b.lblk)
            .filter(|l| !self.idx.nodes.contains(l) && !self.idx.ranges.contains_key(l))
            .take(16)
            .collect();
        for l in missing {
            self.add(p::P2_HTREE_NOTREF, format!("htree block {l} is not referenced"));
        }
    }
}
