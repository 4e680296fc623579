//! Pass 2: directory structure (`directory.rst`). Every directory block:
//! record lengths, name lengths, inode numbers in range and in use, file
//! types matching the inode, names without '/' or NUL, `.` and `..` first,
//! checksum tails; hash-indexed directories through [`crate::htree`];
//! inline directories from the inode. Counts references for pass 4 and
//! records each directory's parent and `..` for pass 3.

use std::collections::{HashMap, HashSet};

use ext4kit_format::dir_entry::{TAIL_SIZE, has_tail, rec_len_for, rec_len_hashed, verify_block_checksum};
use ext4kit_format::features::IncompatFeatures;

use crate::Progress;
use crate::dir_block::DirBuf;
use crate::dirent;
use crate::htree::{self, Index};
use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::{Ctx, DirBlock, DirInfo};

/// Runs pass 2, its blocks and pass 5's bitmaps read ahead in a check
/// ([`crate::readahead`]).
pub fn run(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    crate::readahead::during_pass2(ctx, |ctx| check_dirs(ctx, progress));
}

fn check_dirs(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    let blocks = std::mem::take(&mut ctx.dblocks);
    ctx.bad_itable = crate::bad_blocks::itable_blocks(ctx);
    let bad = ctx.bad_itable.clone();
    crate::bad_blocks::reserve_inodes(ctx, &bad);
    let dirs: Vec<(u32, DirInfo)> = ctx.dirs.iter().map(|(&i, d)| (i, d.clone())).collect();
    let total = dirs.len() as u64;
    for (n, (ino, info)) in dirs.into_iter().enumerate() {
        if ctx.cancelled() {
            break;
        }
        if n % 256 == 0 {
            progress(Progress {
                pass: 2,
                done: n as u64,
                total,
            });
        }
        if info.inline {
            crate::inline_dir::check(ctx, ino);
            continue;
        }
        let a = blocks.partition_point(|b| b.ino < ino);
        let z = blocks.partition_point(|b| b.ino <= ino);
        check_dir(ctx, ino, &info, &blocks[a..z]);
    }
    ctx.dblocks = blocks;
    crate::sb_fields::large_files(ctx);
}

fn check_dir(ctx: &mut Ctx, ino: u32, info: &DirInfo, blocks: &[DirBlock]) {
    if holes(ctx, ino, info.csum_seed, blocks) {
        made_block0(ctx, ino);
    } else if blocks.first().is_some_and(|b| b.lblk != 0) {
        ctx.add(
            Finding::new(
                p::P2_MISSING_DOT,
                "directory has no block 0 (no '.')",
                "rebuild the directory",
            )
            .ino(ino),
        );
    }
    let (index, index_bad) = if info.htree {
        htree::check(ctx, ino, info.csum_seed, blocks)
    } else {
        (None, false)
    };
    let mut dir = Dir {
        ino,
        seed: info.csum_seed,
        keys: (info.itree && index.is_some()).then(Vec::new),
        names: HashMap::new(),
        clear_index: index_bad,
        index,
        hash_bad: HashSet::new(),
        encrypted: None,
        policy: None,
        casefold: None,
    };
    let mut root = None;
    let mut last = None;
    for b in blocks {
        if ctx.cancelled() || last == Some(b.lblk) {
            continue;
        }
        last = Some(b.lblk);
        let buf = match ctx.fs.read_block(b.pblk) {
            Ok(x) => x,
            Err(e) => {
                ctx.add(
                    Finding::new(
                        p::P2_READ_DIRBLOCK,
                        format!("cannot read directory block {}: {e}", b.lblk),
                        "clear the block",
                    )
                    .ino(ino)
                    .blk(b.pblk),
                );
                continue;
            }
        };
        let is_node = dir.index.as_ref().is_some_and(|x| x.nodes.contains(&b.lblk));
        let buf = leaf(ctx, &mut dir, *b, buf, is_node);
        if b.lblk == 0 {
            root = Some(buf);
        }
    }
    if dir.clear_index && info.htree && ctx.repairing() {
        htree::clear_index(ctx, ino, dir.seed, blocks, dir.index.as_ref());
        return;
    }
    if let (Some(keys), Some(root)) = (dir.keys, root) {
        crate::itree::check(ctx, ino, info.csum_seed, &root, keys);
    }
}

