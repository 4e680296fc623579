//! What to run: targets, workloads and their sizes (full or `--quick`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::Serialize;

/// A way of mounting the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// The kernel's ext4 driver on a loop device (`mount -o loop`).
    Kernel,
    /// e2fsprogs' FUSE driver (`fuse2fs IMG DIR`).
    Fuse2fs,
    /// `ext4kit mount IMG DIR -d`.
    Ext4kit,
}

impl Target {
    /// Every target, in report column order.
    pub const ALL: [Target; 3] = [Target::Kernel, Target::Fuse2fs, Target::Ext4kit];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Target::Kernel => "kernel",
            Target::Fuse2fs => "fuse2fs",
            Target::Ext4kit => "ext4kit",
        }
    }
}

/// One benchmark workload: a suite workload run on the mount (see
/// [`crate::mount_suite`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Empty files created in one directory.
    Create,
    /// A PostMark-like mix of small-file transactions.
    Postmark,
    /// One large file written with 1 MiB writes, then fsync.
    Seqwrite,
    /// The same file read cold with 1 MiB reads.
    Seqread,
    /// A source-like tarball extracted, then sync.
    Untar,
    /// stat, readdir and open+close served from the kernel's caches.
    Cached,
    /// Create+write+close and unlink from 1 and from 2 threads.
    Threads,
}

impl Workload {
    /// Every workload, in the order they run.
    pub const ALL: [Workload; 7] = [
        Workload::Create,
        Workload::Postmark,
        Workload::Seqwrite,
        Workload::Seqread,
        Workload::Untar,
        Workload::Cached,
        Workload::Threads,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Create => "create",
            Workload::Postmark => "postmark",
            Workload::Seqwrite => "seqwrite",
            Workload::Seqread => "seqread",
            Workload::Untar => "untar",
            Workload::Cached => "cached",
            Workload::Threads => "threads",
        }
    }
}

fn parse_named<T: Copy>(s: &str, all: &[T], name: fn(T) -> &'static str) -> Result<T, String> {
    all.iter().copied().find(|&t| name(t) == s).ok_or_else(|| {
        let names: Vec<_> = all.iter().map(|&t| name(t)).collect();
        format!("unknown `{s}` (expected one of {})", names.join(", "))
    })
}

impl FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_named(s, &Target::ALL, Target::name)
    }
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_named(s, &Workload::ALL, Workload::name)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a comma-separated list (`kernel,ext4kit`), keeping the order of
/// `all` and dropping duplicates.
pub fn parse_list<T: FromStr<Err = String> + PartialEq + Copy>(s: &str, all: &[T]) -> Result<Vec<T>, String> {
    let wanted = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(T::from_str)
        .collect::<Result<Vec<_>, _>>()?;
    if wanted.is_empty() {
        return Err("empty list".into());
    }
    Ok(all.iter().copied().filter(|t| wanted.contains(t)).collect())
}

/// Sizes of every workload: the figures, or small ones for a CI
/// smoke test (`--quick`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sizes {
    /// Image size in bytes (sparse file).
    pub image_bytes: u64,
    /// `create`: empty files in one directory.
    pub create_files: usize,
    /// `postmark`: initial pool of files.
    pub postmark_files: usize,
    /// `postmark`: subdirectories the pool is spread over (what the suite's
    /// `mount` preset makes of the file count: one per 100 files, at
    /// least 10).
    pub postmark_dirs: usize,
    /// `postmark`: transactions.
    pub postmark_transactions: usize,
    /// `seqwrite`/`seqread`: file size in bytes.
    pub seq_bytes: u64,
    /// `untar`: files in the tarball (the suite's `untar` makes it).
    pub untar_files: usize,
    /// `cached`: files in the directory.
    pub cached_files: usize,
    /// `threads`: files created and unlinked per configuration.
    pub thread_files: usize,
}

impl Sizes {
    /// The full benchmark.
    pub const FULL: Sizes = Sizes {
        image_bytes: 8 << 30,
        create_files: 100_000,
        postmark_files: 10_000,
        postmark_dirs: 100,
        postmark_transactions: 50_000,
        seq_bytes: 2 << 30,
        untar_files: 20_000,
        cached_files: 10_000,
        thread_files: 20_000,
    };

    /// A smoke test that runs every target in seconds.
    pub const QUICK: Sizes = Sizes {
        image_bytes: 512 << 20,
        create_files: 2_000,
        postmark_files: 500,
        postmark_dirs: 10,
        postmark_transactions: 2_000,
        seq_bytes: 64 << 20,
        untar_files: 1_000,
        cached_files: 1_000,
        thread_files: 1_000,
    };
}

