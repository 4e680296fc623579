//! fscrypt's on-disk pieces as ext4 stores them (`fscrypt.rst`,
//! `include/uapi/linux/fscrypt.h`): the encryption context in the xattr of
//! name index 9 named `c`, the padded length of an encrypted name, the
//! no-key names a directory lists without its key, and the
//! length-prefixed ciphertext of an encrypted symlink.

/// `EXT4_XATTR_INDEX_ENCRYPTION`: the name index of the context xattr.
pub const XATTR_INDEX: u8 = 9;
/// The context xattr's name (`EXT4_XATTR_NAME_ENCRYPTION_CONTEXT`).
pub const XATTR_NAME: &[u8] = b"c";
/// `FSCRYPT_FILE_NONCE_SIZE`.
pub const NONCE_SIZE: usize = 16;
/// `FSCRYPT_KEY_DESCRIPTOR_SIZE` (v1 policies name their key by it).
pub const DESCRIPTOR_SIZE: usize = 8;
/// `FSCRYPT_KEY_IDENTIFIER_SIZE` (v2 policies).
pub const IDENTIFIER_SIZE: usize = 16;
/// Size of a v1 context: version, modes, flags, descriptor, nonce.
pub const CONTEXT_V1_SIZE: usize = 4 + DESCRIPTOR_SIZE + NONCE_SIZE;
/// Size of a v2 context: version, modes, flags, 4 reserved bytes,
/// identifier, nonce.
pub const CONTEXT_V2_SIZE: usize = 8 + IDENTIFIER_SIZE + NONCE_SIZE;
/// `FSCRYPT_CONTEXT_V1`.
pub const VERSION_V1: u8 = 1;
/// `FSCRYPT_CONTEXT_V2`.
pub const VERSION_V2: u8 = 2;
/// The cipher block size names are padded to at least
/// (`FSCRYPT_CRYPTO_BLOCK_SIZE`); shorter stored names are corrupt.
pub const NAME_MIN: usize = 16;

/// `FSCRYPT_MODE_*`: the ciphers a policy names.
pub mod mode {
    /// `FSCRYPT_MODE_AES_256_XTS` (contents).
    pub const AES_256_XTS: u8 = 1;
    /// `FSCRYPT_MODE_AES_256_CTS` (names, CBC with ciphertext stealing).
    pub const AES_256_CTS: u8 = 4;
    /// `FSCRYPT_MODE_AES_128_CBC` (contents, with ESSIV).
    pub const AES_128_CBC: u8 = 5;
    /// `FSCRYPT_MODE_AES_128_CTS` (names).
    pub const AES_128_CTS: u8 = 6;
    /// `FSCRYPT_MODE_SM4_XTS`.
    pub const SM4_XTS: u8 = 7;
    /// `FSCRYPT_MODE_SM4_CTS`.
    pub const SM4_CTS: u8 = 8;
    /// `FSCRYPT_MODE_ADIANTUM`.
    pub const ADIANTUM: u8 = 9;
    /// `FSCRYPT_MODE_AES_256_HCTR2`.
    pub const AES_256_HCTR2: u8 = 10;

