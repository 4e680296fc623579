//! Giving an empty directory an encryption policy, as the kernel's
//! `FS_IOC_SET_ENCRYPTION_POLICY` does (`fscrypt_ioctl_set_policy`,
//! `fscrypt_supported_policy`, `ext4_set_context`): the directory gets a
//! context xattr (index 9, `c`) with the policy and a fresh nonce, and
//! `EXT4_ENCRYPT_FL`; an inline directory first moves to a block, as
//! `ext4_set_context` converts it. Everything made in it afterwards
//! inherits the policy ([`super::create`]).

use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::fscrypt::{self, Context, KeyRef, mode};
use ext4kit_format::inode::flags;

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::txn::Txn;

/// An fscrypt policy (`struct fscrypt_policy_v1` / `_v2`): the version
/// follows the key reference (a v1 descriptor or a v2 identifier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// `contents_encryption_mode` ([`mode`]).
    pub contents_mode: u8,
    /// `filenames_encryption_mode` ([`mode`]).
    pub filenames_mode: u8,
    /// `flags` ([`fscrypt::policy_flags`]).
    pub flags: u8,
    /// The master key the policy names.
    pub key: KeyRef,
}

impl Policy {
    /// AES-256-XTS contents and AES-256-CTS-CBC names (the modes the
    /// `fscrypt` tool defaults to) with `flags`.
    pub fn new(key: KeyRef, flags: u8) -> Self {
        Self {
            contents_mode: mode::AES_256_XTS,
            filenames_mode: mode::AES_256_CTS,
            flags,
            key,
        }
    }

    /// The policy of a context (its nonce aside).
    pub fn of(ctx: &Context) -> Self {
        Self {
            contents_mode: ctx.contents_mode,
            filenames_mode: ctx.filenames_mode,
            flags: ctx.flags,
            key: ctx.key,
        }
    }

    /// The policy of `version` 1 or 2 with `contents` and `names` modes
    /// and `flags`, naming `key` (its kind must match the version).
    pub fn with_modes(key: KeyRef, contents: u8, names: u8, flags: u8) -> Self {
        Self {
            contents_mode: contents,
            filenames_mode: names,
            flags,
            key,
        }
    }

    /// Refuses what `fscrypt_supported_policy` refuses (`EINVAL`), then
    /// what the kernel accepts but this code cannot write (`EOPNOTSUPP`):
    /// Adiantum on blocks over the `adiantum` crate's 4096 bytes.
    fn check(&self, stable_inodes: bool, block_size: u32) -> Result<()> {
        let version = match self.key {
            KeyRef::Descriptor(_) => fscrypt::VERSION_V1,
            KeyRef::Identifier(_) => fscrypt::VERSION_V2,
        };
        let refusal = fscrypt::policy_refusal(
            version,
            self.contents_mode,
            self.filenames_mode,
            self.flags,
            stable_inodes,
        );
        if let Some(why) = refusal {
            return Err(Error::InvalidArgument(format!("fscrypt policy: {why}")));
        }
        if self.contents_mode == mode::ADIANTUM && block_size as usize > super::modes::ADIANTUM_MAX {
            return Err(Error::Unsupported(format!(
                "fscrypt contents mode Adiantum on {block_size}-byte blocks (at most {} here)",
                super::modes::ADIANTUM_MAX
            )));
        }
        Ok(())
    }
}

impl Filesystem {
    /// The policy of inode `ino` (`FS_IOC_GET_ENCRYPTION_POLICY_EX`),
    /// `None` when it is not encrypted.
    ///
    /// # Errors
    /// As [`Filesystem::encryption_context`].
    pub fn encryption_policy(&self, ino: u32) -> Result<Option<Policy>> {
        let inode = self.inode(ino)?;
        Ok(self.encryption_context(&inode)?.map(|c| Policy::of(&c)))
    }

    /// Gives directory `ino` `policy`, as `FS_IOC_SET_ENCRYPTION_POLICY`:
    /// a no-op when it already has that policy.
    ///
    /// # Errors
    /// As the kernel: [`Error::Unsupported`] without the `encrypt` feature
    /// (`EOPNOTSUPP`; also for valid policies this code cannot write),
    /// [`Error::InvalidArgument`] for a policy the kernel refuses,
    /// [`Error::Exists`] when `ino` has another policy, [`Error::NotDir`],
    /// [`Error::NotEmpty`], [`Error::NoKey`] for a v2 policy whose key was
    /// not added, [`Error::NotPermitted`] for the root directory (e2fsck
    /// needs an unencrypted lost+found).
    pub fn set_encryption_policy(&self, ino: u32, policy: &Policy) -> Result<()> {
        if !self.geo.features.incompat.contains(IncompatFeatures::ENCRYPT) {
            return Err(Error::Unsupported(
                "setting an encryption policy needs the encrypt feature".into(),
            ));
        }
        self.in_txn(|txn| txn.set_encryption_policy(ino, policy))
    }
}

impl Txn<'_> {
    /// The body of [`Filesystem::set_encryption_policy`] in this transaction.
    fn set_encryption_policy(&mut self, ino: u32, policy: &Policy) -> Result<()> {
        let inode = self.inode(ino)?;
        if let Some(ctx) = self.fs.encryption_context(&inode)? {
            if Policy::of(&ctx) == *policy {
                return Ok(());
            }
            return Err(Error::Exists(format!(
                "inode {ino} already has another encryption policy"
            )));
        }
        if !inode.is_dir() {
            return Err(Error::NotDir(format!("inode {ino}: only a directory takes a policy")));
        }
        if inode.raw.links() == 0 {
            return Err(Error::NotFound(format!("directory {ino} was removed")));
        }
        if !self.dir_is_empty(&inode)? {
            return Err(Error::NotEmpty(format!("directory {ino}")));
        }
        let stable = self.fs.geo.features.compat.contains(CompatFeatures::STABLE_INODES);
        policy.check(stable, self.fs.geo.block_size)?;
        if let KeyRef::Identifier(_) = policy.key {
            self.fs.keyring.master(&policy.key)?;
        }
        if ino == crate::ROOT_INO {
            return Err(Error::NotPermitted("the root directory cannot be encrypted".into()));
        }
        // `fscrypt_supported_v1_policy`: a v1 key cannot give the dirhash
        // key a casefolded directory's entries are hashed with.
        if self.fs.casefolded(&inode) && matches!(policy.key, KeyRef::Descriptor(_)) {
            return Err(Error::InvalidArgument(format!(
                "fscrypt policy: v1 policies cannot be used on casefolded directory {ino}; use a v2 policy"
            )));
        }
        self.inode_for_change(ino)?;
        let ctx = Context {
            contents_mode: policy.contents_mode,
            filenames_mode: policy.filenames_mode,
            flags: policy.flags,
            log2_data_unit_size: 0,
            key: policy.key,
            nonce: super::create::random_nonce()?,
        };
        self.set_encryption_context(ino, &ctx)?;
        let mut inode = self.inode(ino)?;
        inode.raw.i_flags.set(inode.raw.flags() | flags::ENCRYPT);
        self.write_inode(&mut inode)
    }
}
