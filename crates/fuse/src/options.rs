//! `-o` mount options: ext4's own names where the concept is the same
//! (`ro`, `noatime`, `errors=`…), FUSE's for the transport (`allow_other`,
//! `default_permissions`), and ours for caching. An option the engine cannot
//! honour yet is refused by name, never ignored: a user who asks for
//! `stripe=` must not get a silently different layout.

use std::time::Duration;

use ext4kit_engine::journal::{DataMode, JournalOptions};

/// When reads update the access time (`noatime`, `relatime`, `strictatime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimeMode {
    /// Never.
    NoAtime,
    /// When atime is older than mtime/ctime or a day old (the kernel's default).
    #[default]
    Relatime,
    /// On every read.
    Strict,
}

/// What an error found in on-disk metadata does (`errors=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// Report it and go on.
    Continue,
    /// Refuse every further change (the default, as mke2fs sets it).
    #[default]
    RemountRo,
    /// Stop serving at once, leaving the image as it is.
    Panic,
}

/// Whether a busy mount asks the kernel that idle CPUs wake at once
/// (`cpu_latency=`; see the `poll` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuLatencyMode {
    /// When this process may (root): a mount by another user just goes
    /// without.
    #[default]
    Auto,
    /// Always; the mount fails when the kernel refuses.
    On,
    /// Never.
    Off,
}

/// A uid or gid mapping between the image and this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMap {
    /// The id stored in the image.
    pub image: u32,
    /// The id shown (and accepted) on this machine.
    pub host: u32,
}

impl IdMap {
    /// Image id to host id; the two ids swap places so the map stays one-to-one.
    pub fn to_host(map: Option<Self>, id: u32) -> u32 {
        match map {
            Some(m) if id == m.image => m.host,
            Some(m) if id == m.host => m.image,
            _ => id,
        }
    }

    /// Host id to image id (the inverse of [`IdMap::to_host`]).
    pub fn to_image(map: Option<Self>, id: u32) -> u32 {
        Self::to_host(map, id)
    }
}

/// Everything `-o` can set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountConfig {
    /// Serve read-only.
    pub read_only: bool,
    /// Access-time policy.
    pub atime: AtimeMode,
    /// Reaction to corruption.
    pub errors: OnError,
    /// `uid=IMAGE:HOST`.
    pub uid_map: Option<IdMap>,
    /// `gid=IMAGE:HOST`.
    pub gid_map: Option<IdMap>,
    /// Let other users in (`allow_other`).
    pub allow_other: bool,
    /// Let root in besides the owner (`allow_root`).
    pub allow_root: bool,
    /// Mount as type `fuse` instead of `fuse.ext4kit` (`fstype=fuse`), for
    /// test suites that look for the plain type.
    pub plain_fuse_type: bool,
    /// How long the kernel may trust attributes and names (`attr_timeout=`,
    /// `entry_timeout=`, seconds). Only this process changes the image, so
    /// the kernel's caches stay right as long as it mounts the image.
    pub attr_timeout: Duration,
    /// See `attr_timeout`.
    pub entry_timeout: Duration,
    /// Request-serving threads (`threads=`).
    pub threads: usize,
    /// Let the kernel cache writes (`writeback_cache`, default on).
    pub writeback_cache: bool,
    /// How long one serving thread busy-polls `/dev/fuse` after a request
    /// before it sleeps again (`poll=`, microseconds; zero turns polling
    /// off). See the `poll` module.
    pub poll: Duration,
    /// Whether a busy mount holds a CPU wake-up latency request
    /// (`cpu_latency=auto|on|off`).
    pub cpu_latency: CpuLatencyMode,
    /// The kernel's readahead for the mount in KiB (`read_ahead_kb=`);
    /// `None` sets [`DEFAULT_READ_AHEAD_KB`] where permitted.
    pub read_ahead_kb: Option<u32>,
    /// Most file data the kernel may hold written but not yet sent to
    /// the server (`max_dirty=`, bytes); `None` picks
    /// [`crate::space::default_max_dirty`] for the image's size. The
    /// same amount of space is kept for it (see [`crate::space`]).
    pub max_dirty: Option<u64>,
    /// Flush the image after every change (`sync`).
    pub sync: bool,
    /// Kernel flags passed through: `nodev`, `nosuid`, `noexec` (and their
    /// opposites). `nodev` and `nosuid` are the default: an image made
    /// elsewhere must not open this host's devices or run programs with
    /// the privileges it chose; `-o dev`, `-o suid` for images one trusts.
    pub dev: bool,
    /// See `dev`.
    pub suid: bool,
    /// See `dev`.
    pub exec: bool,
    /// Read even when metadata checksums do not match (`nochecksums`).
    pub ignore_checksums: bool,
    /// Source name shown in /proc/mounts (`fsname=`).
    pub fsname: Option<String>,
    /// How the journal is written: `data=ordered|writeback|journal`,
    /// `journal_checksum`/`nojournal_checksum`, `journal_async_commit`.
    pub journal: JournalOptions,
    /// Longest a change waits in memory before it is committed
    /// (`commit=`, seconds; 0 means the default, 5, as in ext4).
    pub commit: Duration,
}

