//! `-O`: which features `tune` turns on and off, one [`FeatureEntry`] per
//! feature in [`FEATURES`]. Adding a feature is one entry plus its
//! functions: `enable`/`disable` edit the planned superblock, validate, and
//! say what the shared passes must redo (the [`Plan`] flags) or refuse with
//! the reason; an optional `rewrite` changes blocks of its own inside the
//! same atomic transaction.
//!
//! A feature that is not in the table is refused: either it cannot be
//! changed on an existing image without rebuilding it (`extent`, `64bit`,
//! `flex_bg`, …) or this command does not do it yet; the message says which.
//! The rules follow tune2fs (`misc/tune2fs.c`, `update_feature_set`) where
//! they are safe, and are stricter where tune2fs leaves work to e2fsck.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};

use super::rewrite::Rewrite;
use super::{Plan, TuneRequest, superblock};
use crate::error::{Error, Result};
use crate::fs::Filesystem;

/// What a feature change may need besides the superblock, and the
/// function that plans it.
pub(crate) type FeatureFn = fn(&Filesystem, &mut Plan, &TuneRequest) -> Result<()>;

/// One feature `tune` can change.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FeatureEntry {
    /// The name as tune2fs spells it (aliases get their own entry).
    pub(crate) name: &'static str,
    /// Turns it on.
    pub(crate) enable: FeatureFn,
    /// Turns it off.
    pub(crate) disable: FeatureFn,
    /// Changes blocks beyond what the [`Plan`] flags ask of the shared
    /// passes (checksums, group descriptors), after those passes and
    /// before the group descriptors are written: e.g. building or dropping
    /// an auxiliary index. When it changes bitmaps or free counts, its
    /// `enable`/`disable` sets `Plan::groups` so the descriptors follow.
    pub(crate) rewrite: Option<RewriteFn>,
}

/// The extra block work of a feature change; `enable` says which way.
pub(crate) type RewriteFn = fn(&mut Rewrite<'_>, &Plan, bool) -> Result<()>;

/// Runs the `rewrite` functions of the request's features, in order.
pub(crate) fn run_rewrites(rw: &mut Rewrite<'_>, p: &Plan, req: &TuneRequest) -> Result<()> {
    for edit in &req.features {
        let entry = FEATURES.iter().find(|e| e.name == edit.name);
        if let Some(f) = entry.and_then(|e| e.rewrite) {
            f(rw, p, edit.enable)?;
        }
    }
    Ok(())
}

/// The features `tune` changes.
pub(crate) static FEATURES: &[FeatureEntry] = &[
    FeatureEntry {
        name: "dir_index",
        enable: dir_index_on,
        disable: dir_index_off,
        rewrite: None,
    },
    FeatureEntry {
        name: "metadata_csum",
        enable: metadata_csum_on,
        disable: metadata_csum_off,
        rewrite: None,
    },
    FeatureEntry {
        name: "uninit_bg",
        enable: uninit_bg_on,
        disable: uninit_bg_off,
        rewrite: None,
    },
    FeatureEntry {
        name: "gdt_csum",
        enable: uninit_bg_on,
        disable: uninit_bg_off,
        rewrite: None,
    },
    FeatureEntry {
        name: "metadata_csum_seed",
        enable: csum_seed_on,
        disable: csum_seed_off,
        rewrite: None,
    },
    FeatureEntry {
        name: "casefold",
        enable: super::casefold::casefold_on,
        disable: super::casefold::casefold_off,
        rewrite: None,
    },
    FeatureEntry {
        name: "verity",
        enable: super::casefold::verity_on,
        disable: super::casefold::verity_off,
        rewrite: None,
    },
];

/// The names `-O` accepts, for help texts.
pub fn tunable_features() -> Vec<&'static str> {
    let table = FEATURES.iter().map(|e| e.name);
    table.chain([super::itree::NAME, "quota", "project"]).collect()
}

/// Why a known feature outside the table is refused.
fn refusal(name: &str, enable: bool) -> String {
    let why = match name {
        "extent" | "extents" if !enable => "files may use extent trees, which nothing can read without the feature",
        "extent" | "extents" => {
            "existing files would keep their block maps; use e2fsck -E bmap2extent semantics instead"
        }
        "64bit" => "the group descriptor size changes; this is resize2fs -b/-s work",
        "has_journal" => {
            "the journal is added and removed by tune::add_journal and remove_journal (ext4kit tune -j, -O [^]has_journal)"
        }
        "flex_bg" | "meta_bg" | "sparse_super" | "sparse_super2" | "resize_inode" | "bigalloc" => {
            "it changes the layout of block groups"
        }
        "inline_data" | "encrypt" | "ea_inode" | "large_dir" | "huge_file" | "dir_nlink" | "extra_isize"
        | "filetype" | "large_file" | "quota" | "project" | "mmp" | "orphan_file" => {
            "changing it is not implemented by ext4kit tune"
        }
        _ => "changing it is not implemented by ext4kit tune",
    };
    format!("cannot turn {} {name}: {why}", if enable { "on" } else { "off" })
}

