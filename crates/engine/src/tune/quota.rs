//! `-O quota`, `-O project` (and `^` of either) and `-Q
//! [^]usrquota,[^]grpquota,[^]prjquota`: which quota types a request turns
//! on and off, with tune2fs's rules (`update_feature_set`,
//! `handle_quota_options`): `quota` means user and group; `project` means
//! project quota and needs inodes larger than 128 bytes; `^quota` turns
//! every type off and overrides `-Q`. Unlike tune2fs, `-O quota` on an
//! image that has the `project` feature keeps project quota on (tune2fs
//! drops the feature).
//!
//! The work is [`Filesystem::switch_quotas`]: one engine transaction
//! through the image's journal (a crash leaves the old image or the new
//! one), then the backup superblocks are given the new feature set.
//! These edits go alone: other changes run as a separate tune.

use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::quota::QuotaType;

use super::{TuneReport, TuneRequest};
use crate::error::{Error, Result};
use crate::fs::Filesystem;

/// One `-Q` item: a quota type turned on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaEdit {
    /// The type (`usr`, `grp`, `prj`).
    pub qtype: QuotaType,
    /// On, or off (`^`).
    pub enable: bool,
}

/// Parses one `-Q` item as tune2fs does: `[^]usr[quota]`, `[^]grp[quota]`,
/// `[^]prj[quota]`.
///
/// # Errors
/// [`Error::InvalidArgument`] for anything else.
pub fn parse_quota_edit(item: &str) -> Result<QuotaEdit> {
    let (enable, name) = match item.strip_prefix('^') {
        Some(n) => (false, n),
        None => (true, item),
    };
    let qtype = match name {
        "usr" | "usrquota" => QuotaType::User,
        "grp" | "grpquota" => QuotaType::Group,
        "prj" | "prjquota" => QuotaType::Project,
        _ => {
            return Err(Error::InvalidArgument(format!(
                "bad quota option {item:?}: expected [^]usr[quota], [^]grp[quota] or [^]prj[quota]"
            )));
        }
    };
    Ok(QuotaEdit { qtype, enable })
}

fn is_quota_feature(name: &str) -> bool {
    name == "quota" || name == "project"
}

/// The wanted state per type (user, group, project) when the request
/// changes quotas; `None` when it does not. A quota request mixed with
/// other changes is refused.
pub(crate) fn requested(fs: &Filesystem, req: &TuneRequest) -> Result<Option<[Option<bool>; 3]>> {
    let edits: Vec<_> = req.features.iter().filter(|e| is_quota_feature(&e.name)).collect();
    if edits.is_empty() && req.quota.is_empty() {
        return Ok(None);
    }
    let alone = edits.len() == req.features.len()
        && req.label.is_none()
        && req.uuid.is_none()
        && req.errors.is_none()
        && req.max_mount_count.is_none()
        && req.check_interval.is_none()
        && req.hash_seed.is_none();
    if !alone {
        return Err(Error::InvalidArgument(
            "quota changes (-O [^]quota, -O [^]project, -Q) go alone: run the other changes separately".into(),
        ));
    }
    let mut want = [None; 3];
    for q in &req.quota {
        want[q.qtype as usize] = Some(q.enable);
    }
    let project_on = fs.geo.features.ro_compat.contains(RoCompatFeatures::PROJECT);
    for e in &edits {
        match (e.name.as_str(), e.enable) {
            ("quota", true) if req.quota.is_empty() => {
                want[0] = Some(true);
                want[1] = Some(true);
                if project_on {
                    want[2].get_or_insert(true);
                }
            }
            ("quota", true) => {}
            ("project", on) => want[2] = Some(on),
            _ => {}
        }
    }
    if edits.iter().any(|e| e.name == "quota" && !e.enable) {
        want = [Some(false); 3];
    }
    Ok(Some(want))
}

/// Switches the quota types and closes the file system.
pub(crate) fn run(fs: Filesystem, want: [Option<bool>; 3]) -> Result<TuneReport> {
    let journaled = fs.journaling;
    let done = fs.switch_quotas(want)?;
    let backups = super::itree::carry_to_backups(&fs)?;
    fs.unmount()?;
    let mut notes = Vec::new();
    for t in QuotaType::ALL {
        let i = t as usize;
        if done.created[i] {
            notes.push(format!("{} quota file made from a scan of every inode", t.name()));
        }
        if done.removed[i] {
            notes.push(format!("{} quota file removed", t.name()));
        }
    }
    if notes.is_empty() {
        notes.push("nothing to change".into());
    }
    Ok(TuneReport {
        blocks_changed: backups,
        journaled,
        notes,
    })
}