impl Default for MountConfig {
    fn default() -> Self {
        Self {
            read_only: false,
            atime: AtimeMode::Relatime,
            errors: OnError::RemountRo,
            uid_map: None,
            gid_map: None,
            allow_other: false,
            allow_root: false,
            plain_fuse_type: false,
            attr_timeout: Duration::from_secs(60),
            entry_timeout: Duration::from_secs(60),
            threads: 4,
            writeback_cache: true,
            poll: DEFAULT_POLL,
            cpu_latency: CpuLatencyMode::Auto,
            read_ahead_kb: None,
            max_dirty: None,
            sync: false,
            dev: false,
            suid: false,
            exec: true,
            ignore_checksums: false,
            fsname: None,
            journal: JournalOptions::default(),
            commit: DEFAULT_COMMIT,
        }
    }
}

/// The busy window (`poll=`, or this when `poll=0`): longer than the gaps between the requests of one
/// busy program (a few to a few hundred microseconds of its own work).
pub(crate) const DEFAULT_POLL: Duration = Duration::from_micros(500);

/// Readahead when `read_ahead_kb=` is not given: a cold 2 GiB sequential
/// read on this project's VM ran at 1.0–1.4 GB/s with FUSE's 128 KiB,
/// 1.5–1.6 GB/s with 8 MiB and 2.2–2.3 GB/s with 16 MiB.
pub const DEFAULT_READ_AHEAD_KB: u32 = 16 * 1024;

/// Bounds of `max_dirty=`: below a few pages the kernel's throttling
/// cannot keep to it; above, the space kept back is unreasonable.
const MIN_MAX_DIRTY: u64 = 256 << 10;
const MAX_MAX_DIRTY: u64 = 1 << 30;

/// ext4's default commit interval (`JBD2_DEFAULT_MAX_COMMIT_AGE`).
const DEFAULT_COMMIT: Duration = Duration::from_secs(5);

/// Options of ext4 that need the new allocators or features not built yet.
const NOT_YET: &[&str] = &[
    "delalloc",
    "nodelalloc",
    "stripe",
    "barrier",
    "nobarrier",
    "discard",
    "nodiscard",
    "auto_da_alloc",
    "noauto_da_alloc",
    "dax",
    "usrquota",
    "grpquota",
    "prjquota",
    "quota",
    "journal_dev",
    "norecovery",
    "noload",
    "inode_readahead_blks",
    "max_batch_time",
    "min_batch_time",
    "journal_ioprio",
];

/// Options `mount(8)` and fstab pass along that mean nothing here.
const HARMLESS: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "_netdev",
    "nofail",
    "async",
    "relatime",
    "rw",
    "default_permissions",
    "acl",
    "user_xattr",
];

