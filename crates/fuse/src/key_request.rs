//! fscrypt on a running mount, the counterparts of the kernel's ioctls
//! (which this workspace cannot issue, every ioctl being `unsafe`, and
//! which FUSE would not carry whole). Each request travels like the sync
//! request ([`crate::sync_request`]), as an extended attribute:
//! - `ext4kit key add MOUNTPOINT [DESCRIPTOR=]FILE`
//!   (`FS_IOC_ADD_ENCRYPTION_KEY`): setting [`ADD_KEY_XATTR`] (or
//!   `ADD_KEY_XATTR.DESCRIPTOR` for a v1 key, 16 hex digits) of the mount
//!   point to the raw key;
//! - `ext4kit key remove MOUNTPOINT KEY` (`FS_IOC_REMOVE_ENCRYPTION_KEY`):
//!   setting [`REMOVE_KEY_XATTR`]`.KEY` of the mount point, KEY being a
//!   descriptor (16 hex digits) or a v2 identifier (32);
//! - `ext4kit key status MOUNTPOINT KEY`
//!   (`FS_IOC_GET_ENCRYPTION_KEY_STATUS`): reading [`KEY_STATUS_XATTR`]`.KEY`;
//! - `ext4kit key set-policy DIR` (`FS_IOC_SET_ENCRYPTION_POLICY`):
//!   setting [`SET_POLICY_XATTR`] of the directory to the ioctl's own
//!   argument, a `struct fscrypt_policy_v1` or `_v2`.
//!
//! What the kernel cached of the directories a key opens or closes is
//! dropped with it ([`crate::key_caches`]).

use ext4kit_engine::{KeyStatus, Policy};
use ext4kit_format::fscrypt::KeyRef;
use fuser::{Errno, INodeNo};

use crate::adapter::Ext4Fuse;

/// The extended attribute whose setting adds a key.
pub const ADD_KEY_XATTR: &str = "ext4kit.add_key";

/// The prefix of the extended attribute whose setting removes a key.
pub const REMOVE_KEY_XATTR: &str = "ext4kit.remove_key";

/// The prefix of the extended attribute whose reading reports a key.
pub const KEY_STATUS_XATTR: &str = "ext4kit.key_status";

/// The extended attribute whose setting gives a directory a policy.
pub const SET_POLICY_XATTR: &str = "ext4kit.set_policy";