    /// The mode's name as `fscrypt.rst` spells it.
    pub fn name(m: u8) -> &'static str {
        match m {
            AES_256_XTS => "AES-256-XTS",
            AES_256_CTS => "AES-256-CTS-CBC",
            AES_128_CBC => "AES-128-CBC-ESSIV",
            AES_128_CTS => "AES-128-CTS-CBC",
            SM4_XTS => "SM4-XTS",
            SM4_CTS => "SM4-CTS-CBC",
            ADIANTUM => "Adiantum",
            AES_256_HCTR2 => "AES-256-HCTR2",
            _ => "unknown",
        }
    }

    /// The mode a name spells, case-insensitively: [`name`]'s spelling,
    /// or it without the `-CBC`/`-ESSIV` tail (`AES-256-CTS`).
    pub fn by_name(s: &str) -> Option<u8> {
        (AES_256_XTS..=AES_256_HCTR2).filter(|&m| m != 2 && m != 3).find(|&m| {
            let full = name(m);
            let short = full.trim_end_matches("-CBC").trim_end_matches("-ESSIV");
            s.eq_ignore_ascii_case(full) || s.eq_ignore_ascii_case(short)
        })
    }

    /// The names mode the kernel pairs with contents mode `m`
    /// (`fscrypt_valid_enc_modes_v1`/`_v2`), the first when there are two.
    pub fn names_partner(m: u8) -> Option<u8> {
        match m {
            AES_256_XTS => Some(AES_256_CTS),
            AES_128_CBC => Some(AES_128_CTS),
            SM4_XTS => Some(SM4_CTS),
            ADIANTUM => Some(ADIANTUM),
            _ => None,
        }
    }

    /// Whether a policy of `version` may pair `contents` with `names`
    /// (`fscrypt_valid_enc_modes_v1`, `fscrypt_valid_enc_modes_v2`).
    pub fn valid_pair(version: u8, contents: u8, names: u8) -> bool {
        let v1 = matches!(
            (contents, names),
            (AES_256_XTS, AES_256_CTS) | (AES_128_CBC, AES_128_CTS) | (ADIANTUM, ADIANTUM)
        );
        let v2 = matches!((contents, names), (AES_256_XTS, AES_256_HCTR2) | (SM4_XTS, SM4_CTS));
        v1 || (version == super::VERSION_V2 && v2)
    }

    /// `ivsize` of mode `m`: the wide-block modes take a 32-byte IV, so
    /// only they can carry the nonce DIRECT_KEY puts in it.
    pub fn iv_size(m: u8) -> usize {
        if matches!(m, ADIANTUM | AES_256_HCTR2) { 32 } else { 16 }
    }
}

/// `FSCRYPT_POLICY_FLAG*`.
pub mod policy_flags {
    /// The name padding: 4 << (flags & PAD_MASK) bytes.
    pub const PAD_MASK: u8 = 0x03;
    /// `FSCRYPT_POLICY_FLAG_DIRECT_KEY`.
    pub const DIRECT_KEY: u8 = 0x04;
    /// `FSCRYPT_POLICY_FLAG_IV_INO_LBLK_64`.
    pub const IV_INO_LBLK_64: u8 = 0x08;
    /// `FSCRYPT_POLICY_FLAG_IV_INO_LBLK_32`.
    pub const IV_INO_LBLK_32: u8 = 0x10;
}

/// Why the kernel refuses a policy (`fscrypt_supported_policy`, which
/// `FS_IOC_SET_ENCRYPTION_POLICY` answers with `EINVAL` and which also
/// guards every open), `None` when it takes it. `stable_inodes`: whether
/// the file system has that feature (IV_INO_LBLK_* needs it).
pub fn policy_refusal(version: u8, contents: u8, names: u8, flags: u8, stable_inodes: bool) -> Option<String> {
    use policy_flags::{DIRECT_KEY, IV_INO_LBLK_32, IV_INO_LBLK_64, PAD_MASK};
    let pair = || format!("contents {} with names {}", mode::name(contents), mode::name(names));
    if !mode::valid_pair(version, contents, names) {
        return Some(format!("{} is not a valid pair for a v{version} policy", pair()));
    }
    let lblk = IV_INO_LBLK_64 | IV_INO_LBLK_32;
    let known = PAD_MASK | DIRECT_KEY | if version == VERSION_V2 { lblk } else { 0 };
    if flags & !known != 0 {
        return Some(format!("flags {flags:#04x} are not valid for a v{version} policy"));
    }
    let key_flags = flags & (DIRECT_KEY | lblk);
    if key_flags.count_ones() > 1 {
        return Some(format!(
            "flags {flags:#04x}: DIRECT_KEY, IV_INO_LBLK_64 and IV_INO_LBLK_32 exclude each other"
        ));
    }
    if key_flags == DIRECT_KEY && (contents != names || mode::iv_size(contents) < 32) {
        return Some(format!(
            "DIRECT_KEY with {}: it needs one mode with a 32-byte IV for both (Adiantum)",
            pair()
        ));
    }
    let which = if key_flags == IV_INO_LBLK_64 {
        "IV_INO_LBLK_64"
    } else {
        "IV_INO_LBLK_32"
    };
    if key_flags & lblk != 0 && contents != mode::AES_256_XTS {
        return Some(format!("{which} with {}: it needs AES-256-XTS contents", pair()));
    }
    if key_flags & lblk != 0 && !stable_inodes {
        return Some(format!("{which} needs the stable_inodes feature"));
    }
    None
}