impl MountConfig {
    /// Applies a comma-separated option list (as after `-o`).
    ///
    /// # Errors
    /// A message naming the option that is unknown, malformed, or not
    /// supported yet.
    pub fn apply(&mut self, list: &str) -> Result<(), String> {
        for opt in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            self.apply_one(key, value)
                .map_err(|why| format!("mount option `{opt}`: {why}"))?;
        }
        Ok(())
    }

    fn apply_one(&mut self, key: &str, value: Option<&str>) -> Result<(), String> {
        if NOT_YET.contains(&key) {
            return Err("not supported yet (it needs the new allocators or a feature not built yet)".into());
        }
        if HARMLESS.contains(&key) || key.starts_with("x-") || key.starts_with("comment=") {
            if key == "relatime" {
                self.atime = AtimeMode::Relatime;
            }
            if key == "rw" {
                self.read_only = false;
            }
            return Ok(());
        }
        let flag = |v: Option<&str>| match v {
            None => Ok(()),
            Some(_) => Err("takes no value".to_string()),
        };
        match key {
            "ro" => flag(value).map(|()| self.read_only = true),
            "noatime" | "nodiratime" => flag(value).map(|()| self.atime = AtimeMode::NoAtime),
            "strictatime" | "atime" => flag(value).map(|()| self.atime = AtimeMode::Strict),
            "errors" => {
                self.errors = match value {
                    Some("continue") => OnError::Continue,
                    Some("remount-ro") => OnError::RemountRo,
                    Some("panic") => OnError::Panic,
                    _ => return Err("expects continue, remount-ro or panic".into()),
                };
                Ok(())
            }
            "uid" => parse_map(value).map(|m| self.uid_map = Some(m)),
            "gid" => parse_map(value).map(|m| self.gid_map = Some(m)),
            "allow_other" => flag(value).map(|()| self.allow_other = true),
            "allow_root" => flag(value).map(|()| self.allow_root = true),
            "fstype" => match value {
                Some(v @ ("fuse" | "fuse.ext4kit")) => {
                    self.plain_fuse_type = v == "fuse";
                    Ok(())
                }
                _ => Err("expects fuse or fuse.ext4kit".into()),
            },
            "attr_timeout" => parse_secs(value).map(|d| self.attr_timeout = d),
            "entry_timeout" => parse_secs(value).map(|d| self.entry_timeout = d),
            "threads" => match value.and_then(|v| v.parse::<usize>().ok()) {
                Some(n @ 1..=64) => {
                    self.threads = n;
                    Ok(())
                }
                _ => Err("expects a number of threads from 1 to 64".into()),
            },
            "poll" => match value.and_then(|v| v.parse::<u64>().ok()) {
                Some(us @ 0..=1_000_000) => {
                    self.poll = Duration::from_micros(us);
                    Ok(())
                }
                _ => Err("expects microseconds from 0 to 1000000".into()),
            },
            "cpu_latency" => {
                self.cpu_latency = match value {
                    Some("auto") => CpuLatencyMode::Auto,
                    Some("on") => CpuLatencyMode::On,
                    Some("off") => CpuLatencyMode::Off,
                    _ => return Err("expects auto, on or off".into()),
                };
                Ok(())
            }
            "read_ahead_kb" => match value.and_then(|v| v.parse::<u32>().ok()) {
                Some(kb @ 0..=262_144) => {
                    self.read_ahead_kb = Some(kb);
                    Ok(())
                }
                _ => Err("expects KiB from 0 to 262144".into()),
            },
            "max_dirty" => match value.map(ext4kit_engine::mkfs::parse_size) {
                Some(Ok(n @ MIN_MAX_DIRTY..=MAX_MAX_DIRTY)) => {
                    self.max_dirty = Some(n);
                    Ok(())
                }
                _ => Err("expects a size from 256K to 1G (e.g. 16M)".into()),
            },
            "writeback_cache" => flag(value).map(|()| self.writeback_cache = true),
            "nowriteback_cache" => flag(value).map(|()| self.writeback_cache = false),
            "sync" => flag(value).map(|()| self.sync = true),
            "dev" | "nodev" => flag(value).map(|()| self.dev = key == "dev"),
            "suid" | "nosuid" => flag(value).map(|()| self.suid = key == "suid"),
            "exec" | "noexec" => flag(value).map(|()| self.exec = key == "exec"),
            "nochecksums" => flag(value).map(|()| self.ignore_checksums = true),
            "data" => {
                self.journal.data = match value {
                    Some("ordered") => DataMode::Ordered,
                    Some("writeback") => DataMode::Writeback,
                    Some("journal") => DataMode::Journal,
                    _ => return Err("expects ordered, writeback or journal".into()),
                };
                Ok(())
            }
            "commit" => {
                self.commit = match value.and_then(|v| v.parse::<u64>().ok()) {
                    Some(0) => DEFAULT_COMMIT,
                    Some(n @ 1..=86_400) => Duration::from_secs(n),
                    _ => return Err("expects whole seconds from 0 to 86400".into()),
                };
                Ok(())
            }
            "journal_checksum" => flag(value).map(|()| self.journal.checksum = Some(true)),
            "nojournal_checksum" => flag(value).map(|()| self.journal.checksum = Some(false)),
            "journal_async_commit" => flag(value).map(|()| self.journal.async_commit = true),
            "fsname" => match value {
                Some(v) if !v.is_empty() && !v.contains(',') => {
                    self.fsname = Some(v.to_string());
                    Ok(())
                }
                _ => Err("expects a name".into()),
            },
            _ => Err("unknown option".into()),
        }
    }
}