/// How a key is named in request names: 16 hex digits for a v1
/// descriptor, 32 for a v2 identifier.
pub fn key_hex(key: &KeyRef) -> String {
    let bytes: &[u8] = match key {
        KeyRef::Descriptor(d) => d,
        KeyRef::Identifier(id) => id,
    };
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key [`key_hex`] names, `None` when `hex` names none.
pub fn parse_key_hex(hex: &[u8]) -> Option<KeyRef> {
    if !hex.len().is_multiple_of(2) || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    let bytes: Vec<u8> = hex.chunks(2).map(|p| digit(p[0]) << 4 | digit(p[1])).collect();
    match bytes.len() {
        8 => bytes.try_into().ok().map(KeyRef::Descriptor),
        16 => bytes.try_into().ok().map(KeyRef::Identifier),
        _ => None,
    }
}

/// The key a name with `prefix` names: `None` for another name,
/// `Some(None)` for a malformed key.
pub(crate) fn parse_key_request(prefix: &str, name: &[u8]) -> Option<Option<KeyRef>> {
    let rest = name.strip_prefix(prefix.as_bytes())?.strip_prefix(b".")?;
    Some(parse_key_hex(rest))
}

/// The ioctl argument of a policy: `struct fscrypt_policy_v1` (version 0,
/// modes, flags, descriptor) or `_v2` (version 2, modes, flags, four
/// reserved bytes, identifier).
pub fn policy_bytes(p: &Policy) -> Vec<u8> {
    match p.key {
        KeyRef::Descriptor(d) => {
            let mut v = vec![0, p.contents_mode, p.filenames_mode, p.flags];
            v.extend_from_slice(&d);
            v
        }
        KeyRef::Identifier(id) => {
            let mut v = vec![2, p.contents_mode, p.filenames_mode, p.flags, 0, 0, 0, 0];
            v.extend_from_slice(&id);
            v
        }
    }
}

/// The policy [`policy_bytes`] encodes; `None` for another size or
/// version, or reserved bytes set (the kernel's `EINVAL`).
pub(crate) fn parse_policy(v: &[u8]) -> Option<Policy> {
    let key = match (v.first()?, v.len()) {
        (0, 12) => KeyRef::Descriptor(v[4..12].try_into().ok()?),
        (2, 24) if v[4..8] == [0; 4] => KeyRef::Identifier(v[8..24].try_into().ok()?),
        _ => return None,
    };
    Some(Policy {
        contents_mode: v[1],
        filenames_mode: v[2],
        flags: v[3],
        key,
    })
}

/// The text a status request answers.
pub fn status_text(s: KeyStatus) -> String {
    match s {
        KeyStatus::Absent => "absent".into(),
        KeyStatus::Present => "present".into(),
        KeyStatus::IncompletelyRemoved { busy } => format!("incompletely removed ({busy} files open)"),
    }
}

/// Whether `name` is an add-key request, with its v1 descriptor if any;
/// `Some(Err(()))` for a malformed descriptor.
pub(crate) fn parse_request(name: &[u8]) -> Option<Result<Option<[u8; 8]>, ()>> {
    let rest = name.strip_prefix(ADD_KEY_XATTR.as_bytes())?;
    if rest.is_empty() {
        return Some(Ok(None));
    }
    let hex = rest.strip_prefix(b".")?;
    if hex.len() != 16 {
        return Some(Err(()));
    }
    let mut d = [0u8; 8];
    for (i, b) in d.iter_mut().enumerate() {
        let s = std::str::from_utf8(&hex[2 * i..2 * i + 2]).map_err(|_| ());
        match s.and_then(|s| u8::from_str_radix(s, 16).map_err(|_| ())) {
            Ok(v) => *b = v,
            Err(()) => return Some(Err(())),
        }
    }
    Some(Ok(Some(d)))
}

impl Ext4Fuse {
    /// Files `raw` as a master key (v1 under `descriptor`), and drops what
    /// the kernel cached in no-key form under it.
    pub(crate) fn add_key_request(&self, descriptor: Option<[u8; 8]>, raw: &[u8]) -> Result<(), Errno> {
        let fs = self.fs();
        let key = fs.add_key(raw, descriptor).map_err(|e| self.errno(e))?;
        self.shown.key_added(&fs, self.notifier.get(), &key);
        Ok(())
    }

    /// Removes `key`; asked of the mount point only, whose inode the
    /// kernel holds locked through the request while the names dropped
    /// lie below it.
    pub(crate) fn remove_key_request(&self, ino: INodeNo, key: &KeyRef) -> Result<(), Errno> {
        if self.ino(ino)? != ext4kit_engine::ROOT_INO {
            log::error!("ext4kit: key remove: ask the mount point, not a path below it");
            return Err(Errno::EINVAL);
        }
        let fs = self.fs();
        let busy = self
            .shown
            .remove_key(&fs, self.notifier.get(), key)
            .map_err(|e| self.errno(e))?;
        if busy > 0 {
            log::info!("ext4kit: key removed; {busy} files open under it keep it until closed");
        }
        Ok(())
    }

    /// The status of `key`, as text.
    pub(crate) fn key_status_request(&self, key: &KeyRef) -> Vec<u8> {
        status_text(self.fs().key_status(key)).into_bytes()
    }

    /// Gives directory `ino` the policy encoded in `value`.
    pub(crate) fn set_policy_request(&self, ino: INodeNo, value: &[u8]) -> Result<(), Errno> {
        self.writable()?;
        let policy = parse_policy(value).ok_or(Errno::EINVAL)?;
        let fs = self.fs();
        fs.set_encryption_policy(self.ino(ino)?, &policy)
            .map_err(|e| self.errno(e))?;
        if let Some(n) = self.notifier.get()
            && let Err(e) = n.inval_inode(ino, -1, 0)
        {
            log::debug!("ext4kit: dropping the attributes of {ino:?}: {e}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_an_optional_descriptor() {
        assert_eq!(parse_request(b"ext4kit.add_key"), Some(Ok(None)));
        assert_eq!(
            parse_request(b"ext4kit.add_key.0123456789abcdef"),
            Some(Ok(Some([1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef])))
        );
        assert_eq!(parse_request(b"ext4kit.add_key.xyz"), Some(Err(())));
        assert_eq!(parse_request(b"user.a"), None);
    }

    #[test]
    fn keys_are_named_by_descriptor_or_identifier() {
        let d = KeyRef::Descriptor([1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        let id = KeyRef::Identifier([0xa5; 16]);
        for k in [d, id] {
            let name = format!("{REMOVE_KEY_XATTR}.{}", key_hex(&k));
            assert_eq!(parse_key_request(REMOVE_KEY_XATTR, name.as_bytes()), Some(Some(k)));
        }
        assert_eq!(key_hex(&d), "0123456789abcdef");
        assert_eq!(
            parse_key_request(KEY_STATUS_XATTR, b"ext4kit.key_status.12"),
            Some(None)
        );
        assert_eq!(
            parse_key_request(KEY_STATUS_XATTR, b"ext4kit.key_status.0123456789abcdeg"),
            Some(None)
        );
        assert_eq!(
            parse_key_request(KEY_STATUS_XATTR, b"ext4kit.remove_key.0123456789abcdef"),
            None
        );
    }

    #[test]
    fn policies_travel_as_the_ioctl_argument() {
        for key in [KeyRef::Descriptor([3; 8]), KeyRef::Identifier([9; 16])] {
            let p = Policy::new(key, 2);
            let v = policy_bytes(&p);
            assert_eq!(v.len(), if matches!(key, KeyRef::Descriptor(_)) { 12 } else { 24 });
            assert_eq!(parse_policy(&v), Some(p));
        }
        let mut v2 = policy_bytes(&Policy::new(KeyRef::Identifier([9; 16]), 0));
        v2[5] = 1;
        assert_eq!(parse_policy(&v2), None, "reserved bytes set");
        assert_eq!(parse_policy(&[1; 12]), None, "unknown version");
        assert_eq!(parse_policy(&[]), None);
    }
}
