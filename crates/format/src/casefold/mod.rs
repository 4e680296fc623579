//! Casefolded directories: the superblock's name encoding and the folding
//! of a name that lookups and htree hashes of `EXT4_CASEFOLD_FL`
//! directories use.
//!
//! On disk (`struct ext4_super_block`): `s_encoding` names the encoding
//! ([`ENCODING_UTF8_12_1`] is the only one defined) and `s_encoding_flags`
//! carries [`ENCODING_FLAG_STRICT`]; the inode flag is
//! [`crate::inode::flags::CASEFOLD`]. A directory entry keeps the name as
//! created; only comparisons and hashes see the folded form.
//!
//! The fold is the kernel's `utf8_casefold` ("nfdicf" tables): canonical
//! decomposition, full case folding (`CaseFolding.txt` C+F), decomposition
//! again, and removal of `Default_Ignorable_Code_Point` characters (e2fsprogs
//! 1.47's tables drop them; see [`ignorable`]). The Unicode data comes from
//! the `unicode-normalization` and `caseless` crates, which follow a newer
//! Unicode than 12.1. Normalisation and case folding of characters that
//! existed in 12.1 are frozen by Unicode's stability policy, so the two
//! agree on every 12.1 character; the 91 characters assigned after 12.1
//! that the newer data would fold or decompose are kept as they are, as
//! the kernel's 12.1 tables keep them ([`newer`]).

mod ignorable;
mod newer;

use caseless::Caseless;
use unicode_normalization::UnicodeNormalization;

use crate::hash::EXT4_NAME_LEN;

/// `s_encoding` value of UTF-8 with Unicode 12.1 tables (`EXT4_ENC_UTF8_12_1`).
pub const ENCODING_UTF8_12_1: u16 = 1;

/// `s_encoding_flags` bit: refuse names that are not valid UTF-8
/// (`EXT4_ENC_STRICT_MODE_FL`).
pub const ENCODING_FLAG_STRICT: u16 = 0x1;

/// The `s_encoding` value for a name as `mke2fs`/`tune2fs -E encoding=`
/// take it (`e2p_str2encoding`: `utf8` is an alias of `utf8-12.1`).
pub fn encoding_from_name(name: &str) -> Option<u16> {
    matches!(name, "utf8" | "utf8-12.1").then_some(ENCODING_UTF8_12_1)
}

/// `-E encoding_flags=` as `e2p_str2encoding_flags` reads it: `-`-separated
/// flag names, each optionally negated with `no`, applied to the
/// encoding's default flags (none for utf8); utf8 knows only `strict`.
pub fn parse_encoding_flags(value: &str) -> Option<u16> {
    value
        .split('-')
        .filter(|s| !s.is_empty())
        .try_fold(0u16, |acc, f| match f {
            "strict" => Some(acc | ENCODING_FLAG_STRICT),
            "nostrict" => Some(acc & !ENCODING_FLAG_STRICT),
            _ => None,
        })
}

/// The name encoding of a casefold file system, from the superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoding {
    /// Names that are not valid UTF-8 are refused (`EINVAL`) rather than
    /// compared byte for byte.
    pub strict: bool,
}

impl Encoding {
    /// Decodes `s_encoding`/`s_encoding_flags`; `None` for an encoding this
    /// module has no tables for (the kernel refuses to mount those).
    pub fn from_superblock(encoding: u16, flags: u16) -> Option<Self> {
        (encoding == ENCODING_UTF8_12_1).then_some(Self {
            strict: flags & ENCODING_FLAG_STRICT != 0,
        })
    }

    /// The name `mke2fs -E encoding=…` takes and `dumpe2fs` prints.
    pub fn name(self) -> &'static str {
        "utf8-12.1"
    }

    /// Whether `name` may be created in a casefolded directory: in strict
    /// mode it must be valid UTF-8.
    pub fn accepts(self, name: &[u8]) -> bool {
        !self.strict || std::str::from_utf8(name).is_ok()
    }
}

/// The folded form of `name`, or `None` when `name` is not valid UTF-8
/// (the kernel then compares and hashes the raw bytes).
pub fn fold(name: &[u8]) -> Option<Vec<u8>> {
    let s = std::str::from_utf8(name).ok()?;
    let mut out = String::with_capacity(s.len());
    // A character newer than 12.1 ends a run: the run before it is
    // folded, the character itself is kept.
    for piece in s.split_inclusive(newer::is_newer) {
        let (run, kept) = match piece.chars().next_back() {
            Some(c) if newer::is_newer(c) => (&piece[..piece.len() - c.len_utf8()], Some(c)),
            _ => (piece, None),
        };
        out.extend(
            run.nfd()
                .default_case_fold()
                .nfd()
                .filter(|&c| !ignorable::is_ignorable(c)),
        );
        out.extend(kept);
    }
    Some(out.into_bytes())
}

/// The bytes an htree hash of `name` is computed over in a casefolded
/// directory: the fold, or the raw name when the fold fails or exceeds
/// `EXT4_NAME_LEN` (the kernel folds into a name-sized buffer).
pub fn hash_input(name: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match fold(name) {
        Some(f) if f.len() <= EXT4_NAME_LEN => std::borrow::Cow::Owned(f),
        _ => std::borrow::Cow::Borrowed(name),
    }
}

/// A lookup key: the name folded once, compared against many entries.
#[derive(Debug, Clone)]
pub struct FoldedName<'a> {
    raw: &'a [u8],
    folded: Option<Vec<u8>>,
}

impl<'a> FoldedName<'a> {
    /// Folds `raw` for repeated comparisons.
    pub fn new(raw: &'a [u8]) -> Self {
        Self { raw, folded: fold(raw) }
    }

    /// Whether the stored entry name `entry` names the same file: folded
    /// forms equal when both are valid UTF-8, else the raw bytes equal.
    pub fn matches(&self, entry: &[u8]) -> bool {
        match (&self.folded, fold(entry)) {
            (Some(a), Some(b)) => *a == b,
            _ => self.raw == entry,
        }
    }
}

/// Whether `c` lies in one of the sorted, disjoint inclusive `ranges`.
fn in_ranges(ranges: &[(u32, u32)], c: char) -> bool {
    let c = c as u32;
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

#[cfg(test)]
mod tests;
