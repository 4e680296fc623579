//! `-o check`: the mount runs `ext4kit fsck` (check only) on the image
//! before serving it, as a boot-time `fsck -p` runs before the kernel's
//! mount. A read-write mount of an image with errors is refused, naming
//! them: serving it would build new changes on a broken structure. A
//! read-only mount serves it with a warning.

use std::path::Path;

use anyhow::{Context, Result, bail};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Filesystem, OpenOptions};
use ext4kit_fsck::{Options, Severity};
use ext4kit_fuse::{MountConfig, PreCheck};

/// Findings named in the refusal; the rest are counted.
const SHOWN: usize = 5;

/// Checks `image` as `cfg.check` asks; an error refuses the mount.
pub fn run(image: &Path, cfg: &MountConfig) -> Result<()> {
    if cfg.check == PreCheck::Off {
        return Ok(());
    }
    if !cfg.read_only {
        settle(image)?;
    }
    let dev = FileDevice::open_unlocked(image, false).with_context(|| format!("cannot open {}", image.display()))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let opts = Options {
        force: cfg.check == PreCheck::Full,
        journal_only: false,
        cancel: None,
        now,
        ..Options::default()
    };
    let report = ext4kit_fsck::check(&dev, &opts, &mut |_| {})
        .map_err(|e| anyhow::anyhow!("{}: the check before mounting could not run: {e}", image.display()))?;
    if report.skipped_clean {
        log::info!(
            "ext4kit: {}: clean (its superblock says so; -o check forces a full check)",
            image.display()
        );
        return Ok(());
    }
    let errors: Vec<String> = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.message.clone())
        .collect();
    if errors.is_empty() {
        log::info!("ext4kit: {}: checked, clean", image.display());
        return Ok(());
    }
    let total = report.errors();
    let problems = if total == 1 {
        "1 problem".to_string()
    } else {
        format!("{total} problems")
    };
    let mut list = errors
        .iter()
        .take(SHOWN)
        .map(|m| format!("\n  {m}"))
        .collect::<String>();
    if total > SHOWN as u64 {
        list.push_str(&format!(
            "\n  … and {} more (ext4kit fsck -fn {} lists them)",
            total - SHOWN as u64,
            image.display()
        ));
    }
    if cfg.read_only {
        log::warn!(
            "ext4kit: {}: {problems} found; serving it read-only as it is:{list}",
            image.display()
        );
        return Ok(());
    }
    bail!(
        "{}: {problems} found, not mounted read-write:{list}\nrepair it with e2fsck -fy (ext4kit fsck cannot repair yet), or mount it with -o ro",
        image.display()
    )
}

/// Replays a journal that needs it and finishes the orphan list, by
/// opening the image as the mount would and closing it (the log is then
/// empty and everything at home): the check reads the image as found, and
/// a crashed session's journal would otherwise look like damage.
fn settle(image: &Path) -> Result<()> {
    let dev = FileDevice::open(image, true).with_context(|| format!("cannot open {}", image.display()))?;
    let opts = OpenOptions {
        count_mount: false,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(dev), opts).with_context(|| format!("{}", image.display()))?;
    fs.unmount()
        .with_context(|| format!("{}: closing after journal recovery", image.display()))?;
    Ok(())
}
