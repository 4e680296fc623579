//! The cipher behind each fscrypt mode (`fscrypt.rst`, "Encryption modes
//! and usage"; `fscrypt_modes[]` in the kernel's `keysetup.c`), applied
//! in place to one data unit of a file or one padded name:
//!
//! - AES-256-XTS and SM4-XTS: XTS with the 16-byte IV as tweak.
//! - AES-128-CBC-ESSIV: CBC under the 16-byte key, its IV the fscrypt IV
//!   encrypted with AES-256 keyed by SHA-256 of that key
//!   (`essiv(cbc(aes),sha256)`).
//! - AES-256-CTS-CBC, AES-128-CTS-CBC, SM4-CTS-CBC: CBC with ciphertext
//!   stealing, the last two blocks swapped (CS3); one block is plain CBC.
//! - Adiantum (XChaCha12, AES-256) and AES-256-HCTR2: wide-block
//!   ciphers tweaked by the whole 32-byte IV.
//!
//! Every cipher is a crate's: `aes`, `sm4`, `xts-mode`, `cbc`, `cts`,
//! `adiantum`, `hctr2-rs`; this file only composes them as fscrypt does.

use aes::cipher::block_padding::NoPadding;
use aes::cipher::{BlockCipher, BlockDecrypt, BlockDecryptMut, BlockEncrypt, BlockEncryptMut, KeyInit, KeyIvInit};
use aes::{Aes128, Aes256};
use cts::{Decrypt, Encrypt};
use ext4kit_format::fscrypt::mode;
use sha2::{Digest, Sha256};
use sm4::Sm4;
use xts_mode::Xts128;

use crate::error::{Error, Result};

/// `union fscrypt_iv`: the little-endian data unit index, then (with
/// DIRECT_KEY) the file's nonce; 16-byte-IV modes read its first half.
pub(crate) type Iv = [u8; 32];

/// The largest data unit the `adiantum` crate takes (its NH hash keeps
/// four 1 KiB strides): larger blocks are refused by name.
pub(crate) const ADIANTUM_MAX: usize = 4096;

/// Which way a transform runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Encrypt,
    Decrypt,
}

/// `fscrypt_mode.keysize` of mode `m`; `None` for a number no kernel
/// defines.
pub(crate) fn key_size(m: u8) -> Option<usize> {
    Some(match m {
        mode::AES_256_XTS => 64,
        mode::AES_256_CTS | mode::SM4_XTS | mode::ADIANTUM | mode::AES_256_HCTR2 => 32,
        mode::AES_128_CBC | mode::AES_128_CTS | mode::SM4_CTS => 16,
        _ => return None,
    })
}

/// `fscrypt_mode.security_strength`: the shortest v2 master key a mode
/// accepts (`fscrypt_valid_master_key_size`).
pub(crate) fn security_strength(m: u8) -> usize {
    match m {
        mode::AES_128_CBC | mode::AES_128_CTS | mode::SM4_XTS | mode::SM4_CTS => 16,
        _ => 32,
    }
}

/// Runs mode `m` keyed by `key` over `buf` (a data unit or a padded name
/// of at least 16 bytes) with IV `iv`.
///
/// # Errors
/// [`Error::Unsupported`] naming the mode for a mode number no kernel
/// defines or an Adiantum unit over [`ADIANTUM_MAX`];
/// [`Error::InvalidArgument`] for a length the mode cannot take.
pub(crate) fn crypt(m: u8, key: &[u8], iv: &Iv, buf: &mut [u8], dir: Dir) -> Result<()> {
    if key_size(m) != Some(key.len()) {
        return Err(Error::Unsupported(format!("fscrypt mode {} ({m})", mode::name(m))));
    }
    if buf.len() < 16 {
        return Err(bad_len(m, buf.len()));
    }
    let iv16: &[u8; 16] = iv[..16].try_into().expect("16 of 32 bytes");
    match m {
        mode::AES_256_XTS => xts::<Aes256>(key, iv16, buf, dir),
        mode::SM4_XTS => xts::<Sm4>(key, iv16, buf, dir),
        mode::AES_128_CBC => essiv(key, iv16, buf, dir),
        mode::AES_256_CTS => cbc_cs3::<Aes256>(key, iv16, buf, dir),
        mode::AES_128_CTS => cbc_cs3::<Aes128>(key, iv16, buf, dir),
        mode::SM4_CTS => cbc_cs3::<Sm4>(key, iv16, buf, dir),
        mode::ADIANTUM => adiantum(key, iv, buf, dir),
        _ => hctr2(key, iv, buf, dir),
    }
}