/// Which master key a context needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyRef {
    /// v1: an 8-byte descriptor chosen by whoever set the policy.
    Descriptor([u8; DESCRIPTOR_SIZE]),
    /// v2: the HKDF-derived identifier of the key.
    Identifier([u8; IDENTIFIER_SIZE]),
}

/// An inode's encryption context (`struct fscrypt_context_v1`/`_v2`): its
/// policy plus the nonce its per-file key is derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// `contents_encryption_mode`.
    pub contents_mode: u8,
    /// `filenames_encryption_mode`.
    pub filenames_mode: u8,
    /// `flags` (`policy_flags`).
    pub flags: u8,
    /// v2's `log2_data_unit_size` (first reserved byte; 0: the block size).
    pub log2_data_unit_size: u8,
    /// The master key and so the policy version.
    pub key: KeyRef,
    /// The per-file nonce.
    pub nonce: [u8; NONCE_SIZE],
}

impl Context {
    /// Decodes a context value; `None` when its size does not match its
    /// version or the version is unknown.
    pub fn parse(v: &[u8]) -> Option<Self> {
        let (key, nonce_at, unit) = match (v.first()?, v.len()) {
            (&VERSION_V1, CONTEXT_V1_SIZE) => (KeyRef::Descriptor(v[4..12].try_into().ok()?), 12, 0),
            (&VERSION_V2, CONTEXT_V2_SIZE) => (KeyRef::Identifier(v[8..24].try_into().ok()?), 24, v[4]),
            _ => return None,
        };
        Some(Self {
            contents_mode: v[1],
            filenames_mode: v[2],
            flags: v[3],
            log2_data_unit_size: unit,
            key,
            nonce: v[nonce_at..nonce_at + NONCE_SIZE].try_into().ok()?,
        })
    }

    /// The stored bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![0, self.contents_mode, self.filenames_mode, self.flags];
        match self.key {
            KeyRef::Descriptor(d) => {
                out[0] = VERSION_V1;
                out.extend_from_slice(&d);
            }
            KeyRef::Identifier(id) => {
                out[0] = VERSION_V2;
                out.extend_from_slice(&[self.log2_data_unit_size, 0, 0, 0]);
                out.extend_from_slice(&id);
            }
        }
        out.extend_from_slice(&self.nonce);
        out
    }

    /// The policy version (1 or 2).
    pub fn version(&self) -> u8 {
        match self.key {
            KeyRef::Descriptor(_) => VERSION_V1,
            KeyRef::Identifier(_) => VERSION_V2,
        }
    }

    /// Whether `other` has the same policy (the nonce aside): a child must
    /// have its directory's policy (`fscrypt_has_permitted_context`).
    pub fn same_policy(&self, other: &Self) -> bool {
        Self {
            nonce: other.nonce,
            ..*self
        } == *other
    }

    /// The name padding in bytes (4, 8, 16 or 32).
    pub fn padding(&self) -> usize {
        4 << (self.flags & policy_flags::PAD_MASK)
    }
}

/// The stored length of a `len`-byte name under `padding`: at least one
/// cipher block, rounded up to the padding, at most `max`
/// (`fscrypt_fname_encrypted_size`).
pub fn padded_len(len: usize, padding: usize, max: usize) -> usize {
    len.max(NAME_MIN).next_multiple_of(padding).min(max)
}

/// `sizeof(fscrypt_nokey_name.bytes)`: how much ciphertext a no-key name
/// carries whole.
pub const NOKEY_BYTES: usize = 149;
/// `FSCRYPT_NOKEY_NAME_MAX`: hashes, bytes and the SHA-256 of the rest.
pub const NOKEY_MAX: usize = 8 + NOKEY_BYTES + 32;

/// What a no-key name says about the entry it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoKeyName {
    /// The whole stored name.
    Exact(Vec<u8>),
    /// A long name: its first [`NOKEY_BYTES`] and the SHA-256 of the rest.
    Long {
        /// The leading ciphertext.
        prefix: Vec<u8>,
        /// SHA-256 of the ciphertext past `prefix`.
        tail_sha256: [u8; 32],
    },
}

