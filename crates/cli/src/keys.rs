//! `--key [DESCRIPTOR=]FILE` and the mount's `-o key=[DESCRIPTOR=]FILE`:
//! fscrypt master keys for encrypted directories. A key file holds the raw
//! key (16 to 64 bytes, as given to the kernel's FS_IOC_ADD_ENCRYPTION_KEY).
//! A v2 policy names its key by an identifier derived from the key itself,
//! so a bare FILE serves every v2 directory of that key; a v1 policy names
//! it by a descriptor its creator chose, given as 16 hex digits before `=`.

use anyhow::{Context, Result, bail};
use ext4kit_engine::Filesystem;

/// Splits `[DESCRIPTOR=]FILE`.
pub(crate) fn parse(spec: &str) -> Result<(Option<[u8; 8]>, &str)> {
    match spec.split_once('=') {
        Some((d, file)) if d.len() == 16 && d.bytes().all(|b| b.is_ascii_hexdigit()) => {
            let mut desc = [0u8; 8];
            for (i, b) in desc.iter_mut().enumerate() {
                *b = u8::from_str_radix(&d[2 * i..2 * i + 2], 16)?;
            }
            Ok((Some(desc), file))
        }
        _ if spec.is_empty() => bail!("--key needs a key file"),
        _ => Ok((None, spec)),
    }
}

/// Gives `fs` every key in `specs`.
pub fn add_keys(fs: &Filesystem, specs: &[String]) -> Result<()> {
    for spec in specs {
        let (desc, file) = parse(spec)?;
        let raw = std::fs::read(file).with_context(|| format!("cannot read key file {file}"))?;
        fs.add_key(&raw, desc).with_context(|| format!("key file {file}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_sixteen_hex_digits_before_the_file() {
        assert_eq!(
            parse("0123456789abcdef=/k").unwrap(),
            (Some([1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]), "/k")
        );
        assert_eq!(parse("/a=b").unwrap(), (None, "/a=b"));
        assert!(parse("").is_err());
    }
}
