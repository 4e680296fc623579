//! fs-verity metadata as ext4 stores it (the kernel's
//! `Documentation/filesystems/fsverity.rst` and `fs/ext4/verity.c`): a file
//! with `EXT4_VERITY_FL` keeps, past its data, starting at the first 64 KiB
//! boundary at or after `i_size`, the Merkle tree (root level first, the
//! level just above the data last), then `struct fsverity_descriptor` at the
//! next block boundary, and the descriptor's size as a `__le32` in the last
//! four bytes of the file's last block. `i_size` stays the data size.

use crate::error::FormatError;

/// Where the verity metadata starts: `i_size` rounded up to 64 KiB, so a
/// page cache of any page size keeps data and tree in separate pages.
pub const METADATA_ALIGN: u64 = 65536;
/// `sizeof(struct fsverity_descriptor)` without a signature.
pub const DESCRIPTOR_SIZE: usize = 256;
/// `FS_VERITY_MAX_DIGEST_SIZE`: room for the root hash in the descriptor.
pub const MAX_DIGEST_SIZE: usize = 64;
/// The descriptor's salt field.
pub const MAX_SALT_SIZE: usize = 32;

/// `FS_VERITY_HASH_ALG_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgorithm {
    /// `FS_VERITY_HASH_ALG_SHA256` (1).
    Sha256,
    /// `FS_VERITY_HASH_ALG_SHA512` (2).
    Sha512,
}

impl HashAlgorithm {
    /// The algorithm numbered `n` in the descriptor.
    pub fn from_number(n: u8) -> Option<Self> {
        match n {
            1 => Some(Self::Sha256),
            2 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// Its number in the descriptor.
    pub fn number(self) -> u8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha512 => 2,
        }
    }

    /// The digest size in bytes.
    pub fn digest_size(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha512 => 64,
        }
    }

    /// The hash's input block size: the salt is zero-padded to it so the
    /// salted state can be computed once.
    pub fn input_block_size(self) -> usize {
        match self {
            Self::Sha256 => 64,
            Self::Sha512 => 128,
        }
    }

    /// The name `fsverity digest` prints before the hex digest.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "sha256",
            Self::Sha512 => "sha512",
        }
    }
}

/// `struct fsverity_descriptor` (256 bytes, little-endian), without the
/// optional signature that may follow it on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// `version`: must be 1.
    pub version: u8,
    /// `hash_algorithm`.
    pub hash_algorithm: HashAlgorithm,
    /// `log_blocksize`: log2 of the Merkle tree block size.
    pub log_blocksize: u8,
    /// `salt_size`: bytes of `salt` in use.
    pub salt_size: u8,
    /// `sig_size`: bytes of the builtin signature after the descriptor.
    pub sig_size: u32,
    /// `data_size`: the file size the tree covers.
    pub data_size: u64,
    /// `root_hash`, zero past the digest size.
    pub root_hash: [u8; MAX_DIGEST_SIZE],
    /// `salt`, zero past `salt_size`.
    pub salt: [u8; MAX_SALT_SIZE],
}

fn bad(field: &'static str, offset: usize, value: u64) -> FormatError {
    FormatError::invalid("fsverity_descriptor", field, offset, value)
}

impl Descriptor {
    /// Parses and checks the fixed part of a descriptor.
    ///
    /// # Errors
    /// A short buffer, a version other than 1, an unknown hash algorithm,
    /// a block size outside 1 KiB..=64 KiB, a salt over 32 bytes, a
    /// reserved byte set (the kernel refuses such a file).
    pub fn parse(b: &[u8]) -> Result<Self, FormatError> {
        if b.len() < DESCRIPTOR_SIZE {
            return Err(FormatError::truncated("fsverity_descriptor", DESCRIPTOR_SIZE, b.len()));
        }
        if b[0] != 1 {
            return Err(bad("version", 0, b[0].into()));
        }
        let hash_algorithm = HashAlgorithm::from_number(b[1]).ok_or_else(|| bad("hash_algorithm", 1, b[1].into()))?;
        if !(10..=16).contains(&b[2]) {
            return Err(bad("log_blocksize", 2, b[2].into()));
        }
        if usize::from(b[3]) > MAX_SALT_SIZE {
            return Err(bad("salt_size", 3, b[3].into()));
        }
        if let Some(i) = b[112..DESCRIPTOR_SIZE].iter().position(|&x| x != 0) {
            return Err(bad("__reserved", 112 + i, b[112 + i].into()));
        }
        let mut root_hash = [0u8; MAX_DIGEST_SIZE];
        root_hash.copy_from_slice(&b[16..80]);
        let mut salt = [0u8; MAX_SALT_SIZE];
        salt.copy_from_slice(&b[80..112]);
        Ok(Self {
            version: b[0],
            hash_algorithm,
            log_blocksize: b[2],
            salt_size: b[3],
            sig_size: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            data_size: u64::from_le_bytes(b[8..16].try_into().unwrap_or([0; 8])),
            root_hash,
            salt,
        })
    }

