//! Opening an image from command-line arguments.

use anyhow::{Context, Result};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{DirtyJournal, Filesystem, OpenOptions};

use crate::ImageArgs;

/// Opens the image read-only with the options the arguments ask for.
pub fn open_ro(a: &ImageArgs) -> Result<Filesystem> {
    open(a, false)
}

/// Opens the image for writing; refuses images that can only be read.
pub fn open_rw(a: &ImageArgs) -> Result<Filesystem> {
    let fs = open(a, true)?;
    if let Some(why) = fs.read_only_reason() {
        anyhow::bail!("{}: cannot be written: {why}", a.image.display());
    }
    Ok(fs)
}

fn open(a: &ImageArgs, writable: bool) -> Result<Filesystem> {
    let dev = FileDevice::open(&a.image, writable).with_context(|| "cannot open the image")?;
    let opts = OpenOptions {
        verify_checksums: !a.ignore_checksums,
        dirty_journal: if a.ignore_journal {
            DirtyJournal::ReadStale
        } else {
            DirtyJournal::Refuse
        },
        ..OpenOptions::default()
    };
    Filesystem::open(Box::new(dev), opts).with_context(|| format!("{}", a.image.display()))
}
