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

    /// Python: HKDF-SHA512 from `cryptography`, SipHash-2-4 written out
    /// from the paper (an independent path to the same 64 bits).
    const PY: &str = r#"
import sys
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
master, nonce, msg = (bytes.fromhex(a) for a in sys.argv[1:4])
k = HKDF(algorithm=hashes.SHA512(), length=16, salt=None,
         info=b"fscrypt\0" + bytes([5]) + nonce).derive(master)
M = (1 << 64) - 1
rotl = lambda x, b: ((x << b) | (x >> (64 - b))) & M
k0, k1 = int.from_bytes(k[:8], "little"), int.from_bytes(k[8:], "little")
v = [k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d, k0 ^ 0x6c7967656e657261, k1 ^ 0x7465646279746573]
def rnd():
    v[0] = (v[0] + v[1]) & M; v[1] = rotl(v[1], 13) ^ v[0]; v[0] = rotl(v[0], 32)
    v[2] = (v[2] + v[3]) & M; v[3] = rotl(v[3], 16) ^ v[2]
    v[0] = (v[0] + v[3]) & M; v[3] = rotl(v[3], 21) ^ v[0]
    v[2] = (v[2] + v[1]) & M; v[1] = rotl(v[1], 17) ^ v[2]; v[2] = rotl(v[2], 32)
b = msg + bytes((-len(msg) - 1) % 8) + bytes([len(msg) & 0xff])
for i in range(0, len(b), 8):
    m = int.from_bytes(b[i:i + 8], "little")
    v[3] ^= m; rnd(); rnd(); v[0] ^= m
v[2] ^= 0xff
for _ in range(4): rnd()
print("%016x" % (v[0] ^ v[1] ^ v[2] ^ v[3]))
"#;

    /// The dirhash key derivation and SipHash against Python's.
    #[test]
    fn dirhash_matches_an_independent_derivation() {
        use ext4kit_format::fscrypt::Context;
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let master = super::super::keys::MasterKey::new(&(0..64).map(|i| i * 3 + 1).collect::<Vec<u8>>()).unwrap();
        let nonce: Vec<u8> = (0..16).map(|i| 0xa0 ^ i).collect();
        let mut ctx = vec![2u8, 1, 4, 2, 0, 0, 0, 0];
        ctx.extend_from_slice(&master.identifier());
        ctx.extend_from_slice(&nonce);
        let ctx = Context::parse(&ctx).unwrap();
        let mut record = vec![0u8; 256];
        record[..2].copy_from_slice(&0o40755u16.to_le_bytes());
        record[128..130].copy_from_slice(&32u16.to_le_bytes());
        let inode = Inode {
            ino: 12,
            raw: ext4kit_format::inode::RawInode::parse(&record, 256).unwrap(),
            record: record.into(),
        };
        let key = FileKey::derive(&master, &ctx, &inode, &[0; 16])
            .unwrap()
            .with_dirhash(&master)
            .unwrap();
        for msg in [
            &b"abc"[..],
            b"strasse-00001-\xd1\x84\xd0\xb0\xd0\xb9\xd0\xbb",
            b"exactly8",
            b"",
        ] {
            let out = std::process::Command::new("python3")
                .args([
                    "-c",
                    PY,
                    &hex(&(0..64).map(|i| i * 3 + 1).collect::<Vec<u8>>()),
                    &hex(&nonce),
                    &hex(msg),
                ])
                .output();
            let Ok(out) = out.map_err(|e| e.to_string()).and_then(|o| {
                if o.status.success() {
                    Ok(o)
                } else {
                    Err(String::from_utf8_lossy(&o.stderr).into_owned())
                }
            }) else {
                ext4kit_testkit::skipped!("python3 with cryptography (python3-cryptography) is missing");
                return;
            };
            let want = u64::from_str_radix(String::from_utf8_lossy(&out.stdout).trim(), 16).unwrap();
            assert_eq!(key.siphash(msg), Some(want), "{:?}", String::from_utf8_lossy(msg));
        }
    }

    #[test]
    fn major_hash_has_bit_0_clear_and_avoids_the_eof_cookie() {
        let h = split_siphash(0x1234_5679_9abc_def0);
        assert_eq!((h.major, h.minor), (0x1234_5678, 0x9abc_def0));
        let eof = u64::from(EXT4_HTREE_EOF_32BIT << 1) << 32 | 7;
        assert_eq!(split_siphash(eof).major, (EXT4_HTREE_EOF_32BIT - 1) << 1);
    }
}
