//! Adding an fscrypt master key to a running mount: `ext4kit key add
//! MOUNTPOINT [DESCRIPTOR=]FILE`, the counterpart of the kernel's
//! `FS_IOC_ADD_ENCRYPTION_KEY` (an ioctl this workspace cannot issue, every
//! ioctl being `unsafe`). The request travels like the sync request
//! ([`crate::sync_request`]) but as a write: setting the extended
//! attribute [`ADD_KEY_XATTR`] (or `ADD_KEY_XATTR.DESCRIPTOR` for a v1
//! key, 16 hex digits) of the mount point to the raw key. The server files
//! the key ([`ext4kit_engine::Filesystem::add_key`]); from then on readdir
//! of the directories it opens shows their names and their files read.
//! What the kernel cached before stays until it expires or is dropped:
//! directory listings read without the key and no-key names looked up
//! (`entry_timeout=`). Misses in encrypted directories are never cached
//! (see [`Ext4Fuse::lookup_entry`]), so a plaintext name is found at once.

use fuser::Errno;

use crate::adapter::Ext4Fuse;

/// The extended attribute whose setting adds a key.
pub const ADD_KEY_XATTR: &str = "ext4kit.add_key";

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
    /// Files `raw` as a master key (v1 under `descriptor`).
    pub(crate) fn add_key_request(&self, descriptor: Option<[u8; 8]>, raw: &[u8]) -> Result<(), Errno> {
        self.fs()
            .add_key(raw, descriptor)
            .map(|_| ())
            .map_err(|e| self.errno(e))
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
}
