//! Master keys and per-file keys (`keysetup.c`, `keysetup_v1.c`,
//! `hkdf.c`): a v1 file key is the master key encrypted with AES-128-ECB
//! under the file's nonce; a v2 one is HKDF-SHA512 of the master key with
//! the info `"fscrypt\0"`, a context byte and the nonce. With DIRECT_KEY
//! every file of a mode shares one key (v1: the master key itself; v2:
//! HKDF of the mode number) and the nonce goes into the IV instead. The
//! IV of a data unit is its logical block number (little-endian,
//! zero-padded to the mode's IV size), with the nonce after it under
//! DIRECT_KEY, the inode number in its high half under IV_INO_LBLK_64,
//! or added to a hash of it under IV_INO_LBLK_32.

use aes::Aes128;
use aes::cipher::{BlockEncrypt, KeyInit, generic_array::GenericArray};
use ext4kit_format::fscrypt::{self, Context, KeyRef, mode, policy_flags};
use hkdf::Hkdf;
use sha2::Sha512;

use super::modes;
use crate::error::{Error, Result};
use crate::inode::Inode;

/// `HKDF_CONTEXT_*`: what a derived key is for.
mod hkdf_context {
    pub const KEY_IDENTIFIER: u8 = 1;
    pub const PER_FILE_ENC_KEY: u8 = 2;
    pub const DIRECT_KEY: u8 = 3;
    pub const IV_INO_LBLK_64_KEY: u8 = 4;
    pub const DIRHASH_KEY: u8 = 5;
    pub const IV_INO_LBLK_32_KEY: u8 = 6;
    pub const INODE_HASH_KEY: u8 = 7;
}

/// A master key as given (`FS_IOC_ADD_ENCRYPTION_KEY`'s raw bytes).
#[derive(Clone)]
pub struct MasterKey {
    raw: Vec<u8>,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MasterKey({} bytes)", self.raw.len())
    }
}

impl MasterKey {
    /// Wraps raw key bytes (16 to 64 of them).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for another length.
    pub fn new(raw: &[u8]) -> Result<Self> {
        if !(16..=64).contains(&raw.len()) {
            return Err(Error::InvalidArgument(format!(
                "an fscrypt master key has 16 to 64 bytes, not {}",
                raw.len()
            )));
        }
        Ok(Self { raw: raw.to_vec() })
    }

    /// `HKDF-Expand(PRK, "fscrypt\0" || context || info, len)`, the PRK
    /// extracted from the key with an all-zero salt.
    fn hkdf(&self, context: u8, info: &[u8], out: &mut [u8]) {
        let h = Hkdf::<Sha512>::new(Some(&[0u8; 64]), &self.raw);
        let mut full = b"fscrypt\0".to_vec();
        full.push(context);
        full.extend_from_slice(info);
        // Lengths here are at most 64 bytes, far under HKDF's limit.
        h.expand(&full, out).expect("HKDF-SHA512 output of at most 64 bytes");
    }

    /// The v2 key identifier (`FSCRYPT_KEY_IDENTIFIER_SIZE` bytes).
    pub fn identifier(&self) -> [u8; 16] {
        let mut id = [0u8; 16];
        self.hkdf(hkdf_context::KEY_IDENTIFIER, &[], &mut id);
        id
    }
}

/// How a data unit's IV is formed (`fscrypt_generate_iv`).
#[derive(Debug, Clone, Copy)]
enum IvBase {
    Lblk,
    /// DIRECT_KEY: the file's nonce follows the index.
    Nonce,
    InoLblk64(u32),
    InoLblk32(u32),
}

/// The key of one inode: its cipher mode and key bytes, and its IV rule.
pub(crate) struct FileKey {
    pub(crate) mode: u8,
    pub(crate) key: Vec<u8>,
    pub(crate) ctx: Context,
    iv: IvBase,
    /// The SipHash key of a casefolded directory (`ci_dirhash_key`).
    pub(crate) dirhash: Option<(u64, u64)>,
}

