//! Pass 2: directory structure (`directory.rst`). Every directory block:
//! record lengths, name lengths, inode numbers in range and in use, file
//! types matching the inode, names without '/' or NUL, `.` and `..` first,
//! checksum tails; hash-indexed directories through [`crate::htree`];
//! inline directories from the inode. Counts references for pass 4 and
//! records each directory's parent and `..` for pass 3.

use std::collections::HashSet;

use ext4kit_format::dir_entry::{has_tail, rec_len_from_disk, verify_block_checksum};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::BG_INODE_UNINIT;
use ext4kit_format::hash::dx_hash;
use ext4kit_format::inline::InlineDir;

use crate::Progress;
use crate::htree::{self, Index};
use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::{Ctx, DirBlock, DirInfo, KIND_BAD};

/// Runs pass 2.
pub fn run(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    let blocks = std::mem::take(&mut ctx.dblocks);
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
            inline_dir(ctx, ino);
            continue;
        }
        let a = blocks.partition_point(|b| b.ino < ino);
        let z = blocks.partition_point(|b| b.ino <= ino);
        check_dir(ctx, ino, &info, &blocks[a..z]);
    }
    ctx.dblocks = blocks;
}

fn check_dir(ctx: &mut Ctx, ino: u32, info: &DirInfo, blocks: &[DirBlock]) {
    let mut expect = 0u32;
    for b in blocks {
        if b.lblk > expect {
            ctx.add(
                Finding::new(
                    p::P2_DIRECTORY_HOLE,
                    format!("directory has a hole at logical block {expect}"),
                    "allocate the block",
                )
                .ino(ino),
            );
            break;
        }
        expect = expect.max(b.lblk.saturating_add(1));
    }
    if blocks.first().is_some_and(|b| b.lblk != 0) {
        ctx.add(
            Finding::new(
                p::P2_MISSING_DOT,
                "directory has no block 0 (no '.')",
                "rebuild the directory",
            )
            .ino(ino),
        );
    }
    let index = if info.htree {
        htree::check(ctx, ino, info.csum_seed, blocks)
    } else {
        None
    };
    let mut col = Collect {
        keys: (info.itree && index.is_some()).then(Vec::new),
        names: HashSet::new(),
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
        let is_node = index.as_ref().is_some_and(|x| x.nodes.contains(&b.lblk));
        leaf(ctx, info.csum_seed, *b, &buf, is_node, index.as_ref(), &mut col);
        if b.lblk == 0 {
            root = Some(buf);
        }
    }
    if let (Some(keys), Some(root)) = (col.keys, root) {
        crate::itree::check(ctx, ino, info.csum_seed, &root, keys);
    }
}

/// One directory block.
/// What pass 2 gathers over a whole directory: the (inode, hash) keys of
/// its names when it has an itree to compare against, and a 64-bit hash of
/// every name seen, to find names that repeat across blocks (8 bytes per
/// name; a false match needs a 64-bit collision).
struct Collect {
    keys: Option<Vec<u64>>,
    names: HashSet<u64>,
}