fn bad_len(m: u8, len: usize) -> Error {
    Error::InvalidArgument(format!("fscrypt mode {} cannot take {len} bytes", mode::name(m)))
}

fn xts<C>(key: &[u8], iv: &[u8; 16], buf: &mut [u8], dir: Dir) -> Result<()>
where
    C: BlockCipher + BlockEncrypt + BlockDecrypt + KeyInit + Clone,
    C: aes::cipher::BlockSizeUser<BlockSize = aes::cipher::consts::U16>,
{
    let (k1, k2) = key.split_at(key.len() / 2);
    let c1 = C::new_from_slice(k1).expect("half of the mode's key");
    let c2 = C::new_from_slice(k2).expect("half of the mode's key");
    let x = Xts128::new(c1, c2);
    match dir {
        Dir::Encrypt => x.encrypt_sector(buf, *iv),
        Dir::Decrypt => x.decrypt_sector(buf, *iv),
    }
    Ok(())
}

/// CBC under `key` with the IV encrypted by AES-256 under SHA-256(`key`).
fn essiv(key: &[u8], iv: &[u8; 16], buf: &mut [u8], dir: Dir) -> Result<()> {
    if !buf.len().is_multiple_of(16) {
        return Err(bad_len(mode::AES_128_CBC, buf.len()));
    }
    let salt = Aes256::new_from_slice(&Sha256::digest(key)).expect("a 32-byte digest");
    let mut essiv = aes::Block::clone_from_slice(iv);
    salt.encrypt_block(&mut essiv);
    let len = buf.len();
    match dir {
        Dir::Encrypt => {
            cbc::Encryptor::<Aes128>::new_from_slices(key, &essiv)
                .expect("a 16-byte key and IV")
                .encrypt_padded_mut::<NoPadding>(buf, len)
                .expect("whole blocks");
        }
        Dir::Decrypt => {
            cbc::Decryptor::<Aes128>::new_from_slices(key, &essiv)
                .expect("a 16-byte key and IV")
                .decrypt_padded_mut::<NoPadding>(buf)
                .expect("whole blocks");
        }
    }
    Ok(())
}

/// `cts(cbc(…))` as the kernel runs it: CS3, plain CBC for one block.
fn cbc_cs3<C>(key: &[u8], iv: &[u8; 16], buf: &mut [u8], dir: Dir) -> Result<()>
where
    C: BlockCipher + BlockEncrypt + BlockDecrypt + KeyInit,
    C: aes::cipher::BlockSizeUser<BlockSize = aes::cipher::consts::U16>,
{
    let one = buf.len() == 16;
    match dir {
        Dir::Encrypt if one => {
            cbc::Encryptor::<C>::new_from_slices(key, iv)
                .expect("the mode's key and a 16-byte IV")
                .encrypt_padded_mut::<NoPadding>(buf, 16)
                .expect("one whole block");
        }
        Dir::Decrypt if one => {
            cbc::Decryptor::<C>::new_from_slices(key, iv)
                .expect("the mode's key and a 16-byte IV")
                .decrypt_padded_mut::<NoPadding>(buf)
                .expect("one whole block");
        }
        Dir::Encrypt => cts::CbcCs3Enc::<C>::new_from_slices(key, iv)
            .expect("the mode's key and a 16-byte IV")
            .encrypt(buf)
            .expect("at least one block"),
        Dir::Decrypt => cts::CbcCs3Dec::<C>::new_from_slices(key, iv)
            .expect("the mode's key and a 16-byte IV")
            .decrypt(buf)
            .expect("at least one block"),
    }
    Ok(())
}

/// The `adiantum` cipher as fscrypt uses it.
type AdiantumCipher = adiantum::Cipher<chacha20::XChaCha12, aes09::Aes256>;

