//! Enabling fs-verity on a file (`FS_IOC_ENABLE_VERITY`,
//! `ext4_begin_enable_verity`/`ext4_end_enable_verity`): the Merkle tree
//! is built from the data, then tree, descriptor and size word are
//! written past `i_size` and `EXT4_VERITY_FL` set in one transaction, so
//! a crash leaves either a plain file or a complete verity file.

use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::inode::flags as fl;
use ext4kit_format::verity::{self as v, Descriptor, HashAlgorithm};

use super::hash::Salted;
use super::read::is_verity;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::write::touch_ctime;
use crate::txn::Txn;

/// How the tree is built (`fsverity enable --hash-alg --salt`); the tree
/// block size is the file system block size, the kernel's default.
#[derive(Debug, Clone)]
pub struct VerityOptions {
    /// The hash; SHA-256 by default.
    pub hash: HashAlgorithm,
    /// Up to 32 bytes hashed before every block; none by default.
    pub salt: Vec<u8>,
}

impl Default for VerityOptions {
    fn default() -> Self {
        Self {
            hash: HashAlgorithm::Sha256,
            salt: Vec::new(),
        }
    }
}

/// Data hashed per device read while building the tree.
const BUILD_CHUNK: usize = 1 << 20;

impl Filesystem {
    /// Enables fs-verity on regular file `ino`: from then on its data is
    /// read only through the tree and never changes.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without the `verity` feature or for a
    /// block-mapped file; [`Error::Exists`] when already enabled;
    /// [`Error::InvalidArgument`] for a salt over 32 bytes;
    /// [`Error::NotPermitted`] for an immutable or append-only file;
    /// [`Error::NoSpace`], [`Error::ReadOnly`]. Nothing changes on error.
    pub fn enable_verity(&self, ino: u32, opts: &VerityOptions) -> Result<()> {
        self.noting_errors("enable_verity", self.enable_verity_locked(ino, opts))
    }

    fn enable_verity_locked(&self, ino: u32, opts: &VerityOptions) -> Result<()> {
        if !self.features().ro_compat.contains(RoCompatFeatures::VERITY) {
            return Err(Error::Unsupported(
                "fs-verity needs the ro_compat feature verity (mkfs -O verity or tune -O verity)".into(),
            ));
        }
        if opts.salt.len() > v::MAX_SALT_SIZE {
            return Err(Error::InvalidArgument(format!(
                "salt of {} bytes (at most 32)",
                opts.salt.len()
            )));
        }
        let _file = self.inode_locks.write(ino);
        self.flush_locked(ino)?;
        let inode = self.inode(ino)?;
        check_enable(&inode)?;
        let (tree, desc) = self.build_tree(&inode, opts)?;
        let bs = u64::from(self.geo.block_size);
        let size = inode.size();
        let desc_pos = v::descriptor_pos(size, tree.len() as u64, bs);
        let size_pos = v::descriptor_size_pos(desc_pos + v::DESCRIPTOR_SIZE as u64, bs);
        let mut tail = vec![0u8; (size_pos + 4 - desc_pos) as usize];
        tail[..v::DESCRIPTOR_SIZE].copy_from_slice(&desc.serialize());
        let at = tail.len() - 4;
        tail[at..].copy_from_slice(&(v::DESCRIPTOR_SIZE as u32).to_le_bytes());
        self.check_file_end(&inode, size_pos + 4)?;

        let mut txn = Txn::begin(self)?;
        txn.under_inode_lock();
        let mut inode = txn.inode(ino)?;
        txn.write_range(&mut inode, v::metadata_pos(size), &tree)?;
        txn.write_range(&mut inode, desc_pos, &tail)?;
        inode.raw.i_flags.set(inode.raw.flags() | fl::VERITY);
        touch_ctime(&mut inode.raw, crate::clock::now());
        txn.write_inode(&mut inode)?;
        txn.commit()
    }

    /// The tree's bytes as stored (root-most level first) and the
    /// descriptor naming its root hash.
    fn build_tree(&self, inode: &Inode, opts: &VerityOptions) -> Result<(Vec<u8>, Descriptor)> {
        let bs = self.geo.block_size as usize;
        let hasher = Salted::new(opts.hash, &opts.salt);
        let size = inode.size();
        let mut hashes = Vec::new();
        let mut buf = vec![0u8; BUILD_CHUNK.max(bs)];
        let mut off = 0u64;
        while off < size {
            let n = self.read_body(inode, off, &mut buf)?;
            if n == 0 {
                break;
            }
            // The buffer holds whole blocks; the last one is zero-padded.
            let end = n.next_multiple_of(bs);
            buf[n..end].fill(0);
            for b in buf[..end].chunks(bs) {
                hashes.extend(hasher.block(b));
            }
            off += n as u64;
        }
        let levels = v::tree_levels(size, bs as u64, opts.hash.digest_size());
        let mut stored: Vec<Vec<u8>> = Vec::with_capacity(levels.len());
        for &(_, count) in &levels {
            let mut level = std::mem::take(&mut hashes);
            level.resize(count as usize * bs, 0);
            hashes = level.chunks(bs).flat_map(|b| hasher.block(b)).collect();
            stored.push(level);
        }
        // One hash left: the top block's, or the only data block's; none
        // for an empty file, whose root hash is zeros.
        let mut root_hash = [0u8; v::MAX_DIGEST_SIZE];
        root_hash[..hashes.len()].copy_from_slice(&hashes);
        let mut salt = [0u8; v::MAX_SALT_SIZE];
        salt[..opts.salt.len()].copy_from_slice(&opts.salt);
        let desc = Descriptor {
            version: 1,
            hash_algorithm: opts.hash,
            log_blocksize: bs.trailing_zeros() as u8,
            salt_size: opts.salt.len() as u8,
            sig_size: 0,
            data_size: size,
            root_hash,
            salt,
        };
        Ok((stored.into_iter().rev().flatten().collect(), desc))
    }
}

/// What `FS_IOC_ENABLE_VERITY` refuses on this file.
fn check_enable(inode: &Inode) -> Result<()> {
    inode.require_regular()?;
    if is_verity(inode) {
        return Err(Error::Exists(format!(
            "inode {} already has fs-verity enabled",
            inode.ino
        )));
    }
    crate::ops::flags::require_changeable(inode)?;
    if !inode.uses_extents() && !inode.has_inline_data() {
        return Err(Error::Unsupported(format!(
            "fs-verity on inode {}: needs an extent-mapped file",
            inode.ino
        )));
    }
    Ok(())
}