/// Logical blocks missing between the directory's blocks (at most 64 a
/// run), and block 0 of a directory that maps no data block at all; each
/// is filled with a new directory block when repairing. True when block 0
/// was made (with `.` and `..`).
fn holes(ctx: &mut Ctx, ino: u32, seed: u32, blocks: &[DirBlock]) -> bool {
    let (mut expect, mut found, mut goal) = (0u32, 0, 0u64);
    let end = blocks.last().map_or(1, |b| b.lblk);
    let mut made0 = false;
    let mut next = blocks.iter().map(|b| (b.lblk, b.pblk)).peekable();
    while expect < end && found < 64 {
        while let Some(&(l, p)) = next.peek()
            && l <= expect
        {
            goal = p;
            expect = expect.max(l.saturating_add(1));
            next.next();
        }
        if expect >= end || next.peek().is_some_and(|&(l, _)| l == expect) {
            continue;
        }
        found += 1;
        let what = if expect == 0 {
            "an unallocated block 0".to_string()
        } else {
            format!("a hole at logical block {expect}")
        };
        let f = Finding::new(
            p::P2_DIRECTORY_HOLE,
            format!("directory has {what}"),
            "allocate the block",
        );
        if !ctx.fix(f.ino(ino)) || !crate::dir_hole::fill(ctx, ino, seed, expect, goal + 1) {
            return made0;
        }
        made0 |= expect == 0;
        expect += 1;
    }
    made0
}

/// Block 0 was just made: its `.` and `..` (naming the root until pass 3
/// finds the parent) count as references.
fn made_block0(ctx: &mut Ctx, ino: u32) {
    dirent::bump(ctx, ino);
    dirent::bump(ctx, crate::lost_found::ROOT);
    if let Some(d) = ctx.dirs.get_mut(&ino) {
        d.dotdot = crate::lost_found::ROOT;
    }
}

/// What pass 2 keeps over one directory: its htree index when valid, the
/// (inode, hash) keys of its names when it has an itree to compare
/// against, a 64-bit hash of every name seen with the inode it names (to
/// find names that repeat across blocks: 12 bytes per name; a false match
/// needs a 64-bit collision), and whether a repair must drop the index.
pub struct Dir {
    pub(crate) ino: u32,
    pub(crate) seed: u32,
    pub(crate) index: Option<Index>,
    pub(crate) keys: Option<Vec<u64>>,
    pub(crate) names: HashMap<u64, u32>,
    pub(crate) clear_index: bool,
    /// Leaves already reported for a name outside their hash range.
    pub(crate) hash_bad: HashSet<u32>,
    /// ENCRYPT_FL (read when first needed): names are ciphertext, not
    /// checked for '/' or renamed.
    pub(crate) encrypted: Option<bool>,
    /// The directory's encryption policy (read when first needed).
    pub(crate) policy: Option<crate::encryption::Policy>,
    /// CASEFOLD_FL on a casefold file system (read when first needed):
    /// names must be valid UTF-8.
    pub(crate) casefold: Option<bool>,
}

impl Dir {
    /// True when the directory's names are case-folded UTF-8 (`i_flags`
    /// CASEFOLD_FL with the casefold feature).
    pub(crate) fn casefolded(&mut self, ctx: &Ctx) -> bool {
        let ino = self.ino;
        let feature = ctx.fs.geo.features.incompat.contains(IncompatFeatures::CASEFOLD);
        *self.casefold.get_or_insert_with(|| {
            feature
                && ctx
                    .fs
                    .inode_record(ino)
                    .is_ok_and(|r| decode(&r).i_flags.get() & ext4kit_format::inode::flags::CASEFOLD != 0)
        })
    }

    /// True when names are checked as encoded text (e2fsck's `cf_dir`):
    /// a casefolded directory on a file system in strict mode
    /// (`s_encoding_flags` EXT4_ENC_STRICT_MODE_FL) or with `-E
    /// check_encoding`. Then a name must be valid UTF-8 and two names that
    /// fold alike are duplicates; otherwise e2fsck checks names byte for
    /// byte, as in any directory.
    pub(crate) fn checks_encoding(&mut self, ctx: &Ctx) -> bool {
        let strict = ctx.fs.sb.s_encoding_flags.get() & ext4kit_format::casefold::ENCODING_FLAG_STRICT != 0;
        (strict || ctx.check_encoding) && self.casefolded(ctx)
    }

    /// The form of `name` duplicates are found by: folded where
    /// [`Dir::checks_encoding`], else the bytes.
    pub(crate) fn name_key(&mut self, ctx: &Ctx, name: &[u8]) -> Vec<u8> {
        let folded = self.checks_encoding(ctx).then(|| ext4kit_format::casefold::fold(name));
        folded.flatten().unwrap_or_else(|| name.to_vec())
    }

    /// True when each entry stores its name's hash after the name
    /// (`ext4_dir_entry_hash`, e2fsck's `hash_in_dirent`): a casefolded
    /// directory with an encryption policy. Its htree (hash version 6,
    /// SipHash of the folded plaintext) is checked with those stored
    /// hashes, since the key is not at hand.
    pub(crate) fn hash_in_dirent(&mut self, ctx: &Ctx) -> bool {
        self.casefolded(ctx) && crate::encryption::dir_policy(ctx, self).is_some()
    }

