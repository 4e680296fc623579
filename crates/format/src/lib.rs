//! On-disk structures of ext2, ext3, ext4 and jbd2, with their checksums and
//! directory hashes.
//!
//! This crate owns the bytes: every structure the kernel writes is mirrored by a
//! `Raw*` type that keeps every byte (reserved ones too) so that parse followed
//! by serialize is the identity, plus validated views where reading needs them.
//! It performs no I/O and calls nothing but `core`/`alloc`-level code and the
//! crc32c primitive; it never panics on any input. Corruption comes back as a
//! [`FormatError`] naming the structure, the field and the byte offset.
//!
//! The layout follows the kernel's `Documentation/filesystems/ext4/` pages and
//! e2fsprogs' `lib/ext2fs/ext2_fs.h`; field names keep the kernel's prefixes
//! (`s_`, `bg_`, `i_`, `eh_`, `ee_`, `ei_`, `h_`…) so they grep against both.

pub mod casefold;
pub mod checksum;
pub mod dir_entry;
pub mod error;
pub mod extent;
pub mod features;
pub mod fields;
pub mod fscrypt;
pub mod group_desc;
pub mod hash;
pub mod htree;
pub mod inline;
pub mod inode;
pub mod itree;
pub mod journal;
pub mod mmp;
pub mod names;
pub mod orphan;
pub mod probe;
pub mod qcow2;
pub mod quota;
pub mod superblock;
pub mod undo;
pub mod verity;
pub mod xattr;

mod util;

pub use error::{FormatError, FormatErrorKind};
