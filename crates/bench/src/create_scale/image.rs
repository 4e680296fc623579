//! The image target: the engine on `PageCache` over `DiskModel` over the
//! image file, both shared through `Arc` so their counters can be read
//! between batches. Every figure here is modeled, so two runs on images
//! made alike give the same numbers (the new image's UUID, hash seed and
//! time stamp are fixed for that: the hash seed decides which htree leaf
//! each name goes to).
//!
//! Each batch of creates ends with `Filesystem::sync`, charged to the
//! batch: the engine keeps committed metadata in memory, so without it the
//! disk would see nothing until the end. Between the phases the file
//! system is unmounted, the page cache and the drive cache are dropped and
//! the file system opened again, so the opens start with every cache cold.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use ext4kit_engine::device::{DiskModel, DiskProfile, DiskStats, FileDevice, PageCache, PageCacheStats};
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_format::features::CompatFeatures;

use super::report::{Batch, PhaseStats, Report};
use super::{Config, Progress, batches, file_name, open_order};
use crate::system;

type Disk = Arc<DiskModel<FileDevice>>;
type Cache = Arc<PageCache<Disk>>;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// Room for `n` empty files: inodes for all of them and a quarter more,
/// 4 KiB of image per file (directory blocks and slack), at least 64 MiB.
fn image_size(n: usize) -> (u64, u64) {
    let inodes = n as u64 + n as u64 / 4 + 1024;
    let bytes = (n as u64 * 4096).max(64 << 20);
    (bytes, inodes)
}

