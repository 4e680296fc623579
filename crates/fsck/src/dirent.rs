//! Pass 2, one directory record (`directory.rst`, `struct
//! ext4_dir_entry_2`): `.` and `..` first in block 0, the inode it names
//! (in range, in use, scanned by pass 1, not `.` or the root, not a second
//! link to a directory), its file type, its name (no `/` or NUL, not a
//! duplicate). Each problem is repaired as e2fsck's `check_dir_block`
//! does: mostly by clearing the record's inode (the record stays, unused),
//! else by fixing the field. References are counted for pass 4 only for
//! records that stay.

use std::collections::HashMap;

use ext4kit_format::dir_entry::rec_len_for;
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::BG_INODE_UNINIT;
use ext4kit_format::hash::{HashVersion, dx_hash};

use crate::dir_block::{DirBuf, Ent, HEADER, mutate_name};
use crate::pass2::Dir;
use crate::problem::{self as p, Code, Finding};
use crate::state::{Ctx, DirBlock, KIND_BAD, KIND_FREE};

/// `EXT4_FT_DIR`.
const FT_DIR: u8 = 2;
const ROOT_INO: u32 = 2;

/// Checks record `e`, the `idx`-th of block `b`; `here` holds the names
/// seen earlier in the same block.
pub fn check(
    ctx: &mut Ctx,
    dir: &mut Dir,
    b: DirBlock,
    d: &mut DirBuf,
    e: Ent,
    idx: usize,
    here: &mut HashMap<Vec<u8>, u32>,
) {
    if b.lblk == 0 && idx == 0 {
        return dot(ctx, dir.ino, d, e);
    }
    if b.lblk == 0 && idx == 1 {
        return dotdot(ctx, dir.ino, d, e);
    }
    if e.inode == 0 {
        return;
    }
    let name = d.name(&e).to_vec();
    if !target(ctx, dir.ino, d, &e, &name) {
        return;
    }
    if let Some(ft) = check_type(ctx, dir.ino, e.inode, e.ft) {
        d.set_ft(e.pos, ft);
    }
    if crate::encryption::check_entry(ctx, dir, d, &e, &name) {
        return;
    }
    let name = fix_name(ctx, dir, d, &e, name);
    let stored = if dir.hash_in_dirent(ctx) {
        d.stored_hash(&e)
    } else {
        None
    };
    hash_range(ctx, dir, b, &e, &name, stored);
    if !link_dir(ctx, dir.ino, d, &e, &name) || !unique(ctx, dir, b, d, &e, name, here) {
        return;
    }
    bump(ctx, e.inode);
}

/// Counts one reference to `ino` for pass 4.
pub fn bump(ctx: &mut Ctx, ino: u32) {
    if let Some(r) = ctx.refs.get_mut(ino as usize) {
        *r = r.saturating_add(1);
    }
}

/// Reports `code` and, when allowed, clears the record (inode 0: the
/// record stays as free space). True when cleared.
pub(crate) fn clear(ctx: &mut Ctx, dir: u32, d: &mut DirBuf, e: &Ent, code: Code, msg: String) -> bool {
    if ctx.fix(Finding::new(code, msg, "clear the entry").ino(dir)) {
        d.set_inode(e.pos, 0);
        return true;
    }
    false
}

/// The first record of block 0 must be `.` naming the directory itself
/// (e2fsck's `check_dot`); a rewritten `.` that is longer than it needs
/// leaves the rest of its record as an empty record.
fn dot(ctx: &mut Ctx, ino: u32, d: &mut DirBuf, e: Ent) {
    let name = d.name(&e);
    let problem = if e.inode == 0 {
        Some((p::P2_MISSING_DOT, "missing '.'"))
    } else if name != b"." {
        Some((p::P2_1ST_NOT_DOT, "first entry is not '.'"))
    } else if d.buf[e.pos + HEADER + 1] != 0 {
        Some((p::P2_DOT_NULL_TERM, "'.' entry is not NUL terminated"))
    } else {
        None
    };
    bump(ctx, ino);
    if let Some((code, msg)) = problem {
        if ctx.fix(Finding::new(code, msg, "fix the entry").ino(ino)) {
            d.put(e.pos, ino, e.rec_len, dir_ft(ctx), b".");
            split_dot(d, e);
        }
        return;
    }
    if e.inode != ino {
        let msg = format!("'.' points at inode {}", e.inode);
        if ctx.fix(Finding::new(p::P2_BAD_INODE_DOT, msg, "fix the entry").ino(ino)) {
            d.set_inode(e.pos, ino);
        }
    } else if let Some(ft) = check_type(ctx, ino, ino, e.ft) {
        d.set_ft(e.pos, ft);
    }
    if e.rec_len > 24 {
        let msg = format!("'.' entry is big ({} bytes)", e.rec_len);
        let f = Finding::new(p::P2_SPLIT_DOT, msg, "split it").ino(ino).warning();
        if ctx.fix(f) {
            split_dot(d, e);
        }
    }
}