/// Builds the plan: simple fields first, then each `-O` item in order.
pub(crate) fn plan(fs: &Filesystem, req: &TuneRequest) -> Result<Plan> {
    let old = fs.superblock();
    let mut p = Plan {
        old,
        new: old,
        csum: false,
        clear_index: false,
        groups: false,
        reset_group_flags: false,
        init_groups: false,
        notes: Vec::new(),
    };
    for edit in &req.features {
        let Some(entry) = FEATURES.iter().find(|e| e.name == edit.name) else {
            let known = CompatFeatures::from_name(&edit.name).is_some()
                || IncompatFeatures::from_name(&edit.name).is_some()
                || RoCompatFeatures::from_name(&edit.name).is_some()
                || edit.name == "extents";
            if !known {
                return Err(Error::InvalidArgument(format!("unknown feature {:?}", edit.name)));
            }
            return Err(Error::Unsupported(refusal(&edit.name, edit.enable)));
        };
        if edit.enable {
            (entry.enable)(fs, &mut p, req)?;
        } else {
            (entry.disable)(fs, &mut p, req)?;
        }
    }
    super::casefold::plan_encoding(&mut p, &req.encoding)?;
    superblock::plan_fields(fs, &mut p, req)?;
    p.init_groups = p.old.features().has_group_csum() && !p.new.features().has_group_csum();
    check_rewrite_limits(&p)?;
    Ok(p)
}

fn has_ro(p: &Plan, f: RoCompatFeatures) -> bool {
    p.new.features().ro_compat.contains(f)
}

fn set_ro(p: &mut Plan, f: RoCompatFeatures, on: bool) {
    let v = p.new.s_feature_ro_compat.get();
    p.new.s_feature_ro_compat.set(if on { v | f.0 } else { v & !f.0 });
}

fn set_incompat(p: &mut Plan, f: IncompatFeatures, on: bool) {
    let v = p.new.s_feature_incompat.get();
    p.new.s_feature_incompat.set(if on { v | f.0 } else { v & !f.0 });
}

pub(crate) fn already(p: &mut Plan, name: &str, on: bool) {
    p.notes
        .push(format!("{name} is already {}", if on { "on" } else { "off" }));
}

/// As tune2fs: a default hash version and a hash seed if none is set.
fn dir_index_on(_: &Filesystem, p: &mut Plan, _: &TuneRequest) -> Result<()> {
    let c = p.new.s_feature_compat.get();
    if c & CompatFeatures::DIR_INDEX.0 != 0 {
        already(p, "dir_index", true);
        return Ok(());
    }
    p.new.s_feature_compat.set(c | CompatFeatures::DIR_INDEX.0);
    if p.new.s_def_hash_version == 0 {
        p.new.s_def_hash_version = 1; // half_md4
    }
    if p.new.s_hash_seed.iter().all(|w| w.get() == 0) {
        superblock::set_hash_seed(&mut p.new, &crate::mkfs::random_uuid());
    }
    Ok(())
}

/// Indexed directories stay readable as linear ones (their index blocks
/// look like empty directory blocks), but e2fsck wants `INDEX_FL` gone
/// without the feature, and with `metadata_csum` the index blocks need
/// leaf checksum tails: every directory is rewritten, as tune2fs does.
fn dir_index_off(_: &Filesystem, p: &mut Plan, _: &TuneRequest) -> Result<()> {
    let c = p.new.s_feature_compat.get();
    if c & CompatFeatures::DIR_INDEX.0 == 0 {
        already(p, "dir_index", false);
        return Ok(());
    }
    p.new.s_feature_compat.set(c & !CompatFeatures::DIR_INDEX.0);
    p.clear_index = true;
    Ok(())
}

/// Every checksummed structure gets a checksum; `uninit_bg` is superseded.
fn metadata_csum_on(_: &Filesystem, p: &mut Plan, _: &TuneRequest) -> Result<()> {
    if has_ro(p, RoCompatFeatures::METADATA_CSUM) {
        already(p, "metadata_csum", true);
        return Ok(());
    }
    if !p.new.features().has_group_csum() {
        p.reset_group_flags = true;
    }
    set_ro(p, RoCompatFeatures::METADATA_CSUM, true);
    set_ro(p, RoCompatFeatures::GDT_CSUM, false);
    p.new.s_checksum_type = 1; // crc32c
    p.csum = true;
    Ok(())
}

