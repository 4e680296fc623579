//! POSIX ACLs as stored in `system.posix_acl_access` / `_default` xattrs.
//!
//! On disk ext4 keeps a compact form (`ext4_acl_header`, version 1, then
//! 4-byte `ext4_acl_entry_short` records for `USER_OBJ`, `GROUP_OBJ`, `MASK`
//! and `OTHER`, 8-byte `ext4_acl_entry` records with an id for `USER` and
//! `GROUP`); the Linux VFS xattr interface (`getxattr`/`setxattr`) uses
//! `posix_acl_xattr_header`, version 2, with 8-byte entries for every tag.
//! Exporting a file to the host needs the VFS form; importing needs the disk
//! form. Both are little-endian.
//!
//! See `fs/ext4/acl.h` and `include/uapi/linux/posix_acl_xattr.h`.

use crate::error::{FormatError, Result};
use crate::util::{le16, le32};

/// `a_version` of the on-disk ext4 form.
pub const EXT4_ACL_VERSION: u32 = 1;
/// `a_version` of the VFS xattr form.
pub const POSIX_ACL_XATTR_VERSION: u32 = 2;
/// `e_tag`: the owner.
pub const ACL_USER_OBJ: u16 = 0x01;
/// `e_tag`: a named user (carries an id).
pub const ACL_USER: u16 = 0x02;
/// `e_tag`: the owning group.
pub const ACL_GROUP_OBJ: u16 = 0x04;
/// `e_tag`: a named group (carries an id).
pub const ACL_GROUP: u16 = 0x08;
/// `e_tag`: the mask.
pub const ACL_MASK: u16 = 0x10;
/// `e_tag`: everyone else.
pub const ACL_OTHER: u16 = 0x20;
/// `e_id` the kernel reports for entries without an id.
pub const ACL_UNDEFINED_ID: u32 = u32::MAX;

const DISK: &str = "ext4_acl_entry";
const VFS: &str = "posix_acl_xattr_entry";

/// One ACL entry, independent of the encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclEntry {
    /// `e_tag` (`ACL_*`).
    pub tag: u16,
    /// `e_perm`: read 4, write 2, execute 1.
    pub perm: u16,
    /// `e_id`: uid or gid for `ACL_USER` / `ACL_GROUP`, else
    /// [`ACL_UNDEFINED_ID`].
    pub id: u32,
}

fn has_id(tag: u16) -> Option<bool> {
    match tag {
        ACL_USER | ACL_GROUP => Some(true),
        ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_MASK | ACL_OTHER => Some(false),
        _ => None,
    }
}

fn check_version(buf: &[u8], want: u32, structure: &'static str) -> Result<()> {
    let v = le32(buf, 0, structure)?;
    if v != want {
        return Err(FormatError::invalid(structure, "a_version", 0, v.into()));
    }
    Ok(())
}

/// Decodes the on-disk ext4 form. The walk is bounded by `value`.
///
/// # Errors
/// `ext4_acl_header.a_version` ≠ 1; `ext4_acl_entry.e_tag` unknown, or an
/// entry cut short by the end of the value, at the entry's byte offset.
pub fn from_disk(value: &[u8]) -> Result<Vec<AclEntry>> {
    check_version(value, EXT4_ACL_VERSION, "ext4_acl_header")?;
    let mut out = Vec::new();
    let mut off = 4usize;
    while off < value.len() {
        let tag = le16(value, off, DISK)?;
        let perm = le16(value, off.saturating_add(2), DISK)?;
        let long = has_id(tag).ok_or_else(|| FormatError::invalid(DISK, "e_tag", off, tag.into()))?;
        let id = if long {
            le32(value, off.saturating_add(4), DISK)?
        } else {
            ACL_UNDEFINED_ID
        };
        out.push(AclEntry { tag, perm, id });
        off = off.saturating_add(if long { 8 } else { 4 });
    }
    Ok(out)
}

/// Encodes the on-disk ext4 form (`ext4_acl_to_disk`).
///
/// # Errors
/// `ext4_acl_entry.e_tag` for an unknown tag (offset = the entry's position
/// in the output).
pub fn to_disk(entries: &[AclEntry]) -> Result<Vec<u8>> {
    let mut out = EXT4_ACL_VERSION.to_le_bytes().to_vec();
    for e in entries {
        let long = has_id(e.tag).ok_or_else(|| FormatError::invalid(DISK, "e_tag", out.len(), e.tag.into()))?;
        out.extend_from_slice(&e.tag.to_le_bytes());
        out.extend_from_slice(&e.perm.to_le_bytes());
        if long {
            out.extend_from_slice(&e.id.to_le_bytes());
        }
    }
    Ok(out)
}