/// A `.` record longer than 24 bytes keeps 12; the rest becomes an empty
/// record unless a `..` already starts there.
fn split_dot(d: &mut DirBuf, e: Ent) {
    if e.rec_len <= 24 {
        return;
    }
    d.set_rec_len(e.pos, 12);
    let next = e.pos + 12;
    if d.buf[next + HEADER..next + HEADER + 3] != *b"..\0" {
        d.put(next, 0, e.rec_len - 12, 0, b"");
    }
}

fn dir_ft(ctx: &Ctx) -> u8 {
    if ctx.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE) {
        FT_DIR
    } else {
        0
    }
}

/// The second record of block 0 must be `..` (e2fsck's `check_dotdot`).
/// A rewritten one names the root; pass 3 points it at the real parent.
fn dotdot(ctx: &mut Ctx, ino: u32, d: &mut DirBuf, e: Ent) {
    let name = d.name(&e);
    let problem = if e.inode == 0 {
        Some((p::P2_MISSING_DOT_DOT, "missing '..'"))
    } else if name != b".." {
        Some((p::P2_2ND_NOT_DOT_DOT, "second entry is not '..'"))
    } else if d.buf[e.pos + HEADER + 2] != 0 {
        Some((p::P2_DOT_DOT_NULL_TERM, "'..' entry is not NUL terminated"))
    } else {
        None
    };
    if let Some((code, msg)) = problem {
        if ctx.fix(Finding::new(code, msg, "fix the entry").ino(ino)) {
            d.put(e.pos, ROOT_INO, e.rec_len, dir_ft(ctx), b"..");
            set_dotdot(ctx, ino, ROOT_INO);
            bump(ctx, ROOT_INO);
        }
        return;
    }
    set_dotdot(ctx, ino, e.inode);
    if ctx.in_use(e.inode) {
        if let Some(ft) = check_type(ctx, ino, e.inode, e.ft) {
            d.set_ft(e.pos, ft);
        }
        bump(ctx, e.inode);
        return;
    }
    let (code, msg) = if e.inode <= ctx.fs.geo.inodes_count {
        (p::P2_UNUSED_INODE, format!("'..' has deleted/unused inode {}", e.inode))
    } else {
        (p::P2_BAD_INO, format!("'..' has bad inode number {}", e.inode))
    };
    if clear(ctx, ino, d, &e, code, msg) {
        set_dotdot(ctx, ino, 0);
    }
}

fn set_dotdot(ctx: &mut Ctx, ino: u32, to: u32) {
    if let Some(info) = ctx.dirs.get_mut(&ino) {
        info.dotdot = to;
    }
}