impl NoKeyName {
    /// Whether stored name `disk` is the one named (`fscrypt_match_name`).
    pub fn matches(&self, disk: &[u8], sha256: impl FnOnce(&[u8]) -> [u8; 32]) -> bool {
        match self {
            Self::Exact(n) => n == disk,
            Self::Long { prefix, tail_sha256 } => {
                disk.len() > NOKEY_BYTES
                    && disk[..NOKEY_BYTES] == prefix[..]
                    && sha256(&disk[NOKEY_BYTES..]) == *tail_sha256
            }
        }
    }
}

/// The no-key name of stored name `disk` (`struct fscrypt_nokey_name`,
/// base64url without padding): the directory hash pair, then the
/// ciphertext, whole when it fits in [`NOKEY_BYTES`], else its prefix and
/// `sha256` of the rest.
pub fn nokey_encode(disk: &[u8], hash: u32, minor: u32, sha256: impl FnOnce(&[u8]) -> [u8; 32]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(NOKEY_MAX);
    raw.extend_from_slice(&hash.to_le_bytes());
    raw.extend_from_slice(&minor.to_le_bytes());
    if disk.len() <= NOKEY_BYTES {
        raw.extend_from_slice(disk);
    } else {
        raw.extend_from_slice(&disk[..NOKEY_BYTES]);
        raw.extend_from_slice(&sha256(&disk[NOKEY_BYTES..]));
    }
    base64url_encode(&raw)
}

/// Decodes a no-key name as `fscrypt_setup_filename` does; `None` for a
/// name no entry can have (then the lookup finds nothing).
pub fn nokey_decode(name: &[u8]) -> Option<NoKeyName> {
    if name.len() > NOKEY_MAX.div_ceil(3) * 4 {
        return None;
    }
    let raw = base64url_decode(name)?;
    if raw.len() < 9 || (raw.len() > 8 + NOKEY_BYTES && raw.len() != NOKEY_MAX) {
        return None;
    }
    let body = &raw[8..];
    Some(if raw.len() == NOKEY_MAX {
        NoKeyName::Long {
            prefix: body[..NOKEY_BYTES].to_vec(),
            tail_sha256: body[NOKEY_BYTES..].try_into().ok()?,
        }
    } else {
        NoKeyName::Exact(body.to_vec())
    })
}

const B64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// RFC 4648 base64url without `=` padding (`fscrypt_base64url_encode`).
pub fn base64url_encode(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len().div_ceil(3) * 4);
    for chunk in src.chunks(3) {
        let mut w = [0u8; 3];
        w[..chunk.len()].copy_from_slice(chunk);
        let v = u32::from(w[0]) << 16 | u32::from(w[1]) << 8 | u32::from(w[2]);
        for i in 0..=chunk.len() {
            out.push(B64URL[(v >> (18 - 6 * i) & 63) as usize]);
        }
    }
    out
}

