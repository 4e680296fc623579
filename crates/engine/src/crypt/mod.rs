//! fscrypt on ext4 (`Documentation/filesystems/fscrypt.rst`): directories
//! with a policy hold names encrypted with AES-256-CTS-CBC and files whose
//! blocks are AES-256-XTS encrypted, each inode with its own key derived
//! from a master key and the nonce in its context ([`ext4kit_format::fscrypt`]).
//!
//! The engine keeps the master keys it was given ([`Filesystem::add_key`])
//! in a keyring by the name policies use for them (v1 descriptor, v2
//! identifier). Without its key an encrypted directory lists the kernel's
//! no-key names and its files' contents are refused (`ENOKEY`), as the
//! kernel does; with it, names and contents read and write as plaintext.
//!
//! - [`keys`]: master keys and the per-file key derivation.
//! - [`modes`]: the cipher of each fscrypt mode.
//! - [`names`]: user names to stored names and back, at the public
//!   directory operations (the directory code below sees stored names).
//! - [`contents`]: the block transform at the file read and write paths.
//! - [`policy`]: giving an empty directory a policy.
//! - [`dirhash`]: directories both casefolded and encrypted, whose
//!   entries carry the SipHash of the folded plaintext name.
//! - [`removal`]: removing a key while files under it are open.

pub(crate) mod contents;
pub(crate) mod create;
pub(crate) mod dirhash;
pub(crate) mod keys;
pub(crate) mod modes;
pub(crate) mod names;
pub(crate) mod policy;
pub(crate) mod removal;

use std::collections::HashMap;

use ext4kit_format::fscrypt::{self, Context, KeyRef};
use ext4kit_format::inode::flags;
use ext4kit_format::xattr::{self, XattrEntry, XattrValue};
use parking_lot::RwLock;

use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

pub use keys::MasterKey;
pub use policy::Policy;
pub use removal::KeyStatus;

/// Master keys taken from one `Filesystem` for another
/// ([`Filesystem::keys`]); their bytes are not reachable through it.
#[derive(Default)]
pub struct Keys(HashMap<KeyRef, MasterKey>);

/// The master keys given to this file system, by the name contexts use.
#[derive(Default)]
pub(crate) struct Keyring(RwLock<HashMap<KeyRef, MasterKey>>);

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring").field("keys", &self.0.read().len()).finish()
    }
}

impl Filesystem {
    /// Adds a master key: a v2 key by its identifier (derived from it), a
    /// v1 key by the descriptor its policies name. Returns the name the
    /// key was filed under.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a key shorter than 16 or longer than
    /// 64 bytes (`FSCRYPT_MIN_KEY_SIZE`, `FSCRYPT_MAX_KEY_SIZE`).
    pub fn add_key(&self, raw: &[u8], v1_descriptor: Option<[u8; fscrypt::DESCRIPTOR_SIZE]>) -> Result<KeyRef> {
        let key = MasterKey::new(raw)?;
        let name = match v1_descriptor {
            Some(d) => KeyRef::Descriptor(d),
            None => KeyRef::Identifier(key.identifier()),
        };
        self.keyring.0.write().insert(name, key);
        Ok(name)
    }

    /// Removes a master key, as `FS_IOC_REMOVE_ENCRYPTION_KEY`: from then
    /// on its directories list no-key names and its files refuse their
    /// contents (`ENOKEY`). No per-file key outlives it (they are derived
    /// at each access), so a file opened before loses its contents too,
    /// where the kernel lets files in use keep theirs and reports them busy.
    ///
    /// # Errors
    /// [`Error::NoKey`] when the key was not added (the kernel's `ENOKEY`).
    pub fn remove_key(&self, key: &KeyRef) -> Result<()> {
        match self.keyring.0.write().remove(key) {
            Some(_) => Ok(()),
            None => Err(Error::NoKey(format!("{} was not added", keys::describe(key)))),
        }
    }

    /// The master keys added so far, to hand to the `Filesystem` that
    /// replaces this one on the same image (a mount grown while serving
    /// reopens it and must keep the keys added while it ran).
    pub fn keys(&self) -> Keys {
        Keys(self.keyring.0.read().clone())
    }

