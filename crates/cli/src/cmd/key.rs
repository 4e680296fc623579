//! `ext4kit key add MOUNTPOINT [DESCRIPTOR=]FILE`: gives a running
//! `ext4kit mount` an fscrypt master key (see
//! [`ext4kit_fuse::key_request`]), as `FS_IOC_ADD_ENCRYPTION_KEY` gives
//! the kernel one. `ext4kit key set-policy IMAGE DIR --key [DESCRIPTOR=]FILE`
//! gives an empty directory of an image a policy under that key, as
//! `FS_IOC_SET_ENCRYPTION_POLICY` (see `Filesystem::set_encryption_policy`).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_engine::Policy;
use ext4kit_fuse::key_request::ADD_KEY_XATTR;

use crate::ImageArgs;
use crate::open::open_rw;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

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
    /// Give an empty directory of an image an encryption policy
    /// (AES-256-XTS contents, AES-256-CTS-CBC names) under the first
    /// `--key`: v2 for FILE, v1 for DESCRIPTOR=FILE.
    SetPolicy {
        #[command(flatten)]
        image: ImageArgs,
        /// The directory in the image.
        dir: String,
        /// Names padded to 4, 8, 16 or 32 bytes.
        #[arg(long, default_value = "32", value_parser = ["4", "8", "16", "32"])]
        padding: String,
    },
}

pub fn run(a: Args) -> Result<()> {
    let (mountpoint, key) = match a.what {
        What::Add { mountpoint, key } => (mountpoint, key),
        What::SetPolicy { image, dir, padding } => return set_policy(&image, &dir, &padding),
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

/// `key set-policy`.
fn set_policy(image: &ImageArgs, dir: &str, padding: &str) -> Result<()> {
    let Some(spec) = image.keys.first() else {
        bail!("set-policy needs --key [DESCRIPTOR=]FILE: the key the policy names");
    };
    let fs = open_rw(image)?;
    let (desc, file) = crate::keys::parse(spec)?;
    let raw = std::fs::read(file).with_context(|| format!("cannot read key file {file}"))?;
    let key = fs.add_key(&raw, desc).with_context(|| format!("key file {file}"))?;
    let pad_flag = match padding {
        "4" => 0,
        "8" => 1,
        "16" => 2,
        _ => 3,
    };
    let ino = fs.resolve(dir.as_bytes()).with_context(|| dir.to_string())?.ino;
    fs.set_encryption_policy(ino, &Policy::new(key, pad_flag))
        .with_context(|| format!("{dir}: cannot set the encryption policy"))?;
    fs.unmount()?;
    Ok(())
}
