//! `ext4kit fallocate IMAGE PATH`: fallocate(1)'s modes on a file of an
//! image, spelled as util-linux spells them (`-o`, `-l`, `-n`, `-p`, `-z`,
//! `-c`, `-i`). Collapse and insert range are here because a FUSE mount
//! cannot pass them (the kernel's FUSE client refuses those modes before
//! they reach the server).

use anyhow::{Context, Result, bail};
use ext4kit_engine::FallocMode;
use ext4kit_engine::mkfs::parse_size;

use crate::ImageArgs;
use crate::open::open_rw;

/// Arguments of `fallocate`.
#[derive(clap::Args)]
// `-z` is fallocate(1)'s zero range here: the undo file is `--undo`.
#[command(mut_arg("undo", |a| a.short(None)))]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// The file in the image.
    path: String,
    /// Where the range starts, in bytes (K, M, G suffixes accepted).
    #[arg(short = 'o', long, default_value = "0", value_parser = size)]
    offset: u64,
    /// How long the range is, in bytes (K, M, G suffixes accepted).
    #[arg(short = 'l', long, value_parser = size)]
    length: u64,
    /// Keep the file size (FALLOC_FL_KEEP_SIZE).
    #[arg(short = 'n', long)]
    keep_size: bool,
    /// Free the whole blocks of the range and zero its edges.
    #[arg(short = 'p', long, group = "mode")]
    punch_hole: bool,
    /// Zero the range (whole blocks become unwritten).
    #[arg(short = 'z', long, group = "mode")]
    zero_range: bool,
    /// Remove the range, moving the rest of the file down (whole
    /// clusters; the range must end before the end of the file).
    #[arg(short = 'c', long, group = "mode")]
    collapse_range: bool,
    /// Open a hole of LENGTH at OFFSET, moving the rest of the file up
    /// (whole clusters; OFFSET must be before the end of the file).
    #[arg(short = 'i', long, group = "mode")]
    insert_range: bool,
}

fn size(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// Runs one fallocate(2)-like call on the file.
pub fn run(a: Args) -> Result<()> {
    let fs = open_rw(&a.image)?;
    let inode = fs
        .resolve_opts(a.path.as_bytes(), true)
        .with_context(|| a.path.clone())?;
    let (off, len) = (a.offset, a.length);
    if (a.collapse_range || a.insert_range) && a.keep_size {
        // vfs_fallocate refuses keep-size with these modes.
        bail!("--keep-size does not go with --collapse-range or --insert-range");
    }
    let r = if a.collapse_range {
        fs.collapse_range(inode.ino, off, len)
    } else if a.insert_range {
        fs.insert_range(inode.ino, off, len)
    } else {
        let mode = if a.punch_hole {
            FallocMode::PunchHole
        } else if a.zero_range {
            FallocMode::ZeroRange { keep_size: a.keep_size }
        } else {
            FallocMode::Allocate { keep_size: a.keep_size }
        };
        fs.fallocate(inode.ino, off, len, mode)
    };
    r.with_context(|| format!("{}: fallocate at {off} for {len} bytes", a.path))?;
    fs.unmount()?;
    Ok(())
}
