//! Directory-entry name hashes of hashed (htree) directories: the legacy
//! "dx hack" hash, half-MD4 and TEA, each in a signed-char and an
//! unsigned-char flavour.
//!
//! This module owns the hash functions and the mapping from the on-disk
//! version codes to them. It does not own the index blocks that store the
//! hashes (see [`crate::htree`]) nor the casefold/SipHash variant, which needs
//! Unicode name folding and is not implemented here.
//!
//! See `Documentation/filesystems/ext4/directory.rst`, section "Hash Tree
//! Directories", and `fs/ext4/hash.c` for the reference behaviour.

use crate::error::{FormatError, Result};
use crate::superblock::FLAGS_UNSIGNED_HASH;

/// The hash the kernel reserves for "end of directory" in 32-bit readdir
/// cookies (`EXT4_HTREE_EOF_32BIT`); a name never hashes to twice this value.
pub const EXT4_HTREE_EOF_32BIT: u32 = 0x7fff_ffff;

/// Longest name a directory entry can hold (`EXT4_NAME_LEN`).
pub const EXT4_NAME_LEN: usize = 255;

/// The default half-MD4/TEA starting state, used when the seed is all zero.
const DEFAULT_SEED: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// Directory hash algorithm, with the codes stored in `dx_root_info.hash_version`
/// and `s_def_hash_version` (`DX_HASH_*` in the kernel).
///
/// Codes 3..=5 never appear on disk: the kernel derives them from 0..=2 when the
/// superblock's `s_flags` says char is unsigned (see [`HashVersion::effective`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashVersion {
    /// `DX_HASH_LEGACY` (0): the original ext3 "dx hack" hash, signed chars.
    Legacy,
    /// `DX_HASH_HALF_MD4` (1): half-MD4 over the name, signed chars.
    HalfMd4,
    /// `DX_HASH_TEA` (2): TEA over the name, signed chars.
    Tea,
    /// `DX_HASH_LEGACY_UNSIGNED` (3).
    LegacyUnsigned,
    /// `DX_HASH_HALF_MD4_UNSIGNED` (4).
    HalfMd4Unsigned,
    /// `DX_HASH_TEA_UNSIGNED` (5).
    TeaUnsigned,
    /// `DX_HASH_SIPHASH` (6): casefolded (+ encrypted) directories; not computed here.
    SipHash,
}

impl HashVersion {
    /// Decodes an on-disk or derived code; `None` for unknown codes.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => Self::Legacy,
            1 => Self::HalfMd4,
            2 => Self::Tea,
            3 => Self::LegacyUnsigned,
            4 => Self::HalfMd4Unsigned,
            5 => Self::TeaUnsigned,
            6 => Self::SipHash,
            _ => return None,
        })
    }

    /// The `DX_HASH_*` code.
    pub fn code(self) -> u8 {
        match self {
            Self::Legacy => 0,
            Self::HalfMd4 => 1,
            Self::Tea => 2,
            Self::LegacyUnsigned => 3,
            Self::HalfMd4Unsigned => 4,
            Self::TeaUnsigned => 5,
            Self::SipHash => 6,
        }
    }

    /// The version the kernel actually hashes with: the stored code (from
    /// `dx_root_info.hash_version` or `s_def_hash_version`), moved to its
    /// unsigned twin (+3) when `s_flags` has `EXT2_FLAGS_UNSIGNED_HASH`. Only
    /// codes 0..=2 are moved, as in `dx_probe`. `None` for unknown codes.
    pub fn effective(stored: u8, s_flags: u32) -> Option<Self> {
        let version = Self::from_code(stored)?;
        Some(version.with_unsigned(s_flags & FLAGS_UNSIGNED_HASH != 0))
    }

    /// This version's unsigned twin when `unsigned` is true; `self` otherwise
    /// or when there is no twin.
    #[must_use]
    pub fn with_unsigned(self, unsigned: bool) -> Self {
        match (self, unsigned) {
            (Self::Legacy, true) => Self::LegacyUnsigned,
            (Self::HalfMd4, true) => Self::HalfMd4Unsigned,
            (Self::Tea, true) => Self::TeaUnsigned,
            (other, _) => other,
        }
    }

    /// True for the variants that read name bytes as unsigned char.
    pub fn is_unsigned(self) -> bool {
        matches!(self, Self::LegacyUnsigned | Self::HalfMd4Unsigned | Self::TeaUnsigned)
    }
}

/// A name's position in a hashed directory (`dx_hash_info.hash`/`minor_hash`).
///
/// `major` orders index entries and leaf blocks; its low bit is always clear
/// because the index uses that bit to mark hash collisions that continue into
/// the next leaf. `minor` only breaks ties in readdir cookies; it is 0 for the
/// legacy hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DxHash {
    /// The 32-bit hash stored in `dx_entry.hash`.
    pub major: u32,
    /// The secondary hash.
    pub minor: u32,
}

