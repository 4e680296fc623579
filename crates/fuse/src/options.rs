//! `-o` mount options: ext4's own names where the concept is the same
//! (`ro`, `noatime`, `errors=`…), FUSE's for the transport (`allow_other`,
//! `default_permissions`), and ours for caching. An option the engine cannot
//! honour yet is refused by name, never ignored: a user who asks for
//! `dax` must not get silently different behaviour.

use std::time::Duration;

use ext4kit_engine::AllocOptions;
use ext4kit_engine::dir::ReadDirOptions;
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

/// What carries FUSE requests between the kernel and the adapter
/// (`transport=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// The transport measured fastest here: FUSE over io_uring where the
    /// kernel offers it (no workload slower than on `/dev/fuse`,
    /// docs/fuse-requests.md), `/dev/fuse` otherwise, with the reason
    /// logged.
    #[default]
    Auto,
    /// This crate's own reader of `/dev/fuse` (answers FUSE_STATX).
    Dev,
    /// FUSE over io_uring (Linux 6.14+ with `fuse.enable_uring` on), with
    /// the same requests and replies as `Dev`; the mount fails where the
    /// kernel does not offer it.
    Uring,
    /// The `fuser` library's session.
    Fuser,
}

impl Transport {
    /// The session `Auto` runs: the own one (on io_uring or `/dev/fuse`,
    /// see [`Self::wants_uring`]).
    pub fn resolve(self) -> Self {
        match self {
            Self::Auto => Self::Dev,
            t => t,
        }
    }

    /// Whether the mount asks the kernel for FUSE over io_uring: always
    /// for `Uring`; for `Auto` only where it measured no slower than
    /// `/dev/fuse` (docs/fuse-requests.md), falling back to the device
    /// where the kernel does not offer it.
    pub fn wants_uring(self) -> bool {
        match self {
            Self::Uring => true,
            Self::Auto => AUTO_PREFERS_URING,
            Self::Dev | Self::Fuser => false,
        }
    }
}

/// Whether `transport=auto` tries io_uring first (see
/// [`Transport::wants_uring`]).
const AUTO_PREFERS_URING: bool = true;

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

/// Whether the image is checked (`ext4kit fsck`) before it is served
/// (`-o check`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PreCheck {
    /// Not checked (default, as the kernel's mount).
    #[default]
    Off,
    /// Checked when the superblock asks for it (not clean, errors
    /// recorded, mount count or check interval due), as `fsck -p` at boot:
    /// `check=auto`.
    Auto,
    /// Always fully checked (`fsck -f`): `check` or `check=force`.
    Full,
    /// Fully checked, and before a read-write mount repaired as boot's
    /// `fsck -p` repairs: only what e2fsck's preen mode fixes without
    /// asking; anything else refuses the mount (`check=preen`).
    Preen,
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
    /// What carries requests (`transport=auto|dev|uring|fuser`).
    pub transport: Transport,
    /// Ring entries per io_uring queue (`uring_depth=`): how many
    /// requests of one CPU's queue are served at once, each entry on a
    /// thread of its own with a payload buffer of `max_write` bytes.
    pub uring_depth: usize,
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
    /// Check the image before serving it (`check`, `check=auto`,
    /// `check=preen`).
    pub check: PreCheck,
    /// Source name shown in /proc/mounts (`fsname=`).
    pub fsname: Option<String>,
    /// How the journal is written: `data=ordered|writeback|journal`,
    /// `journal_checksum`/`nojournal_checksum`, `journal_async_commit`,
    /// `fast_commit`/`nofast_commit` (fsyncs as fast commits, on by default).
    pub journal: JournalOptions,
    /// Longest a change waits in memory before it is committed
    /// (`commit=`, seconds; 0 means the default, 5, as in ext4).
    pub commit: Duration,
    /// Allocation policies and mballoc's tunables: `alloc=`,
    /// `inode_alloc=`, `stripe=`, and the kernel's sysfs tunables under
    /// their own names (`mb_stream_req=`, `mb_group_prealloc=`…), and
    /// ext4kit's `mb_flex_aware=` (flex groups as the allocation unit).
    pub alloc: AllocOptions,
    /// The order `readdir` lists in: `readdir=hash` (the kernel's,
    /// default) or `readdir=inode` (inode order from a snapshot taken at
    /// `opendir`/`rewinddir`, for directories of at most
    /// `readdir_snapshot=N` entries; hash order for bigger ones).
    pub readdir: ReadDirOptions,
    /// The kernel's `sb=N`: read the superblock from the backup N KiB
    /// into the image (8193 for group 1 with 1 KiB blocks, 131072 with
    /// 4 KiB). Unlike the kernel, which mounts read-write from it and
    /// writes the superblock back there, the mount must be `ro`: see
    /// `ext4kit_engine::backup_sb`.
    pub superblock: Option<u64>,
    /// The external journal device (`journal_path=`, as ext4 spells it),
    /// for an image whose journal lives on another device.
    pub journal_path: Option<std::path::PathBuf>,
    /// fscrypt master key files (`key=[DESCRIPTOR=]FILE`, repeatable; see
    /// the CLI's `--key`).
    pub keys: Vec<String>,
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
            transport: Transport::Auto,
            uring_depth: DEFAULT_URING_DEPTH,
            read_ahead_kb: None,
            max_dirty: None,
            sync: false,
            dev: false,
            suid: false,
            exec: true,
            ignore_checksums: false,
            check: PreCheck::Off,
            fsname: None,
            journal: JournalOptions::default(),
            commit: DEFAULT_COMMIT,
            alloc: AllocOptions::default(),
            readdir: ReadDirOptions::default(),
            superblock: None,
            journal_path: None,
            keys: Vec::new(),
        }
    }
}

