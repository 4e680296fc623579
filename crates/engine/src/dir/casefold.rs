//! The one place directory code asks how names compare and hash: in a
//! directory with `EXT4_CASEFOLD_FL` on a `casefold` file system, names
//! match when their folds match and htree hashes are over the fold
//! ([`ext4kit_format::casefold`], the kernel's `ext4fs_dirhash` with an
//! encoding); elsewhere both are over the raw bytes.

use std::borrow::Cow;

use ext4kit_format::casefold::{self, Encoding, FoldedName};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::flags;

use ext4kit_format::hash::{DxHash, HashVersion, dx_hash};

use crate::crypt::dirhash::SealedName;
use crate::error::{Error, Location, Result};
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
    /// Comparison of the folds of decrypted names, in a casefolded,
    /// encrypted directory whose key is present.
    Sealed(Box<SealedName<'a>>),
}

impl NameKey<'_> {
    /// Whether the stored entry name `entry` is this name.
    pub(crate) fn matches(&self, entry: &[u8]) -> bool {
        match self {
            Self::Exact(n) => *n == entry,
            Self::Folded(k) => k.matches(entry),
            Self::Sealed(k) => k.matches(entry),
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
        if self.hash_in_dirent(dir) {
            return match self.sealed_name(dir, name) {
                Some(k) => NameKey::Sealed(Box::new(k)),
                None => NameKey::Exact(name),
            };
        }
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

    /// The htree hash of stored name `name` in `dir` under `version`: the
    /// stored-hash SipHash in a casefolded, encrypted directory (which
    /// needs the key), else `dx_hash` over [`Self::hash_input`].
    ///
    /// # Errors
    /// [`Error::NoKey`] for a casefolded, encrypted directory without its
    /// key; a version `dx_hash` does not compute.
    pub(crate) fn name_dx_hash(&self, dir: &Inode, name: &[u8], version: HashVersion) -> Result<DxHash> {
        if self.hash_in_dirent(dir) {
            return self.sealed_hash(dir, name);
        }
        let seed = self.sb.read().s_hash_seed.map(|w| w.get());
        dx_hash(&self.hash_input(dir, name), version, &seed).map_err(|e| Error::format(Location::Inode(dir.ino), e))
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
        // Stored names of an encrypted directory are ciphertext; its
        // plaintext was checked before encryption ([`crate::crypt::names`]).
        if self.is_encrypted(dir) {
            return Ok(());
        }
        self.check_plain_casefold_name(dir, name)
    }

    /// [`Self::check_new_casefold_name`] of a plaintext name.
    pub(crate) fn check_plain_casefold_name(&self, dir: &Inode, name: &[u8]) -> Result<()> {
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