impl FileKey {
    /// The key of `inode` (contents mode for regular files, names mode
    /// for directories and symlinks) from `master`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the modes and flags of a policy
    /// the kernel refuses (its `EINVAL`), [`Error::Unsupported`] for a
    /// data unit size other than the block size, [`Error::NoKey`] for a
    /// master key too short for the mode (the kernel's `ENOKEY`).
    pub(crate) fn derive(master: &MasterKey, ctx: &Context, inode: &Inode, uuid: &[u8; 16]) -> Result<Self> {
        let m = if inode.raw.file_type() == Some(ext4kit_format::inode::FileType::Regular) {
            ctx.contents_mode
        } else {
            ctx.filenames_mode
        };
        check_policy(ctx, inode.ino)?;
        let size = modes::key_size(m).expect("a mode of a valid pair");
        check_master_size(master, ctx, m, size, inode.ino)?;
        let mut key = vec![0u8; size];
        let lblk = policy_flags::IV_INO_LBLK_64 | policy_flags::IV_INO_LBLK_32;
        let iv = match (ctx.key, ctx.flags & (policy_flags::DIRECT_KEY | lblk)) {
            (KeyRef::Descriptor(_), policy_flags::DIRECT_KEY) => {
                key.copy_from_slice(&master.raw[..size]);
                IvBase::Nonce
            }
            (KeyRef::Descriptor(_), _) => {
                v1_derive(master, &ctx.nonce, &mut key);
                IvBase::Lblk
            }
            (KeyRef::Identifier(_), policy_flags::DIRECT_KEY) => {
                master.hkdf(hkdf_context::DIRECT_KEY, &[m], &mut key);
                IvBase::Nonce
            }
            (KeyRef::Identifier(_), policy_flags::IV_INO_LBLK_64) => {
                master.hkdf(hkdf_context::IV_INO_LBLK_64_KEY, &mode_and_uuid(m, uuid), &mut key);
                IvBase::InoLblk64(inode.ino)
            }
            (KeyRef::Identifier(_), policy_flags::IV_INO_LBLK_32) => {
                master.hkdf(hkdf_context::IV_INO_LBLK_32_KEY, &mode_and_uuid(m, uuid), &mut key);
                IvBase::InoLblk32(hashed_ino(master, inode.ino))
            }
            (KeyRef::Identifier(_), _) => {
                master.hkdf(hkdf_context::PER_FILE_ENC_KEY, &ctx.nonce, &mut key);
                IvBase::Lblk
            }
        };
        Ok(Self {
            mode: m,
            key,
            ctx: *ctx,
            iv,
            dirhash: None,
        })
    }

    /// Adds the dirhash key of a casefolded directory: HKDF-SHA512 of the
    /// master key with the directory's nonce (`fscrypt_derive_dirhash_key`),
    /// read as two little-endian words. v1 policies have no way to derive
    /// one, and the kernel refuses them on casefolded directories.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a v1 policy.
    pub(crate) fn with_dirhash(mut self, master: &MasterKey) -> Result<Self> {
        if let KeyRef::Descriptor(_) = self.ctx.key {
            return Err(Error::InvalidArgument(
                "a v1 encryption policy cannot be used on a casefolded directory (no dirhash key)".into(),
            ));
        }
        let mut k = [0u8; 16];
        master.hkdf(hkdf_context::DIRHASH_KEY, &self.ctx.nonce, &mut k);
        self.dirhash = Some(sip_key(&k));
        Ok(self)
    }

    /// SipHash-2-4 of `folded` under the dirhash key
    /// (`fscrypt_fname_siphash`); `None` without one.
    pub(crate) fn siphash(&self, folded: &[u8]) -> Option<u64> {
        use std::hash::Hasher;
        let (k0, k1) = self.dirhash?;
        let mut h = siphasher::sip::SipHasher24::new_with_keys(k0, k1);
        h.write(folded);
        Some(h.finish())
    }

    /// The IV of data unit `lblk` (0 for names): its index little-endian,
    /// then the nonce under DIRECT_KEY, zeros elsewhere.
    pub(crate) fn iv(&self, lblk: u64) -> modes::Iv {
        let index = match self.iv {
            IvBase::Lblk | IvBase::Nonce => lblk,
            IvBase::InoLblk64(ino) => u64::from(ino) << 32 | (lblk & 0xffff_ffff),
            IvBase::InoLblk32(h) => u64::from(h.wrapping_add(lblk as u32)),
        };
        let mut iv = [0u8; 32];
        iv[..8].copy_from_slice(&index.to_le_bytes());
        if let IvBase::Nonce = self.iv {
            iv[8..24].copy_from_slice(&self.ctx.nonce);
        }
        iv
    }

    /// Runs this key's mode over `buf` with the IV of `lblk`.
    pub(crate) fn crypt(&self, lblk: u64, buf: &mut [u8], dir: modes::Dir) -> Result<()> {
        modes::crypt(self.mode, &self.key, &self.iv(lblk), buf, dir)
    }
}