fn name_hash(name: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// `col` collects the (inode, hash) key of every live name when the
/// directory has an itree to compare against.
fn leaf(ctx: &mut Ctx, seed: u32, b: DirBlock, buf: &[u8], is_node: bool, index: Option<&Index>, col: &mut Collect) {
    let mut end = buf.len();
    if ctx.fs.geo.features.metadata_csum() && !is_node {
        if has_tail(buf) {
            end -= 12;
            if verify_block_checksum(buf, seed).is_err() {
                ctx.add(
                    Finding::new(
                        p::P2_LEAF_NODE_ONLY_CSUM_INVALID,
                        format!("directory block {} checksum does not match", b.lblk),
                        "recompute it",
                    )
                    .ino(b.ino)
                    .blk(b.pblk),
                );
            }
        } else {
            ctx.add(
                Finding::new(
                    p::P2_LEAF_NODE_MISSING_CSUM,
                    format!("directory block {} has no checksum tail", b.lblk),
                    "make room for it",
                )
                .ino(b.ino)
                .blk(b.pblk),
            );
        }
    }
    let filetype = ctx.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE);
    let range = index.and_then(|x| x.ranges.get(&b.lblk).map(|r| (x, *r)));
    let mut hash_bad = false;
    let mut names: HashSet<&[u8]> = HashSet::new();
    let (mut pos, mut idx) = (0usize, 0usize);
    while pos < end {
        let corrupt = |ctx: &mut Ctx, why: String| {
            ctx.add(
                Finding::new(
                    p::P2_DIR_CORRUPTED,
                    format!("directory block {} is corrupt at offset {pos}: {why}", b.lblk),
                    "salvage the block",
                )
                .ino(b.ino)
                .blk(b.pblk),
            )
        };
        if pos + 8 > end {
            corrupt(ctx, "truncated entry".into());
            break;
        }
        let inode = u32::from_le_bytes([buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]]);
        let rec_len = rec_len_from_disk(u16::from_le_bytes([buf[pos + 4], buf[pos + 5]]), ctx.fs.bs());
        let (mut name_len, mut ft) = (usize::from(buf[pos + 6]), buf[pos + 7]);
        if !filetype {
            name_len |= usize::from(ft) << 8;
            ft = 0;
        }
        if rec_len < 12 || !rec_len.is_multiple_of(4) || pos + rec_len > end || name_len + 8 > rec_len {
            corrupt(ctx, format!("rec_len {rec_len}, name_len {name_len}"));
            break;
        }
        let name = &buf[pos + 8..pos + 8 + name_len];
        if inode != 0 && !name.is_empty() && !names.insert(name) {
            let msg = format!(
                "duplicate entry '{}' in directory block {}",
                String::from_utf8_lossy(name),
                b.lblk
            );
            ctx.add(Finding::new(p::P2_DUPLICATE_DIRENT, msg, "clear it").ino(b.ino));
        } else if inode != 0 && !name.is_empty() && name != b"." && name != b".." && !col.names.insert(name_hash(name))
        {
            let msg = format!(
                "name '{}' appears more than once in the directory",
                String::from_utf8_lossy(name)
            );
            ctx.add(Finding::new(p::P2_NON_UNIQUE_FILE, msg, "rename it").ino(b.ino));
        }
        if let Some((x, (lo, hi))) = range
            && inode != 0
            && !hash_bad
            && let Ok(h) = dx_hash(name, x.version, &x.seed)
            && (h.major < lo || h.major > hi)
        {
            hash_bad = true;
            let code = if h.major < lo {
                p::P2_HTREE_MIN_HASH
            } else {
                p::P2_HTREE_MAX_HASH
            };
            ctx.add(
                Finding::new(
                    code,
                    format!("htree leaf {} holds a name whose hash is outside its range", b.lblk),
                    "rebuild the index",
                )
                .ino(b.ino),
            );
        }
        if let (Some(k), Some(x)) = (col.keys.as_mut(), index)
            && inode != 0
            && name != b"."
            && name != b".."
            && let Ok(h) = dx_hash(name, x.version, &x.seed)
        {
            k.push(ext4kit_format::itree::key(inode, h.major));
        }
        if b.lblk == 0 && idx < 2 && name_len == idx + 1 && rec_len > 8 + name_len && buf[pos + 8 + name_len] != 0 {
            let (code, what) = if idx == 0 {
                (p::P2_DOT_NULL_TERM, "'.'")
            } else {
                (p::P2_DOT_DOT_NULL_TERM, "'..'")
            };
            ctx.add(Finding::new(code, format!("{what} entry is not NUL terminated"), "terminate it").ino(b.ino));
        }
        entry(ctx, b.ino, b.lblk == 0, idx, inode, name, ft);
        pos += rec_len;
        idx += 1;
    }
}

