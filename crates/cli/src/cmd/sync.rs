//! `ext4kit sync MOUNTPOINT…`: makes everything written to an ext4kit
//! mount durable now. `sync(1)` and `syncfs(2)` cannot: FUSE does not tell
//! the server about them (see [`ext4kit_fuse::sync_request`]), so without
//! this a change waits for the journal's next commit (`commit=`).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_fuse::sync_request::{SYNC_REPLY, SYNC_XATTR};

/// `statfs.f_type` of every FUSE mount (`FUSE_SUPER_MAGIC`).
pub(crate) const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// Arguments of `sync`.
#[derive(clap::Args)]
pub struct Args {
    /// Mount points of ext4kit mounts (or any directory or regular file on
    /// one).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

/// Syncs each mount in turn; stops at the first that fails.
pub fn run(a: Args) -> Result<()> {
    for path in &a.paths {
        sync_mount(path)?;
    }
    Ok(())
}

fn sync_mount(path: &std::path::Path) -> Result<()> {
    let shown = path.display();
    let meta = std::fs::metadata(path).with_context(|| format!("{shown}"))?;
    if !meta.is_dir() && !meta.is_file() {
        bail!("{shown}: not a directory or regular file");
    }
    let file = std::fs::File::open(path).with_context(|| format!("{shown}"))?;
    let fs = nix::sys::statfs::fstatfs(&file).with_context(|| format!("statfs {shown}"))?;
    if fs.filesystem_type().0 as i64 != FUSE_SUPER_MAGIC {
        bail!("{shown}: not an ext4kit mount (not a FUSE file system)");
    }
    // The kernel's dirty pages and times, written back to the server.
    nix::unistd::syncfs(&file).with_context(|| format!("syncfs {shown}"))?;
    // The server commits and flushes before it answers.
    match xattr::get(path, SYNC_XATTR) {
        Ok(Some(v)) if v == SYNC_REPLY => Ok(()),
        Ok(_) => bail!("{shown}: not an ext4kit mount (its server does not know ext4kit's sync)"),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTSUP | libc::ENOSYS)) => {
            bail!("{shown}: not an ext4kit mount (its server does not know ext4kit's sync)")
        }
        Err(e) => Err(e).with_context(|| format!("{shown}: the server could not make the changes durable")),
    }
}
