//! `tune -j`, `-J size=,fast_commit_size=`, `-J device=PATH`, `-O
//! has_journal` and `-O ^has_journal`: adding, attaching or removing the
//! journal, as tune2fs; carried out by `ext4kit_engine::tune::{add_journal,
//! attach_external, remove_journal}` before the other changes of the
//! request, as tune2fs orders them.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::mkfs::journal::JournalSize;
use ext4kit_engine::tune::{FeatureEdit, TuneReport, add_journal, attach_external, open_for_tune, remove_journal};

/// What the journal options ask for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) enum JournalChange {
    /// Nothing.
    #[default]
    None,
    /// An internal journal (`-j`, `-J size=`, `-O has_journal`).
    Add(JournalSize),
    /// The journal device at this path (`-J device=`).
    Attach(PathBuf),
    /// `-O ^has_journal`.
    Remove,
}

/// Takes `has_journal` out of the `-O` edits and reads `-j`/`-J`.
pub(super) fn change(j: bool, opts: &[String], features: &mut Vec<FeatureEdit>) -> Result<JournalChange> {
    let mut add = j;
    let mut remove = false;
    features.retain(|f| {
        if f.name != "has_journal" {
            return true;
        }
        add |= f.enable;
        remove |= !f.enable;
        false
    });
    let (device, size) = crate::cmd::mkfs::journal_options(opts)?;
    add |= size.is_some();
    Ok(match (add || device.is_some(), remove, device) {
        (false, false, _) => JournalChange::None,
        (true, true, _) => bail!("-O ^has_journal cannot be combined with adding a journal"),
        (_, true, _) => JournalChange::Remove,
        (_, _, Some(d)) => JournalChange::Attach(d),
        _ => JournalChange::Add(size.unwrap_or_default()),
    })
}

/// Carries out the change on the image.
pub(super) fn apply(image: &Path, c: &JournalChange) -> Result<Option<TuneReport>> {
    let report = match c {
        JournalChange::None => return Ok(None),
        JournalChange::Add(size) => add_journal(Box::new(open_for_tune(image)?), size)?,
        JournalChange::Remove => remove_journal(Box::new(open_for_tune(image)?))?,
        JournalChange::Attach(path) => {
            let fs = open_for_tune(image)?;
            let jdev = FileDevice::open(path, true).with_context(|| format!("cannot open {}", path.display()))?;
            // As mke2fs: the device number, 0 for an image file.
            let rdev = std::fs::metadata(path).map_or(0, |m| m.rdev() as u32);
            attach_external(&fs, &jdev, rdev).with_context(|| format!("attaching {}", path.display()))?;
            TuneReport {
                notes: vec![format!("journal on {} attached", path.display())],
                ..TuneReport::default()
            }
        }
    };
    Ok(Some(report))
}