    /// Adds every key of `keys` (see [`Filesystem::keys`]).
    pub fn add_keys(&self, keys: Keys) {
        self.keyring.0.write().extend(keys.0);
    }

    /// Whether `inode` carries `EXT4_ENCRYPT_FL` on an `encrypt` file system.
    pub(crate) fn is_encrypted(&self, inode: &Inode) -> bool {
        inode.raw.has_flag(flags::ENCRYPT)
    }

    /// The encryption context of `inode`, `None` when it is not encrypted.
    ///
    /// # Errors
    /// Corruption: the flag without a context, or a context that does not
    /// decode (e2fsck clears such inodes).
    pub fn encryption_context(&self, inode: &Inode) -> Result<Option<Context>> {
        if !self.is_encrypted(inode) {
            return Ok(None);
        }
        let value = self.context_xattr(inode)?;
        let bad = |what: &str| Error::inconsistent(Location::Inode(inode.ino), format!("encrypted inode {what}"));
        let v = value.ok_or_else(|| bad("without an encryption context (xattr index 9 \"c\")"))?;
        Context::parse(&v)
            .map(Some)
            .ok_or_else(|| bad("with an encryption context of unknown version or size"))
    }

    /// The `c` xattr of index 9, from the inode body or its block.
    fn context_xattr(&self, inode: &Inode) -> Result<Option<Vec<u8>>> {
        let find = |es: &[XattrEntry<'_>]| {
            es.iter().find_map(|e| match e.value {
                XattrValue::Inline(v) if e.index() == fscrypt::XATTR_INDEX && e.name == fscrypt::XATTR_NAME => {
                    Some(v.to_vec())
                }
                _ => None,
            })
        };
        let at = Location::Inode(inode.ino);
        if inode.record.len() > 128 {
            let region =
                xattr::ibody_region(&inode.record, inode.raw.i_extra_isize.get()).map_err(|e| Error::format(at, e))?;
            if let Some(v) = find(&xattr::parse_ibody(region).map_err(|e| Error::format(at, e))?) {
                return Ok(Some(v));
            }
        }
        let blk = inode.raw.file_acl();
        if blk == 0 {
            return Ok(None);
        }
        let buf = self.meta_block(blk, inode.ino)?;
        let at = Location::Block {
            block: blk,
            inode: inode.ino,
        };
        Ok(find(
            &xattr::parse_block(&buf).map_err(|e| Error::format(at, e))?.entries,
        ))
    }

    /// The key of encrypted `inode` when its master key was given; `None`
    /// for an unencrypted inode.
    ///
    /// # Errors
    /// [`Error::NoKey`] when the master key is missing, [`Error::Unsupported`]
    /// naming a mode or flag this code does not implement, and the
    /// errors of [`Self::encryption_context`].
    pub(crate) fn file_key(&self, inode: &Inode) -> Result<Option<keys::FileKey>> {
        let Some(ctx) = self.encryption_context(inode)? else {
            return Ok(None);
        };
        let master = self.keyring.0.read().get(&ctx.key).cloned();
        let master = master.or_else(|| self.removed_keys.master_for(&ctx.key, inode.ino));
        let Some(master) = master else {
            return Err(Error::NoKey(format!(
                "inode {} is encrypted with {} and that key was not given",
                inode.ino,
                keys::describe(&ctx.key)
            )));
        };
        let uuid = self.sb.read().s_uuid;
        let key = keys::FileKey::derive(&master, &ctx, inode, &uuid)?;
        if inode.is_dir() && self.casefolded(inode) {
            return key.with_dirhash(&master).map(Some);
        }
        Ok(Some(key))
    }
}

impl Keyring {
    /// The master key a context names.
    ///
    /// # Errors
    /// [`Error::NoKey`] when it was not given.
    pub(crate) fn master(&self, key: &KeyRef) -> Result<MasterKey> {
        self.0
            .read()
            .get(key)
            .cloned()
            .ok_or_else(|| Error::NoKey(format!("{} was not given", keys::describe(key))))
    }
}