/// Decodes the VFS xattr form (version 2, 8-byte entries).
///
/// # Errors
/// `posix_acl_xattr_header.a_version` ≠ 2; `posix_acl_xattr_entry` with a
/// length that is not 4 + 8·n (reported at the trailing bytes) or an
/// unknown `e_tag`.
pub fn from_vfs(value: &[u8]) -> Result<Vec<AclEntry>> {
    check_version(value, POSIX_ACL_XATTR_VERSION, "posix_acl_xattr_header")?;
    let body = value.get(4..).unwrap_or(&[]);
    if !body.len().is_multiple_of(8) {
        let at = value.len().saturating_sub(body.len() % 8);
        let len = u64::try_from(value.len()).unwrap_or(u64::MAX);
        return Err(FormatError::invalid(VFS, "", at, len));
    }
    let mut out = Vec::with_capacity(body.len() / 8);
    for (i, chunk) in body.chunks_exact(8).enumerate() {
        let off = i.saturating_mul(8).saturating_add(4);
        let tag = le16(chunk, 0, VFS)?;
        let long = has_id(tag).ok_or_else(|| FormatError::invalid(VFS, "e_tag", off, tag.into()))?;
        let id = if long { le32(chunk, 4, VFS)? } else { ACL_UNDEFINED_ID };
        out.push(AclEntry {
            tag,
            perm: le16(chunk, 2, VFS)?,
            id,
        });
    }
    Ok(out)
}

