//! `ext4kit key add MOUNTPOINT [DESCRIPTOR=]FILE`: gives a running
//! `ext4kit mount` an fscrypt master key (see
//! [`ext4kit_fuse::key_request`]), as `FS_IOC_ADD_ENCRYPTION_KEY` gives
//! the kernel one.

use std::path::PathBuf;

use anyhow::{Context, Result};
use ext4kit_fuse::key_request::ADD_KEY_XATTR;

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
}

pub fn run(a: Args) -> Result<()> {
    let What::Add { mountpoint, key } = a.what;
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
