//! `ext4kit image IMAGE OUT`: a metadata-only copy for bug reports, as
//! e2image writes one — `-r` sparse raw, `-Q` QCOW2, `-a` with file data,
//! `-s` with directory names scrambled; `-r` on a QCOW2 input converts it
//! back to raw. The walk and the writers live in `ext4kit_engine::image`.

use std::fs::File;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_engine::image::{self, ImageOptions};

use crate::ImageArgs;
use crate::open::open_ro;

/// Arguments of `image`.
#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("form").required(true).args(["raw", "qcow2"]))]
pub struct Args {
    /// The file system image (or block device), or with -r a QCOW2 image
    /// to turn back into raw.
    image: PathBuf,
    /// The image file to write (created or truncated).
    out: PathBuf,
    /// Write a sparse raw image: each block at its own offset, the rest holes.
    #[arg(short = 'r')]
    raw: bool,
    /// Write a QCOW2 image (clusters of one block), as e2image -Q.
    #[arg(short = 'Q')]
    qcow2: bool,
    /// Include file data too, not only metadata.
    #[arg(short = 'a')]
    all_data: bool,
    /// Replace directory entry names by stand-ins of the same length.
    #[arg(short = 's')]
    scramble: bool,
    /// Read the file system through the backup superblock at this block
    /// and copy it and its descriptors too, as e2image -b.
    #[arg(short = 'b', value_name = "BLOCK")]
    superblock: Option<u64>,
    /// The block size -b counts in (without it each size is tried).
    #[arg(short = 'B', value_name = "SIZE", requires = "superblock", value_parser = crate::open::parse_block_size)]
    block_size: Option<u32>,
}

/// Writes the image and says what went into it.
pub fn run(a: Args) -> Result<()> {
    let input = File::open(&a.image).with_context(|| format!("cannot open {}", a.image.display()))?;
    if same_file(&a.image, &a.out) {
        bail!("{}: the output would overwrite the input", a.out.display());
    }
    if image::is_qcow2(&input) {
        if !a.raw || a.all_data || a.scramble || a.superblock.is_some() {
            bail!(
                "{}: a QCOW2 image can only be turned back into raw (-r alone)",
                a.image.display()
            );
        }
        let out = create(&a.out)?;
        let n = image::qcow2_to_raw(&input, &out).with_context(|| format!("{}", a.image.display()))?;
        outln!("{}: {n} blocks restored from QCOW2", a.out.display());
        return Ok(());
    }
    drop(input);
    let fs = open_ro(&ImageArgs {
        image: a.image.clone(),
        ignore_checksums: true,
        ignore_journal: true,
        superblock: a.superblock,
        block_size: a.block_size,
        journal: None,
        undo: Default::default(),
        keys: Vec::new(),
    })?;
    let opts = ImageOptions {
        all_data: a.all_data,
        scramble: a.scramble,
    };
    let set = fs.metadata_blocks(&opts)?;
    for w in &set.warnings {
        eprintln!("ext4kit image: {w}");
    }
    let out = create(&a.out)?;
    let stats = if a.qcow2 {
        fs.write_qcow2_image(&set, &out)?
    } else {
        fs.write_raw_image(&set, &out)?
    };
    outln!(
        "{}: {} blocks of {} bytes chosen, {} written ({} all zeros), {} bytes",
        a.out.display(),
        stats.blocks,
        fs.block_size(),
        stats.written,
        stats.blocks - stats.written,
        stats.file_bytes
    );
    if a.scramble {
        outln!("names scrambled: {}, kept: {}", stats.names_scrambled, stats.names_kept);
    }
    Ok(())
}

fn create(path: &std::path::Path) -> Result<File> {
    File::create(path).with_context(|| format!("cannot create {}", path.display()))
}

/// True when both paths name one existing file.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}
