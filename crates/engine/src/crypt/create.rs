//! New names and inodes under an encrypted directory
//! (`fscrypt_prepare_new_inode`, `fscrypt_prepare_link`,
//! `fscrypt_prepare_rename`, `fscrypt_prepare_symlink`): a regular file,
//! directory or symlink made there inherits the directory's policy with a
//! fresh random nonce and gets `EXT4_ENCRYPT_FL`; device nodes, FIFOs and
//! sockets stay unencrypted. A link or move into an encrypted directory
//! must carry the same policy (`EXDEV` otherwise).

use std::io::Read;

use ext4kit_format::fscrypt::{self, Context};
use ext4kit_format::inode::{FileType, flags};

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::ops::{NodeKind, XattrSet};
use crate::txn::Txn;

/// 16 bytes from the kernel's random source; a nonce must never repeat, so
/// there is no weaker fallback.
pub(super) fn random_nonce() -> Result<[u8; fscrypt::NONCE_SIZE]> {
    let mut n = [0u8; fscrypt::NONCE_SIZE];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut n))
        .map_err(|e| Error::Unsupported(format!("no random source for an fscrypt nonce: {e}")))?;
    Ok(n)
}

impl Filesystem {
    /// Refuses to give `inode` a name in `dir` unless `dir` is unencrypted,
    /// `inode` is of a type never encrypted, or both share a policy.
    pub(crate) fn check_permitted_context(&self, dir: &Inode, inode: &Inode) -> Result<()> {
        let Some(d) = self.encryption_context(dir)? else {
            return Ok(());
        };
        let encryptable = matches!(
            inode.raw.file_type(),
            Some(FileType::Regular | FileType::Directory | FileType::Symlink)
        );
        match self.encryption_context(inode)? {
            _ if !encryptable => Ok(()),
            Some(c) if c.same_policy(&d) => Ok(()),
            _ => Err(Error::PolicyMismatch(format!(
                "inode {} does not have the encryption policy of directory {}",
                inode.ino, dir.ino
            ))),
        }
    }
}

impl Txn<'_> {
    /// The context a new inode of `kind` in `dir` gets (`None`: not
    /// encrypted), with `kind` as stored: a symlink target becomes its
    /// `fscrypt_symlink_data`. Sets `EXT4_ENCRYPT_FL` on `inode`.
    pub(crate) fn encrypt_new_inode(
        &self,
        dir: &Inode,
        inode: &mut Inode,
        kind: &NodeKind,
    ) -> Result<Option<(Context, Option<NodeKind>)>> {
        if !matches!(kind, NodeKind::Regular | NodeKind::Directory | NodeKind::Symlink(_)) {
            return Ok(None);
        }
        let Some(parent) = self.fs.encryption_context(dir)? else {
            return Ok(None);
        };
        let ctx = Context {
            nonce: random_nonce()?,
            ..parent
        };
        inode.raw.i_flags.set(inode.raw.i_flags.get() | flags::ENCRYPT);
        let stored = match kind {
            NodeKind::Symlink(target) => {
                let master = self.fs.keyring.master(&ctx.key)?;
                let uuid = self.fs.sb.read().s_uuid;
                let key = super::keys::FileKey::derive(&master, &ctx, inode, &uuid)?;
                let max = self.fs.geo.block_size as usize - 3;
                Some(NodeKind::Symlink(fscrypt::symlink_body(
                    &key.encrypt_name(target, max)?,
                )))
            }
            _ => None,
        };
        Ok(Some((ctx, stored)))
    }

    /// Stores `ctx` as inode `ino`'s context xattr.
    pub(crate) fn set_encryption_context(&mut self, ino: u32, ctx: &Context) -> Result<()> {
        let v = ctx.to_bytes();
        self.set_xattr_as(
            ino,
            fscrypt::XATTR_INDEX,
            fscrypt::XATTR_NAME,
            &v,
            XattrSet::Create,
            false,
        )
    }
}
