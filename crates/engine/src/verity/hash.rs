//! The salted hash fs-verity applies to every data and tree block: the
//! salt, zero-padded to the hash's input block size, is hashed first
//! (nothing when there is no salt), then the block.

use ext4kit_format::verity::HashAlgorithm;
use sha2::{Digest, Sha256, Sha512};

/// A hasher primed with the salt, cloned for each block.
#[derive(Clone)]
pub(crate) enum Salted {
    Sha256(Sha256),
    Sha512(Sha512),
}

impl Salted {
    pub(crate) fn new(alg: HashAlgorithm, salt: &[u8]) -> Self {
        let mut padded = Vec::new();
        if !salt.is_empty() {
            padded.extend_from_slice(salt);
            padded.resize(salt.len().next_multiple_of(alg.input_block_size()), 0);
        }
        match alg {
            HashAlgorithm::Sha256 => Self::Sha256(Sha256::new_with_prefix(&padded)),
            HashAlgorithm::Sha512 => Self::Sha512(Sha512::new_with_prefix(&padded)),
        }
    }

    /// The salted hash of `block`.
    pub(crate) fn block(&self, block: &[u8]) -> Vec<u8> {
        match self.clone() {
            Self::Sha256(h) => h.chain_update(block).finalize().to_vec(),
            Self::Sha512(h) => h.chain_update(block).finalize().to_vec(),
        }
    }
}

/// The plain (unsalted) hash of `bytes`: the file digest is this over the
/// descriptor.
pub(crate) fn plain(alg: HashAlgorithm, bytes: &[u8]) -> Vec<u8> {
    match alg {
        HashAlgorithm::Sha256 => Sha256::digest(bytes).to_vec(),
        HashAlgorithm::Sha512 => Sha512::digest(bytes).to_vec(),
    }
}
