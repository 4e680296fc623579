//! fs-verity on ext4 (`Documentation/filesystems/fsverity.rst`,
//! `fs/ext4/verity.c`): a file with `EXT4_VERITY_FL` is read-only forever
//! and every block read from it is checked against a Merkle tree stored
//! past its end (layout in [`ext4kit_format::verity`]). Reads of such a
//! file go through [`Filesystem::read_verified`](crate::Filesystem), which
//! fails with [`Error::VerityMismatch`](crate::error::Error) (`EIO`) on
//! the first block that does not hash to its parent's entry; enabling
//! builds the tree and descriptor in one transaction. Descriptors and
//! proven tree blocks are kept between reads ([`cache`]).

pub(crate) mod cache;
mod enable;
mod hash;
mod read;

pub use enable::VerityOptions;
pub(crate) use read::is_verity;

#[cfg(test)]
mod tests;
