//! The workloads. Each one is a function over a directory on the mounted
//! file system, works in its own subdirectory, and returns its figures.
//! They use only safe std calls plus nix for cache control, so they can be
//! run against any mount.

pub mod cached;
pub mod create;
pub mod postmark;
pub mod seq;
pub mod threads;
pub mod untar;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::config::{Sizes, Workload};
use crate::report::Metric;

/// Runs workload `w` under `mnt` at `sizes`; `untar` needs the tarball.
pub fn run(w: Workload, mnt: &Path, sizes: &Sizes, tarball: Option<&Path>) -> Result<Vec<Metric>> {
    match w {
        Workload::Create => create::run(mnt, sizes.create_files),
        Workload::Postmark => postmark::run(mnt, &postmark::Params::from_sizes(sizes)),
        Workload::Seqwrite => seq::write(mnt, sizes.seq_bytes),
        Workload::Seqread => seq::read(mnt, sizes.seq_bytes),
        Workload::Untar => match tarball {
            Some(t) => untar::run(mnt, t),
            None => bail!("untar needs a tarball"),
        },
        Workload::Cached => cached::run(mnt, sizes.cached_files),
        Workload::Threads => threads::run(mnt, sizes.thread_files),
    }
}

/// Makes the workload's own directory (fails if it exists: every workload
/// runs once per image).
fn workdir(mnt: &Path, name: &str) -> Result<std::path::PathBuf> {
    let d = mnt.join(name);
    std::fs::create_dir(&d).with_context(|| format!("mkdir {}", d.display()))?;
    Ok(d)
}

/// Operations per second.
fn per_sec(ops: f64, d: Duration) -> f64 {
    ops / d.as_secs_f64().max(1e-9)
}

/// The median of `v` (sorts it); zero when empty.
fn median(v: &mut [Duration]) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every workload runs on a plain directory (the host's file system)
    /// at tiny sizes and reports finite, positive figures. Needs no root:
    /// dropping caches is skipped when not allowed.
    #[test]
    fn every_workload_runs_on_a_plain_directory() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = Sizes {
            image_bytes: 0,
            create_files: 200,
            postmark_files: 50,
            postmark_dirs: 5,
            postmark_transactions: 200,
            seq_bytes: 3 << 20,
            untar_files: 40,
            cached_files: 50,
            thread_files: 20,
        };
        let tar = dir.path().join("t.tar");
        crate::tarball::write_source_tree(&tar, sizes.untar_files, 3).unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        for w in Workload::ALL {
            let m = run(w, &mnt, &sizes, Some(&tar)).unwrap_or_else(|e| panic!("{w}: {e:#}"));
            assert!(!m.is_empty(), "{w}");
            for x in &m {
                assert!(x.value.is_finite() && x.value >= 0.0, "{w} {}: {}", x.name, x.value);
            }
        }
        assert_eq!(std::fs::read_dir(mnt.join("create")).unwrap().count(), 200);
    }
}
