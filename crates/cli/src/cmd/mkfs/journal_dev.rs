//! `mkfs -O journal_dev` (a journal device) and `mkfs -J device=PATH` (a
//! file system whose journal is on one), as mke2fs; the layout is the
//! engine's (`ext4kit_engine::mkfs::journal_dev`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::mkfs::MkfsOptions;
use ext4kit_engine::mkfs::journal::JournalSize;
use ext4kit_engine::mkfs::journal_dev::{
    JournalDevOptions, attach_journal_device, journal_device_block_size, make_journal_device,
};

use super::{Args, fs_size, prepare};

/// `-O journal_dev`: only `-b`, `-L`, `-U`, `-F`, `-q` and a size apply.
pub(super) fn make(a: &Args) -> Result<()> {
    let others = a.features.iter().flat_map(|f| f.split(',')).map(str::trim);
    if let Some(f) = others
        .filter(|f| !f.is_empty() && *f != "journal_dev")
        .find(|f| *f != "metadata_csum")
    {
        bail!("-O journal_dev makes a journal device: feature {f} does not apply");
    }
    if a.root_dir.is_some() || !a.journal.is_empty() {
        bail!("-O journal_dev makes a journal device: -d and -J do not apply");
    }
    let size = a.size.as_deref().map(|s| fs_size(s, a.block_size)).transpose()?;
    let (dev, zeroed) = prepare(&a.image, size, a.force, true)?;
    let o = JournalDevOptions {
        block_size: a.block_size,
        size_bytes: size,
        uuid: a.uuid.as_deref().map(ext4kit_engine::mkfs::parse_uuid).transpose()?,
        label: a.label.clone().unwrap_or_default(),
        metadata_csum: a.fs_type == "ext4",
        device_zeroed: zeroed,
    };
    let r = make_journal_device(dev.as_ref(), &o).with_context(|| format!("{}", a.image.display()))?;
    if !a.quiet {
        outln!(
            "{}: journal device of {} blocks of {} bytes, UUID {}",
            a.image.display(),
            r.blocks,
            r.block_size,
            ext4kit_engine::journal::external::uuid(&r.uuid)
        );
    }
    Ok(())
}

/// The `-J` list: `device=PATH` (a journal device) or the internal
/// journal's `size=` (MiB) and `fast_commit_size=` (KiB), as mke2fs reads them.
pub(crate) fn journal_options(list: &[String]) -> Result<(Option<PathBuf>, Option<JournalSize>)> {
    let mut device = None;
    let mut size: Option<JournalSize> = None;
    for item in list
        .iter()
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        match item.split_once('=') {
            Some(("device", p)) if !p.is_empty() => device = Some(PathBuf::from(p)),
            _ if size.get_or_insert_default().parse_item(item)? => {}
            _ => bail!(
                "bad journal option {item:?}: the journal options are size=MiB, fast_commit_size=KiB and \
                 device=PATH (location= and v1_superblock are not supported)"
            ),
        }
    }
    if device.is_some() && size.is_some() {
        bail!("-J device= keeps the journal on another device: size= and fast_commit_size= do not apply");
    }
    Ok((device, size))
}

/// No internal journal, and the journal device's block size unless `-b` says.
pub(super) fn prepare_fs(o: &mut MkfsOptions, journal: &Path) -> Result<()> {
    let dev = FileDevice::open(journal, false).with_context(|| format!("cannot open {}", journal.display()))?;
    let bs = journal_device_block_size(&dev).with_context(|| format!("{}", journal.display()))?;
    match o.block_size {
        Some(b) if b != bs => bail!("-b {b}: the journal device {} has {bs}-byte blocks", journal.display()),
        _ => o.block_size = Some(bs),
    }
    o.feature_edits.push(("has_journal".into(), false));
    Ok(())
}

/// Records the journal in the new file system and the file system in the
/// journal's user list.
pub(super) fn attach(image: &Path, journal: &Path) -> Result<()> {
    let fs = FileDevice::open(image, true).with_context(|| format!("cannot open {}", image.display()))?;
    let jdev = FileDevice::open(journal, true).with_context(|| format!("cannot open {}", journal.display()))?;
    // `s_journal_dev` is the device number, as mke2fs records `st_rdev`
    // (0 for an image file: the journal is then found by UUID or given).
    let rdev = std::fs::metadata(journal).map_or(0, |m| m.rdev() as u32);
    attach_journal_device(&fs, &jdev, rdev)
        .with_context(|| format!("attaching {} to {}", journal.display(), image.display()))
}