/// The inode the record names; false when the record must be skipped
/// (cleared, or left as it is in a check).
fn target(ctx: &mut Ctx, dir: u32, d: &mut DirBuf, e: &Ent, name: &[u8]) -> bool {
    let show = String::from_utf8_lossy(name).into_owned();
    let inode = e.inode;
    let geo = &ctx.fs.geo;
    let bad = if inode == dir {
        Some((p::P2_LINK_DOT, format!("entry '{show}' is a link to '.'")))
    } else if (inode != ROOT_INO && inode < geo.first_ino) || inode > geo.inodes_count {
        Some((p::P2_BAD_INO, format!("entry '{show}' has bad inode number {inode}")))
    } else if name == b"." {
        Some((p::P2_DUP_DOT, "duplicate '.' entry".into()))
    } else if name == b".." {
        Some((p::P2_DUP_DOT_DOT, "duplicate '..' entry".into()))
    } else if inode == ROOT_INO {
        Some((
            p::P2_LINK_ROOT,
            format!("entry '{show}' is a link to the root directory"),
        ))
    } else if name.is_empty() {
        Some((p::P2_NULL_NAME, "entry has a zero-length name".into()))
    } else {
        None
    };
    if let Some((code, msg)) = bad {
        clear(ctx, dir, d, e, code, msg);
        return false;
    }
    if crate::bad_blocks::inode_in(ctx, &ctx.bad_itable, inode) {
        let msg = format!("entry '{show}' points to inode {inode} located in a bad block");
        clear(ctx, dir, d, e, p::P2_BB_INODE, msg);
        return false;
    }
    if !scanned(ctx, dir, inode, &show) {
        return false;
    }
    if !ctx.in_use(inode) {
        let msg = format!("entry '{show}' has deleted/unused inode {inode}");
        clear(ctx, dir, d, e, p::P2_UNUSED_INODE, msg);
        return false;
    }
    if ctx.kind[inode as usize] == KIND_BAD {
        let msg = format!("inode {inode} ('{show}') has an invalid mode");
        if ctx.fix(Finding::new(p::P2_BAD_MODE, msg, "clear the inode").ino(inode)) {
            clear_inode(ctx, inode);
            d.set_inode(e.pos, 0);
        }
        return false;
    }
    true
}

/// The inode lies where pass 1 looked: not in an INODE_UNINIT group, not
/// in a group's `bg_itable_unused` tail. If it does not, the repair (as
/// e2fsck's) marks the group's whole inode table in use, and the next run
/// scans it; the record is left alone until then.
fn scanned(ctx: &mut Ctx, dir: u32, inode: u32, show: &str) -> bool {
    let geo = &ctx.fs.geo;
    let (g, idx) = geo.inode_location(inode).unwrap_or((0, 0));
    let Some(&gd) = ctx.fs.groups.get(g as usize) else {
        return false;
    };
    let uninit = geo.features.has_group_csum() && gd.flags() & BG_INODE_UNINIT != 0;
    if !uninit && idx < ctx.scanned[g as usize] {
        return true;
    }
    if !uninit && gd.itable_unused() == 0 {
        // Already repaired earlier in this run.
        return false;
    }
    let (code, msg) = if uninit {
        (
            p::P2_INOREF_BG_INO_UNINIT,
            format!("entry '{show}' references inode {inode} in an uninitialized group"),
        )
    } else {
        (
            p::P2_INOREF_IN_UNUSED,
            format!("entry '{show}' references inode {inode} in the unused area of its group"),
        )
    };
    if ctx.fix(
        Finding::new(code, msg, "mark the group's inodes in use and recheck")
            .ino(dir)
            .grp(g),
    ) {
        let gd = &mut ctx.fs.groups[g as usize];
        gd.bg_flags.set(gd.flags() & !BG_INODE_UNINIT);
        gd.bg_itable_unused_lo.set(0);
        gd.bg_itable_unused_hi.set(0);
        ctx.fs.dirty_groups = true;
    }
    false
}

/// Releases an inode pass 2 found unusable (e2fsck's `deallocate_inode`):
/// no links, a deletion time; the next run sees it free and frees its blocks.
pub fn clear_inode(ctx: &mut Ctx, ino: u32) {
    let Ok(mut rec) = ctx.fs.inode_record(ino) else {
        ctx.not_fixed("cannot read the inode");
        return;
    };
    let now = crate::inode_edit::dtime_now(ctx);
    rec[0x14..0x18].copy_from_slice(&now.to_le_bytes());
    rec[0x1A..0x1C].fill(0);
    if let Err(e) = ctx.fs.write_inode_record(ino, &mut rec) {
        ctx.not_fixed(format!("writing inode {ino}: {e}"));
        return;
    }
    ctx.kind[ino as usize] = KIND_FREE;
    ctx.dirs.remove(&ino);
}

