//! `-o check`: the mount runs `ext4kit fsck` on the image before serving
//! it, as a boot-time `fsck -p` runs before the kernel's mount. A
//! read-write mount of an image with errors is refused, naming them:
//! serving it would build new changes on a broken structure. A read-only
//! mount serves it with a warning. `check=preen` first repairs what
//! e2fsck's preen mode repairs without asking, and refuses the mount only
//! for what is left.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use ext4kit_engine::{BlockDevice, Filesystem, OpenOptions};
use ext4kit_fsck::report::Report;
use ext4kit_fsck::{Mode, Options, Severity};
use ext4kit_fuse::{MountConfig, PreCheck};

/// Findings named in a refusal or a repair summary; the rest are counted.
const SHOWN: usize = 5;

/// Checks `image` as `cfg.check` asks; an error refuses the mount.
pub fn run(image: &Path, cfg: &MountConfig) -> Result<()> {
    if cfg.check == PreCheck::Off {
        return Ok(());
    }
    if !cfg.read_only {
        settle(image)?;
        if cfg.check == PreCheck::Preen {
            return preen(image);
        }
    }
    let (dev, _) = crate::open::open_device(image, crate::open::Access::Read)
        .with_context(|| format!("cannot open {}", image.display()))?;
    let dev = dev.as_ref();
    let opts = Options {
        force: cfg.check != PreCheck::Auto,
        now: now(),
        ..Options::default()
    };
    let report = ext4kit_fsck::check(dev, &opts, &mut |_| {})
        .map_err(|e| anyhow::anyhow!("{}: the check before mounting could not run: {e}", image.display()))?;
    if report.skipped_clean {
        log::info!(
            "ext4kit: {}: clean (its superblock says so; -o check forces a full check)",
            image.display()
        );
        return Ok(());
    }
    let Some((problems, list)) = summary(&report, image, false) else {
        log::info!("ext4kit: {}: checked, clean", image.display());
        return Ok(());
    };
    if cfg.read_only {
        log::warn!(
            "ext4kit: {}: {problems} found; serving it read-only as it is:{list}",
            image.display()
        );
        return Ok(());
    }
    bail!(
        "{}: {problems} found, not mounted read-write:{list}\nrepair it with `ext4kit fsck -fy {}` (or e2fsck -fy), mount it with -o check=preen to repair what is safe to repair unattended, or mount it with -o ro",
        image.display(),
        image.display()
    )
}

/// `check=preen` before a read-write mount: a full check that repairs, as
/// `fsck -fp` does, then the mount goes ahead only if nothing is left.
fn preen(image: &Path) -> Result<()> {
    let (dev, _) = crate::open::open_device(image, crate::open::Access::Write)
        .with_context(|| format!("cannot open {}", image.display()))?;
    let dev: Arc<dyn BlockDevice> = Arc::from(dev);
    let opts = Options {
        force: true,
        mode: Mode::Preen,
        now: now(),
        ..Options::default()
    };
    let out = ext4kit_fsck::repair::repair(&dev, &opts, &mut |_| {})
        .map_err(|e| anyhow::anyhow!("{}: the repair before mounting could not run: {e}", image.display()))?;
    let fixed = out.fixed();
    if fixed > 0 {
        let mut repaired = Report::default();
        for f in out.runs.iter().chain([&out.verdict]).flat_map(|r| &r.findings) {
            repaired.add(f.clone());
        }
        if let Some((problems, list)) = summary(&repaired, image, true) {
            log::warn!("ext4kit: {}: {problems} repaired (preen):{list}", image.display());
        }
    }
    match summary(&out.verdict, image, false) {
        None => {
            log::info!("ext4kit: {}: checked, clean", image.display());
            Ok(())
        }
        Some((problems, list)) => bail!(
            "{}: {problems} that preening does not repair, not mounted read-write:{list}\nrepair it with `ext4kit fsck -fy {}` (or e2fsck -fy), or mount it with -o ro",
            image.display(),
            image.display()
        ),
    }
}

/// "N problems" and the first few messages, of the errors left
/// (`fixed` false) or of those repaired (`fixed` true); `None` when there
/// are none.
fn summary(report: &Report, image: &Path, fixed: bool) -> Option<(String, String)> {
    let errors: Vec<&str> = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error && f.fixed == fixed)
        .map(|f| f.message.as_str())
        .collect();
    let total = errors.len() as u64 + if fixed { 0 } else { report.dropped };
    if total == 0 {
        return None;
    }
    let problems = if total == 1 {
        "1 problem".to_string()
    } else {
        format!("{total} problems")
    };
    let mut list: String = errors.iter().take(SHOWN).map(|m| format!("\n  {m}")).collect();
    if total > SHOWN as u64 {
        list.push_str(&format!(
            "\n  … and {} more (ext4kit fsck -fn {} lists them)",
            total - SHOWN as u64,
            image.display()
        ));
    }
    Some((problems, list))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Replays a journal that needs it and finishes the orphan list, by
/// opening the image as the mount would and closing it (the log is then
/// empty and everything at home): the check reads the image as found, and
/// a crashed session's journal would otherwise look like damage.
fn settle(image: &Path) -> Result<()> {
    let (dev, _) = crate::open::open_device(image, crate::open::Access::Write)
        .with_context(|| format!("cannot open {}", image.display()))?;
    let opts = OpenOptions {
        count_mount: false,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(dev, opts).with_context(|| format!("{}", image.display()))?;
    fs.unmount()
        .with_context(|| format!("{}: closing after journal recovery", image.display()))?;
    Ok(())
}