// adiantum 0.2.0 (the newest release; its repository has no later fix)
// views its 1,072-byte NH key, a `[u8; 0x430]` field of its own
// `NhPoly1305` inside the cipher value, as `[u32; 4]` words through an
// unchecked pointer cast (`nh` in `src/nh.rs`), in host byte order. That
// buffer is the crate's, not ours: the data unit and tweak we pass are
// read byte-wise, so no alignment at our call site changes anything.
// Whether the field is 4-aligned rests on rustc's layout of a struct
// whose own alignment is at least 4 (it holds Poly1305 states), which the
// language does not promise; this assert checks the part we can see.
// Host byte order is caught by `adiantum_matches_published_vectors`.
const _: () = assert!(std::mem::align_of::<AdiantumCipher>() >= 4);

/// `adiantum(xchacha12,aes)`.
fn adiantum(key: &[u8], iv: &Iv, buf: &mut [u8], dir: Dir) -> Result<()> {
    use adiantum::cipher::KeyInit as _;
    if buf.len() > ADIANTUM_MAX {
        return Err(Error::Unsupported(format!(
            "fscrypt mode Adiantum on {}-byte data units (at most {ADIANTUM_MAX} here)",
            buf.len()
        )));
    }
    let key = adiantum::cipher::Key::<AdiantumCipher>::try_from(key).expect("a 32-byte key");
    let c = AdiantumCipher::new(&key);
    match dir {
        Dir::Encrypt => c.encrypt(buf, iv),
        Dir::Decrypt => c.decrypt(buf, iv),
    }
    Ok(())
}