/// The record's file type against the inode's; the type to set when the
/// repair is allowed.
pub fn check_type(ctx: &mut Ctx, dir: u32, inode: u32, ft: u8) -> Option<u8> {
    let want = match ctx.kind[inode as usize] {
        KIND_BAD => 0,
        k => k,
    };
    let filetype = ctx.fs.geo.features.incompat.contains(IncompatFeatures::FILETYPE);
    // The Hurd has no dirent file types; e2fsck does not check them there.
    if ctx.fs.sb.s_creator_os.get() == 1 || !filetype || ft == want {
        return None;
    }
    let f = |c, m: String| Finding::new(c, m, "set the file type").ino(dir);
    let finding = if ft == 0 {
        f(p::P2_SET_FILETYPE, format!("entry for inode {inode} has no file type"))
    } else {
        f(
            p::P2_BAD_FILETYPE,
            format!("entry for inode {inode} has file type {ft}, should be {want}"),
        )
    };
    ctx.fix(finding).then_some(want)
}

/// A name with `/` or NUL gets `.` in their place (e2fsck's `check_name`).
/// Encrypted names are ciphertext, any byte allowed: their checks are
/// [`crate::encryption::check_entry`]'s.
fn fix_name(ctx: &mut Ctx, dir: &mut Dir, d: &mut DirBuf, e: &Ent, mut name: Vec<u8>) -> Vec<u8> {
    if dir.encrypted(ctx) {
        return name;
    }
    if dir.checks_encoding(ctx) {
        return fix_encoded_name(ctx, dir, d, e, name);
    }
    if !name.iter().any(|&c| c == b'/' || c == 0) {
        return name;
    }
    let msg = format!(
        "entry '{}' has illegal characters in its name",
        String::from_utf8_lossy(&name)
    );
    let f = Finding::new(p::P2_BAD_NAME, msg, "replace them with '.'").ino(dir.ino);
    if ctx.fix(f) {
        for c in name.iter_mut().filter(|c| **c == b'/' || **c == 0) {
            *c = b'.';
        }
        d.buf[e.pos + HEADER..e.pos + HEADER + name.len()].copy_from_slice(&name);
        d.dirty = true;
        dir.clear_index = true;
    }
    name
}

/// In a case-folded directory in strict mode a name must be valid UTF-8
/// (e2fsck's `encoded_check_name`): from the first bad byte to the end of the name
/// (or a NUL), bytes become `.`.
fn fix_encoded_name(ctx: &mut Ctx, dir: &mut Dir, d: &mut DirBuf, e: &Ent, mut name: Vec<u8>) -> Vec<u8> {
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    let Err(bad) = std::str::from_utf8(&name[..end]) else {
        return name;
    };
    let msg = format!(
        "entry '{}' has illegal UTF-8 characters in its name",
        String::from_utf8_lossy(&name)
    );
    if ctx.fix(Finding::new(p::P2_BAD_ENCODED_NAME, msg, "replace them with '.'").ino(dir.ino)) {
        name[bad.valid_up_to()..end].fill(b'.');
        d.buf[e.pos + HEADER..e.pos + HEADER + name.len()].copy_from_slice(&name);
        d.dirty = true;
        dir.clear_index = true;
    }
    name
}

/// In an htree leaf, every name's hash must lie in the range its parent
/// gives the block; when one does not, the repair drops the index. A
/// casefolded directory hashes the folded name (`ext4fs_dirhash`); one
/// that is also encrypted (hash version 6, SipHash under the directory's
/// key) is checked with the hash `stored` after each name, as e2fsck
/// does without the key.
fn hash_range(ctx: &mut Ctx, dir: &mut Dir, b: DirBlock, e: &Ent, name: &[u8], stored: Option<(u32, u32)>) {
    let Some(x) = dir.index.as_ref() else { return };
    let major = if x.version == HashVersion::SipHash {
        // No stored hash: pass 1's root check or the record check reported it.
        let Some((major, _)) = stored else { return };
        major
    } else {
        let input = if dir.casefolded(ctx) {
            ext4kit_format::casefold::hash_input(name)
        } else {
            std::borrow::Cow::Borrowed(name)
        };
        let Some(x) = dir.index.as_ref() else { return };
        let Ok(h) = dx_hash(&input, x.version, &x.seed) else {
            return;
        };
        h.major
    };
    if let Some(k) = dir.keys.as_mut() {
        k.push(ext4kit_format::itree::key(e.inode, major));
    }
    let Some(&(lo, hi)) = dir.index.as_ref().and_then(|x| x.ranges.get(&b.lblk)) else {
        return;
    };
    if dir.hash_bad.contains(&b.lblk) || (lo..=hi).contains(&major) {
        return;
    }
    dir.hash_bad.insert(b.lblk);
    let (code, msg) = if major < lo {
        (p::P2_HTREE_MIN_HASH, format!("below the block's min hash {lo:#010x}"))
    } else {
        (p::P2_HTREE_MAX_HASH, format!("above the block's max hash {hi:#010x}"))
    };
    let msg = format!(
        "htree leaf {} (block {}): entry at offset {} has hash {major:#010x}, {msg}",
        b.lblk, b.pblk, e.pos
    );
    if ctx.fix(Finding::new(code, msg, "clear the index").ino(dir.ino).blk(b.pblk)) {
        dir.clear_index = true;
    }
}