/// One entry; `first_block` with `idx` 0 and 1 must be `.` and `..`.
fn entry(ctx: &mut Ctx, dir: u32, first_block: bool, idx: usize, inode: u32, name: &[u8], ft: u8) {
    let f = |c, m: String| Finding::new(c, m, "fix the entry").ino(dir);
    if first_block && idx == 0 {
        if inode == 0 {
            ctx.add(f(p::P2_MISSING_DOT, "missing '.'".into()));
        } else if name != b"." {
            ctx.add(f(p::P2_1ST_NOT_DOT, "first entry is not '.'".into()));
        } else if inode != dir {
            ctx.add(f(p::P2_BAD_INODE_DOT, format!("'.' points at inode {inode}")));
        } else {
            check_type(ctx, dir, dir, ft);
        }
        bump(ctx, dir);
        return;
    }
    if first_block && idx == 1 {
        if inode == 0 {
            ctx.add(f(p::P2_MISSING_DOT_DOT, "missing '..'".into()));
        } else if name != b".." {
            ctx.add(f(p::P2_2ND_NOT_DOT_DOT, "second entry is not '..'".into()));
        } else {
            if let Some(d) = ctx.dirs.get_mut(&dir) {
                d.dotdot = inode;
            }
            if ctx.in_use(inode) {
                check_type(ctx, dir, inode, ft);
                bump(ctx, inode);
            } else if inode <= ctx.fs.geo.inodes_count {
                ctx.add(f(p::P2_UNUSED_INODE, format!("'..' has deleted/unused inode {inode}")));
            } else {
                ctx.add(f(p::P2_BAD_INO, format!("'..' has bad inode number {inode}")));
            }
        }
        return;
    }
    if inode == 0 {
        return;
    }
    if name == b"." {
        ctx.add(f(p::P2_DUP_DOT, "duplicate '.' entry".into()));
        return;
    }
    if name == b".." {
        ctx.add(f(p::P2_DUP_DOT_DOT, "duplicate '..' entry".into()));
        return;
    }
    if !target_ok(ctx, dir, inode, name) {
        return;
    }
    check_type(ctx, dir, inode, ft);
    if ctx.is_dir(inode) {
        let d = ctx.dirs.get_mut(&inode);
        match d {
            Some(d) if d.parent != 0 => {
                ctx.add(f(
                    p::P2_LINK_DIR,
                    format!(
                        "entry '{}' is a second link to directory {inode}",
                        String::from_utf8_lossy(name)
                    ),
                ));
                return;
            }
            Some(d) => d.parent = dir,
            None => {}
        }
    }
    if dir == 2 && name == b"lost+found" {
        ctx.lost_found = Some(inode);
    }
    bump(ctx, inode);
}

fn bump(ctx: &mut Ctx, ino: u32) {
    if let Some(r) = ctx.refs.get_mut(ino as usize) {
        *r = r.saturating_add(1);
    }
}