/// Checksums are cleared; `uninit_bg` takes over the group flags unless
/// the same request turns it off, and `metadata_csum_seed` goes (tune2fs).
fn metadata_csum_off(_: &Filesystem, p: &mut Plan, req: &TuneRequest) -> Result<()> {
    if !has_ro(p, RoCompatFeatures::METADATA_CSUM) {
        already(p, "metadata_csum", false);
        return Ok(());
    }
    set_ro(p, RoCompatFeatures::METADATA_CSUM, false);
    let keep_uninit = !req
        .features
        .iter()
        .any(|e| !e.enable && (e.name == "uninit_bg" || e.name == "gdt_csum"));
    if keep_uninit {
        set_ro(p, RoCompatFeatures::GDT_CSUM, true);
        p.notes
            .push("uninit_bg turned on in place of metadata_csum's group checksums".into());
    }
    set_incompat(p, IncompatFeatures::CSUM_SEED, false);
    p.new.s_checksum_seed.set(0);
    p.new.s_checksum_type = 0;
    p.csum = true;
    Ok(())
}

fn uninit_bg_on(_: &Filesystem, p: &mut Plan, _: &TuneRequest) -> Result<()> {
    if has_ro(p, RoCompatFeatures::METADATA_CSUM) {
        p.notes.push("uninit_bg is not set: metadata_csum supersedes it".into());
        return Ok(());
    }
    if has_ro(p, RoCompatFeatures::GDT_CSUM) {
        already(p, "uninit_bg", true);
        return Ok(());
    }
    set_ro(p, RoCompatFeatures::GDT_CSUM, true);
    p.reset_group_flags = true;
    p.groups = true;
    Ok(())
}

/// Uninitialized groups are written out first (see `uninit`).
fn uninit_bg_off(_: &Filesystem, p: &mut Plan, _: &TuneRequest) -> Result<()> {
    if has_ro(p, RoCompatFeatures::METADATA_CSUM) || p.old.features().metadata_csum() {
        return Ok(()); // metadata_csum_off decides; nothing to do here
    }
    if !has_ro(p, RoCompatFeatures::GDT_CSUM) {
        already(p, "uninit_bg", false);
        return Ok(());
    }
    set_ro(p, RoCompatFeatures::GDT_CSUM, false);
    p.groups = true;
    Ok(())
}

/// The seed is kept in the superblock so the UUID can change freely.
fn csum_seed_on(_: &Filesystem, p: &mut Plan, _: &TuneRequest) -> Result<()> {
    if !has_ro(p, RoCompatFeatures::METADATA_CSUM) {
        return Err(Error::InvalidArgument("metadata_csum_seed needs metadata_csum".into()));
    }
    if p.new.features().incompat.contains(IncompatFeatures::CSUM_SEED) {
        already(p, "metadata_csum_seed", true);
        return Ok(());
    }
    let seed = p.new.csum_seed();
    set_incompat(p, IncompatFeatures::CSUM_SEED, true);
    p.new.s_checksum_seed.set(seed);
    Ok(())
}

/// Allowed only while the stored seed is still the one the UUID gives;
/// otherwise every checksum would change (tune2fs asks for a rewrite then;
/// here: refused, run `-U` back or turn metadata_csum off and on).
fn csum_seed_off(_: &Filesystem, p: &mut Plan, _: &TuneRequest) -> Result<()> {
    if !p.new.features().incompat.contains(IncompatFeatures::CSUM_SEED) {
        already(p, "metadata_csum_seed", false);
        return Ok(());
    }
    let from_uuid = ext4kit_format::checksum::fs_csum_seed(&p.new.s_uuid);
    if p.new.s_checksum_seed.get() != from_uuid {
        return Err(Error::InvalidArgument(
            "cannot turn off metadata_csum_seed: the UUID changed since it was turned on, so every \
             checksum would change"
                .into(),
        ));
    }
    set_incompat(p, IncompatFeatures::CSUM_SEED, false);
    p.new.s_checksum_seed.set(0);
    Ok(())
}

/// Structures whose checksums this command does not know how to rewrite.
fn check_rewrite_limits(p: &Plan) -> Result<()> {
    if !(p.csum || p.groups || p.clear_index || p.init_groups) {
        return Ok(());
    }
    let f = p.old.features();
    let refuse = |what: &str| {
        Err(Error::Unsupported(format!(
            "this change rewrites checksums, which is not implemented on a file system with {what}"
        )))
    };
    if f.incompat.contains(IncompatFeatures::META_BG) {
        return refuse("meta_bg");
    }
    if p.csum && f.incompat.contains(IncompatFeatures::MMP) {
        return refuse("mmp (the MMP block carries a checksum)");
    }
    if p.csum && f.compat.contains(CompatFeatures::ORPHAN_FILE) {
        return refuse("orphan_file (its blocks carry checksums)");
    }
    Ok(())
}