/// A benchmark run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Targets in the order they run.
    pub targets: Vec<Target>,
    /// Workloads in the order they run.
    pub workloads: Vec<Workload>,
    /// Small sizes for a smoke test.
    pub quick: bool,
    /// Where images, mount points and the tarball go (a temporary
    /// directory is made inside); `/var/tmp` when `None`, so the images
    /// are on a real disk rather than tmpfs.
    pub dir: Option<PathBuf>,
    /// The `ext4kit` executable for the `ext4kit` target.
    pub ext4kit_exe: PathBuf,
    /// More `-o` options for the `ext4kit` target's mount; each entry is
    /// one ext4kit configuration, run as a target of its own (none: one
    /// run with the defaults).
    pub ext4kit_options: Vec<String>,
    /// Record the FUSE requests of every workload on the FUSE targets
    /// ([`crate::fuse_trace`]; root and tracefs).
    pub profile: bool,
    /// How many times every target runs (see [`crate::rounds`]); at least 1.
    pub rounds: usize,
}

/// One target as it runs: the kind of mount and, for ext4kit, its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetRun {
    /// The kind of mount.
    pub target: Target,
    /// More `-o` options (ext4kit only).
    pub options: Option<String>,
    /// Its name in the reports, unique within the run.
    pub label: String,
}

impl Config {
    /// The targets as they run, in order: the ext4kit target once per
    /// `ext4kit_options` entry, labelled `ext4kit[OPTIONS]` when there are
    /// several (plain `ext4kit` for one, so reports keep their columns).
    pub fn runs(&self) -> Vec<TargetRun> {
        let mut out = Vec::new();
        for &target in &self.targets {
            let plain = |options: Option<String>| TargetRun {
                target,
                options,
                label: target.name().to_string(),
            };
            match (target, self.ext4kit_options.as_slice()) {
                (Target::Ext4kit, [one]) => out.push(plain(Some(one.clone()))),
                (Target::Ext4kit, many) if many.len() > 1 => {
                    out.extend(many.iter().map(|o| TargetRun {
                        target,
                        options: Some(o.clone()),
                        label: format!("ext4kit[{o}]"),
                    }));
                }
                _ => out.push(plain(None)),
            }
        }
        out
    }

    /// The sizes in force.
    pub fn sizes(&self) -> Sizes {
        if self.quick { Sizes::QUICK } else { Sizes::FULL }
    }

    /// A fresh temporary directory for this run, removed when dropped.
    pub fn work_dir(&self) -> std::io::Result<tempfile::TempDir> {
        let base = self.dir.clone().unwrap_or_else(|| PathBuf::from("/var/tmp"));
        std::fs::create_dir_all(&base)?;
        tempfile::Builder::new().prefix("ext4kit-bench-").tempdir_in(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keep_canonical_order_and_reject_unknown_names() {
        let t = parse_list("ext4kit,kernel,ext4kit", &Target::ALL).unwrap();
        assert_eq!(t, vec![Target::Kernel, Target::Ext4kit]);
        let w = parse_list("threads,create", &Workload::ALL).unwrap();
        assert_eq!(w, vec![Workload::Create, Workload::Threads]);
        assert!(
            parse_list::<Target>("xfs", &Target::ALL)
                .unwrap_err()
                .contains("kernel")
        );
        assert!(parse_list::<Workload>(",", &Workload::ALL).is_err());
    }

    /// One `--ext4kit-options` keeps the plain `ext4kit` column; several
    /// make one labelled target each, in the order given, after the others.
    #[test]
    fn each_ext4kit_option_set_is_a_target_of_its_own() {
        let mut cfg = Config {
            targets: Target::ALL.to_vec(),
            workloads: vec![Workload::Create],
            quick: true,
            dir: None,
            ext4kit_exe: PathBuf::from("ext4kit"),
            ext4kit_options: Vec::new(),
            profile: false,
            rounds: 1,
        };
        let labels = |c: &Config| c.runs().into_iter().map(|r| r.label).collect::<Vec<_>>();
        assert_eq!(labels(&cfg), ["kernel", "fuse2fs", "ext4kit"]);
        cfg.ext4kit_options = vec!["poll=0".into()];
        assert_eq!(labels(&cfg), ["kernel", "fuse2fs", "ext4kit"]);
        assert_eq!(cfg.runs()[2].options.as_deref(), Some("poll=0"));
        cfg.ext4kit_options = vec!["transport=dev".into(), "transport=fuser".into()];
        assert_eq!(
            labels(&cfg),
            [
                "kernel",
                "fuse2fs",
                "ext4kit[transport=dev]",
                "ext4kit[transport=fuser]"
            ]
        );
        assert_eq!(cfg.runs()[3].options.as_deref(), Some("transport=fuser"));
    }
}
