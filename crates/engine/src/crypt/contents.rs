//! File contents of encrypted regular files (`crypto.c`): each block is
//! one data unit of the policy's contents mode ([`super::modes`]) whose
//! IV is derived from its logical block number ([`FileKey::iv`]).
//! Holes and unwritten extents read as zeros without decryption, as the
//! kernel never encrypts them. Reads decrypt whole blocks; writes
//! encrypt whole blocks, reading and decrypting the partial ones first.

use ext4kit_format::inode::FileType;

use super::keys::FileKey;
use super::modes::Dir;
use crate::error::Result;
use crate::fs::Filesystem;
use crate::inode::Inode;

impl FileKey {
    /// Decrypts block `lblk` of the file in place.
    pub(crate) fn decrypt_block(&self, lblk: u64, block: &mut [u8]) -> Result<()> {
        self.crypt(lblk, block, Dir::Decrypt)
    }

    /// Encrypts block `lblk` of the file in place.
    pub(crate) fn encrypt_block(&self, lblk: u64, block: &mut [u8]) -> Result<()> {
        self.crypt(lblk, block, Dir::Encrypt)
    }
}

impl Filesystem {
    /// The contents key of `inode` when it is an encrypted regular file.
    ///
    /// # Errors
    /// [`Error::NoKey`] without its master key; see [`Filesystem::file_key`].
    pub(crate) fn contents_key(&self, inode: &Inode) -> Result<Option<FileKey>> {
        if !self.is_encrypted(inode) || inode.raw.file_type() != Some(FileType::Regular) {
            return Ok(None);
        }
        self.file_key(inode)
    }

    /// Reads encrypted `inode` as plaintext: up to `buf.len()` bytes at
    /// `offset`, within its size.
    ///
    /// # Errors
    /// [`Error::NoKey`] without its key; mapping and I/O errors.
    pub(crate) fn read_encrypted(&self, inode: &Inode, key: &FileKey, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let size = inode.size();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = (size - offset).min(buf.len() as u64) as usize;
        let bs = u64::from(self.geo.block_size);
        let first = offset / bs;
        let last = (offset + n as u64).div_ceil(bs);
        let runs = self.map_range(inode, first, last - first)?;
        let mut block = vec![0u8; bs as usize];
        for lblk in first..last {
            let mapped = runs
                .iter()
                .find(|r| !r.unwritten && r.logical <= lblk && lblk < r.end())
                .map(|r| r.physical + (lblk - r.logical));
            match mapped {
                Some(p) => {
                    self.read_bytes(p * bs, &mut block)?;
                    key.decrypt_block(lblk, &mut block)?;
                }
                None => block.fill(0),
            }
            let lo = (lblk * bs).max(offset);
            let hi = ((lblk + 1) * bs).min(offset + n as u64);
            let from = (lo - lblk * bs) as usize;
            buf[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&block[from..from + (hi - lo) as usize]);
        }
        Ok(n)
    }

    /// `data` at `offset` of encrypted `inode` as the whole encrypted
    /// blocks to store: the blocks it touches, read and decrypted, with
    /// `data` laid over them and encrypted again. Returns the byte offset
    /// of the first block and the ciphertext.
    pub(crate) fn encrypt_range(
        &self,
        inode: &Inode,
        key: &FileKey,
        offset: u64,
        data: &[u8],
    ) -> Result<(u64, Vec<u8>)> {
        let bs = u64::from(self.geo.block_size);
        let first = offset / bs;
        let last = (offset + data.len() as u64).div_ceil(bs);
        let start = first * bs;
        let mut plain = vec![0u8; ((last - first) * bs) as usize];
        // Only what lies inside the file reads back; past its end is zero.
        self.read_encrypted(inode, key, start, &mut plain)?;
        let at = (offset - start) as usize;
        plain[at..at + data.len()].copy_from_slice(data);
        for (i, block) in plain.chunks_mut(bs as usize).enumerate() {
            key.encrypt_block(first + i as u64, block)?;
        }
        Ok((start, plain))
    }
}

impl Filesystem {
    /// [`Filesystem::write`] of an encrypted file, the file's lock held:
    /// whole encrypted blocks written at once (never held for delayed
    /// allocation), then the size set to what the plaintext write gives.
    pub(crate) fn write_encrypted(&self, ino: u32, key: &FileKey, offset: u64, data: &[u8]) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let mut txn = crate::txn::Txn::begin(self)?;
        txn.under_inode_lock();
        txn.write_encrypted(ino, key, offset, data)?;
        txn.commit_deferring_data()?.write()?;
        Ok(data.len())
    }
}

impl crate::txn::Txn<'_> {
    /// The body of [`Filesystem::write_encrypted`] in this transaction,
    /// whose changes to the file must be on the device already: the
    /// partial blocks are read from there to be decrypted.
    pub(crate) fn write_encrypted(&mut self, ino: u32, key: &FileKey, offset: u64, data: &[u8]) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let inode = self.inode(ino)?;
        let (start, blocks) = self.fs.encrypt_range(&inode, key, offset, data)?;
        let size = inode.size().max(offset + data.len() as u64);
        self.write(ino, start, &blocks)?;
        let mut after = self.inode(ino)?;
        after.raw.set_size(size);
        self.write_inode(&mut after)?;
        Ok(data.len())
    }
}
