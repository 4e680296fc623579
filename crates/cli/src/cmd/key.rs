//! `ext4kit key`: fscrypt master keys and policies, as the kernel's
//! ioctls give them. On a running `ext4kit mount` (see
//! [`ext4kit_fuse::key_request`]): `add MOUNTPOINT [DESCRIPTOR=]FILE`
//! (`FS_IOC_ADD_ENCRYPTION_KEY`), `remove MOUNTPOINT KEY`
//! (`FS_IOC_REMOVE_ENCRYPTION_KEY`), `status MOUNTPOINT KEY`
//! (`FS_IOC_GET_ENCRYPTION_KEY_STATUS`), `set-policy DIR --key …`
//! (`FS_IOC_SET_ENCRYPTION_POLICY`). On an image: `set-policy IMAGE DIR
//! --key [DESCRIPTOR=]FILE` (see `Filesystem::set_encryption_policy`).
//! `--contents`, `--filenames` and `--flags` choose among the modes and
//! flags the kernel accepts.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_engine::{MasterKey, Policy};
use ext4kit_format::fscrypt::{KeyRef, mode, policy_flags};
use ext4kit_fuse::key_request::{self as kr, ADD_KEY_XATTR};

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
    /// Remove a key from a running mount: files open under it keep
    /// working until closed, new lookups show no-key names.
    Remove {
        /// The mount point of an ext4kit mount.
        mountpoint: PathBuf,
        /// The key: its v2 identifier (32 hex digits), v1 descriptor (16),
        /// or `[DESCRIPTOR=]FILE` as for `add`.
        key: String,
    },
    /// Print whether a running mount has a key: present, absent, or
    /// incompletely removed (files still open under it).
    Status {
        /// The mount point of an ext4kit mount.
        mountpoint: PathBuf,
        /// The key, as for `remove`.
        key: String,
    },
    /// Give an empty directory an encryption policy under the first
    /// `--key`: v2 for FILE, v1 for DESCRIPTOR=FILE. `IMAGE DIR` for an image, or a
    /// directory of a running mount alone (the key is added to the mount).
    SetPolicy {
        #[command(flatten)]
        image: ImageArgs,
        /// The directory in the image (none for a mounted directory).
        dir: Option<String>,
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
    match a.what {
        What::Add { mountpoint, key } => add(&mountpoint, &key).map(|k| {
            if let KeyRef::Identifier(_) = k {
                println!("{}", kr::key_hex(&k));
            }
        }),
        What::Remove { mountpoint, key } => remove(&mountpoint, &key),
        What::Status { mountpoint, key } => {
            println!("{}", status(&mountpoint, &key_named(&key)?)?);
            Ok(())
        }
        What::SetPolicy {
            image,
            dir,
            padding,
            contents,
            filenames,
            flags,
        } => {
            let modes = Modes::parse(&contents, filenames.as_deref(), &padding, &flags)?;
            match dir {
                Some(dir) => set_policy(&image, &dir, &modes),
                None => set_mounted_policy(&image, &modes),
            }
        }
    }
}

/// The key `spec` names: a v2 identifier, a v1 descriptor, or
/// `[DESCRIPTOR=]FILE`.
fn key_named(spec: &str) -> Result<KeyRef> {
    if let Some(k) = kr::parse_key_hex(spec.as_bytes()) {
        return Ok(k);
    }
    match crate::keys::parse(spec)? {
        (Some(d), _) => Ok(KeyRef::Descriptor(d)),
        (None, file) => {
            let raw = std::fs::read(file).with_context(|| format!("cannot read key file {file}"))?;
            Ok(KeyRef::Identifier(MasterKey::new(&raw)?.identifier()))
        }
    }
}

fn status(mountpoint: &std::path::Path, key: &KeyRef) -> Result<String> {
    let name = format!("{}.{}", kr::KEY_STATUS_XATTR, kr::key_hex(key));
    let v = xattr::get(mountpoint, name).with_context(|| {
        format!(
            "{}: the mount did not answer (is it an ext4kit mount?)",
            mountpoint.display()
        )
    })?;
    Ok(String::from_utf8_lossy(&v.unwrap_or_default()).into_owned())
}

/// `key remove`: says so when files open under the key keep it.
fn remove(mountpoint: &std::path::Path, spec: &str) -> Result<()> {
    let key = key_named(spec)?;
    let name = format!("{}.{}", kr::REMOVE_KEY_XATTR, kr::key_hex(&key));
    xattr::set(mountpoint, name, b"").map_err(|e| match e.raw_os_error() {
        Some(libc::ENOKEY) => anyhow::anyhow!("{}: the mount does not have that key", mountpoint.display()),
        Some(libc::EINVAL) => anyhow::anyhow!(
            "{}: not taken (give the mount point of an ext4kit mount, and 16 or 32 hex digits)",
            mountpoint.display()
        ),
        _ => anyhow::Error::new(e).context(format!("{}: cannot remove the key", mountpoint.display())),
    })?;
    let now = status(mountpoint, &key)?;
    if now != "absent" {
        println!("{now}: files open under the key keep it until they are closed");
    }
    Ok(())
}

/// `key add`: the name the key is filed under.
fn add(mountpoint: &std::path::Path, key: &str) -> Result<KeyRef> {
    let (desc, file) = crate::keys::parse(key)?;
    let raw = std::fs::read(file).with_context(|| format!("cannot read key file {file}"))?;
    let filed = match desc {
        Some(d) => KeyRef::Descriptor(d),
        None => KeyRef::Identifier(MasterKey::new(&raw)?.identifier()),
    };
    let name = match desc {
        Some(d) => format!(
            "{ADD_KEY_XATTR}.{}",
            d.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
        None => ADD_KEY_XATTR.to_string(),
    };
    xattr::set(mountpoint, name, &raw).with_context(|| {
        format!(
            "{}: the mount did not take the key (is it an ext4kit mount?)",
            mountpoint.display()
        )
    })?;
    Ok(filed)
}

/// `key set-policy DIR` on a running mount: adds the first `--key`, then
/// asks for the policy.
fn set_mounted_policy(image: &ImageArgs, modes: &Modes) -> Result<()> {
    let dir = &image.image;
    let Some(spec) = image.keys.first() else {
        bail!("set-policy needs --key [DESCRIPTOR=]FILE: the key the policy names");
    };
    if !dir.is_dir() {
        bail!(
            "{}: give IMAGE DIR for an image, or a directory of a running ext4kit mount",
            dir.display()
        );
    }
    let key = add(dir, spec)?;
    let policy = Policy::with_modes(key, modes.contents, modes.names, modes.flags);
    xattr::set(dir, kr::SET_POLICY_XATTR, &kr::policy_bytes(&policy)).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::EEXIST) => "it already has another policy",
            Some(libc::ENOTEMPTY) => "it is not empty",
            Some(libc::ENOTDIR) => "not a directory",
            Some(libc::EPERM) => "the root directory stays unencrypted",
            Some(libc::EOPNOTSUPP) => "the image has no encrypt feature, or the policy is not supported",
            _ => "",
        };
        anyhow::Error::new(e).context(format!("{}: cannot set the encryption policy {why}", dir.display()))
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
