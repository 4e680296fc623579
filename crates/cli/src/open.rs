//! Opening an image from command-line arguments.
//!
//! Editing commands open the image for writing, which claims it (the
//! device layer's image lock, and no kernel mount: see
//! `ext4kit_engine::device::inuse`) before anything is read or replayed,
//! and are refused while another process has it. Reading commands take no
//! lock: when the image is mounted or being written elsewhere they say so
//! on stderr and read what is on disk (the journal replayed in memory),
//! which may be out of date.

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
    if let Some(who) = dev.in_use() {
        log::warn!(
            "ext4kit: {} is {who}: reading what is on disk, which may be out of date",
            a.image.display()
        );
    }
    let opts = OpenOptions {
        verify_checksums: !a.ignore_checksums,
        dirty_journal: if a.ignore_journal {
            DirtyJournal::ReadStale
        } else {
            DirtyJournal::Replay
        },
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(dev), opts).with_context(|| format!("{}", a.image.display()))?;
    log_recovery(&fs);
    Ok(fs)
}

/// Says at info level what the journal replay at open did, if it ran.
pub fn log_recovery(fs: &Filesystem) {
    if let Some(r) = &fs.journal_info().recovered {
        let place = if r.in_memory {
            " (in memory: the image is read-only)"
        } else {
            ""
        };
        log::info!(
            "recovering journal: {} transactions from {}, {} blocks written, {} revoked{place}",
            r.transactions,
            r.from_sequence,
            r.blocks_written,
            r.blocks_revoked
        );
    }
}
