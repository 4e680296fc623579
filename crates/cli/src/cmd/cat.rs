//! `ext4kit cat IMAGE PATH`.

use std::io::Write;

use anyhow::{Context, Result, bail};
use ext4kit_format::inode::FileType;

use crate::ImageArgs;
use crate::open::open_ro;

/// Arguments of `cat`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Path inside the image.
    path: String,
}

/// Streams the file to standard output in 1 MiB pieces.
pub fn run(a: Args) -> Result<()> {
    let fs = open_ro(&a.image)?;
    let inode = fs.resolve_opts(a.path.as_bytes(), true)?;
    if inode.file_type()? == FileType::Directory {
        bail!("{}: is a directory", a.path);
    }
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = fs
            .read_at(&inode, off, &mut buf)
            .with_context(|| format!("{}: read at byte {off}", a.path))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        off += n as u64;
    }
    out.flush()?;
    Ok(())
}
