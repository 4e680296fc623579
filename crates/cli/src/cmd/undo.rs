//! `ext4kit undo [-f] [-n] [-v] [--header] UNDO_FILE IMAGE`: e2undo. Puts
//! back the blocks an undo file saved (`mkfs`/`tune`/`resize`/`fsck -z`
//! here, `mke2fs`/`tune2fs`/`resize2fs`/`e2fsck -z` in e2fsprogs), after
//! checking the whole file and that the image is the one it was made
//! against; the replay itself is `ext4kit_engine::device::undo::replay`.

use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::device::undo::replay::{ReplayOptions, UndoFile, replay};

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
    /// The undo file.
    undo_file: PathBuf,
    /// The image to restore; it must not be mounted.
    image: PathBuf,
}

/// Checks the undo file and the image, then replays.
pub fn run(a: Args) -> Result<()> {
    let name = a.undo_file.display();
    let file = File::open(&a.undo_file).with_context(|| format!("cannot open the undo file {name}"))?;
    let undo = UndoFile::read(&file, a.force).with_context(|| format!("{name}: nothing was written"))?;
    if a.header {
        print_header(&undo)?;
        return Ok(());
    }
    let dev = FileDevice::open(&a.image, !a.dry_run).with_context(|| "cannot open the image")?;
    if !a.force {
        undo.check_image(&dev)
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
    let r = replay(&undo, &file, &dev, opts, &mut |run| {
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
