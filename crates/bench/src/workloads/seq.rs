//! `seqwrite` and `seqread`: one large file in 1 MiB requests. The write
//! is timed up to and including fsync (what a user waits for); the read
//! starts cold: the page cache of every file system (the mount's and the
//! image file's on the host) is dropped first.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};

use crate::report::Metric;
use crate::rng::Rng;

/// The request size.
pub const CHUNK: usize = 1 << 20;

fn file(mnt: &Path) -> PathBuf {
    mnt.join("seq").join("big")
}

/// Chunk `i` of the file: seeded random bytes with the chunk number in the
/// first eight, so a misplaced chunk is noticed when reading back.
fn stamp(buf: &mut [u8], i: u64) {
    buf[..8].copy_from_slice(&i.to_le_bytes());
}

fn pattern() -> Vec<u8> {
    let mut buf = vec![0; CHUNK];
    Rng::new(0x5e9).fill(&mut buf);
    buf
}

fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs.max(1e-9)
}

/// Writes `bytes` (rounded up to whole MiB) to `mnt/seq/big`, then fsync.
pub fn write(mnt: &Path, bytes: u64) -> Result<Vec<Metric>> {
    let path = file(mnt);
    std::fs::create_dir_all(path.parent().unwrap_or(mnt))?;
    let mut buf = pattern();
    let chunks = bytes.div_ceil(CHUNK as u64);
    let start = Instant::now();
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("create {}", path.display()))?;
    for i in 0..chunks {
        stamp(&mut buf, i);
        f.write_all(&buf).with_context(|| format!("write chunk {i}"))?;
    }
    let written = start.elapsed();
    f.sync_all().context("fsync")?;
    drop(f);
    let total = start.elapsed();
    let n = chunks * CHUNK as u64;
    Ok(vec![
        Metric::higher("MB/s incl. fsync", mb_per_s(n, total.as_secs_f64()), "MB/s"),
        Metric::higher("MB/s before fsync", mb_per_s(n, written.as_secs_f64()), "MB/s"),
        Metric::lower("fsync", (total - written).as_secs_f64(), "s"),
    ])
}

/// Reads `mnt/seq/big` cold with 1 MiB reads and checks every chunk;
/// writes the file first (untimed) when `seqwrite` did not run.
pub fn read(mnt: &Path, bytes: u64) -> Result<Vec<Metric>> {
    let path = file(mnt);
    let chunks = bytes.div_ceil(CHUNK as u64);
    if std::fs::metadata(&path).map(|m| m.len()).ok() != Some(chunks * CHUNK as u64) {
        let _ = std::fs::remove_file(&path);
        write(mnt, bytes)?;
    }
    drop_file_cache(&path)?;
    let mut expect = pattern();
    let mut buf = vec![0; CHUNK];
    let start = Instant::now();
    let mut f = File::open(&path).with_context(|| format!("open {}", path.display()))?;
    for i in 0..chunks {
        f.read_exact(&mut buf).with_context(|| format!("read chunk {i}"))?;
        stamp(&mut expect, i);
        if buf != expect {
            bail!("chunk {i} of {} reads back different data", path.display());
        }
    }
    let total = start.elapsed();
    Ok(vec![Metric::higher(
        "MB/s cold",
        mb_per_s(chunks * CHUNK as u64, total.as_secs_f64()),
        "MB/s",
    )])
}

/// Makes the next read of `path` come from the file system, not from
/// memory: writes everything back, drops all clean caches (root only: the
/// benchmark runs targets only as root; a plain-directory test without
/// root reads warm), and asks the mount to drop the
/// file's pages too (on FUSE this is the page cache of the mount, distinct
/// from the image file's pages on the host).
fn drop_file_cache(path: &Path) -> Result<()> {
    let f = File::open(path)?;
    f.sync_all()?;
    posix_fadvise(&f, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED).context("posix_fadvise DONTNEED")?;
    if crate::system::is_root() {
        crate::system::drop_caches()?;
    }
    posix_fadvise(&f, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED).context("posix_fadvise DONTNEED")?;
    Ok(())
}
