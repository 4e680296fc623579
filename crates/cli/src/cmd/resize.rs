//! `ext4kit resize [-f] [-P] IMAGE [SIZE]`: resize2fs's command line,
//! carried out by `ext4kit_engine::resize`, which refuses an image that
//! needs a check or a shrink below the `-P` estimate (unless `-f`), an
//! image in use, and what it does not do, naming it. SIZE is read as
//! resize2fs reads it (a bare number counts blocks; K, M, G, T; `s` for
//! 512-byte sectors); without it the image file's size is taken.

use std::path::PathBuf;

use anyhow::{Context, Result};
use ext4kit_engine::BlockDevice;
use ext4kit_engine::resize::{ResizeOptions, ResizeReport, SizeSpec, minimum_size, parse_size, resize, resize_image};
use ext4kit_engine::tune::open_for_tune;
use indicatif::{ProgressBar, ProgressStyle};

/// Arguments of `resize`.
#[derive(clap::Args)]
pub struct Args {
    /// Resize even an image that should be checked with e2fsck -f first,
    /// or shrink below the estimated minimum.
    #[arg(short = 'f', long)]
    force: bool,
    /// Print the minimum size the file system could have, in blocks, and
    /// change nothing.
    #[arg(short = 'P')]
    print_min: bool,
    /// Zero the new inode tables now, even where the kernel would
    /// initialise them lazily.
    #[arg(long)]
    zero_itables: bool,
    /// Save what the resize overwrites in FILE first (a new file, or the
    /// undo file of the commands before it to continue), which `ext4kit
    /// undo FILE IMAGE` or e2fsprogs' `e2undo` replays.
    #[arg(short = 'z', value_name = "FILE")]
    undo: Option<PathBuf>,
    /// The image file (unmounted, or mounted by ext4kit), or the mount
    /// point of an ext4kit mount.
    image: PathBuf,
    /// The new size: blocks, or a number with K, M, G, T or s (sectors).
    size: Option<String>,
}

/// Resizes the image, or prints its minimum size.
pub fn run(a: Args) -> Result<()> {
    if a.print_min {
        // The usual read-only open: an image in use is read with a
        // warning, a dirty journal is replayed in memory.
        let fs = crate::open::open_ro(&crate::ImageArgs {
            image: a.image.clone(),
            ignore_checksums: false,
            ignore_journal: false,
            superblock: None,
            block_size: None,
            journal: None,
            undo: Default::default(),
            keys: Vec::new(),
        })?;
        outln!("Estimated minimum size of the filesystem: {}", minimum_size(&fs));
        return Ok(());
    }
    if let Some(mp) = super::resize_online::mount_of(&a.image) {
        if a.undo.is_some() {
            anyhow::bail!("{}: no undo file is kept for a mounted file system", a.image.display());
        }
        let image = (!a.image.is_dir()).then_some(a.image.as_path());
        return super::resize_online::run(&mp, image, a.size.as_deref());
    }
    crate::open::refuse_export(
        &a.image,
        "resize",
        "its size is the server's; resize the export there, or copy it to a file (-P works)",
    )?;
    let size = a.size.as_deref().map(parse_size).transpose()?;
    let opts = ResizeOptions {
        force: a.force,
        zero_itables: a.zero_itables,
    };
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template("resizing {bar:40} {percent}% {elapsed}") {
        bar.set_style(style);
    }
    let mut progress = |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let r = match &a.undo {
        None => resize_image(&a.image, size, &opts, &mut progress).map_err(anyhow::Error::from),
        Some(z) => undoable_resize(&a.image, z, size, &opts, &mut progress),
    };
    bar.finish_and_clear();
    let r = r.with_context(|| format!("{}", a.image.display()))?;
    let kib = r.block_size / 1024;
    if r.new_blocks == r.old_blocks {
        outln!(
            "The filesystem is already {} ({kib}k) blocks long.  Nothing to do!",
            r.new_blocks
        );
    } else {
        outln!(
            "The filesystem on {} is now {} ({kib}k) blocks long ({} groups, was {} blocks in {}).",
            a.image.display(),
            r.new_blocks,
            r.new_groups,
            r.old_blocks,
            r.old_groups
        );
    }
    if r.moved_blocks > 0 || r.moved_inodes > 0 {
        outln!(
            "Moved {} blocks and renumbered {} inodes out of the part cut off.",
            r.moved_blocks,
            r.moved_inodes
        );
    }
    Ok(())
}

/// `resize -z`: as `resize_image`, through the undo wrapper. The image
/// file is extended first, outside the undo file (e2undo puts blocks back
/// but never shortens a file).
fn undoable_resize(
    image: &std::path::Path,
    undo: &std::path::Path,
    size: Option<SizeSpec>,
    opts: &ResizeOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ResizeReport> {
    let mut dev = open_for_tune(image)?;
    let bs = crate::open::fs_block_size(&dev);
    let want = size.map(|s| s.blocks(bs));
    if let Some(bytes) = want.and_then(|w| w.checked_mul(u64::from(bs)))
        && bytes > dev.len()
    {
        dev.set_len(bytes)
            .with_context(|| format!("cannot extend {}", image.display()))?;
    }
    crate::open::with_undo(Box::new(dev), Some(undo), image, bs, |d| {
        Ok(resize(d, want, opts, progress)?)
    })
}
