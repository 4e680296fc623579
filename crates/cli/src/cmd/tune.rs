//! `ext4kit tune [-O [^]feature,…] [-Q [^]usrquota,…] [-L label] [-U uuid]
//! [-e behavior] [-c count] [-i interval] [-E hash_seed=UUID,encoding=utf8,
//! encoding_flags=strict] [-j] [-J
//! size=|device=] IMAGE`: tune2fs's options, parsed here and carried out
//! by `ext4kit_engine::tune`, which validates the whole request, refuses
//! an image in use, and changes it atomically (adding or removing a
//! journal, [`journal`], cannot be: it is written in an order a crash
//! leaves repairable).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ext4kit_engine::mkfs::parse_uuid;
use ext4kit_engine::tune::{
    ErrorBehavior, FeatureEdit, TuneRequest, UuidChange, open_for_tune, parse_interval, parse_quota_edit, tune,
};
use ext4kit_format::casefold;

mod journal;

/// Arguments of `tune`.
#[derive(clap::Args)]
pub struct Args {
    /// Features to turn on (name) or off (^name), comma-separated.
    #[arg(short = 'O', value_name = "[^]FEATURE[,...]")]
    features: Vec<String>,
    /// Quota types to turn on or off: [^]usrquota, [^]grpquota, [^]prjquota.
    #[arg(short = 'Q', value_name = "[^]TYPE[,...]")]
    quota: Vec<String>,
    /// Volume label (at most 16 bytes).
    #[arg(short = 'L', value_name = "LABEL")]
    label: Option<String>,
    /// New UUID: a UUID, `random`, `time` or `clear`.
    #[arg(short = 'U', value_name = "UUID")]
    uuid: Option<String>,
    /// Behaviour on errors: continue, remount-ro or panic.
    #[arg(short = 'e', value_name = "BEHAVIOR")]
    errors: Option<String>,
    /// Mounts between checks (0 or -1: never; `random`: 20..40).
    #[arg(short = 'c', value_name = "COUNT", allow_hyphen_values = true)]
    max_mount_count: Option<String>,
    /// Time between checks: N[d|w|m|s] (days by default; 0: never).
    #[arg(short = 'i', value_name = "INTERVAL")]
    interval: Option<String>,
    /// Add an internal journal of the default size (as -O has_journal).
    #[arg(short = 'j')]
    add_journal: bool,
    /// Journal options: size=MiB, fast_commit_size=KiB (add an internal
    /// journal of that size), device=PATH (attach a journal device).
    #[arg(short = 'J', value_name = "OPTIONS")]
    journal: Vec<String>,
    /// Extended options: hash_seed=UUID, encoding=utf8 (turns casefold on),
    /// encoding_flags=[no]strict.
    #[arg(short = 'E', value_name = "OPTIONS")]
    extended: Vec<String>,
    /// Save what the tune overwrites in FILE first (a new file, or the
    /// undo file of the commands before it to continue), which `ext4kit
    /// undo FILE IMAGE` or e2fsprogs' `e2undo` replays.
    #[arg(short = 'z', value_name = "FILE")]
    undo: Option<PathBuf>,
    /// When the undo file is synced.
    #[arg(long, value_enum, default_value_t, requires = "undo")]
    undo_sync: crate::open::UndoSyncArg,
    /// The image file (or block device); it must not be mounted.
    image: PathBuf,
}

/// Parses the options, tunes the image and prints what it noted.
pub fn run(a: Args) -> Result<()> {
    let mut req = request(&a)?;
    let jc = journal::change(a.add_journal, &a.journal, &mut req.features)?;
    if req == TuneRequest::default() && jc == journal::JournalChange::None {
        bail!("nothing to do: give at least one of -O -Q -L -U -e -c -i -E -j -J");
    }
    if a.undo.is_some() && jc != journal::JournalChange::None {
        bail!(
            "-z with -j/-J/has_journal is not supported: adding or removing a journal is not written through the undo file"
        );
    }
    if jc != journal::JournalChange::None {
        crate::open::refuse_export(
            &a.image,
            "tune -j/-J/-O [^]has_journal",
            "adding or removing a journal is done on an image file",
        )?;
    }
    let at = || format!("{}", a.image.display());
    let mut reports: Vec<_> = journal::apply(&a.image, &jc).with_context(at)?.into_iter().collect();
    if req != TuneRequest::default() {
        reports.push(match &a.undo {
            None => tune(open_tuned(&a.image).with_context(at)?, &req).with_context(at)?,
            Some(z) => {
                let dev = open_tuned(&a.image).with_context(at)?;
                let bs = crate::open::fs_block_size(dev.as_ref());
                let sync = a.undo_sync.into();
                let op = |d| tune(d, &req).with_context(at);
                crate::open::with_undo_synced(dev, Some(z), sync, &a.image, bs, op)?
            }
        });
    }
    reports.iter().try_for_each(print)
}

