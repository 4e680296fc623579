//! Directories both casefolded and encrypted (`ext4_hash_in_dirent`):
//! their htree cannot hash the stored ciphertext (case-insensitive names
//! must meet in one leaf) and without the key nobody can hash the
//! plaintext, so each entry stores its hash — SipHash-2-4 of the folded
//! plaintext name under the directory's dirhash key (`fscrypt_fname_siphash`,
//! `DX_HASH_SIPHASH`) — in a `struct ext4_dir_entry_hash` after the name
//! (`Documentation/filesystems/ext4/directory.rst`). Readers without the
//! key order and list entries by those stored hashes.
//!
//! Names still reach the directory code as stored ciphertext
//! ([`super::names`]); here they are decrypted again where a hash or a
//! case-insensitive comparison needs the plaintext.

use std::collections::HashMap;

use ext4kit_format::casefold;
use ext4kit_format::dir_entry;
use ext4kit_format::hash::{DxHash, EXT4_HTREE_EOF_32BIT};

use super::keys::FileKey;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// A stored name to find in a casefolded, encrypted directory whose key
/// is present: an entry matches when its plaintext folds to the same
/// name (`generic_ci_match` over the decrypted entry).
pub(crate) struct SealedName<'a> {
    disk: &'a [u8],
    key: FileKey,
    folded: Option<Vec<u8>>,
    plain: Vec<u8>,
}

impl std::fmt::Debug for SealedName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedName").field("disk", &self.disk).finish()
    }
}

impl SealedName<'_> {
    /// Whether stored name `entry` names the same file.
    pub(crate) fn matches(&self, entry: &[u8]) -> bool {
        if entry == self.disk {
            return true;
        }
        let Ok(Some(plain)) = self.key.decrypt_name(entry) else {
            return false;
        };
        match (&self.folded, casefold::fold(&plain)) {
            (Some(a), Some(b)) => *a == b,
            _ => self.plain == plain,
        }
    }
}

/// The htree hash of a folded plaintext name (`__ext4fs_dirhash` for
/// `DX_HASH_SIPHASH`: the high word is the major hash, bit 0 cleared and
/// kept off the end-of-directory cookie, the low word the minor).
fn split_siphash(h: u64) -> DxHash {
    let mut major = (h >> 32) as u32 & !1;
    if major == EXT4_HTREE_EOF_32BIT << 1 {
        major = (EXT4_HTREE_EOF_32BIT - 1) << 1;
    }
    DxHash { major, minor: h as u32 }
}

impl Filesystem {
    /// Whether `dir`'s entries carry their hash (casefolded and encrypted).
    pub(crate) fn hash_in_dirent(&self, dir: &Inode) -> bool {
        self.is_encrypted(dir) && self.casefolded(dir)
    }

    /// The key of a casefolded, encrypted `dir`.
    ///
    /// # Errors
    /// [`Error::NoKey`] without it; those of [`Self::file_key`].
    fn sealed_key(&self, dir: &Inode) -> Result<FileKey> {
        self.file_key(dir)?
            .ok_or_else(|| Error::NoKey(format!("directory {} is not encrypted", dir.ino)))
    }

    /// The hash stored name `disk` carries in the casefolded, encrypted
    /// `dir`: its plaintext folded (as stored when it does not fold), then
    /// SipHash-2-4 under the dirhash key.
    ///
    /// # Errors
    /// [`Error::NoKey`] without the key (the kernel's "Siphash requires
    /// key"); a stored name that does not decrypt.
    pub(crate) fn sealed_hash(&self, dir: &Inode, disk: &[u8]) -> Result<DxHash> {
        let key = self.sealed_key(dir)?;
        let plain = key.decrypt_name(disk)?.ok_or_else(|| {
            Error::InvalidArgument(format!("a stored name of directory {} does not decrypt", dir.ino))
        })?;
        let h = key
            .siphash(&casefold::hash_input(&plain))
            .ok_or_else(|| Error::NoKey(format!("directory {} has no dirhash key", dir.ino)))?;
        Ok(split_siphash(h))
    }