/// Turns 16 seed bytes (`s_hash_seed`, or a UUID as `debugfs dx_hash -s` takes
/// it) into the four little-endian words the hash functions use.
pub fn seed_from_bytes(bytes: &[u8; 16]) -> [u32; 4] {
    let mut seed = [0u32; 4];
    for (word, chunk) in seed.iter_mut().zip(bytes.chunks_exact(4)) {
        let mut four = [0u8; 4];
        four.copy_from_slice(chunk);
        *word = u32::from_le_bytes(four);
    }
    seed
}

/// Hashes `name` as the kernel's `ext4fs_dirhash` does.
///
/// `seed` is the superblock's `s_hash_seed` as words; an all-zero seed selects
/// the default MD4 starting state (the legacy hash ignores the seed). Bytes
/// are widened as signed or unsigned char according to `version`, which must
/// already be the effective version ([`HashVersion::effective`]). The result's
/// major hash has bit 0 cleared, and `EXT4_HTREE_EOF_32BIT << 1` is replaced by
/// `(EXT4_HTREE_EOF_32BIT - 1) << 1` so no name sorts at end-of-directory.
/// (e2fsprogs' `ext2fs_dirhash`, and so `debugfs dx_hash`, skips that last
/// step; the two differ only for names whose hash is `0xfffffffe`/`0xffffffff`.)
///
/// Pure computation, no block reads; O(`name.len()`).
///
/// # Errors
/// - `Invalid` on structure `dx_hash`, field `hash_version`, for
///   [`HashVersion::SipHash`]: casefolded directories need Unicode folding,
///   which this crate does not implement.
/// - `Invalid` on structure `dx_hash`, field `name_len`, if `name` is longer
///   than [`EXT4_NAME_LEN`] bytes.
pub fn dx_hash(name: &[u8], version: HashVersion, seed: &[u32; 4]) -> Result<DxHash> {
    if name.len() > EXT4_NAME_LEN {
        let len = u64::try_from(name.len()).unwrap_or(u64::MAX);
        return Err(FormatError::invalid("dx_hash", "name_len", 0, len));
    }
    let state = if seed.iter().any(|&w| w != 0) {
        *seed
    } else {
        DEFAULT_SEED
    };
    let unsigned = version.is_unsigned();
    let (major, minor) = match version {
        HashVersion::Legacy | HashVersion::LegacyUnsigned => (legacy(name, unsigned), 0),
        HashVersion::HalfMd4 | HashVersion::HalfMd4Unsigned => half_md4(name, unsigned, state),
        HashVersion::Tea | HashVersion::TeaUnsigned => tea(name, unsigned, state),
        HashVersion::SipHash => {
            let code = u64::from(version.code());
            return Err(FormatError::invalid("dx_hash", "hash_version", 0, code));
        }
    };
    let mut major = major & !1;
    if major == EXT4_HTREE_EOF_32BIT << 1 {
        major = (EXT4_HTREE_EOF_32BIT - 1) << 1;
    }
    Ok(DxHash { major, minor })
}

/// A name byte widened to 32 bits as C's `(int)(signed char)` or
/// `(int)(unsigned char)` would, then reinterpreted as `__u32`.
fn widen(byte: u8, unsigned: bool) -> u32 {
    if unsigned {
        u32::from(byte)
    } else {
        i32::from(byte.cast_signed()).cast_unsigned()
    }
}

/// The legacy hash (`dx_hack_hash_*`): a two-word lagged recurrence folded
/// into 31 bits.
fn legacy(name: &[u8], unsigned: bool) -> u32 {
    let (mut hash0, mut hash1) = (0x12a3_fe2d_u32, 0x37ab_e8f9_u32);
    for &byte in name {
        let mixed = widen(byte, unsigned).wrapping_mul(7_152_373);
        let mut hash = hash1.wrapping_add(hash0 ^ mixed);
        if hash & 0x8000_0000 != 0 {
            hash = hash.wrapping_sub(0x7fff_ffff);
        }
        hash1 = hash0;
        hash0 = hash;
    }
    hash0 << 1
}

/// Packs up to `N * 4` bytes of `rest` into `N` words (`str2hashbuf_*`).
///
/// Every word starts from a pad built from the *remaining* length (which may
/// exceed one chunk), then each byte is shifted in from the right; words
/// past the end of the name are the bare pad.
fn pack<const N: usize>(rest: &[u8], unsigned: bool) -> [u32; N] {
    // rest.len() <= EXT4_NAME_LEN, so the conversion cannot fail.
    let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
    let mut pad = len | (len << 8);
    pad |= pad << 16;
    let mut words = [pad; N];
    let take = rest.len().min(N.saturating_mul(4));
    let bytes = rest.get(..take).unwrap_or(rest);
    for (word, group) in words.iter_mut().zip(bytes.chunks(4)) {
        *word = group
            .iter()
            .fold(pad, |val, &b| widen(b, unsigned).wrapping_add(val << 8));
    }
    words
}