fn parse_map(value: Option<&str>) -> Result<IdMap, String> {
    let bad = || "expects IMAGE_ID:HOST_ID, e.g. uid=1001:1000".to_string();
    let (image, host) = value.and_then(|v| v.split_once(':')).ok_or_else(bad)?;
    Ok(IdMap {
        image: image.parse().map_err(|_| bad())?,
        host: host.parse().map_err(|_| bad())?,
    })
}

fn parse_secs(value: Option<&str>) -> Result<Duration, String> {
    value
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && (0.0..=86_400.0).contains(s))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| "expects seconds from 0 to 86400".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ext4_and_fuse_options() {
        let mut c = MountConfig::default();
        c.apply("ro,noatime,errors=continue,uid=1001:1000,allow_other,fstype=fuse,attr_timeout=0.5")
            .unwrap();
        assert!(c.read_only && c.allow_other && c.plain_fuse_type);
        assert_eq!(c.atime, AtimeMode::NoAtime);
        assert_eq!(c.errors, OnError::Continue);
        assert_eq!(
            c.uid_map,
            Some(IdMap {
                image: 1001,
                host: 1000
            })
        );
        assert_eq!(c.attr_timeout, Duration::from_millis(500));
        c.apply("data=journal,commit=30,journal_async_commit,nojournal_checksum")
            .unwrap();
        assert_eq!(c.journal.data, DataMode::Journal);
        assert_eq!(c.commit, Duration::from_secs(30));
        assert!(c.journal.async_commit);
        assert_eq!(c.journal.checksum, Some(false));
        c.apply("commit=0").unwrap();
        assert_eq!(c.commit, DEFAULT_COMMIT);
        assert_eq!(c.poll, DEFAULT_POLL);
        c.apply("poll=0").unwrap();
        assert!(c.poll.is_zero());
        c.apply("poll=250").unwrap();
        assert_eq!(c.poll, Duration::from_micros(250));
        assert_eq!(c.cpu_latency, CpuLatencyMode::Auto);
        c.apply("cpu_latency=off").unwrap();
        assert_eq!(c.cpu_latency, CpuLatencyMode::Off);
        c.apply("cpu_latency=on").unwrap();
        assert_eq!(c.cpu_latency, CpuLatencyMode::On);
        assert_eq!(c.read_ahead_kb, None);
        c.apply("read_ahead_kb=4096").unwrap();
        assert_eq!(c.read_ahead_kb, Some(4096));
        assert_eq!(c.max_dirty, None);
        c.apply("max_dirty=8M").unwrap();
        assert_eq!(c.max_dirty, Some(8 << 20));
    }

    #[test]
    fn refuses_unsupported_and_unknown_options_by_name() {
        let e = MountConfig::default().apply("rw,stripe=8").unwrap_err();
        assert!(e.contains("stripe=8") && e.contains("not supported yet"), "{e}");
        let e = MountConfig::default().apply("data=fast").unwrap_err();
        assert!(e.contains("data=fast") && e.contains("expects ordered"), "{e}");
        let e = MountConfig::default().apply("bogus").unwrap_err();
        assert!(e.contains("bogus") && e.contains("unknown"), "{e}");
        assert!(MountConfig::default().apply("ro=1").is_err());
        assert!(MountConfig::default().apply("uid=5").is_err());
        assert!(MountConfig::default().apply("threads=0").is_err());
        assert!(MountConfig::default().apply("poll=-1").is_err());
        assert!(MountConfig::default().apply("poll").is_err());
        assert!(MountConfig::default().apply("read_ahead_kb=262145").is_err());
        assert!(MountConfig::default().apply("max_dirty=4K").is_err());
        assert!(MountConfig::default().apply("max_dirty=2G").is_err());
        assert!(MountConfig::default().apply("max_dirty=lots").is_err());
        let e = MountConfig::default().apply("cpu_latency=fast").unwrap_err();
        assert!(e.contains("cpu_latency=fast") && e.contains("auto, on or off"), "{e}");
    }

    #[test]
    fn id_maps_swap_both_ways() {
        let m = Some(IdMap {
            image: 1001,
            host: 1000,
        });
        assert_eq!(IdMap::to_host(m, 1001), 1000);
        assert_eq!(IdMap::to_host(m, 1000), 1001);
        assert_eq!(IdMap::to_host(m, 0), 0);
        assert_eq!(IdMap::to_image(m, 1000), 1001);
    }
}