/// Ring entries per io_uring queue unless `uring_depth=` says otherwise
/// (measured in docs/fuse-requests.md).
pub const DEFAULT_URING_DEPTH: usize = 1;

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
    "barrier",
    "nobarrier",
    "discard",
    "nodiscard",
    "dax",
    "usrquota",
    "grpquota",
    "prjquota",
    "quota",
    "norecovery",
    "noload",
    "inode_readahead_blks",
    "max_batch_time",
    "min_batch_time",
    "journal_ioprio",
];

/// Bounds of the allocator's tunables. The kernel takes any number
/// through sysfs; these refuse what cannot mean anything: a
/// locality-group preallocation and a request lie in one group, at most
/// 32768 blocks of 4 KiB (2^15), and no group has more than 524288 blocks
/// (of 64 KiB), so no stripe is longer. `mb_stream_req` and the scan
/// limits are only capped far above their defaults, to catch a typo.
const MAX_GROUP_PREALLOC: u32 = 32_768;
const MAX_ORDER2_REQ: u32 = 15;
const MAX_STRIPE: u32 = 524_288;
const MAX_STREAM_REQ: u32 = 1 << 20;
const MAX_TO_SCAN: u32 = 1_000_000;

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

    /// Checks what spans several options, once every `-o` list is
    /// applied (so their order does not matter).
    ///
    /// # Errors
    /// A message naming the options that disagree.
    pub fn check(&self) -> Result<(), String> {
        let a = &self.alloc;
        if a.min_to_scan > a.max_to_scan {
            return Err(format!(
                "mount options `mb_min_to_scan={}` and `mb_max_to_scan={}`: the fewest extents to look at exceeds the most",
                a.min_to_scan, a.max_to_scan
            ));
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
        if let Some(done) = apply_alloc(&mut self.alloc, key, value) {
            return done;
        }
        if let Some(done) = apply_readdir(&mut self.readdir, key, value) {
            return done;
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
            "transport" => {
                self.transport = match value {
                    Some("auto") => Transport::Auto,
                    Some("dev") => Transport::Dev,
                    Some("uring") => Transport::Uring,
                    Some("fuser") => Transport::Fuser,
                    _ => return Err("expects auto, dev, uring or fuser".into()),
                };
                Ok(())
            }
            "uring_depth" => match value.and_then(|v| v.parse::<usize>().ok()) {
                Some(n @ 1..=64) => {
                    self.uring_depth = n;
                    Ok(())
                }
                _ => Err("expects a number of ring entries per queue from 1 to 64".into()),
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
            "check" => {
                self.check = match value {
                    None | Some("force") => PreCheck::Full,
                    Some("auto") => PreCheck::Auto,
                    Some("none") => PreCheck::Off,
                    Some("preen") => PreCheck::Preen,
                    _ => return Err("expects auto, force, preen or none".into()),
                };
                Ok(())
            }
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
            // The kernel's journal_dev= (a device number, or MAJ:MIN),
            // resolved to its node.
            "journal_dev" => {
                let (major, minor) = ext4kit_engine::journal::external::parse_device_number(value.unwrap_or(""))
                    .map_err(|e| e.to_string())?;
                let p = ext4kit_engine::journal::external::device_path(major, minor).map_err(|e| e.to_string())?;
                self.journal_path = Some(p);
                Ok(())
            }
            "key" => match value {
                Some(k) if !k.is_empty() => {
                    self.keys.push(k.into());
                    Ok(())
                }
                _ => Err("expects a key file, [DESCRIPTOR=]FILE".into()),
            },
            "journal_path" => match value {
                Some(p) if !p.is_empty() => {
                    self.journal_path = Some(p.into());
                    Ok(())
                }
                _ => Err("expects the journal device's path".into()),
            },
            "fast_commit" => flag(value).map(|()| self.journal.fast_commit = true),
            "nofast_commit" => flag(value).map(|()| self.journal.fast_commit = false),
            "sb" => match value.and_then(|v| v.parse::<u64>().ok()) {
                Some(n) if n > 0 => {
                    self.superblock = Some(n);
                    Ok(())
                }
                _ => Err("expects where the backup superblock is, in 1 KiB units (as the kernel's sb=)".into()),
            },
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

/// Sets the allocation option `key`; `None` when `key` is not one.
fn apply_alloc(a: &mut AllocOptions, key: &str, value: Option<&str>) -> Option<Result<(), String>> {
    let done = match key {
        "alloc" => value
            .ok_or("expects mballoc or ext3".into())
            .and_then(str::parse)
            .map(|b| a.blocks = b),
        "inode_alloc" => value
            .ok_or("expects orlov, flexbg or parent".into())
            .and_then(str::parse)
            .map(|i| a.inodes = i),
        "stripe" => number(value, 0, MAX_STRIPE, "blocks").map(|n| a.stripe = n),
        "mb_optimize_scan" => switch(value).map(|on| a.optimize_scan = Some(on)),
        "mb_inode_prealloc" => switch(value).map(|on| a.inode_prealloc = on),
        "mb_flex_aware" => switch(value).map(|on| a.flex_aware = on),
        "mb_stream_req" => number(value, 0, MAX_STREAM_REQ, "blocks").map(|n| a.stream_req = n),
        "mb_group_prealloc" => number(value, 1, MAX_GROUP_PREALLOC, "blocks").map(|n| a.group_prealloc = n),
        "mb_order2_req" => number(value, 0, MAX_ORDER2_REQ, "an order").map(|n| a.order2_req = n),
        "mb_max_to_scan" => number(value, 0, MAX_TO_SCAN, "extents").map(|n| a.max_to_scan = n),
        "mb_min_to_scan" => number(value, 0, MAX_TO_SCAN, "extents").map(|n| a.min_to_scan = n),
        "delalloc" | "nodelalloc" | "auto_da_alloc" | "noauto_da_alloc" => match value {
            Some(_) => Err("takes no value".to_string()),
            None => {
                let on = !key.starts_with("no");
                if key.ends_with("delalloc") {
                    a.delalloc = on;
                } else {
                    a.auto_da_alloc = on;
                }
                Ok(())
            }
        },
        _ => return None,
    };
    Some(done)
}

/// Most entries `readdir_snapshot=` allows: 100 million entries make a
/// snapshot of several GiB, past which hash order is the sane choice.
const MAX_SNAPSHOT: u32 = 100_000_000;

/// Sets the listing option `key`; `None` when `key` is not one.
fn apply_readdir(r: &mut ReadDirOptions, key: &str, value: Option<&str>) -> Option<Result<(), String>> {
    let done = match key {
        "readdir" => value
            .ok_or("expects hash or inode".into())
            .and_then(str::parse)
            .map(|o| r.order = o),
        "readdir_snapshot" => number(value, 0, MAX_SNAPSHOT, "entries").map(|n| r.snapshot_limit = n as usize),
        _ => return None,
    };
    Some(done)
}

/// A whole number from `lo` to `hi`.
fn number(value: Option<&str>, lo: u32, hi: u32, what: &str) -> Result<u32, String> {
    value
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| (lo..=hi).contains(n))
        .ok_or_else(|| format!("expects {what} from {lo} to {hi}"))
}

/// `0` or `1`, as the kernel's sysfs switches take.
fn switch(value: Option<&str>) -> Result<bool, String> {
    match value {
        Some("0") => Ok(false),
        Some("1") => Ok(true),
        _ => Err("expects 0 or 1".into()),
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
    use ext4kit_engine::{BlockAllocator, InodeAllocator};

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
        assert!(c.journal.fast_commit);
        c.apply("nofast_commit").unwrap();
        assert!(!c.journal.fast_commit);
        c.apply("fast_commit").unwrap();
        assert!(c.journal.fast_commit);
        c.apply("sb=131072").unwrap();
        assert_eq!(c.superblock, Some(131_072));
        assert!(c.apply("sb=x").is_err() && c.apply("sb").is_err());
        c.apply("commit=0").unwrap();
        assert_eq!(c.commit, DEFAULT_COMMIT);
        assert_eq!(c.poll, DEFAULT_POLL);
        c.apply("poll=0").unwrap();
        assert!(c.poll.is_zero());
        c.apply("poll=250").unwrap();
        assert_eq!(c.poll, Duration::from_micros(250));
        assert_eq!(c.cpu_latency, CpuLatencyMode::Auto);
        c.apply("transport=fuser").unwrap();
        assert_eq!(c.transport, Transport::Fuser);
        c.apply("transport=uring").unwrap();
        assert_eq!(c.uring_depth, DEFAULT_URING_DEPTH);
        c.apply("uring_depth=8").unwrap();
        assert_eq!(c.uring_depth, 8);
        assert!(c.clone().apply("uring_depth=0").is_err());
        assert!(c.clone().apply("uring_depth=65").is_err());
        assert_eq!(c.transport, Transport::Uring);
        assert!(c.apply("transport=ring").is_err());
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
    fn readdir_order_and_snapshot_limit() {
        use ext4kit_engine::dir::{DEFAULT_SNAPSHOT_LIMIT, ReadDirOrder};
        let mut c = MountConfig::default();
        assert_eq!(c.readdir.order, ReadDirOrder::Hash, "the kernel's order by default");
        assert_eq!(c.readdir.snapshot_limit, DEFAULT_SNAPSHOT_LIMIT);
        c.apply("readdir=inode,readdir_snapshot=5000").unwrap();
        assert_eq!(c.readdir.order, ReadDirOrder::Inode);
        assert_eq!(c.readdir.snapshot_limit, 5000);
        let e = MountConfig::default().apply("readdir=name").unwrap_err();
        assert!(e.contains("readdir=name") && e.contains("hash or inode"), "{e}");
        assert!(MountConfig::default().apply("readdir_snapshot=many").is_err());
        assert!(MountConfig::default().apply("readdir").is_err());
    }

    #[test]
    fn delalloc_switches_like_ext4() {
        let mut c = MountConfig::default();
        assert!(c.alloc.delalloc && c.alloc.auto_da_alloc, "ext4's defaults");
        c.apply("nodelalloc,noauto_da_alloc").unwrap();
        assert!(!c.alloc.delalloc && !c.alloc.auto_da_alloc);
        c.apply("delalloc,auto_da_alloc").unwrap();
        assert!(c.alloc.delalloc && c.alloc.auto_da_alloc);
        assert!(c.apply("delalloc=1").unwrap_err().contains("no value"));
    }

    #[test]
    fn refuses_unsupported_and_unknown_options_by_name() {
        for opt in ["dax", "usrquota"] {
            let e = MountConfig::default().apply(&format!("rw,{opt}")).unwrap_err();
            assert!(e.contains(opt) && e.contains("not supported yet"), "{e}");
        }
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
    fn allocation_options_default_to_the_kernels() {
        let c = MountConfig::default();
        assert_eq!(c.alloc, AllocOptions::default());
        assert_eq!(c.alloc.blocks, BlockAllocator::Mballoc);
        assert_eq!(c.alloc.inodes, InodeAllocator::Orlov);
        assert_eq!(c.alloc.optimize_scan, None);
        c.check().unwrap();
    }

    #[test]
    fn parses_allocation_options() {
        let mut c = MountConfig::default();
        c.apply("alloc=ext3,inode_alloc=flexbg,stripe=16,mb_optimize_scan=0,mb_inode_prealloc=0,mb_flex_aware=1")
            .unwrap();
        c.apply("mb_stream_req=32,mb_group_prealloc=1024,mb_order2_req=3,mb_max_to_scan=400,mb_min_to_scan=20")
            .unwrap();
        c.check().unwrap();
        assert_eq!(
            c.alloc,
            AllocOptions {
                blocks: BlockAllocator::Ext3,
                inodes: InodeAllocator::FlexBg,
                stream_req: 32,
                group_prealloc: 1024,
                inode_prealloc: false,
                optimize_scan: Some(false),
                stripe: 16,
                order2_req: 3,
                max_to_scan: 400,
                min_to_scan: 20,
                flex_aware: true,
                ..AllocOptions::default()
            }
        );
        c.apply("alloc=mballoc,inode_alloc=parent,mb_optimize_scan=1,mb_inode_prealloc=1,stripe=0")
            .unwrap();
        assert_eq!(c.alloc.blocks, BlockAllocator::Mballoc);
        assert_eq!(c.alloc.inodes, InodeAllocator::Parent);
        assert_eq!(c.alloc.optimize_scan, Some(true));
        assert!(c.alloc.inode_prealloc);
        assert_eq!(c.alloc.stripe, 0);
    }

    #[test]
    fn refuses_allocation_values_out_of_range_by_name() {
        let refused = |list: &str, why: &str| {
            let e = MountConfig::default().apply(list).unwrap_err();
            assert!(e.contains(list) && e.contains(why), "{list}: {e}");
        };
        refused("alloc=buddy", "mballoc, ext3");
        refused("alloc", "mballoc or ext3");
        refused("inode_alloc=spread", "orlov, flexbg, parent");
        refused("mb_group_prealloc=0", "from 1 to 32768");
        refused("mb_group_prealloc=32769", "from 1 to 32768");
        refused("mb_order2_req=16", "from 0 to 15");
        refused("stripe=-1", "blocks from 0");
        refused("stripe=524289", "to 524288");
        refused("mb_stream_req=many", "blocks from 0");
        refused("mb_max_to_scan=1000001", "extents from 0");
        refused("mb_min_to_scan", "extents from 0");
        refused("mb_optimize_scan=yes", "0 or 1");
        refused("mb_inode_prealloc=2", "0 or 1");
        refused("mb_flex_aware=on", "0 or 1");
        MountConfig::default()
            .apply("mb_group_prealloc=32768,mb_order2_req=15")
            .unwrap();
    }

    #[test]
    fn scan_limits_are_checked_together_whatever_their_order() {
        let mut c = MountConfig::default();
        c.apply("mb_min_to_scan=300").unwrap();
        let e = c.check().unwrap_err();
        assert!(
            e.contains("mb_min_to_scan=300") && e.contains("mb_max_to_scan=200"),
            "{e}"
        );
        c.apply("mb_max_to_scan=500").unwrap();
        c.check().unwrap();
        c.apply("mb_max_to_scan=0").unwrap();
        assert!(c.check().is_err());
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