/// Inode number, name and target state; false when the entry must be skipped.
fn target_ok(ctx: &mut Ctx, dir: u32, inode: u32, name: &[u8]) -> bool {
    let show = String::from_utf8_lossy(name).into_owned();
    let f = |c, m: String| Finding::new(c, m, "clear the entry").ino(dir);
    let geo = &ctx.fs.geo;
    if name.is_empty() {
        ctx.add(f(p::P2_NULL_NAME, "entry has a zero-length name".into()));
        return false;
    }
    if (inode != 2 && inode < geo.first_ino) || inode > geo.inodes_count {
        ctx.add(f(p::P2_BAD_INO, format!("entry '{show}' has bad inode number {inode}")));
        return false;
    }
    let (g, idx) = geo.inode_location(inode).unwrap_or((0, 0));
    let gd = ctx.fs.groups[g as usize];
    if geo.features.has_group_csum() && gd.flags() & BG_INODE_UNINIT != 0 {
        ctx.add(f(
            p::P2_INOREF_BG_INO_UNINIT,
            format!("entry '{show}' references inode {inode} in an uninitialized group"),
        ));
        return false;
    }
    if idx >= ctx.scanned[g as usize] {
        ctx.add(f(
            p::P2_INOREF_IN_UNUSED,
            format!("entry '{show}' references inode {inode} in the unused area of its group"),
        ));
        return false;
    }
    if !ctx.in_use(inode) {
        ctx.add(f(
            p::P2_UNUSED_INODE,
            format!("entry '{show}' has deleted/unused inode {inode}"),
        ));
        return false;
    }
    if name.iter().any(|&c| c == b'/' || c == 0) {
        ctx.add(f(
            p::P2_BAD_NAME,
            format!("entry '{show}' has illegal characters in its name"),
        ));
    }
    if inode == dir {
        ctx.add(f(p::P2_LINK_DOT, format!("entry '{show}' is a link to '.'")));
        return false;
    }
    if inode == 2 {
        ctx.add(f(
            p::P2_LINK_ROOT,
            format!("entry '{show}' is a link to the root directory"),
        ));
        return false;
    }
    if ctx.kind[inode as usize] == KIND_BAD {
        let msg = format!("inode {inode} ('{show}') has an invalid mode");
        ctx.add(Finding::new(p::P2_BAD_MODE, msg, "clear the inode").ino(inode));
        return false;
    }
    true
}

/// The entry's file type against the inode's.
fn check_type(ctx: &mut Ctx, dir: u32, inode: u32, ft: u8) {
    let want = ctx.kind[inode as usize];
    let filetype = ctx.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE);
    // The Hurd has no dirent file types; e2fsck does not check them there.
    if ctx.fs.sb.s_creator_os.get() == 1 {
        return;
    }
    let f = |c, m: String| Finding::new(c, m, "set the file type").ino(dir);
    if !filetype {
        if ft != 0 {
            ctx.add(f(
                p::P2_CLEAR_FILETYPE,
                format!("entry for inode {inode} has a file type without the filetype feature"),
            ));
        }
    } else if ft == 0 {
        ctx.add(f(
            p::P2_SET_FILETYPE,
            format!("entry for inode {inode} has no file type"),
        ));
    } else if ft != want {
        ctx.add(f(
            p::P2_BAD_FILETYPE,
            format!("entry for inode {inode} has file type {ft}, should be {want}"),
        ));
    }
}

/// A directory stored in the inode (`inline_data`): `..` in the first four
/// bytes of `i_block`, entries after it and in the `system.data` xattr.
fn inline_dir(ctx: &mut Ctx, ino: u32) {
    let Ok(rec) = ctx.fs.inode_record(ino) else { return };
    let raw = decode(&rec);
    let extra = raw.i_extra_isize.get();
    let region = ext4kit_format::xattr::ibody_region(&rec, extra).ok();
    let entries = region
        .and_then(|r| ext4kit_format::xattr::parse_ibody(r).ok())
        .unwrap_or_default();
    let data = ext4kit_format::inline::system_data(&entries).unwrap_or(&[]);
    let Ok(dir) = InlineDir::parse(&raw.i_block, data) else {
        return;
    };
    bump(ctx, ino);
    if let Some(d) = ctx.dirs.get_mut(&ino) {
        d.dotdot = dir.parent;
    }
    if ctx.in_use(dir.parent) {
        bump(ctx, dir.parent);
    }
    let mut found = Vec::new();
    for e in dir.entries() {
        match e {
            Ok(e) => found.push((e.inode, e.name.to_vec(), e.file_type)),
            Err(err) => {
                ctx.add(
                    Finding::new(
                        p::P2_DIR_CORRUPTED,
                        format!("inline directory is corrupt: {err}"),
                        "salvage it",
                    )
                    .ino(ino),
                );
                break;
            }
        }
    }
    for (i, name, ft) in found {
        entry(ctx, ino, false, 2, i, &name, ft);
    }
}
