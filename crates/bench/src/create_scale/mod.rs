//! `ext4kit bench create-scale`: seed 000's experiment. N empty files are
//! created in one new directory, then, after every cache is dropped,
//! opened in a random order; the time per create and per open is
//! reported per batch against the entries so far. The seed found creates
//! on kernel ext2 growing from 133 to 4,426 µs over 100,000 entries in a
//! linear (`^dir_index`) directory, each create scanning the whole
//! directory for the name; issue 14 wants the engine's creates flat
//! (last 5 % within 1.3× of the first 5 %).
//!
//! Two kinds of target:
//! - an image file ([`image`]): the engine through its library API on the
//!   disk model with a page cache in front, modeled time — the same run
//!   gives the same figures on any machine; the image ends `e2fsck -fn`
//!   clean or the run fails;
//! - a directory ([`dir`]): any mounted file system through the host's
//!   calls, wall time.

mod dir;
mod image;
pub mod plot;
pub mod report;

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

pub use report::{Batch, PhaseStats, Report};

use crate::rng::Rng;

/// The open order's seed unless told otherwise.
pub const DEFAULT_SEED: u64 = 0x000c_5ca1e;

/// A run.
#[derive(Debug, Clone)]
pub struct Config {
    /// An image file (made if missing) or a directory.
    pub target: PathBuf,
    /// Files to create.
    pub n: usize,
    /// Files per batch (0: N/20).
    pub batch: usize,
    /// Disk model profile name (images).
    pub disk: String,
    /// Page cache bytes (images).
    pub cache_bytes: u64,
    /// Make a new image without `dir_index`.
    pub no_dir_index: bool,
    /// Create with `Filesystem::create_new` (no existence lookup; seed
    /// 000's S_CR736 mode): the names are known to be new. Images only.
    pub no_lookup: bool,
    /// Seed of the open order.
    pub seed: u64,
}

impl Config {
    /// The batch size in effect: N/20 unless set, at least 1.
    pub fn batch_size(&self) -> usize {
        if self.batch > 0 { self.batch } else { self.n / 20 }.max(1)
    }
}

/// What the progress callback is told: files done of both phases, and
/// their total (2N).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// What the target is.
enum Kind {
    /// An existing ext2/3/4 image.
    Image,
    /// A path to make a new image at.
    NewImage,
    /// A directory.
    Directory,
}

/// Offset and value of the superblock's magic number.
const MAGIC_AT: u64 = 1024 + 56;
const EXT_MAGIC: [u8; 2] = 0xEF53u16.to_le_bytes();

fn kind_of(path: &Path) -> Result<Kind> {
    let expected = "expected an ext2/3/4 image file (made if missing) or a directory";
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(Kind::Directory),
        Ok(m) if m.is_file() => {
            use std::os::unix::fs::FileExt as _;
            let f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
            let mut magic = [0u8; 2];
            if f.read_exact_at(&mut magic, MAGIC_AT).is_err() || magic != EXT_MAGIC {
                bail!(
                    "{}: a regular file without an ext2/3/4 superblock; {expected}",
                    path.display()
                );
            }
            Ok(Kind::Image)
        }
        Ok(_) => bail!("{}: neither a regular file nor a directory; {expected}", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match path.parent() {
                Some(p) if p.as_os_str().is_empty() => Path::new("."),
                Some(p) => p,
                None => bail!("{}: not a file name; {expected}", path.display()),
            };
            if !parent.is_dir() {
                bail!(
                    "{}: does not exist and its parent {} is not a directory; {expected}",
                    path.display(),
                    parent.display()
                );
            }
            Ok(Kind::NewImage)
        }
        Err(e) => bail!("{}: {e}; {expected}", path.display()),
    }
}

/// Runs the workload on `cfg.target`. Fails on a target of the wrong kind
/// and on any error of the file system under test; a dirty image is
/// recorded in the report (see [`Report::failed`]).
pub fn run(cfg: &Config, progress: Progress<'_>) -> Result<Report> {
    if cfg.n == 0 {
        bail!("-n must be at least 1");
    }
    let started = std::time::Instant::now();
    let mut report = match kind_of(&cfg.target)? {
        Kind::Directory => {
            if cfg.no_dir_index {
                bail!(
                    "--no-dir-index makes a new image; {} is a directory (make its file system with ^dir_index instead)",
                    cfg.target.display()
                );
            }
            if cfg.no_lookup {
                bail!(
                    "--no-lookup chooses the engine's create; {} is a directory, created through the host's calls",
                    cfg.target.display()
                );
            }
            dir::run(cfg, progress)?
        }
        Kind::Image => image::run(cfg, false, progress)?,
        Kind::NewImage => image::run(cfg, true, progress)?,
    };
    report.compute_ratios();
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The name of file `i`: seven digits, so every name has the same length
/// and a directory block holds the same number of entries throughout.
fn file_name(i: usize) -> String {
    format!("f{i:07}")
}

/// `0..n` shuffled (Fisher–Yates) by a generator started from `seed`.
fn open_order(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for k in (1..n).rev() {
        order.swap(k, rng.below(k + 1));
    }
    order
}

/// The ranges of file indices making up each batch.
fn batches(n: usize, size: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..n).step_by(size).map(move |s| s..(s + size).min(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_order_is_a_fixed_permutation() {
        let a = open_order(1000, 7);
        assert_eq!(a, open_order(1000, 7));
        assert_ne!(a, open_order(1000, 8));
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_ne!(a, sorted);
    }

    #[test]
    fn batches_cover_every_file_once() {
        let b: Vec<_> = batches(10, 4).collect();
        assert_eq!(b, vec![0..4, 4..8, 8..10]);
    }

    #[test]
    fn wrong_targets_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, vec![0u8; 4096]).unwrap();
        let e = kind_of(&plain).err().unwrap().to_string();
        assert!(
            e.contains("without an ext2/3/4 superblock") && e.contains("plain"),
            "{e}"
        );
        let orphan = dir.path().join("no/such/img");
        let e = kind_of(&orphan).err().unwrap().to_string();
        assert!(e.contains("parent") && e.contains("expected an ext2/3/4 image"), "{e}");
        assert!(matches!(kind_of(dir.path()), Ok(Kind::Directory)));
        assert!(matches!(kind_of(&dir.path().join("new.img")), Ok(Kind::NewImage)));
    }
}
