//! `-O [^]casefold`, `-E encoding=…,encoding_flags=…` and `-O verity`, as
//! tune2fs 1.47 does them (`update_feature_set`, `parse_extended_opts`).
//! Only the superblock changes: `s_feature_incompat` CASEFOLD (0x20000)
//! with `s_encoding`/`s_encoding_flags`, or `s_feature_ro_compat` VERITY
//! (0x8000). No directory is folded by turning casefold on (each one opts
//! in with `EXT4_CASEFOLD_FL` while empty), so no block is rewritten.
//!
//! The checks are tune2fs's: casefold is cleared only while no inode has
//! `EXT4_CASEFOLD_FL` (their names would stop matching their hashes and
//! lookups); an encoding already recorded is never altered; flags need an
//! encoding in the same request. tune2fs refuses all of it on a mounted
//! file system, which every tune here refuses anyway (`mounted`). It does
//! not refuse casefold next to `encrypt` (1.47 allows the two together).
//! Verity cannot be cleared: tune2fs has no way to, since files that carry
//! `EXT4_VERITY_FL` would lose their protection.

use ext4kit_format::casefold::ENCODING_UTF8_12_1;
use ext4kit_format::features::{IncompatFeatures, RoCompatFeatures};
use ext4kit_format::inode::flags;

use super::{Plan, TuneRequest};
use crate::error::{Error, Result};
use crate::fs::Filesystem;

/// `-E encoding=NAME[,encoding_flags=FLAGS]`, decoded by the caller with
/// `ext4kit_format::casefold::{encoding_from_name, parse_encoding_flags}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncodingEdit {
    /// The `s_encoding` value named by `encoding=`.
    pub encoding: Option<u16>,
    /// The `s_encoding_flags` value `encoding_flags=` gives.
    pub flags: Option<u16>,
}

fn has_casefold(p: &Plan) -> bool {
    p.new.features().incompat.contains(IncompatFeatures::CASEFOLD)
}

fn set_casefold(p: &mut Plan, on: bool) {
    let v = p.new.s_feature_incompat.get();
    let bit = IncompatFeatures::CASEFOLD.0;
    p.new.s_feature_incompat.set(if on { v | bit } else { v & !bit });
}

/// The default encoding, utf8-12.1 without strict mode (what
/// `e2p_get_encoding_flags` gives).
pub(crate) fn casefold_on(_: &Filesystem, p: &mut Plan, _: &TuneRequest) -> Result<()> {
    if has_casefold(p) {
        super::features::already(p, "casefold", true);
        return Ok(());
    }
    set_casefold(p, true);
    p.new.s_encoding.set(ENCODING_UTF8_12_1);
    p.new.s_encoding_flags.set(0);
    Ok(())
}

/// Refused while any inode carries `EXT4_CASEFOLD_FL`, as tune2fs does.
pub(crate) fn casefold_off(fs: &Filesystem, p: &mut Plan, _: &TuneRequest) -> Result<()> {
    if !has_casefold(p) {
        super::features::already(p, "casefold", false);
        return Ok(());
    }
    if let Some(ino) = super::csum::first_inode_where(fs, |i| i.raw.has_flag(flags::CASEFOLD))? {
        return Err(Error::InvalidArgument(format!(
            "the casefold feature can't be cleared when there are inodes with +F flag (inode {ino})"
        )));
    }
    set_casefold(p, false);
    p.new.s_encoding.set(0);
    p.new.s_encoding_flags.set(0);
    Ok(())
}

pub(crate) fn verity_on(_: &Filesystem, p: &mut Plan, _: &TuneRequest) -> Result<()> {
    let v = p.new.s_feature_ro_compat.get();
    if v & RoCompatFeatures::VERITY.0 != 0 {
        super::features::already(p, "verity", true);
        return Ok(());
    }
    p.new.s_feature_ro_compat.set(v | RoCompatFeatures::VERITY.0);
    Ok(())
}

pub(crate) fn verity_off(_: &Filesystem, _: &mut Plan, _: &TuneRequest) -> Result<()> {
    Err(Error::Unsupported(
        "clearing filesystem feature 'verity' not supported (as tune2fs): files with EXT4_VERITY_FL \
         would lose their protection"
            .into(),
    ))
}

/// `-E encoding=`/`encoding_flags=`, after the `-O` items: an encoding
/// turns casefold on with the encoding's default flags, then the flags
/// given; the encoding of a file system that had casefold before this
/// request is never changed.
pub(crate) fn plan_encoding(p: &mut Plan, e: &EncodingEdit) -> Result<()> {
    let Some(encoding) = e.encoding else {
        if e.flags.is_some() {
            return Err(Error::InvalidArgument(
                "an encoding must be explicitly specified when passing encoding_flags".into(),
            ));
        }
        return Ok(());
    };
    let had = p.old.features().incompat.contains(IncompatFeatures::CASEFOLD);
    if had && has_casefold(p) {
        return Err(Error::InvalidArgument("cannot alter existing encoding".into()));
    }
    set_casefold(p, true);
    p.new.s_encoding.set(encoding);
    p.new.s_encoding_flags.set(e.flags.unwrap_or(0));
    p.notes.push("setting encoding to 'utf8-12.1'".into());
    if e.flags.is_some() {
        let strict = p.new.s_encoding_flags.get() & ext4kit_format::casefold::ENCODING_FLAG_STRICT != 0;
        p.notes.push(format!(
            "setting encoding_flags to '{}'",
            if strict { "strict" } else { "" }
        ));
    }
    Ok(())
}
