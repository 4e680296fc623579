//! The one place directory code asks how names compare and hash: in a
//! directory with `EXT4_CASEFOLD_FL` on a `casefold` file system, names
//! match when their folds match and htree hashes are over the fold
//! ([`ext4kit_format::casefold`], the kernel's `ext4fs_dirhash` with an
//! encoding); elsewhere both are over the raw bytes.

use std::borrow::Cow;

use ext4kit_format::casefold::{self, Encoding, FoldedName};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::flags;

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// A name to look for in one directory, folded once if the directory is
/// casefolded.
#[derive(Debug)]
pub(crate) enum NameKey<'a> {
    /// Byte-for-byte comparison.
    Exact(&'a [u8]),
    /// Comparison of folds (raw bytes when either is not UTF-8).
    Folded(FoldedName<'a>),
}

impl NameKey<'_> {
    /// Whether the stored entry name `entry` is this name.
    pub(crate) fn matches(&self, entry: &[u8]) -> bool {
        match self {
            Self::Exact(n) => *n == entry,
            Self::Folded(k) => k.matches(entry),
        }
    }
}

impl Filesystem {
    /// Whether names in `dir` compare and hash folded.
    pub(crate) fn casefolded(&self, dir: &Inode) -> bool {
        dir.raw.has_flag(flags::CASEFOLD) && self.geo.features.incompat.contains(IncompatFeatures::CASEFOLD)
    }

    /// The superblock's name encoding (`s_encoding`, `s_encoding_flags`).
    pub(crate) fn encoding(&self) -> Option<Encoding> {
        let sb = self.sb.read();
        Encoding::from_superblock(sb.s_encoding.get(), sb.s_encoding_flags.get())
    }

    /// `name` as a key for scanning `dir`.
    pub(crate) fn name_key<'a>(&self, dir: &Inode, name: &'a [u8]) -> NameKey<'a> {
        if self.casefolded(dir) {
            NameKey::Folded(FoldedName::new(name))
        } else {
            NameKey::Exact(name)
        }
    }

    /// The bytes `dir`'s htree hashes `name` over.
    pub(crate) fn hash_input<'a>(&self, dir: &Inode, name: &'a [u8]) -> Cow<'a, [u8]> {
        if self.casefolded(dir) {
            casefold::hash_input(name)
        } else {
            Cow::Borrowed(name)
        }
    }

    /// A directory made in a casefolded one is casefolded too
    /// (`ext4_inherit_flags`; the flag is for directories only).
    pub(crate) fn inherit_casefold(&self, parent: &Inode, inode: &mut Inode) {
        if inode.is_dir() && self.casefolded(parent) {
            inode.raw.i_flags.set(inode.raw.i_flags.get() | flags::CASEFOLD);
        }
    }

    /// Refuses a new name the encoding rejects: in strict mode, a name of
    /// a casefolded directory must be valid UTF-8 (`ext4_add_entry`'s
    /// `EINVAL`).
    pub(crate) fn check_new_casefold_name(&self, dir: &Inode, name: &[u8]) -> Result<()> {
        match self.encoding() {
            Some(enc) if self.casefolded(dir) && !enc.accepts(name) => Err(Error::InvalidArgument(format!(
                "{:?} is not valid UTF-8, which the strict {} encoding requires",
                String::from_utf8_lossy(name),
                enc.name()
            ))),
            _ => Ok(()),
        }
    }
}

/// Refuses a casefold file system whose `s_encoding` this code has no
/// tables for, as the kernel's `ext4_sb_read_encoding` does.
pub(crate) fn check_encoding(sb: &ext4kit_format::superblock::RawSuperblock) -> Result<()> {
    let (enc, fl) = (sb.s_encoding.get(), sb.s_encoding_flags.get());
    if !sb.features().incompat.contains(IncompatFeatures::CASEFOLD) || Encoding::from_superblock(enc, fl).is_some() {
        return Ok(());
    }
    Err(Error::Unsupported(format!(
        "casefold encoding {enc} (only utf8-12.1, encoding 1, is known)"
    )))
}