/// Half-MD4: the name in 32-byte chunks through the reduced MD4 transform;
/// major is state word 1, minor state word 2.
fn half_md4(name: &[u8], unsigned: bool, mut state: [u32; 4]) -> (u32, u32) {
    let mut rest = name;
    while !rest.is_empty() {
        let input = pack::<8>(rest, unsigned);
        half_md4_transform(&mut state, &input);
        rest = rest.get(32..).unwrap_or(&[]);
    }
    (state[1], state[2])
}

/// TEA: the name in 16-byte chunks through 16 TEA rounds; major is state
/// word 0, minor state word 1.
fn tea(name: &[u8], unsigned: bool, mut state: [u32; 4]) -> (u32, u32) {
    let mut rest = name;
    while !rest.is_empty() {
        let input = pack::<4>(rest, unsigned);
        tea_transform(&mut state, &input);
        rest = rest.get(16..).unwrap_or(&[]);
    }
    (state[0], state[1])
}

/// One TEA block: 16 rounds keyed by the four input words, then added into
/// the first two state words.
fn tea_transform(state: &mut [u32; 4], input: &[u32; 4]) {
    const DELTA: u32 = 0x9e37_79b9;
    let [k0, k1, k2, k3] = *input;
    let (mut b0, mut b1, mut sum) = (state[0], state[1], 0u32);
    for _ in 0..16 {
        sum = sum.wrapping_add(DELTA);
        b0 = b0.wrapping_add(tea_mix(b1, sum, k0, k1));
        b1 = b1.wrapping_add(tea_mix(b0, sum, k2, k3));
    }
    state[0] = state[0].wrapping_add(b0);
    state[1] = state[1].wrapping_add(b1);
}

fn tea_mix(v: u32, sum: u32, ka: u32, kb: u32) -> u32 {
    (v << 4).wrapping_add(ka) ^ v.wrapping_add(sum) ^ (v >> 5).wrapping_add(kb)
}

/// MD4's selection function.
fn md4_f(x: u32, y: u32, z: u32) -> u32 {
    z ^ (x & (y ^ z))
}

/// MD4's majority function, in the additive form the kernel uses.
fn md4_g(x: u32, y: u32, z: u32) -> u32 {
    (x & y).wrapping_add((x ^ y) & z)
}

/// MD4's parity function.
fn md4_h(x: u32, y: u32, z: u32) -> u32 {
    x ^ y ^ z
}

/// Per-round data: word order within `input`, rotation amounts for the four
/// state positions, the additive constant and the boolean function.
type Md4Round = ([usize; 8], [u32; 4], u32, fn(u32, u32, u32) -> u32);

const MD4_ROUNDS: [Md4Round; 3] = [
    ([0, 1, 2, 3, 4, 5, 6, 7], [3, 7, 11, 19], 0, md4_f),
    ([1, 3, 5, 7, 0, 2, 4, 6], [3, 5, 9, 13], 0x5a82_7999, md4_g),
    ([3, 7, 2, 6, 1, 5, 0, 4], [3, 9, 11, 15], 0x6ed9_eba1, md4_h),
];

