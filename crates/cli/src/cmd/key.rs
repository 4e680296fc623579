//! `ext4kit key add MOUNTPOINT [DESCRIPTOR=]FILE`: gives a running
//! `ext4kit mount` an fscrypt master key (see
//! [`ext4kit_fuse::key_request`]), as `FS_IOC_ADD_ENCRYPTION_KEY` gives
//! the kernel one. `ext4kit key set-policy IMAGE DIR --key [DESCRIPTOR=]FILE`
//! gives an empty directory of an image a policy under that key, as
//! `FS_IOC_SET_ENCRYPTION_POLICY` (see `Filesystem::set_encryption_policy`),
//! with `--contents`, `--filenames` and `--flags` choosing among the
//! modes and flags the kernel accepts.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_engine::Policy;
use ext4kit_format::fscrypt::{mode, policy_flags};
use ext4kit_fuse::key_request::ADD_KEY_XATTR;

use crate::ImageArgs;
use crate::open::open_rw;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

// Parsed once per run, so the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(clap::Subcommand)]
enum What {
    /// Add a key: FILE (raw 16-64 bytes) for v2 policies,
    /// DESCRIPTOR=FILE (16 hex digits) for v1.
    Add {
        /// The mount point of an ext4kit mount.
        mountpoint: PathBuf,
        /// `[DESCRIPTOR=]FILE`.
        key: String,
    },
    /// Give an empty directory of an image an encryption policy under the
    /// first `--key`: v2 for FILE, v1 for DESCRIPTOR=FILE.
    SetPolicy {
        #[command(flatten)]
        image: ImageArgs,
        /// The directory in the image.
        dir: String,
        /// Names padded to 4, 8, 16 or 32 bytes.
        #[arg(long, default_value = "32", value_parser = ["4", "8", "16", "32"])]
        padding: String,
        /// Contents mode: AES-256-XTS, AES-128-CBC-ESSIV, Adiantum, SM4-XTS.
        #[arg(long, default_value = "AES-256-XTS")]
        contents: String,
        /// Names mode: AES-256-CTS-CBC, AES-128-CTS-CBC, Adiantum,
        /// AES-256-HCTR2, SM4-CTS-CBC (default: the kernel's partner of
        /// the contents mode).
        #[arg(long)]
        filenames: Option<String>,
        /// Policy flags, comma-separated: direct_key, iv_ino_lblk_64,
        /// iv_ino_lblk_32.
        #[arg(long, value_delimiter = ',', value_parser = ["direct_key", "iv_ino_lblk_64", "iv_ino_lblk_32"])]
        flags: Vec<String>,
    },
}

pub fn run(a: Args) -> Result<()> {
    let (mountpoint, key) = match a.what {
        What::Add { mountpoint, key } => (mountpoint, key),
        What::SetPolicy {
            image,
            dir,
            padding,
            contents,
            filenames,
            flags,
        } => {
            let modes = Modes::parse(&contents, filenames.as_deref(), &padding, &flags)?;
            return set_policy(&image, &dir, &modes);
        }
    };
    let (desc, file) = crate::keys::parse(&key)?;
    let raw = std::fs::read(file).with_context(|| format!("cannot read key file {file}"))?;
    let name = match desc {
        Some(d) => format!(
            "{ADD_KEY_XATTR}.{}",
            d.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
        None => ADD_KEY_XATTR.to_string(),
    };
    xattr::set(&mountpoint, name, &raw).with_context(|| {
        format!(
            "{}: the mount did not take the key (is it an ext4kit mount?)",
            mountpoint.display()
        )
    })
}

/// The modes and flags `key set-policy` was given.
struct Modes {
    contents: u8,
    names: u8,
    flags: u8,
}

impl Modes {
    /// Reads mode names as `fscrypt.rst` spells them; the kernel's rules
    /// on pairs and flags are the engine's to apply.
    fn parse(contents: &str, names: Option<&str>, padding: &str, flags: &[String]) -> Result<Self> {
        let by_name =
            |what: &str, s: &str| mode::by_name(s).with_context(|| format!("unknown fscrypt {what} mode {s:?}"));
        let contents = by_name("contents", contents)?;
        let names = match names {
            Some(n) => by_name("filenames", n)?,
            None => mode::names_partner(contents)
                .with_context(|| format!("{} is not a contents mode", mode::name(contents)))?,
        };
        let mut bits = match padding {
            "4" => 0,
            "8" => 1,
            "16" => 2,
            _ => 3,
        };
        for f in flags {
            bits |= match f.as_str() {
                "direct_key" => policy_flags::DIRECT_KEY,
                "iv_ino_lblk_64" => policy_flags::IV_INO_LBLK_64,
                _ => policy_flags::IV_INO_LBLK_32,
            };
        }
        Ok(Self {
            contents,
            names,
            flags: bits,
        })
    }
}

/// `key set-policy`.
fn set_policy(image: &ImageArgs, dir: &str, modes: &Modes) -> Result<()> {
    let Some(spec) = image.keys.first() else {
        bail!("set-policy needs --key [DESCRIPTOR=]FILE: the key the policy names");
    };
    let fs = open_rw(image)?;
    let (desc, file) = crate::keys::parse(spec)?;
    let raw = std::fs::read(file).with_context(|| format!("cannot read key file {file}"))?;
    let key = fs.add_key(&raw, desc).with_context(|| format!("key file {file}"))?;
    let ino = fs.resolve(dir.as_bytes()).with_context(|| dir.to_string())?.ino;
    let policy = Policy::with_modes(key, modes.contents, modes.names, modes.flags);
    fs.set_encryption_policy(ino, &policy)
        .with_context(|| format!("{dir}: cannot set the encryption policy"))?;
    fs.unmount()?;
    Ok(())
}
