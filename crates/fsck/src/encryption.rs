//! Encrypted files and directories (fscrypt; `ENCRYPT_FL` with the
//! encryption context in the `c` xattr of index 9). Without the key the
//! checker sees ciphertext names, so it checks what e2fsck checks
//! (`encrypted_files.c`, `check_encrypted_dirent`):
//! - pass 1: an inode with `ENCRYPT_FL` has a context: missing, the flag
//!   is cleared; unusable (version 0, or the wrong size for its version),
//!   the inode is cleared;
//! - pass 2: in an encrypted directory, a name shorter than one cipher
//!   block (16 bytes) is cleared, and so is an entry naming a regular
//!   file, directory or symlink whose policy is not the directory's
//!   (unencrypted, or another key or mode).

use ext4kit_format::inode::flags;
use ext4kit_format::xattr::{XattrEntry, XattrValue, ibody_region, parse_block, parse_ibody};

use crate::dir_block::{DirBuf, Ent};
use crate::inode_edit::{self, InodeEdit};
use crate::pass1::decode;
use crate::pass2::Dir;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// `EXT4_XATTR_INDEX_ENCRYPTION`.
const INDEX: u8 = 9;
/// The context's stored name.
const NAME: &[u8] = b"c";
/// `EXT4_CRYPTO_BLOCK_SIZE`: the shortest encrypted name.
const MIN_NAME: usize = 16;
/// `fscrypt_context_v1`: version, two modes, flags, 8-byte key
/// descriptor, 16-byte nonce; the policy is all but the nonce.
const V1: (usize, usize) = (28, 12);
/// `fscrypt_context_v2`: version, two modes, flags, 4 reserved bytes,
/// 16-byte key identifier, 16-byte nonce.
const V2: (usize, usize) = (40, 24);

/// An inode's encryption policy (e2fsck's policy ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// Not encrypted (no flag, or no context).
    None,
    /// A context that cannot be read as a policy.
    Corrupt,
    /// A context of a version this checker does not know.
    Unrecognized,
    /// The policy bytes of a known context.
    Known(Vec<u8>),
}

/// Reads inode `ino`'s policy.
pub fn policy_of(ctx: &Ctx, ino: u32) -> Policy {
    let Ok(rec) = ctx.fs.inode_record(ino) else {
        return Policy::None;
    };
    if decode(&rec).i_flags.get() & flags::ENCRYPT == 0 {
        return Policy::None;
    }
    match context(ctx, &rec) {
        None => Policy::None,
        Some(v) => from_context(&v),
    }
}

/// The policy a context value gives.
fn from_context(v: &[u8]) -> Policy {
    let (size, keep) = match v.first() {
        None | Some(0) => return Policy::Corrupt,
        Some(1) => V1,
        Some(2) => V2,
        Some(_) => return Policy::Unrecognized,
    };
    if v.len() == size {
        Policy::Known(v[..keep].to_vec())
    } else {
        Policy::Corrupt
    }
}

/// The `c` xattr's value, from the inode body or its xattr block.
fn context(ctx: &Ctx, rec: &[u8]) -> Option<Vec<u8>> {
    let raw = decode(rec);
    let find = |es: &[XattrEntry]| {
        es.iter().find_map(|e| match e.value {
            XattrValue::Inline(v) if e.index() == INDEX && e.name == NAME => Some(v.to_vec()),
            _ => None,
        })
    };
    if rec.len() > 128
        && let Ok(region) = ibody_region(rec, raw.i_extra_isize.get())
        && let Ok(es) = parse_ibody(region)
        && let Some(v) = find(&es)
    {
        return Some(v);
    }
    let acl = raw.file_acl();
    if acl == 0 || !ctx.fs.valid_block(acl) {
        return None;
    }
    let buf = ctx.fs.read_block(acl).ok()?;
    let blk = parse_block(&buf).ok()?;
    find(&blk.entries)
}

/// Pass 1: an inode with `ENCRYPT_FL` must have a usable context.
pub fn check_inode(ctx: &mut Ctx, ed: &mut InodeEdit) {
    if !ed.raw.has_flag(flags::ENCRYPT) {
        return;
    }
    let ino = ed.ino;
    match context(ctx, &ed.rec).map_or(Policy::None, |v| from_context(&v)) {
        Policy::None => {
            let msg = "encrypt flag set but no encryption xattr";
            if ctx.fix(Finding::new(p::P1_MISSING_ENCRYPTION_XATTR, msg, "clear the flag").ino(ino)) {
                ed.raw.i_flags.set(ed.raw.flags() & !flags::ENCRYPT);
                ed.dirty = true;
            }
        }
        Policy::Corrupt => {
            let msg = "encrypted inode has a corrupt encryption xattr";
            if ctx.fix(Finding::new(p::P1_CORRUPT_ENCRYPTION_XATTR, msg, "clear the inode").ino(ino)) {
                inode_edit::clear(ctx, ed);
            }
        }
        _ => {}
    }
}

/// Pass 2: entry `e` of encrypted directory `dir` (its policy known);
/// true when the entry was cleared.
pub fn check_entry(ctx: &mut Ctx, dir: &mut Dir, d: &mut DirBuf, e: &Ent, name: &[u8]) -> bool {
    let Some(dp) = dir_policy(ctx, dir) else { return false };
    let show = String::from_utf8_lossy(name).into_owned();
    if name.len() < MIN_NAME {
        let msg = format!("encrypted entry '{show}' is too short");
        return crate::dirent::clear(ctx, dir.ino, d, e, p::P2_BAD_ENCRYPTED_NAME, msg);
    }
    let fp = policy_of(ctx, e.inode);
    if fp == dp {
        return false;
    }
    let (code, msg) = if fp == Policy::None {
        // Devices, fifos and sockets are never encrypted.
        if !matches!(ctx.kind.get(e.inode as usize), Some(1 | 2 | 7)) {
            return false;
        }
        let m = format!("encrypted entry '{show}' references unencrypted inode {}", e.inode);
        (p::P2_UNENCRYPTED_FILE, m)
    } else {
        let m = format!(
            "encrypted entry '{show}' references inode {}, which has a different encryption policy",
            e.inode
        );
        (p::P2_INCONSISTENT_ENCRYPTION_POLICY, m)
    };
    crate::dirent::clear(ctx, dir.ino, d, e, code, msg)
}

/// The directory's policy (read once), `None` when it is not encrypted.
pub(crate) fn dir_policy(ctx: &Ctx, dir: &mut Dir) -> Option<Policy> {
    let ino = dir.ino;
    let pol = dir.policy.get_or_insert_with(|| policy_of(ctx, ino)).clone();
    (pol != Policy::None).then_some(pol)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_give_policies() {
        assert_eq!(from_context(&[]), Policy::Corrupt);
        assert_eq!(from_context(&[0; 28]), Policy::Corrupt);
        let mut v1 = vec![1u8; 28];
        assert_eq!(from_context(&v1), Policy::Known(vec![1; 12]));
        v1.push(0);
        assert_eq!(from_context(&v1), Policy::Corrupt);
        assert_eq!(from_context(&[2u8; 40]), Policy::Known(vec![2; 24]));
        assert_eq!(from_context(&[7u8; 40]), Policy::Unrecognized);
    }
}