/// The inverse of [`base64url_encode`]; `None` for a character outside
/// the alphabet, a length no encoding has, or nonzero leftover bits.
pub fn base64url_decode(src: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(src.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in src {
        let v = B64URL.iter().position(|&a| a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (bits < 6 && acc == 0).then_some(out)
}

/// The ciphertext of an encrypted symlink's body (`struct
/// fscrypt_symlink_data`: a little-endian 16-bit length, then that many
/// bytes); `None` when the length overruns the body or is zero.
pub fn symlink_ciphertext(body: &[u8]) -> Option<&[u8]> {
    let len = usize::from(u16::from_le_bytes(body.get(..2)?.try_into().ok()?));
    (len > 0).then(|| body.get(2..2 + len)).flatten()
}

/// An encrypted symlink's body for `ciphertext`.
pub fn symlink_body(ciphertext: &[u8]) -> Vec<u8> {
    let mut out = (ciphertext.len() as u16).to_le_bytes().to_vec();
    out.extend_from_slice(ciphertext);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_round_trips_every_length() {
        for n in 0..40u8 {
            let v: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
            assert_eq!(base64url_decode(&base64url_encode(&v)).unwrap(), v);
        }
        assert_eq!(base64url_encode(b"\xfb\xff"), b"-_8");
        assert_eq!(base64url_decode(b"-_9"), None, "leftover bits must be zero");
    }

    #[test]
    fn contexts_round_trip_and_reject_bad_sizes() {
        let c = Context {
            contents_mode: 1,
            filenames_mode: 4,
            flags: 2,
            log2_data_unit_size: 0,
            key: KeyRef::Identifier([7; 16]),
            nonce: [9; 16],
        };
        let b = c.to_bytes();
        assert_eq!(b.len(), CONTEXT_V2_SIZE);
        assert_eq!(Context::parse(&b), Some(c));
        assert_eq!(Context::parse(&b[..27]), None);
        let v1 = Context {
            key: KeyRef::Descriptor([1; 8]),
            ..c
        };
        assert_eq!(Context::parse(&v1.to_bytes()).unwrap().version(), 1);
        assert_eq!(padded_len(3, 32, 255), 32);
        assert_eq!(padded_len(250, 32, 255), 255);
        assert_eq!(padded_len(17, 4, 255), 20);
    }

    #[test]
    fn mode_names_and_the_kernels_policy_rule() {
        assert_eq!(mode::by_name("aes-256-cts"), Some(mode::AES_256_CTS));
        assert_eq!(mode::by_name("AES-128-CBC-ESSIV"), Some(mode::AES_128_CBC));
        assert_eq!(mode::by_name("adiantum"), Some(mode::ADIANTUM));
        assert_eq!(mode::by_name("SM4-CTS-CBC"), Some(mode::SM4_CTS));
        assert_eq!(mode::by_name("AES-256-HCTR2"), Some(mode::AES_256_HCTR2));
        assert_eq!(mode::by_name("AES-256-CBC"), None);
        assert_eq!(mode::by_name("unknown"), None);
        let ok = |v, c, n, f| policy_refusal(v, c, n, f, true);
        assert_eq!(ok(1, mode::ADIANTUM, mode::ADIANTUM, policy_flags::DIRECT_KEY), None);
        assert_eq!(
            ok(2, mode::AES_256_XTS, mode::AES_256_HCTR2, policy_flags::IV_INO_LBLK_32),
            None
        );
        assert_eq!(ok(2, mode::SM4_XTS, mode::SM4_CTS, 3), None);
        let why = ok(1, mode::AES_256_XTS, mode::AES_256_HCTR2, 0).unwrap();
        assert!(why.contains("AES-256-HCTR2") && why.contains("v1"), "{why}");
        let why = ok(2, mode::AES_256_XTS, mode::AES_256_CTS, policy_flags::DIRECT_KEY).unwrap();
        assert!(why.contains("DIRECT_KEY") && why.contains("AES-256-XTS"), "{why}");
        let why = ok(2, mode::ADIANTUM, mode::ADIANTUM, policy_flags::IV_INO_LBLK_64).unwrap();
        assert!(why.contains("IV_INO_LBLK_64") && why.contains("Adiantum"), "{why}");
        assert!(ok(1, mode::AES_256_XTS, mode::AES_256_CTS, policy_flags::IV_INO_LBLK_32).is_some());
        assert!(ok(2, mode::ADIANTUM, mode::ADIANTUM, 0x0c).unwrap().contains("exclude"));
        let none = policy_refusal(2, mode::AES_256_XTS, mode::AES_256_CTS, 0x10, false);
        assert!(none.unwrap().contains("stable_inodes"));
    }

    #[test]
    fn nokey_names_decode_to_what_was_encoded() {
        let short = vec![0xab; 32];
        let n = nokey_encode(&short, 0x1234, 0x5678, |_| unreachable!());
        assert_eq!(nokey_decode(&n), Some(NoKeyName::Exact(short)));
        let long = vec![0xcd; 200];
        let n = nokey_encode(&long, 1, 2, |_| [3; 32]);
        assert_eq!(n.len(), 252);
        let d = nokey_decode(&n).unwrap();
        assert!(d.matches(&long, |t| if t.len() == 51 { [3; 32] } else { [0; 32] }));
        assert_eq!(nokey_decode(b"short"), None);
    }
}