/// `hctr2(aes)` with AES-256.
fn hctr2(key: &[u8], iv: &Iv, buf: &mut [u8], dir: Dir) -> Result<()> {
    let c = hctr2_rs::Hctr2_256::new(key);
    let input = buf.to_vec();
    match dir {
        Dir::Encrypt => c.encrypt(&input, iv, buf),
        Dir::Decrypt => c.decrypt(&input, iv, buf),
    }
    .map_err(|_| bad_len(mode::AES_256_HCTR2, buf.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Encrypts `pt` to `ct` and back under mode `m`.
    fn known_answer(m: u8, key: &str, iv: &str, pt: &str, ct: &str) {
        let mut tweak = [0u8; 32];
        let iv = hex(iv);
        tweak[..iv.len()].copy_from_slice(&iv);
        let mut buf = hex(pt);
        crypt(m, &hex(key), &tweak, &mut buf, Dir::Encrypt).unwrap();
        assert_eq!(buf, hex(ct), "{} encrypts {pt}", mode::name(m));
        crypt(m, &hex(key), &tweak, &mut buf, Dir::Decrypt).unwrap();
        assert_eq!(buf, hex(pt), "{} decrypts back", mode::name(m));
    }

    /// Adiantum-XChaCha12-AES with 32-byte tweaks, from the vectors the
    /// Adiantum authors publish (`Adiantum_XChaCha12_32_AES256.json`).
    #[test]
    fn adiantum_matches_published_vectors() {
        known_answer(
            mode::ADIANTUM,
            "9eebb2493c1cf5f46a99c2c4dfb1f4dd752057ea2c4fcdb2a53d7b491eabfd0f",
            "df63d4abd249f3d8338137607dfa7308d8496d80e82f6254eb0ea9395b457f8a",
            "67c9f23084418e43fbf3b33e79367fe8",
            "6d32861867860f3f967c9d280d53ec9f",
        );
        known_answer(
            mode::ADIANTUM,
            "362b5797f85dcd995f1a5a441d920f27cc16d72b856399d3ba96a1dbd26068da",
            "ef5869b12c5e9a4724c1b169e112938f433d6d00db5ed8d9129afed9ff2daac4",
            "5ea8681985981223260accdb0a04b9df4db3487bb0e3c819435a4606942df2",
            "c7c6f1738fc4ff4a39be78be8d28c8894663e70c7d87e84ec9187bbe186050",
        );
        let mut big = vec![0u8; ADIANTUM_MAX + 1024];
        let err = crypt(mode::ADIANTUM, &[1; 32], &[0; 32], &mut big, Dir::Encrypt).unwrap_err();
        assert!(err.to_string().contains("Adiantum"), "{err}");
    }

    /// HCTR2-AES-256 with 32-byte tweaks, from the HCTR2 authors' vectors
    /// (`HCTR2_AES256.json`, the source of the kernel's testmgr ones).
    #[test]
    fn hctr2_matches_published_vectors() {
        known_answer(
            mode::AES_256_HCTR2,
            "9eebb2493c1cf5f46a99c2c4dfb1f4dd752057ea2c4fcdb2a53d7b491eabfd0f",
            "df63d4abd249f3d8338137607dfa7308d8496d80e82f6254eb0ea9395b457f8a",
            "67c9f23084418e43fbf3b33e79367fe8",
            "2738784716d971352e7edd7e433cb840",
        );
        known_answer(
            mode::AES_256_HCTR2,
            "93fa7ee20e67c439e7ca4795689d5e5a7c2619abc6ca6a4c45a69642ae6cffe7",
            "ea8247953b22a13a6aca244c507e23cd0e50e541b66529d8302300d254a7d656",
            "db1f1fecad836e5d19a5f63bb4935a576f",
            "f1466e9db301f06bc2ac5788486d407268",
        );
        known_answer(
            mode::AES_256_HCTR2,
            "362b5797f85dcd995f1a5a441d920f27cc16d72b856399d3ba96a1dbd26068da",
            "ef5869b12c5e9a4724c1b169e112938f433d6d00db5ed8d9129afed9ff2daac4",
            "5ea8681985981223260accdb0a04b9df4db3487bb0e3c819435a4606942df2",
            "dbfdc803d0ecc1febd6437b88243624e7e54a3e224a727e8a4d5b36cb226b4",
        );
    }

    /// SM4: the block cipher's example in GB/T 32907 (one block of CBC
    /// under a zero IV is the bare cipher), and the kernel's `xts(sm4)`
    /// testmgr vector.
    #[test]
    fn sm4_matches_the_standard_and_the_kernel() {
        let k = "0123456789abcdeffedcba9876543210";
        known_answer(mode::SM4_CTS, k, "", k, "681edf34d206965e86b3e94f536e4246");
        known_answer(
            mode::SM4_XTS,
            "1111111111111111111111111111111122222222222222222222222222222222",
            "3333333333",
            "4444444444444444444444444444444444444444444444444444444444444444",
            "a74d726c11196a32be04e001ff29d0c7932f9f3ec29bfcb64dd17f63cbd3ea31",
        );
    }

    /// AES-128-CBC-ESSIV and AES-128-CTS-CBC against answers computed by
    /// Python's `cryptography` (ESSIV: the IV encrypted with AES-256 under
    /// SHA-256 of the key, then CBC; CTS: CBC with the last two blocks
    /// swapped).
    #[test]
    fn aes_128_modes_match_a_second_implementation() {
        let key = "000102030405060708090a0b0c0d0e0f";
        let pt: String = (0..64u32).map(|i| format!("{:02x}", (i * 7 + 3) & 255)).collect();
        known_answer(
            mode::AES_128_CBC,
            key,
            "0500000000000000",
            &pt,
            "c76fa884de951860ab9a3754d5c57910bd2c9ed67390deaba767de1d9a82de27\
             a92a3d6d9dfc1c10671a3c92af7e7c821eb7a342eb2135e0d6b85a8b55c90f25",
        );
        let name: String = b"twenty-byte-name-abc".iter().map(|b| format!("{b:02x}")).collect();
        known_answer(
            mode::AES_128_CTS,
            key,
            "",
            &format!("{name}{}", "00".repeat(12)),
            "b90eae356b15465c48f9e26509e3a0c551c2140cced8f464014686ae5766443e",
        );
    }

    #[test]
    fn short_units_and_unknown_modes_are_refused_by_name() {
        let mut short = [0u8; 15];
        let e = crypt(mode::AES_256_HCTR2, &[0; 32], &[0; 32], &mut short, Dir::Encrypt).unwrap_err();
        assert!(e.to_string().contains("AES-256-HCTR2"), "{e}");
        let e = crypt(2, &[0; 32], &[0; 32], &mut [0; 16], Dir::Encrypt).unwrap_err();
        assert_eq!(e.errno(), libc::EOPNOTSUPP);
    }
}