/// A directory has one entry naming it (besides its own `.` and its
/// children's `..`): a second is cleared. False when cleared or skipped.
fn link_dir(ctx: &mut Ctx, dir: u32, d: &mut DirBuf, e: &Ent, name: &[u8]) -> bool {
    if !ctx.is_dir(e.inode) {
        return true;
    }
    match ctx.dirs.get_mut(&e.inode) {
        Some(info) if info.parent != 0 => {
            let msg = format!(
                "entry '{}' is a second link to directory {}",
                String::from_utf8_lossy(name),
                e.inode
            );
            clear(ctx, dir, d, e, p::P2_LINK_DIR, msg);
            false
        }
        Some(info) => {
            info.parent = dir;
            if dir == ROOT_INO && name == b"lost+found" {
                ctx.lost_found = Some(e.inode);
            }
            true
        }
        None => true,
    }
}

/// A name must appear once in a directory (once folded, where the
/// directory [`Dir::checks_encoding`], as e2fsck's `dict_de_cf_cmp`). A
/// repeat naming the same inode is cleared; one naming another inode is
/// renamed `name~N` (e2fsck's rehash does both), or cleared when the new
/// name does not fit its record. False when cleared (a repeat left in
/// place by a check-only run still counts as a reference, as e2fsck -n
/// counts it).
fn unique(
    ctx: &mut Ctx,
    dir: &mut Dir,
    b: DirBlock,
    d: &mut DirBuf,
    e: &Ent,
    name: Vec<u8>,
    here: &mut HashMap<Vec<u8>, u32>,
) -> bool {
    let key = dir.name_key(ctx, &name);
    let h = crate::pass2::name_hash(&key);
    let (code, first) = match (here.get(&key), dir.names.get(&h)) {
        (Some(&i), _) => (p::P2_DUPLICATE_DIRENT, i),
        (None, Some(&i)) => (p::P2_NON_UNIQUE_FILE, i),
        (None, None) => {
            dir.names.insert(h, e.inode);
            here.insert(key, e.inode);
            return true;
        }
    };
    let show = String::from_utf8_lossy(&name).into_owned();
    if first == e.inode || dir.encrypted(ctx) {
        let msg = format!("duplicate entry '{show}' in directory block {}", b.lblk);
        return !clear(ctx, dir.ino, d, e, code, msg);
    }
    let mut new = name.clone();
    let mut new_key = key;
    for _ in 0..1000 {
        mutate_name(&mut new);
        new_key = dir.name_key(ctx, &new);
        if !here.contains_key(&new_key) && !dir.names.contains_key(&crate::pass2::name_hash(&new_key)) {
            break;
        }
    }
    if rec_len_for(new.len()) > e.rec_len {
        let msg = format!("entry '{show}' repeats a name and has no room to be renamed");
        return !clear(ctx, dir.ino, d, e, code, msg);
    }
    let msg = format!("name '{show}' appears more than once in the directory");
    if ctx.fix(Finding::new(code, msg, "rename it").ino(dir.ino)) {
        let ft = d.ent(e.pos, d.bs()).map_or(e.ft, |x| x.ft);
        d.set_name_len(e.pos, new.len(), ft);
        d.buf[e.pos + HEADER..e.pos + HEADER + new.len()].copy_from_slice(&new);
        dir.clear_index = true;
        dir.names.insert(crate::pass2::name_hash(&new_key), e.inode);
        here.insert(new_key, e.inode);
    }
    true
}