    /// True when the directory's names are encrypted (`i_flags` ENCRYPT_FL).
    pub(crate) fn encrypted(&mut self, ctx: &Ctx) -> bool {
        let ino = self.ino;
        *self.encrypted.get_or_insert_with(|| {
            ctx.fs
                .inode_record(ino)
                .is_ok_and(|r| decode(&r).i_flags.get() & ext4kit_format::inode::flags::ENCRYPT != 0)
        })
    }
}

pub(crate) fn name_hash(name: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// One directory block: its checksum tail, then every record, repaired
/// where a finding allows; the block is written back if a repair changed
/// it. Returns the block as it now is.
fn leaf(ctx: &mut Ctx, dir: &mut Dir, b: DirBlock, buf: Vec<u8>, is_node: bool) -> Vec<u8> {
    let mc = ctx.fs.geo.features.metadata_csum();
    let filetype = ctx.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE);
    let mut d = DirBuf {
        buf,
        dirty: false,
        filetype,
    };
    let leaf_csum = mc && !is_node;
    let tail = leaf_csum && has_tail(&d.buf);
    let failed = tail && verify_block_checksum(&d.buf, dir.seed).is_err();
    let mut want_tail = false;
    if leaf_csum && !tail {
        want_tail = ctx.fix(
            Finding::new(
                p::P2_LEAF_NODE_MISSING_CSUM,
                format!("directory block {} has no checksum tail", b.lblk),
                "make room for it",
            )
            .ino(b.ino)
            .blk(b.pblk),
        );
    }
    let end = if tail { d.bs() - TAIL_SIZE } else { d.bs() };
    records(ctx, dir, b, &mut d, end, 0);
    if (want_tail || (d.dirty && leaf_csum)) && !has_tail(&d.buf) {
        let room = d.insert_tail(dir.seed);
        if want_tail && !room {
            ctx.not_fixed("no room for the tail in the block");
        }
    }
    if !d.dirty && failed {
        d.dirty = ctx.fix(
            Finding::new(
                p::P2_LEAF_NODE_ONLY_CSUM_INVALID,
                format!("directory block {} checksum does not match", b.lblk),
                "recompute it",
            )
            .ino(b.ino)
            .blk(b.pblk),
        );
    }
    if d.dirty {
        let out = d.sealed(mc, is_node, dir.seed).to_vec();
        if let Err(e) = ctx.fs.write_block(b.pblk, &out) {
            ctx.not_fixed(format!("writing directory block {}: {e}", b.lblk));
        }
        return out;
    }
    d.buf
}

/// The records of a block up to `end`, the first counted as the
/// `first_idx`-th of the block (2 for an inline directory, whose `.` and
/// `..` are implicit); a broken chain is salvaged (P2_DIR_CORRUPTED) when
/// the run repairs, else checking stops there.
pub(crate) fn records(ctx: &mut Ctx, dir: &mut Dir, b: DirBlock, d: &mut DirBuf, end: usize, first_idx: usize) {
    let mut here: HashMap<Vec<u8>, u32> = HashMap::new();
    let (mut pos, mut idx, mut prev) = (0usize, first_idx, None);
    let mut salvages = 0;
    let hashed_dir = dir.hash_in_dirent(ctx);
    while pos < end {
        // Past `.` and `..`, a record of a casefolded, encrypted directory
        // holds its name and then its stored hash (e2fsck's `extended`).
        let hashed = hashed_dir && !(b.lblk == 0 && idx < 2);
        let e = d.ent(pos, end).filter(|e| {
            e.rec_len >= rec_len_hashed(1, hashed)
                && e.rec_len.is_multiple_of(4)
                && pos + e.rec_len <= end
                && rec_len_hashed(e.name_len, hashed) <= e.rec_len
        });
        let Some(e) = e else {
            let why = d.ent(pos, end).map_or("truncated entry".into(), |e| {
                let hash = if hashed && rec_len_for(e.name_len) <= e.rec_len {
                    " (no room for the stored name hash)"
                } else {
                    ""
                };
                format!("rec_len {}, name_len {}{hash}", e.rec_len, e.name_len)
            });
            let f = Finding::new(
                p::P2_DIR_CORRUPTED,
                format!("directory block {} is corrupt at offset {pos}: {why}", b.lblk),
                "salvage the block",
            );
            if salvages > d.bs() / 4 || !ctx.fix(f.ino(b.ino).blk(b.pblk)) {
                break;
            }
            salvages += 1;
            pos = d.salvage(pos, prev, end, ctx.fs.geo.inodes_count, hashed);
            continue;
        };
        dirent::check(ctx, dir, b, d, e, idx, &mut here);
        prev = Some(pos);
        pos += d.ent(pos, end).map_or(e.rec_len, |e| e.rec_len.max(12));
        idx += 1;
    }
}
