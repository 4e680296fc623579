//! `untar`: GNU tar extracts the source-like tarball (built once, outside
//! the mount), then the mount is synced; the time is what a user waits
//! for. As root tar also sets owners, modes and times, as it would for a
//! real unpack.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::Result;

use super::{per_sec, workdir};
use crate::report::Metric;
use crate::system::{run_ok, syncfs, tool};

/// Extracts `tarball` into `mnt/untar` and syncs.
pub fn run(mnt: &Path, tarball: &Path) -> Result<Vec<Metric>> {
    let dir = workdir(mnt, "untar")?;
    let tar = tool("tar")?;
    let start = Instant::now();
    run_ok(Command::new(&tar).arg("-xf").arg(tarball).arg("-C").arg(&dir))?;
    let extracted = start.elapsed();
    syncfs(&dir)?;
    let total = start.elapsed();
    let files = count_files(&dir)?;
    Ok(vec![
        Metric::lower("total incl. sync", total.as_secs_f64(), "s"),
        Metric::lower("extract", extracted.as_secs_f64(), "s"),
        Metric::lower("sync", (total - extracted).as_secs_f64(), "s"),
        Metric::higher("files/s", per_sec(files as f64, total), "files/s"),
    ])
}

/// Regular files under `dir` (a check that everything was extracted).
fn count_files(dir: &Path) -> Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            n += count_files(&e.path())?;
        } else if t.is_file() {
            n += 1;
        }
    }
    Ok(n)
}
