//! `ext4kit undo [-f] [-n] [-v] [-o OFFSET] [-z FILE] [--header] UNDO_FILE
//! IMAGE`: e2undo. Puts
//! back the blocks an undo file saved (`mkfs`/`tune`/`resize`/`fsck -z`
//! here, `mke2fs`/`tune2fs`/`resize2fs`/`e2fsck -z` in e2fsprogs), after
//! checking the whole file and that the image is the one it was made
//! against; the replay itself is `ext4kit_engine::device::undo::replay`.
//! `-o` places the file system at a byte offset of IMAGE (else the undo
//! file's own, if it records one); `-z` saves what the replay overwrites
//! in another undo file, so that the undo can be undone.

use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use ext4kit_engine::BlockDevice;
use ext4kit_engine::device::undo::replay::{ReplayOptions, UndoFile, replay};
use ext4kit_engine::device::{OffsetDevice, UndoDevice};

use crate::open::{Access, open_device};

/// Arguments of `undo`.
#[derive(clap::Args)]
pub struct Args {
    /// Replay even when the image's superblock does not match the undo
    /// file or checksums are wrong (the image is then marked for a check).
    #[arg(short = 'f')]
    force: bool,
    /// Dry run: check the undo file and the image, write nothing.
    #[arg(short = 'n')]
    dry_run: bool,
    /// Name every run of blocks replayed.
    #[arg(short = 'v')]
    verbose: bool,
    /// Print the undo file's header and stop (e2undo -h).
    #[arg(long)]
    header: bool,
    /// Byte offset of the file system in IMAGE (default: the one the undo
    /// file records, else 0).
    #[arg(short = 'o', value_name = "OFFSET")]
    offset: Option<u64>,
    /// Save what the replay overwrites in FILE first, so that this undo
    /// can itself be undone (`ext4kit undo FILE IMAGE`, or e2undo).
    #[arg(short = 'z', value_name = "FILE")]
    undo: Option<PathBuf>,
    /// The undo file.
    undo_file: PathBuf,
    /// The image to restore; it must not be mounted.
    image: PathBuf,
}

/// Checks the undo file and the image, then replays.
pub fn run(a: Args) -> Result<()> {
    let name = a.undo_file.display();
    let file = File::open(&a.undo_file).with_context(|| format!("cannot open the undo file {name}"))?;
    let mut undo = UndoFile::read(&file, a.force).with_context(|| format!("{name}: nothing was written"))?;
    if a.header {
        print_header(&undo)?;
        return Ok(());
    }
    if let Some(z) = &a.undo
        && (same_file(z, &a.undo_file) || same_file(z, &a.image))
    {
        bail!(
            "-z {}: the new undo file cannot be the one replayed, or the image",
            z.display()
        );
    }
    let offset = a.offset.unwrap_or(undo.fs_offset());
    let access = if a.dry_run { Access::Read } else { Access::Write };
    let (dev, _) = open_device(&a.image, access).with_context(|| "cannot open the image")?;
    let dev = OffsetDevice::new(dev, offset).with_context(|| format!("{}", a.image.display()))?;
    // The device starts at the file system from here on.
    undo.set_fs_offset(0);
    let (dev, saver) = save_to(Box::new(dev), &a, undo.header.fs_block_size, offset)?;
    if !a.force {
        undo.check_image(dev.as_ref())
            .with_context(|| format!("{}: nothing was written", a.image.display()))?;
    }
    for d in &undo.damage {
        eprintln!("ext4kit undo: {name}: {d}");
    }
    let opts = ReplayOptions {
        force: a.force,
        dry_run: a.dry_run,
    };
    let bs = undo.header.fs_block_size;
    let r = replay(&undo, &file, dev.as_ref(), opts, &mut |run| {
        if a.verbose {
            let _ = writeln!(
                std::io::stdout(),
                "Replayed block of size {} from {} to {}",
                run.key.size,
                run.undo_block,
                run.key.fs_block
            );
        }
    })
    .with_context(|| format!("replaying {name} onto {}", a.image.display()))?;
    if let (Some(u), Some(z)) = (saver, &a.undo) {
        u.finish()
            .with_context(|| format!("finishing the undo file {}", z.display()))?;
        eprintln!(
            "This undo can be undone with:\n    ext4kit undo {} {}",
            z.display(),
            a.image.display()
        );
    }
    let verb = if a.dry_run { "would be written" } else { "written" };
    outln!(
        "{}: {} runs of {bs}-byte blocks ({} bytes) {verb} back from {name}",
        a.image.display(),
        r.runs,
        r.bytes
    );
    if r.incomplete {
        eprintln!("ext4kit undo: {name}: incomplete undo record (the command was interrupted); run fsck.");
    }
    if !undo.damage.is_empty() {
        bail!("{name}: undo file corruption: the image is marked in error; run fsck -fy now");
    }
    Ok(())
}

/// The undo file `-z` fills, finished once the replay is done.
type Saver = Arc<UndoDevice>;

/// `-z`: the device wrapped so that the replay's writes are saved first
/// (not on a dry run, which writes nothing).
fn save_to(
    dev: Box<dyn BlockDevice>,
    a: &Args,
    block_size: u32,
    offset: u64,
) -> Result<(Box<dyn BlockDevice>, Option<Saver>)> {
    let Some(z) = a.undo.as_deref().filter(|_| !a.dry_run) else {
        return Ok((dev, None));
    };
    let u = Arc::new(
        UndoDevice::create_at(dev, z, block_size, offset)
            .with_context(|| format!("cannot create the undo file {}", z.display()))?,
    );
    Ok((Box::new(u.clone()), Some(u)))
}

/// True when both paths name one existing file.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

fn print_header(u: &UndoFile) -> Result<()> {
    let h = &u.header;
    outln!("nr keys:\t{}", h.num_keys);
    outln!("super block:\t{}", h.super_offset);
    outln!("key block:\t{}", h.key_offset);
    outln!("block size:\t{}", h.block_size);
    outln!("fs block size:\t{}", h.fs_block_size);
    outln!("super crc:\t{:#x}", h.sb_crc);
    outln!("state:\t\t{:#x}", h.state);
    outln!("compat:\t\t{:#x}", h.f_compat);
    outln!("incompat:\t{:#x}", h.f_incompat);
    outln!("rocompat:\t{:#x}", h.f_rocompat);
    if u.fs_offset() != 0 {
        outln!("fs offset:\t{}", u.fs_offset());
    }
    Ok(())
}