/// Makes a sparse image at `path` with the engine's mkfs, with fixed
/// identity so the layout and every hash are the same run after run.
fn make_image(path: &Path, n: usize, no_dir_index: bool) -> Result<()> {
    let (bytes, inodes) = image_size(n);
    let f = std::fs::File::create_new(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.set_len(bytes)
        .with_context(|| format!("cannot size {} to {bytes} bytes", path.display()))?;
    drop(f);
    let dev = FileDevice::open(path, true).with_context(|| format!("opening {}", path.display()))?;
    let mut opts = MkfsOptions {
        inode_count: Some(inodes),
        uuid: Some(*b"create-scale-000"),
        hash_seed: Some(*b"seed-000-htree!!"),
        timestamp: Some(1_700_000_000),
        device_zeroed: true,
        ..MkfsOptions::default()
    };
    if no_dir_index {
        opts.add_features("^dir_index");
    }
    mkfs(&dev, &opts).with_context(|| format!("mkfs of {}", path.display()))?;
    Ok(())
}

fn counters(disk: &Disk, cache: &Cache) -> (DiskStats, PageCacheStats) {
    (disk.stats(), cache.stats())
}

fn requests(a: &DiskStats, b: &DiskStats) -> u64 {
    (b.reads + b.writes + b.flushes) - (a.reads + a.writes + a.flushes)
}

fn open_fs(cache: &Cache, path: &Path) -> Result<Filesystem> {
    Filesystem::open(Box::new(cache.clone()), OpenOptions::default())
        .with_context(|| format!("opening {} with the engine", path.display()))
}

/// A directory name not yet in the root: `create-scale`, then `.2`, ….
fn new_dir_name(fs: &Filesystem) -> Result<String> {
    let root = fs.inode(ROOT_INO)?;
    for k in 1u32.. {
        let name = if k == 1 {
            "create-scale".to_string()
        } else {
            format!("create-scale.{k}")
        };
        if fs.lookup(&root, name.as_bytes()).is_err() {
            return Ok(name);
        }
    }
    unreachable!("u32 names exhausted")
}

pub(super) fn run(cfg: &Config, create_image: bool, progress: Progress<'_>) -> Result<Report> {
    let path = cfg.target.as_path();
    if create_image {
        make_image(path, cfg.n, cfg.no_dir_index)?;
    }
    let profile: DiskProfile = cfg.disk.parse()?;
    let file = FileDevice::open(path, true).with_context(|| format!("opening {}", path.display()))?;
    let disk: Disk = Arc::new(DiskModel::new(file, &profile)?);
    let page = crate::modeled::image_block_size(path)?;
    let cache: Cache = Arc::new(PageCache::with_page_size(disk.clone(), cfg.cache_bytes, page));
    let size = cfg.batch_size();
    let total = 2 * cfg.n as u64;
    let mut rows: Vec<Batch> = Vec::new();

    let fs = open_fs(&cache, path)?;
    let dir_index = fs.features().compat.contains(CompatFeatures::DIR_INDEX);
    let dir_name = new_dir_name(&fs)?;
    let dir = fs.create(ROOT_INO, dir_name.as_bytes(), NodeKind::Directory, ATTR)?.ino;
    fs.sync()?;
    let (d0, c0) = counters(&disk, &cache);
    for (k, range) in batches(cfg.n, size).enumerate() {
        let before = disk.stats();
        let wall = Instant::now();
        for i in range.clone() {
            let name = file_name(i);
            if cfg.no_lookup {
                fs.create_new(dir, name.as_bytes(), NodeKind::Regular, ATTR)
            } else {
                fs.create(dir, name.as_bytes(), NodeKind::Regular, ATTR)
            }
            .with_context(|| format!("creating {dir_name}/{name}"))?;
        }
        fs.sync()?;
        let wall_us = wall.elapsed().as_secs_f64() * 1e6;
        let after = disk.stats();
        let files = range.len();
        rows.push(Batch {
            batch: k + 1,
            entries: range.end,
            files,
            create_us: Some((after.modeled_ns - before.modeled_ns) as f64 / 1e3 / files as f64),
            create_wall_us: wall_us / files as f64,
            create_requests: Some(requests(&before, &after)),
            ..Batch::default()
        });
        progress(range.end as u64, total);
    }
    let (d1, c1) = counters(&disk, &cache);
    fs.unmount().with_context(|| format!("unmounting {}", path.display()))?;
    cache.drop_all().context("dropping the page cache")?;
    disk.drop_cache();

    let fs = open_fs(&cache, path)?;
    let (d2, c2) = counters(&disk, &cache);
    let root = fs.inode(ROOT_INO)?;
    let dir = fs.lookup(&root, dir_name.as_bytes())?;
    let dir_inode = fs.inode(dir)?;
    let order = open_order(cfg.n, cfg.seed);
    for (k, range) in batches(cfg.n, size).enumerate() {
        let before = disk.stats();
        let wall = Instant::now();
        for &i in &order[range.clone()] {
            let name = file_name(i);
            let ino = fs
                .lookup(&dir_inode, name.as_bytes())
                .with_context(|| format!("looking up {dir_name}/{name}"))?;
            fs.open_file(ino)?;
            fs.release_file(ino)?;
        }
        let wall_us = wall.elapsed().as_secs_f64() * 1e6;
        let after = disk.stats();
        let row = &mut rows[k];
        row.open_us = Some((after.modeled_ns - before.modeled_ns) as f64 / 1e3 / row.files as f64);
        row.open_wall_us = wall_us / row.files as f64;
        row.open_requests = Some(requests(&before, &after));
        progress(cfg.n as u64 + range.end as u64, total);
    }
    let (d3, c3) = counters(&disk, &cache);
    fs.unmount().with_context(|| format!("unmounting {}", path.display()))?;
    drop(cache);
    ensure!(
        Arc::strong_count(&disk) == 1,
        "the disk model is still shared after unmount"
    );
    drop(disk);
    let fsck = system::e2fsck(path)?;

    Ok(Report {
        workload: "create-scale",
        target: path.display().to_string(),
        target_kind: "image",
        n: cfg.n,
        batch_size: size,
        dir_index: Some(dir_index),
        no_lookup: cfg.no_lookup,
        image_created: create_image,
        disk: Some(profile.name().to_string()),
        page_cache_bytes: Some(cfg.cache_bytes),
        seed: cfg.seed,
        opens_cold: true,
        note: (!create_image && cfg.no_dir_index)
            .then(|| "--no-dir-index applies only to a new image; this one was used as it is".to_string()),
        batches: rows,
        create_phase: Some(PhaseStats::between(&d0, &d1, &c0, &c1)),
        open_phase: Some(PhaseStats::between(&d2, &d3, &c2, &c3)),
        fsck: Some(fsck),
        ..Report::default()
    })
}