    /// The hash a new entry for `disk` stores after its name: `None`
    /// outside casefolded, encrypted directories.
    ///
    /// # Errors
    /// As [`Self::sealed_hash`].
    pub(crate) fn dirent_hash(&self, dir: &Inode, disk: &[u8]) -> Result<Option<(u32, u32)>> {
        if !self.hash_in_dirent(dir) || disk == b"." || disk == b".." {
            return Ok(None);
        }
        self.sealed_hash(dir, disk).map(|h| Some((h.major, h.minor)))
    }

    /// Refuses switching CASEFOLD on for encrypted `dir` unless its key is
    /// present and its policy is v2, which the dirhash key needs
    /// (`fscrypt_prepare_setflags`: `ENOKEY`, `EINVAL`).
    ///
    /// # Errors
    /// [`Error::NoKey`], [`Error::InvalidArgument`].
    pub(crate) fn check_casefold_on_encrypted(&self, dir: &Inode) -> Result<()> {
        let Some(ctx) = self.encryption_context(dir)? else {
            return Ok(());
        };
        if let ext4kit_format::fscrypt::KeyRef::Descriptor(_) = ctx.key {
            return Err(Error::InvalidArgument(format!(
                "directory {} has a v1 encryption policy, which cannot be casefolded (no dirhash key)",
                dir.ino
            )));
        }
        let master = self.keyring.master(&ctx.key)?;
        let uuid = self.sb.read().s_uuid;
        FileKey::derive(&master, &ctx, dir, &uuid)?
            .with_dirhash(&master)
            .map(|_| ())
    }

    /// Stored name → stored hash for every entry of the casefolded,
    /// encrypted `dir`, for listing it without the key: its no-key names
    /// carry the hashes (`fscrypt_fname_disk_to_usr`). One pass over the
    /// directory, holding one pair per name.
    ///
    /// # Errors
    /// Corruption of the blocks read.
    pub(crate) fn stored_hashes(&self, dir: &Inode) -> Result<HashMap<Vec<u8>, (u32, u32)>> {
        let mut out = HashMap::new();
        for run in self.all_runs(dir)? {
            for i in 0..run.len {
                let block = run.physical + i;
                let buf = self.meta_block(block, dir.ino)?;
                let at = Location::Block { block, inode: dir.ino };
                self.scan_dir_block(dir, &buf, run.logical + i, at, |e| {
                    let h = dir_entry::stored_hash(&buf, e).unwrap_or((0, 0));
                    out.insert(e.name.to_vec(), h);
                    false
                })?;
            }
        }
        Ok(out)
    }

    /// A lookup key for stored name `disk` in the casefolded, encrypted
    /// `dir`; `None` without the key (stored names then compare exactly).
    pub(crate) fn sealed_name<'a>(&self, dir: &Inode, disk: &'a [u8]) -> Option<SealedName<'a>> {
        let key = self.sealed_key(dir).ok()?;
        let plain = key.decrypt_name(disk).ok()??;
        Some(SealedName {
            disk,
            folded: casefold::fold(&plain),
            plain,
            key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SipHash-2-4 reference vector (Aumasson and Bernstein, appendix
    /// A): key 00..0f, message 00..0e, 64-bit output a129ca6149be45e5.
    #[test]
    fn siphash_reference_vector() {
        use std::hash::Hasher;
        let key: Vec<u8> = (0..16).collect();
        let k0 = u64::from_le_bytes(key[..8].try_into().unwrap());
        let k1 = u64::from_le_bytes(key[8..].try_into().unwrap());
        let mut h = siphasher::sip::SipHasher24::new_with_keys(k0, k1);
        h.write(&(0..15).collect::<Vec<u8>>());
        assert_eq!(h.finish(), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn major_hash_has_bit_0_clear_and_avoids_the_eof_cookie() {
        let h = split_siphash(0x1234_5679_9abc_def0);
        assert_eq!((h.major, h.minor), (0x1234_5678, 0x9abc_def0));
        let eof = u64::from(EXT4_HTREE_EOF_32BIT << 1) << 32 | 7;
        assert_eq!(split_siphash(eof).major, (EXT4_HTREE_EOF_32BIT - 1) << 1);
    }
}
