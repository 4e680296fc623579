//! One measurement: a fresh image, the engine opened on it, the workload
//! timed through the library API, unmount, `e2fsck -fn`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::journal::JournalStats;
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};

use super::report::{Counts, Sample};
use super::{Config, Mode, Step};
use crate::rng::Rng;
use crate::system;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// Runs `step` once in `mode` on a fresh image under `work`. The
/// directories are made and synced before the clock starts, so the time
/// is that of the files alone (and of the final sync, for `create`).
pub(super) fn measure(cfg: &Config, work: &Path, step: Step, mode: Mode, repeat: usize) -> Result<Sample> {
    let s = &cfg.sizes;
    let slug = match mode {
        Mode::Journal => "journal",
        Mode::NoJournal => "nojournal",
    };
    let image = work.join(format!("{}-{slug}-{repeat}.ext4", step.name()));
    make_image(&image, s.image_bytes, mode)?;
    let fs = open(&image, mode)?;
    let (files, dirs) = match step {
        Step::Create => (s.create_files, s.create_files.div_ceil(s.files_per_dir.max(1))),
        Step::Fsync => (s.fsync_files, 1),
        Step::Fsync4 => (s.fsync_files, s.threads.max(1)),
    };
    let dirs = make_dirs(&fs, dirs)?;
    fs.sync()?;
    let mut data = vec![0u8; s.file_bytes];
    Rng::new(0x4a42).fill(&mut data);
    let before = fs.journal_stats();
    let started = Instant::now();
    match step {
        Step::Create => create_then_sync(&fs, &dirs, files, s.files_per_dir, &data)?,
        Step::Fsync => fsync_each(&fs, dirs[0], 0..files, &data)?,
        Step::Fsync4 => fsync_threads(&fs, &dirs, files, &data)?,
    }
    let seconds = started.elapsed().as_secs_f64();
    let counts = before.zip(fs.journal_stats()).map(|(b, a)| counts_between(&b, &a));
    fs.unmount()
        .with_context(|| format!("unmounting {}", image.display()))?;
    let fsck = system::e2fsck(&image)?;
    let kept_image = if fsck.clean {
        std::fs::remove_file(&image)?;
        None
    } else {
        Some(keep(&image, cfg)?)
    };
    Ok(Sample {
        step,
        mode,
        repeat,
        files,
        seconds,
        counts,
        fsck,
        kept_image,
    })
}

/// A sparse image made by `mkfs.ext4` with the mount benchmark's options,
/// without `has_journal` for [`Mode::NoJournal`].
fn make_image(image: &Path, bytes: u64, mode: Mode) -> Result<()> {
    let extra: &[&str] = match mode {
        Mode::Journal => &[],
        Mode::NoJournal => &["-O", "^has_journal"],
    };
    system::mkfs_with(image, bytes, extra)
}

/// Opens the image with the default options (journal written with
/// `data=ordered`), and checks that the engine journals exactly when the
/// image has a journal.
fn open(image: &Path, mode: Mode) -> Result<Filesystem> {
    let dev = FileDevice::open(image, true)?;
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default())
        .with_context(|| format!("opening {}", image.display()))?;
    let journaling = fs.journal_stats().is_some();
    if journaling != (mode == Mode::Journal) {
        bail!(
            "{}: expected {} but the engine {} through a journal",
            image.display(),
            mode.name(),
            if journaling { "writes" } else { "does not write" }
        );
    }
    Ok(fs)
}

fn make_dirs(fs: &Filesystem, n: usize) -> Result<Vec<u32>> {
    (0..n)
        .map(|k| {
            let name = format!("d{k:03}");
            Ok(fs.create(ROOT_INO, name.as_bytes(), NodeKind::Directory, ATTR)?.ino)
        })
        .collect()
}

/// Creates `name` in `dir` and writes `data` at offset 0; returns its inode.
fn create_file(fs: &Filesystem, dir: u32, i: usize, data: &[u8]) -> Result<u32> {
    let name = format!("f{i:06}");
    let ino = fs.create(dir, name.as_bytes(), NodeKind::Regular, ATTR)?.ino;
    let n = fs.write(ino, 0, data)?;
    ensure!(n == data.len(), "short write to {name}: {n} of {} bytes", data.len());
    Ok(ino)
}

/// `create`: every file, `per_dir` to a directory, then one sync.
fn create_then_sync(fs: &Filesystem, dirs: &[u32], files: usize, per_dir: usize, data: &[u8]) -> Result<()> {
    for i in 0..files {
        create_file(fs, dirs[i / per_dir.max(1)], i, data)?;
    }
    fs.sync()?;
    Ok(())
}

/// `fsync`: create, write and fsync each file of `range` in `dir`.
fn fsync_each(fs: &Filesystem, dir: u32, range: std::ops::Range<usize>, data: &[u8]) -> Result<()> {
    for i in range {
        let ino = create_file(fs, dir, i, data)?;
        fs.sync_inode(ino)?;
    }
    Ok(())
}

/// `fsync4`: [`fsync_each`] on one thread per directory, the files split
/// evenly (the first threads take the remainder).
fn fsync_threads(fs: &Filesystem, dirs: &[u32], files: usize, data: &[u8]) -> Result<()> {
    let n = dirs.len();
    std::thread::scope(|scope| {
        let handles: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(t, &dir)| {
                let start = t * (files / n) + t.min(files % n);
                let len = files / n + usize::from(t < files % n);
                scope.spawn(move || fsync_each(fs, dir, start..start + len, data))
            })
            .collect();
        handles.into_iter().try_for_each(|h| match h.join() {
            Ok(r) => r,
            Err(_) => bail!("a writer thread panicked"),
        })
    })
}

/// What the journal writer did between two snapshots of its counters.
fn counts_between(before: &JournalStats, after: &JournalStats) -> Counts {
    Counts {
        sync_calls: after.write_backs - before.write_backs,
        commits: after.commits - before.commits,
        blocks_logged: after.blocks_logged - before.blocks_logged,
        revoke_records: after.revoke_records - before.revoke_records,
        checkpoints: after.checkpoints - before.checkpoints,
    }
}

/// Moves a dirty image out of the temporary directory so that it survives
/// the run, and says where it went.
fn keep(image: &Path, cfg: &Config) -> Result<PathBuf> {
    let base = cfg.dir.clone().unwrap_or_else(|| PathBuf::from("/var/tmp"));
    let name = image.file_name().context("image without a name")?;
    let kept = base.join(format!("ext4kit-jbench-dirty-{}", name.to_string_lossy()));
    std::fs::rename(image, &kept)?;
    Ok(kept)
}