/// The image to tune: a file claimed and checked as `open_for_tune` does,
/// or an NBD export (no lock to take: see `crate::open::open_device`).
fn open_tuned(image: &std::path::Path) -> Result<Box<dyn ext4kit_engine::BlockDevice>> {
    if crate::open::export_uri(image).is_some() {
        return Ok(crate::open::open_device(image, crate::open::Access::Write)?.0);
    }
    Ok(Box::new(open_for_tune(image)?))
}

fn print(report: &ext4kit_engine::tune::TuneReport) -> Result<()> {
    for n in &report.notes {
        outln!("{n}");
    }
    if report.blocks_changed > 0 {
        let how = if report.journaled {
            "through the journal"
        } else {
            "in place"
        };
        outln!("{} blocks rewritten {how}", report.blocks_changed);
    }
    Ok(())
}

fn request(a: &Args) -> Result<TuneRequest> {
    let mut req = TuneRequest {
        label: a.label.clone(),
        ..TuneRequest::default()
    };
    for item in a.features.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        let (enable, name) = match item.strip_prefix('^') {
            Some(n) => (false, n),
            None => (true, item),
        };
        req.features.push(FeatureEdit {
            name: name.to_string(),
            enable,
        });
    }
    for item in a.quota.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        req.quota.push(parse_quota_edit(item)?);
    }
    req.uuid = a.uuid.as_deref().map(uuid_change).transpose()?;
    req.errors = a.errors.as_deref().map(errors).transpose()?;
    req.max_mount_count = a.max_mount_count.as_deref().map(mount_count).transpose()?;
    req.check_interval = a.interval.as_deref().map(parse_interval).transpose()?;
    for opt in a.extended.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        match opt.split_once('=') {
            Some(("hash_seed", v)) => req.hash_seed = Some(parse_uuid(v)?),
            Some(("encoding", v)) => {
                let e = casefold::encoding_from_name(v).ok_or_else(|| anyhow::anyhow!("invalid encoding: {v}"))?;
                req.encoding.encoding = Some(e);
            }
            Some(("encoding_flags", v)) => {
                let f =
                    casefold::parse_encoding_flags(v).ok_or_else(|| anyhow::anyhow!("invalid encoding flag: {v}"))?;
                req.encoding.flags = Some(f);
            }
            _ => bail!(
                "unknown extended option {opt:?} (supported: hash_seed=UUID, encoding=utf8, encoding_flags=strict)"
            ),
        }
    }
    Ok(req)
}

fn uuid_change(s: &str) -> Result<UuidChange> {
    Ok(match s {
        "clear" | "null" => UuidChange::Clear,
        "random" => UuidChange::Random,
        "time" => UuidChange::Time,
        _ => UuidChange::Set(parse_uuid(s)?),
    })
}

fn errors(s: &str) -> Result<ErrorBehavior> {
    Ok(match s {
        "continue" => ErrorBehavior::Continue,
        "remount-ro" => ErrorBehavior::RemountRo,
        "panic" => ErrorBehavior::Panic,
        _ => bail!("bad error behavior {s:?} (continue, remount-ro or panic)"),
    })
}

/// tune2fs's `-c`: -16000..=16000, or `random` (20 to 40).
fn mount_count(s: &str) -> Result<i16> {
    if s == "random" {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        return Ok(20 + (nanos % 20) as i16);
    }
    let n: i16 = s.parse().map_err(|_| anyhow::anyhow!("bad mounts count {s:?}"))?;
    if !(-16000..=16000).contains(&n) {
        bail!("bad mounts count {s:?}");
    }
    Ok(n)
}
