//! `ext4kit defrag IMAGE [PATH…]`: rewrites fragmented files into fewer
//! extents (`e4defrag`, offline), one transaction per chunk so a crash
//! leaves every chunk in its old place or its new one. Without paths,
//! every regular file. The image is opened for writing through the usual
//! lock and in-use checks, dry run included, so a mounted image is
//! refused rather than planned against stale contents.
//!
//! `ext4kit defrag MOUNTPOINT/PATH…` (or `--mounted PATH…`) does the same
//! to the files of an ext4kit mount, through the mount's own request
//! ([`mounted`]): e4defrag's ioctl cannot pass through FUSE.

mod mounted;
mod report;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_engine::{DEFAULT_CHUNK_BLOCKS, DefragOptions, Filesystem, Inode};
use ext4kit_format::inode::FileType;

use crate::ImageArgs;
use crate::open::open_rw;
use report::Progress;

/// Arguments of `defrag`.
#[derive(clap::Args)]
#[command(after_help = "On an ext4kit mount: ext4kit defrag [--mounted] MOUNTPOINT/PATH… \
    (IMAGE is then the first file or directory; the mount's server moves the blocks).")]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Files to defragment [default: every regular file]; with a mount,
    /// more files or directories on ext4kit mounts.
    paths: Vec<String>,
    /// Every path is a file or directory on an ext4kit mount, defragmented
    /// by the mount's server [default: when the first path is a directory
    /// or a file the mount answers for].
    #[arg(long)]
    mounted: bool,
    /// Report what would move; change nothing.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Blocks moved per transaction.
    #[arg(long, default_value_t = DEFAULT_CHUNK_BLOCKS, value_parser = clap::value_parser!(u32).range(1..))]
    chunk_blocks: u32,
}

/// The files named, or every regular file.
fn targets(fs: &Filesystem, paths: &[String]) -> Result<Vec<(String, Inode)>> {
    if paths.is_empty() {
        return Ok(fs.regular_files()?);
    }
    let mut v = Vec::with_capacity(paths.len());
    for p in paths {
        let inode = fs.resolve(p.as_bytes()).with_context(|| p.clone())?;
        if inode.file_type()? != FileType::Regular {
            bail!("{p}: not a regular file");
        }
        v.push((p.clone(), inode));
    }
    Ok(v)
}

/// Defragments (or plans) and reports, offline or through a mount.
pub fn run(a: Args) -> Result<()> {
    let opts = DefragOptions {
        dry_run: a.dry_run,
        chunk_blocks: a.chunk_blocks,
    };
    if a.mounted || mounted::answers(&a.image.image) {
        let mut paths = vec![a.image.image];
        paths.extend(a.paths.iter().map(PathBuf::from));
        return mounted::run(&paths, &opts, a.json);
    }
    let fs = open_rw(&a.image)?;
    let files = targets(&fs, &a.paths)?;
    let mut progress = Progress::new(files.len() as u64);
    let mut done = Vec::with_capacity(files.len());
    for (i, (path, inode)) in files.iter().enumerate() {
        progress.show(i as u64, path);
        let out = fs
            .defrag_file_reporting(inode.ino, &opts, |moved| {
                progress.show(i as u64, &format!("{path}: {moved} blocks moved"));
            })
            .with_context(|| format!("{path}: defrag"))?;
        done.push((path.as_str(), out));
    }
    progress.finish();
    fs.unmount().context("closing the image")?;
    report::print(&done, a.dry_run, a.json)
}
