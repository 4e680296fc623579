//! Names in encrypted directories (`fname.c`): stored names are the
//! plaintext zero-padded to the policy's padding and encrypted with the
//! policy's names mode under the directory's key with the IV of index 0, so
//! one plaintext always gives the same stored name and the directory code
//! below (lookup, htree hashes over the stored bytes, insertion) works on
//! stored names unchanged. The public operations translate at their entry
//! ([`Filesystem::disk_name`]) and readdir on the way out ([`Presenter`]).

use std::borrow::Cow;
use std::collections::HashMap;

use ext4kit_format::fscrypt::{self, NoKeyName};
use ext4kit_format::hash::{HashVersion, dx_hash};
use sha2::{Digest, Sha256};

use super::keys::FileKey;
use super::modes::Dir;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// What a directory operation does with the name it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intent {
    /// Finds an existing entry (lookup, unlink, rmdir, rename source):
    /// without the key, a no-key name names it.
    Find,
    /// Makes a new entry: needs the key (`ENOKEY` otherwise).
    Create,
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

fn sha256(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

impl FileKey {
    /// The stored form of plaintext `name` (at most `max` bytes stored).
    pub(crate) fn encrypt_name(&self, name: &[u8], max: usize) -> Result<Vec<u8>> {
        if name.is_empty() || name.len() > max {
            return Err(Error::NameTooLong(String::from_utf8_lossy(name).into_owned()));
        }
        let mut buf = name.to_vec();
        buf.resize(fscrypt::padded_len(name.len(), self.ctx.padding(), max), 0);
        self.crypt(0, &mut buf, Dir::Encrypt)?;
        Ok(buf)
    }

    /// The plaintext of stored name `disk`, its zero padding removed;
    /// `None` for a stored name too short to be a ciphertext.
    pub(crate) fn decrypt_name(&self, disk: &[u8]) -> Result<Option<Vec<u8>>> {
        if disk.len() < fscrypt::NAME_MIN {
            return Ok(None);
        }
        let mut buf = disk.to_vec();
        self.crypt(0, &mut buf, Dir::Decrypt)?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        Ok(Some(buf))
    }
}

/// How a directory's stored names are shown.
pub(crate) enum Presenter {
    /// Not encrypted: as stored.
    Plain,
    /// With the key: decrypted.
    Decrypt(FileKey),
    /// Without it: the no-key name, carrying the readdir hash when the
    /// kernel would give one: computed over the stored name, or, in a
    /// casefolded directory, the one each entry stores.
    NoKey {
        hash: Option<(HashVersion, [u32; 4])>,
        stored: Option<HashMap<Vec<u8>, (u32, u32)>>,
    },
}

impl Presenter {
    /// The name readdir shows for stored name `disk`.
    pub(crate) fn present(&self, disk: &[u8]) -> Vec<u8> {
        if is_dot(disk) {
            return disk.to_vec();
        }
        match self {
            Self::Plain => disk.to_vec(),
            // An undecryptable name (too short: e2fsck clears such) is
            // shown as the no-key form rather than hidden.
            Self::Decrypt(k) => match k.decrypt_name(disk) {
                Ok(Some(n)) if !n.is_empty() => n,
                _ => fscrypt::nokey_encode(disk, 0, 0, sha256),
            },
            Self::NoKey { stored: Some(map), .. } => {
                let (major, minor) = map.get(disk).copied().unwrap_or((0, 0));
                fscrypt::nokey_encode(disk, major, minor, sha256)
            }
            Self::NoKey { hash, .. } => {
                let h = hash.and_then(|(v, seed)| dx_hash(disk, v, &seed).ok());
                let (major, minor) = h.map_or((0, 0), |h| (h.major, h.minor));
                fscrypt::nokey_encode(disk, major, minor, sha256)
            }
        }
    }

    /// Whether names pass through unchanged.
    pub(crate) fn is_plain(&self) -> bool {
        matches!(self, Self::Plain)
    }
}

impl Filesystem {
    /// How readdir shows `dir`'s names.
    ///
    /// # Errors
    /// A corrupt context, or a mode this code does not implement.
    pub(crate) fn presenter(&self, dir: &Inode) -> Result<Presenter> {
        match self.file_key(dir) {
            Ok(None) => Ok(Presenter::Plain),
            Ok(Some(k)) => Ok(Presenter::Decrypt(k)),
            Err(Error::NoKey(_)) => {
                if self.hash_in_dirent(dir) {
                    return Ok(Presenter::NoKey {
                        hash: None,
                        stored: Some(self.stored_hashes(dir)?),
                    });
                }
                let seed = self.sb.read().s_hash_seed.map(|w| w.get());
                Ok(Presenter::NoKey {
                    hash: self.readdir_hash_version(dir)?.map(|v| (v, seed)),
                    stored: None,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// The stored name user name `name` stands for in `dir`: itself
    /// outside encrypted directories; its ciphertext with the key; without
    /// it, the stored name its no-key form names ([`Error::NotFound`] when
    /// none does), or [`Error::NoKey`] for a new name.
    pub(crate) fn disk_name<'a>(&self, dir: &Inode, name: &'a [u8], intent: Intent) -> Result<Cow<'a, [u8]>> {
        if !self.is_encrypted(dir) || is_dot(name) {
            return Ok(Cow::Borrowed(name));
        }
        match self.file_key(dir) {
            Ok(None) => Ok(Cow::Borrowed(name)),
            Ok(Some(k)) => {
                if intent == Intent::Create {
                    self.check_plain_casefold_name(dir, name)?;
                }
                k.encrypt_name(name, 255).map(Cow::Owned)
            }
            Err(Error::NoKey(why)) if intent == Intent::Create => Err(Error::NoKey(why)),
            Err(Error::NoKey(_)) => self.nokey_lookup(dir, name).map(Cow::Owned),
            Err(e) => Err(e),
        }
    }

    /// The stored name no-key name `name` names in `dir`.
    fn nokey_lookup(&self, dir: &Inode, name: &[u8]) -> Result<Vec<u8>> {
        let missing = || Error::NotFound(String::from_utf8_lossy(name).into_owned());
        match fscrypt::nokey_decode(name).ok_or_else(missing)? {
            NoKeyName::Exact(disk) => Ok(disk),
            long => {
                let mut hit = None;
                self.for_each_dir_entry(dir, |e| {
                    if long.matches(&e.name, sha256) {
                        hit = Some(e.name);
                    }
                    Ok(hit.is_none())
                })?;
                hit.ok_or_else(missing)
            }
        }
    }
}

impl Filesystem {
    /// The target symlink `inode` shows for its stored `body`: as stored
    /// unless encrypted; then (`fscrypt_get_symlink`) the decrypted
    /// `fscrypt_symlink_data` with the key, its no-key name without.
    pub(crate) fn present_link(&self, inode: &Inode, body: Vec<u8>) -> Result<Vec<u8>> {
        if !self.is_encrypted(inode) {
            return Ok(body);
        }
        let bad = || {
            Error::inconsistent(
                crate::error::Location::Inode(inode.ino),
                "encrypted symlink with a bad fscrypt_symlink_data",
            )
        };
        let ct = fscrypt::symlink_ciphertext(&body).ok_or_else(bad)?;
        match self.file_key(inode) {
            Ok(Some(k)) => k.decrypt_name(ct)?.filter(|t| !t.is_empty()).ok_or_else(bad),
            Ok(None) => Ok(body),
            Err(Error::NoKey(_)) => Ok(fscrypt::nokey_encode(ct, 0, 0, sha256)),
            Err(e) => Err(e),
        }
    }
}

impl Filesystem {
    /// The stored names of a rename's source and target: both directories'
    /// keys are needed when either is encrypted (`fscrypt_prepare_rename`).
    pub(crate) fn rename_disk_names<'a>(
        &self,
        old_parent: u32,
        old_name: &'a [u8],
        new_parent: u32,
        new_name: &'a [u8],
    ) -> Result<[Cow<'a, [u8]>; 2]> {
        let (od, nd) = (self.inode(old_parent)?, self.inode(new_parent)?);
        let intent = if self.is_encrypted(&od) || self.is_encrypted(&nd) {
            Intent::Create
        } else {
            Intent::Find
        };
        Ok([
            self.disk_name(&od, old_name, intent)?,
            self.disk_name(&nd, new_name, intent)?,
        ])
    }
}