/// Refuses a context whose policy the kernel refuses (`EINVAL` at open)
/// and a data unit size this code does not implement.
fn check_policy(ctx: &Context, ino: u32) -> Result<()> {
    let refusal = fscrypt::policy_refusal(ctx.version(), ctx.contents_mode, ctx.filenames_mode, ctx.flags, true);
    if let Some(why) = refusal {
        return Err(Error::InvalidArgument(format!("inode {ino}: fscrypt policy: {why}")));
    }
    if ctx.log2_data_unit_size != 0 {
        return Err(Error::Unsupported(format!(
            "fscrypt data unit size 2^{} other than the block size (inode {ino})",
            ctx.log2_data_unit_size
        )));
    }
    Ok(())
}

/// A v1 key must be as long as the mode's key (it is encrypted or used
/// whole); a v2 one at least the mode's security strength
/// (`fscrypt_valid_master_key_size`).
fn check_master_size(master: &MasterKey, ctx: &Context, m: u8, size: usize, ino: u32) -> Result<()> {
    let need = if ctx.version() == fscrypt::VERSION_V1 {
        size
    } else {
        modes::security_strength(m)
    };
    if master.raw.len() < need {
        return Err(Error::NoKey(format!(
            "{} has {} bytes; inode {ino}'s mode {} needs {need}",
            describe(&ctx.key),
            master.raw.len(),
            mode::name(m)
        )));
    }
    Ok(())
}

fn mode_and_uuid(m: u8, uuid: &[u8; 16]) -> Vec<u8> {
    let mut info = vec![m];
    info.extend_from_slice(uuid);
    info
}

/// SipHash-2-4 of the inode number under the inode-hash key
/// (`fscrypt_hash_inode_number`).
fn hashed_ino(master: &MasterKey, ino: u32) -> u32 {
    use std::hash::Hasher;
    let mut k = [0u8; 16];
    master.hkdf(hkdf_context::INODE_HASH_KEY, &[], &mut k);
    let (k0, k1) = sip_key(&k);
    let mut h = siphasher::sip::SipHasher24::new_with_keys(k0, k1);
    h.write(&u64::from(ino).to_le_bytes());
    h.finish() as u32
}

/// A `siphash_key_t` from 16 derived bytes (two little-endian words).
fn sip_key(k: &[u8; 16]) -> (u64, u64) {
    let word = |i: usize| {
        u64::from_le_bytes([
            k[i],
            k[i + 1],
            k[i + 2],
            k[i + 3],
            k[i + 4],
            k[i + 5],
            k[i + 6],
            k[i + 7],
        ])
    };
    (word(0), word(8))
}

/// v1: each 16 bytes of the master key encrypted with AES-128 keyed by the
/// nonce (`derive_key_aes`); the caller checked the key's length.
fn v1_derive(master: &MasterKey, nonce: &[u8; 16], out: &mut [u8]) {
    let aes = Aes128::new(GenericArray::from_slice(nonce));
    for (o, i) in out.chunks_mut(16).zip(master.raw.chunks(16)) {
        let mut b = GenericArray::clone_from_slice(i);
        aes.encrypt_block(&mut b);
        o.copy_from_slice(&b);
    }
}

/// How a key is named in messages.
pub(crate) fn describe(k: &KeyRef) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    match k {
        KeyRef::Descriptor(d) => format!("the v1 key with descriptor {}", hex(d)),
        KeyRef::Identifier(id) => format!("the v2 key with identifier {}", hex(id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ext4kit_format::fscrypt::Context;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A v1 directory the kernel made (name "abc"), checked independently
    /// with Python's `cryptography` (AES-128-ECB derivation, AES-256-CBC).
    #[test]
    fn v1_name_key_decrypts_a_kernel_name() {
        let master = MasterKey::new(&hex("a5f793d8e48d2e264baeb6588ba5b162a2217d6e4772b2286e31315124049c2d\
             120760f14fc56a46f18bca7f5ee7dad1f873a4d1eee47100cad1398891d7833e"))
        .unwrap();
        let ctx = Context::parse(&hex("01010402 0123456789abcdef bced611977b26fd98779f2f6d2cdf80f"
            .replace(' ', "")
            .as_str()))
        .unwrap();
        let mut record = vec![0u8; 256];
        record[..2].copy_from_slice(&0o40755u16.to_le_bytes());
        record[128..130].copy_from_slice(&32u16.to_le_bytes());
        let raw = ext4kit_format::inode::RawInode::parse(&record, 256).unwrap();
        let inode = crate::inode::Inode {
            ino: 12,
            raw,
            record: record.into(),
        };
        let key = FileKey::derive(&master, &ctx, &inode, &[0; 16]).unwrap();
        let ct = b"\xa7\x97\x8a\x0dwF,SK\xed1\xc2\x11\xef\xcb\xa8";
        assert_eq!(key.decrypt_name(ct).unwrap().unwrap(), b"abc");
        assert_eq!(key.encrypt_name(b"abc", 255).unwrap(), ct);
    }
}