/// Encodes the VFS xattr form; entries without an id get
/// [`ACL_UNDEFINED_ID`], as the kernel's `posix_acl_to_xattr` writes.
pub fn to_vfs(entries: &[AclEntry]) -> Vec<u8> {
    let mut out = POSIX_ACL_XATTR_VERSION.to_le_bytes().to_vec();
    for e in entries {
        let id = if has_id(e.tag) == Some(true) {
            e.id
        } else {
            ACL_UNDEFINED_ID
        };
        out.extend_from_slice(&e.tag.to_le_bytes());
        out.extend_from_slice(&e.perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

/// On-disk value → VFS value, for exporting to the host.
///
/// # Errors
/// As [`from_disk`].
pub fn disk_to_vfs(value: &[u8]) -> Result<Vec<u8>> {
    from_disk(value).map(|e| to_vfs(&e))
}

/// VFS value → on-disk value, for importing from the host.
///
/// # Errors
/// As [`from_vfs`].
pub fn vfs_to_disk(value: &[u8]) -> Result<Vec<u8>> {
    from_vfs(value).and_then(|e| to_disk(&e))
}

/// The permission bits an access ACL implies for a file of mode `perm`,
/// and whether the ACL says no more than those bits (then ext4 stores no
/// ACL at all: `posix_acl_equiv_mode`). A mask entry stands in for the
/// group bits.
///
/// # Errors
/// An entry with a tag no ACL may hold (reported as `e_tag`).
pub fn equiv_mode(entries: &[AclEntry], perm: u16) -> Result<(u16, bool)> {
    let mut mode = 0u16;
    let mut equivalent = true;
    for (i, e) in entries.iter().enumerate() {
        let p = e.perm & 0o7;
        match e.tag {
            ACL_USER_OBJ => mode |= p << 6,
            ACL_GROUP_OBJ => mode |= p << 3,
            ACL_OTHER => mode |= p,
            ACL_MASK => {
                mode = (mode & !0o070) | (p << 3);
                equivalent = false;
            }
            ACL_USER | ACL_GROUP => equivalent = false,
            t => return Err(FormatError::invalid(VFS, "e_tag", i * 8 + 4, t.into())),
        }
    }
    Ok(((perm & !0o777) | mode, equivalent))
}

/// The ACL a new inode gets from its directory's default ACL, and its
/// permission bits (`posix_acl_create_masq`): the owner, mask (or owning
/// group) and other entries are cut down to the requested `perm` and the
/// bits to the entries. Returns the new bits and whether the ACL says no
/// more than they do (then nothing is stored).
pub fn create_masq(entries: &mut [AclEntry], perm: u16) -> (u16, bool) {
    let mut mode = perm;
    let mut equivalent = true;
    let mut group = None;
    let mut mask = None;
    for (i, e) in entries.iter_mut().enumerate() {
        match e.tag {
            ACL_USER_OBJ => {
                e.perm &= (mode >> 6) & 0o7;
                mode &= (e.perm << 6) | !0o700;
            }
            ACL_OTHER => {
                e.perm &= mode & 0o7;
                mode &= e.perm | !0o007;
            }
            ACL_GROUP_OBJ => group = Some(i),
            ACL_MASK => {
                mask = Some(i);
                equivalent = false;
            }
            _ => equivalent = false,
        }
    }
    if let Some(i) = mask.or(group) {
        let e = &mut entries[i];
        e.perm &= (mode >> 3) & 0o7;
        mode &= (e.perm << 3) | !0o070;
    }
    (mode, equivalent)
}

/// An access ACL after `chmod` to `perm` (`posix_acl_chmod_masq`): the
/// owner and other entries take the new bits, and so does the mask, or the
/// owning group when there is no mask.
pub fn chmod_masq(entries: &mut [AclEntry], perm: u16) {
    let has_mask = entries.iter().any(|e| e.tag == ACL_MASK);
    for e in entries.iter_mut() {
        match e.tag {
            ACL_USER_OBJ => e.perm = (perm >> 6) & 0o7,
            ACL_OTHER => e.perm = perm & 0o7,
            ACL_MASK => e.perm = (perm >> 3) & 0o7,
            ACL_GROUP_OBJ if !has_mask => e.perm = (perm >> 3) & 0o7,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<AclEntry> {
        let e = |tag, perm, id| AclEntry { tag, perm, id };
        vec![
            e(ACL_USER_OBJ, 6, ACL_UNDEFINED_ID),
            e(ACL_USER, 4, 1000),
            e(ACL_GROUP_OBJ, 4, ACL_UNDEFINED_ID),
            e(ACL_GROUP, 5, 50),
            e(ACL_MASK, 7, ACL_UNDEFINED_ID),
            e(ACL_OTHER, 0, ACL_UNDEFINED_ID),
        ]
    }

    #[test]
    fn equiv_mode_takes_the_mask_for_group_bits() {
        let e = |tag, perm| AclEntry {
            tag,
            perm,
            id: ACL_UNDEFINED_ID,
        };
        let base = [e(ACL_USER_OBJ, 7), e(ACL_GROUP_OBJ, 5), e(ACL_OTHER, 4)];
        assert_eq!(equiv_mode(&base, 0o4000).unwrap(), (0o4754, true));
        let masked = [e(ACL_USER_OBJ, 6), e(ACL_GROUP_OBJ, 7), e(ACL_MASK, 4), e(ACL_OTHER, 0)];
        assert_eq!(equiv_mode(&masked, 0).unwrap(), (0o640, false));
        let named = [
            e(ACL_USER_OBJ, 6),
            e(ACL_USER, 6),
            e(ACL_GROUP_OBJ, 4),
            e(ACL_MASK, 6),
            e(ACL_OTHER, 4),
        ];
        assert_eq!(equiv_mode(&named, 0).unwrap(), (0o664, false));
        assert!(equiv_mode(&[e(0x40, 7)], 0).is_err());
    }

    #[test]
    fn create_masq_cuts_entries_and_bits_to_each_other() {
        let e = |tag, perm| AclEntry {
            tag,
            perm,
            id: if tag == ACL_USER { 1000 } else { ACL_UNDEFINED_ID },
        };
        let mut d = [
            e(ACL_USER_OBJ, 7),
            e(ACL_USER, 7),
            e(ACL_GROUP_OBJ, 5),
            e(ACL_MASK, 7),
            e(ACL_OTHER, 5),
        ];
        let (mode, equivalent) = create_masq(&mut d, 0o666);
        assert_eq!((mode, equivalent), (0o664, false));
        assert_eq!(d.map(|x| x.perm), [6, 7, 5, 6, 4]);
        let mut plain = [e(ACL_USER_OBJ, 7), e(ACL_GROUP_OBJ, 0), e(ACL_OTHER, 0)];
        assert_eq!(create_masq(&mut plain, 0o2777), (0o2700, true));
    }

    #[test]
    fn chmod_masq_sets_the_mask_not_the_group() {
        let e = |tag, perm| AclEntry {
            tag,
            perm,
            id: ACL_UNDEFINED_ID,
        };
        let mut a = [e(ACL_USER_OBJ, 6), e(ACL_GROUP_OBJ, 4), e(ACL_MASK, 4), e(ACL_OTHER, 0)];
        chmod_masq(&mut a, 0o751);
        assert_eq!(a.map(|x| x.perm), [7, 4, 5, 1]);
        let mut b = [e(ACL_USER_OBJ, 6), e(ACL_GROUP_OBJ, 4), e(ACL_OTHER, 0)];
        chmod_masq(&mut b, 0o640);
        assert_eq!(b.map(|x| x.perm), [6, 4, 0]);
    }

    #[test]
    fn disk_form_is_compact_and_round_trips() {
        let disk = to_disk(&sample()).unwrap();
        // header 4 + four short entries of 4 + two long of 8.
        assert_eq!(disk.len(), 4 + 4 * 4 + 2 * 8);
        assert_eq!(&disk[..4], &[1, 0, 0, 0]);
        assert_eq!(from_disk(&disk).unwrap(), sample());
    }

    #[test]
    fn vfs_form_round_trips_through_disk() {
        let vfs = to_vfs(&sample());
        assert_eq!(vfs.len(), 4 + 6 * 8);
        let disk = vfs_to_disk(&vfs).unwrap();
        assert_eq!(disk_to_vfs(&disk).unwrap(), vfs);
    }

    #[test]
    fn corrupt_acls_name_the_field() {
        let mut disk = to_disk(&sample()).unwrap();
        disk[0] = 2;
        assert_eq!(from_disk(&disk).unwrap_err().field, "a_version");
        let mut disk = to_disk(&sample()).unwrap();
        disk[8] = 0x40; // second entry's tag
        let err = from_disk(&disk).unwrap_err();
        assert_eq!((err.field, err.offset), ("e_tag", 8));
        let disk = to_disk(&sample()).unwrap();
        // Cut inside the USER entry's id.
        assert!(from_disk(&disk[..10]).is_err());
        let vfs = to_vfs(&sample());
        assert!(from_vfs(&vfs[..vfs.len() - 3]).is_err());
    }
}
