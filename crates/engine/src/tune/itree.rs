//! `-O itree` and `-O ^itree`: giving every indexed directory an itree
//! (seed 003's inode-ordered index, [`crate::dir::itree`]) or taking them
//! all away. Unlike the other changes this is not one journal transaction:
//! a tree per directory can outgrow any journal. The engine converts one
//! directory per transaction and orders the feature bit so that every
//! intermediate image is a valid itree image (see
//! [`Filesystem::itree_add_all`]); an interrupted run is finished by
//! running it again.
//!
//! On an image with the feature, every other change is refused until
//! `-O ^itree`: the link sits at an offset that `metadata_csum` moves, node
//! checksums are seeded from the UUID, keys hold the name hashes that
//! `hash_seed` sets, and `^dir_index` would leave trees without their root.

use ext4kit_format::features::{CompatFeatures, RoCompatFeatures};

use super::{TuneReport, TuneRequest};
use crate::error::{Error, Result};
use crate::fs::Filesystem;

/// The feature's name in `-O`.
pub(crate) const NAME: &str = "itree";

/// `Some(on)` when the request is an itree change, alone; an error when it
/// mixes one with anything else, or when the image has itrees and the
/// request changes what they depend on.
pub(crate) fn requested(fs: &Filesystem, req: &TuneRequest) -> Result<Option<bool>> {
    let edit = req.features.iter().find(|e| e.name == NAME);
    let alone = req.features.len() == 1
        && req.label.is_none()
        && req.uuid.is_none()
        && req.errors.is_none()
        && req.max_mount_count.is_none()
        && req.check_interval.is_none()
        && req.hash_seed.is_none()
        && req.quota.is_empty();
    if let Some(e) = edit {
        if !alone {
            return Err(Error::InvalidArgument(
                "-O itree and -O ^itree go alone: run the other changes separately".into(),
            ));
        }
        return Ok(Some(e.enable));
    }
    let has = fs.geo.features.ro_compat.contains(RoCompatFeatures::ITREE);
    // Quota switches go through the engine, which keeps the trees.
    let layout = req.features.iter().any(|e| e.name != "quota" && e.name != "project");
    if has && (layout || req.uuid.is_some() || req.hash_seed.is_some()) {
        return Err(Error::InvalidArgument(
            "the image has itrees, which -O, -U and -E hash_seed would invalidate: run tune -O ^itree first".into(),
        ));
    }
    Ok(None)
}

/// Adds or removes the itrees and closes the file system.
pub(crate) fn run(fs: Filesystem, enable: bool) -> Result<TuneReport> {
    if enable && !fs.geo.features.compat.contains(CompatFeatures::DIR_INDEX) {
        return Err(Error::InvalidArgument(
            "itree needs dir_index: the trees hang off htree roots".into(),
        ));
    }
    let (had, journaled) = (fs.itree_enabled(), fs.journaling);
    let conv = if enable {
        fs.itree_add_all()?
    } else {
        fs.itree_remove_all()?
    };
    let backups = carry_to_backups(&fs)?;
    fs.unmount()?;
    let mut notes = Vec::new();
    if had == enable && conv.directories == 0 {
        notes.push("nothing to change".into());
    }
    let verb = if enable { "given" } else { "relieved of" };
    notes.push(format!(
        "{} directories {verb} an itree ({} names)",
        conv.directories, conv.names
    ));
    if conv.skipped_full_root > 0 {
        notes.push(format!(
            "{} indexed directories left without one: their htree root has no two free slots for the link",
            conv.skipped_full_root
        ));
    }
    Ok(TuneReport {
        blocks_changed: backups,
        journaled,
        notes,
    })
}

/// Gives the backup superblocks the feature set the conversion left in the
/// primary, as every other `tune` change does: e2fsck falls back to a
/// backup when the primary is lost, and a backup still naming the itree
/// bit after `-O ^itree` would have it refuse the image (one lacking it
/// after `-O itree` would let the trees go stale). The conversion's own
/// transactions change the primary only; this is one more, after the
/// session is closed so the log is empty. Returns the blocks written.
pub(super) fn carry_to_backups(fs: &Filesystem) -> Result<usize> {
    fs.close()?;
    let plan = super::features::plan(fs, &TuneRequest::default())?;
    let mut rw = super::rewrite::Rewrite::new(fs);
    super::superblock::stage(&mut rw, &plan)?;
    let changed = rw.changed();
    let n = changed.len();
    super::commit::commit(fs, changed, &[], &plan.old, &plan.new)?;
    Ok(n)
}