    /// The 256 bytes, reserved bytes zero.
    pub fn serialize(&self) -> [u8; DESCRIPTOR_SIZE] {
        let mut b = [0u8; DESCRIPTOR_SIZE];
        b[0] = self.version;
        b[1] = self.hash_algorithm.number();
        b[2] = self.log_blocksize;
        b[3] = self.salt_size;
        b[4..8].copy_from_slice(&self.sig_size.to_le_bytes());
        b[8..16].copy_from_slice(&self.data_size.to_le_bytes());
        b[16..80].copy_from_slice(&self.root_hash);
        b[80..112].copy_from_slice(&self.salt);
        b
    }

    /// The bytes whose hash is the file digest (`fsverity digest`): the
    /// descriptor with `sig_size` zero.
    pub fn digest_input(&self) -> [u8; DESCRIPTOR_SIZE] {
        let mut b = self.serialize();
        b[4..8].fill(0);
        b
    }

    /// The salt in use.
    pub fn salt(&self) -> &[u8] {
        &self.salt[..usize::from(self.salt_size)]
    }

    /// The root hash without its zero padding.
    pub fn root(&self) -> &[u8] {
        &self.root_hash[..self.hash_algorithm.digest_size()]
    }

    /// The Merkle tree block size.
    pub fn block_size(&self) -> u64 {
        1u64 << self.log_blocksize
    }
}

/// Byte offset in the file where the Merkle tree starts.
pub fn metadata_pos(i_size: u64) -> u64 {
    i_size.div_ceil(METADATA_ALIGN).saturating_mul(METADATA_ALIGN)
}

/// The Merkle tree's levels as `(first tree block, block count)`, level 0
/// (hashes of data blocks) first; levels are stored the other way round,
/// the root-most level at tree block 0. Empty for a file of at most one
/// block: its root hash is that block's hash (all zeros when empty).
pub fn tree_levels(data_size: u64, block_size: u64, digest_size: usize) -> Vec<(u64, u64)> {
    let per_block = (block_size / digest_size as u64).max(2);
    let mut counts = Vec::new();
    let mut n = data_size.div_ceil(block_size);
    while n > 1 {
        n = n.div_ceil(per_block);
        counts.push(n);
    }
    let mut start: u64 = counts.iter().sum();
    counts
        .into_iter()
        .map(|c| {
            start -= c;
            (start, c)
        })
        .collect()
}

/// Byte offset of the descriptor: after the tree, at a block boundary.
pub fn descriptor_pos(i_size: u64, tree_bytes: u64, fs_block_size: u64) -> u64 {
    (metadata_pos(i_size) + tree_bytes).div_ceil(fs_block_size) * fs_block_size
}

/// Byte offset of the `__le32` descriptor size for a descriptor ending at
/// `desc_end`: the last four bytes of the block holding room for it.
pub fn descriptor_size_pos(desc_end: u64, fs_block_size: u64) -> u64 {
    (desc_end + 4).div_ceil(fs_block_size) * fs_block_size - 4
}

/// Where the descriptor starts, given the byte offset of its size word and
/// the size it holds: the block boundary at or below `size_pos - size`.
///
/// # Errors
/// A size larger than the space before the size word.
pub fn descriptor_pos_from_size(size_pos: u64, size: u32, fs_block_size: u64) -> Result<u64, FormatError> {
    let size = u64::from(size);
    if size < DESCRIPTOR_SIZE as u64 || size > size_pos || size > 1 << 20 {
        return Err(bad("size", 0, size));
    }
    Ok((size_pos - size) / fs_block_size * fs_block_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_root_first() {
        // 4 KiB blocks, SHA-256: 128 hashes a block.
        assert_eq!(tree_levels(0, 4096, 32), vec![]);
        assert_eq!(tree_levels(4096, 4096, 32), vec![]);
        assert_eq!(tree_levels(4097, 4096, 32), vec![(0, 1)]);
        assert_eq!(tree_levels(128 * 4096, 4096, 32), vec![(0, 1)]);
        assert_eq!(tree_levels(129 * 4096, 4096, 32), vec![(1, 2), (0, 1)]);
    }

    #[test]
    fn descriptor_round_trip() {
        let d = Descriptor {
            version: 1,
            hash_algorithm: HashAlgorithm::Sha256,
            log_blocksize: 12,
            salt_size: 2,
            sig_size: 7,
            data_size: 5000,
            root_hash: [3; 64],
            salt: [0; 32],
        };
        let b = d.serialize();
        assert_eq!(Descriptor::parse(&b).unwrap(), d);
        assert_eq!(d.digest_input()[4..8], [0; 4]);
    }

    #[test]
    fn descriptor_place() {
        assert_eq!(metadata_pos(1), 65536);
        assert_eq!(metadata_pos(65536), 65536);
        let pos = descriptor_pos(1, 4096, 4096);
        assert_eq!(pos, 69632);
        let size_pos = descriptor_size_pos(pos + 256, 4096);
        assert_eq!(size_pos, 69632 + 4092);
        assert_eq!(descriptor_pos_from_size(size_pos, 256, 4096).unwrap(), pos);
    }
}