/// The cut-down MD4 compression: three rounds of eight steps over eight input
/// words, added into `state`.
fn half_md4_transform(state: &mut [u32; 4], input: &[u32; 8]) {
    // Working registers a, b, c, d; step i updates register (4 - i % 4) % 4,
    // i.e. a, d, c, b in turn, from the other three in rotated order.
    let mut r = *state;
    for (order, shifts, k, f) in MD4_ROUNDS {
        for (step, &word) in order.iter().enumerate() {
            let t = (4 - step % 4) % 4;
            let (x, y, z) = (r[(t + 1) % 4], r[(t + 2) % 4], r[(t + 3) % 4]);
            let add = f(x, y, z).wrapping_add(input[word]).wrapping_add(k);
            r[t] = r[t].wrapping_add(add).rotate_left(shifts[step % 4]);
        }
    }
    for (s, v) in state.iter_mut().zip(r) {
        *s = s.wrapping_add(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `debugfs -R "dx_hash -s 01234567-89ab-cdef-0123-456789abcdef ..."` seed.
    const SEED: [u8; 16] = [
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
    ];
    /// 47 bytes: two half-MD4 chunks, three TEA chunks, one byte >= 0x80.
    const LONG: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ\xc3\xa9";

    fn check(name: &[u8], seed: &[u32; 4], expect: [(u32, u32); 6]) {
        for (code, &(major, minor)) in (0u8..).zip(expect.iter()) {
            let version = HashVersion::from_code(code).unwrap();
            let got = dx_hash(name, version, seed).unwrap();
            assert_eq!((got.major, got.minor), (major, minor), "code {code} name {name:?}");
        }
    }

    // Every vector below was printed by debugfs 1.47.0 `dx_hash -h <code>`.
    #[test]
    fn debugfs_vectors_zero_seed() {
        check(
            b"h\xe9llo\xff",
            &[0; 4],
            [
                (0xbdbc_7c5e, 0),
                (0x67bb_2376, 0xec4a_c060),
                (0x71b1_7e08, 0xf811_ad18),
                (0x729c_6054, 0),
                (0xd8bf_ff52, 0x501b_c43d),
                (0x2650_8c1e, 0xa3b9_428e),
            ],
        );
        let hello = dx_hash(b"hello", HashVersion::HalfMd4, &[0; 4]).unwrap();
        assert_eq!((hello.major, hello.minor), (0x1746_da32, 0x4200_13b5));
        let tea = dx_hash(b"hello", HashVersion::Tea, &[0; 4]).unwrap();
        assert_eq!((tea.major, tea.minor), (0x6f5b_b1a8, 0x2319_17c2));
        let legacy = dx_hash(b"hello", HashVersion::Legacy, &[0; 4]).unwrap();
        assert_eq!((legacy.major, legacy.minor), (0x3225_2546, 0));
    }

    #[test]
    fn debugfs_vectors_with_seed() {
        check(
            LONG,
            &seed_from_bytes(&SEED),
            [
                (0xd958_f19c, 0),
                (0x5ef7_9356, 0x787e_482c),
                (0xebef_f4bc, 0x153c_a74e),
                (0x6f5c_e198, 0),
                (0xf5bf_070c, 0xe007_706f),
                (0xa355_6582, 0x7570_38e8),
            ],
        );
        let hello = dx_hash(b"hello", HashVersion::HalfMd4, &seed_from_bytes(&SEED)).unwrap();
        assert_eq!((hello.major, hello.minor), (0xa26e_4a80, 0x97e5_b7f7));
    }

    #[test]
    fn empty_name_hashes_the_bare_state() {
        // debugfs: `dx_hash -h 1 ""` prints 0xefcdab88 (minor 0x98badcfe).
        let h = dx_hash(b"", HashVersion::HalfMd4, &[0; 4]).unwrap();
        assert_eq!((h.major, h.minor), (0xefcd_ab88, 0x98ba_dcfe));
    }

    #[test]
    fn eof_hash_is_moved_down_like_the_kernel() {
        // With seed ffffffff-…-ffff the empty name's half-MD4 major is
        // 0xffffffff; debugfs prints 0xfffffffe, the kernel uses 0xfffffffc.
        let h = dx_hash(b"", HashVersion::HalfMd4, &[u32::MAX; 4]).unwrap();
        assert_eq!((h.major, h.minor), (0xffff_fffc, 0xffff_ffff));
    }

    #[test]
    fn siphash_and_overlong_names_are_errors() {
        let err = dx_hash(b"x", HashVersion::SipHash, &[0; 4]).unwrap_err();
        assert_eq!((err.structure, err.field), ("dx_hash", "hash_version"));
        let long = [b'a'; 256];
        let err = dx_hash(&long, HashVersion::Tea, &[0; 4]).unwrap_err();
        assert_eq!(err.field, "name_len");
    }

    #[test]
    fn codes_round_trip_and_unsigned_flag_applies() {
        for code in 0..=6u8 {
            assert_eq!(HashVersion::from_code(code).map(HashVersion::code), Some(code));
        }
        assert_eq!(HashVersion::from_code(7), None);
        assert_eq!(
            HashVersion::effective(1, FLAGS_UNSIGNED_HASH),
            Some(HashVersion::HalfMd4Unsigned)
        );
        assert_eq!(HashVersion::effective(2, 0x1), Some(HashVersion::Tea));
        assert_eq!(
            HashVersion::effective(6, FLAGS_UNSIGNED_HASH),
            Some(HashVersion::SipHash)
        );
        assert_eq!(HashVersion::effective(9, 0), None);
    }

    #[test]
    fn major_hash_is_even_and_never_eof() {
        for n in 0u32..5000 {
            let name = n.to_le_bytes();
            for code in 0..=5 {
                let v = HashVersion::from_code(code).unwrap();
                let h = dx_hash(&name, v, &[1, 2, 3, 4]).unwrap().major;
                assert_eq!(h & 1, 0);
                assert_ne!(h, EXT4_HTREE_EOF_32BIT << 1);
            }
        }
    }
}
