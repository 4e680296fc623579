//! Small helpers shared by the checks: the failure type, errno assertions
//! and file shortcuts. Everything here works on any mounted directory.

use std::fmt::Display;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::errno::Errno;

/// Why a check did not pass: a real failure, or a loud skip (the file system
/// or the machine lacks what the check needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The behaviour differs from what Linux file systems must do.
    Fail(String),
    /// The check could not run; the text says why.
    Skip(String),
}

/// What every check returns.
pub type CheckResult = Result<(), Failure>;

/// Turns any error into a failure with the name of the step that failed.
pub trait At<T> {
    /// `Err(e)` becomes `Failure::Fail("what: e")`.
    fn at(self, what: &str) -> Result<T, Failure>;
}

impl<T, E: Display> At<T> for Result<T, E> {
    fn at(self, what: &str) -> Result<T, Failure> {
        self.map_err(|e| Failure::Fail(format!("{what}: {e}")))
    }
}

/// Returns early with a failure built like `format!`.
#[macro_export]
macro_rules! fail {
    ($($arg:tt)*) => { return Err($crate::util::Failure::Fail(format!($($arg)*))) };
}

/// Fails the check unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => { if !$cond { $crate::fail!($($arg)*) } };
}

/// Anything that may carry an errno: `io::Error`, `nix::Errno`, `rustix::io::Errno`.
pub trait ToErrno {
    /// The errno, if this error has one.
    fn errno(&self) -> Option<Errno>;
}

impl ToErrno for io::Error {
    fn errno(&self) -> Option<Errno> {
        self.raw_os_error().map(Errno::from_raw)
    }
}

impl ToErrno for Errno {
    fn errno(&self) -> Option<Errno> {
        Some(*self)
    }
}

impl ToErrno for rustix::io::Errno {
    fn errno(&self) -> Option<Errno> {
        Some(Errno::from_raw(self.raw_os_error()))
    }
}

/// Passes when `r` failed with one of `want`; fails (naming `what`) otherwise.
pub fn expect_errno<T, E: ToErrno + Display>(r: Result<T, E>, want: &[Errno], what: &str) -> CheckResult {
    match r {
        Ok(_) => fail!("{what}: succeeded, wanted {}", names(want)),
        Err(e) => match e.errno() {
            Some(got) if want.contains(&got) => Ok(()),
            _ => fail!("{what}: got `{e}`, wanted {}", names(want)),
        },
    }
}

fn names(errs: &[Errno]) -> String {
    errs.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>().join(" or ")
}

/// True when `e` means "this file system does not do that".
pub fn unsupported(e: Errno) -> bool {
    matches!(e, Errno::EOPNOTSUPP | Errno::ENOTTY | Errno::ENOSYS | Errno::EINVAL)
}

/// Opens with explicit `O_*` flags (beyond read/write/create) and mode 0644.
pub fn open_flags(path: &Path, read: bool, write: bool, flags: i32) -> io::Result<File> {
    OpenOptions::new()
        .read(read)
        .write(write)
        .custom_flags(flags)
        .mode(0o644)
        .open(path)
}

/// Creates (or truncates) `path` with `data`.
pub fn write_file(path: &Path, data: &[u8]) -> Result<(), Failure> {
    std::fs::write(path, data).at(&format!("write {}", path.display()))
}

/// Reads the whole of `path`.
pub fn read_file(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).at(&format!("read {}", path.display()))
}

/// `lstat` through std.
pub fn lstat(path: &Path) -> Result<std::fs::Metadata, Failure> {
    std::fs::symlink_metadata(path).at(&format!("lstat {}", path.display()))
}

/// A deterministic byte pattern, different for each `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32 * 7) as u8 ^ (i >> 9) as u8)
        .collect()
}

/// Whether the file system under `dir` keeps only whole seconds (e.g.
/// ext4 with 128-byte inodes): a nanosecond time set on a probe file reads
/// back with 0 ns. Measured once per process.
pub fn whole_second_times(dir: &Path) -> bool {
    static COARSE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *COARSE.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        let p = dir.join(".ext4kit-posix-granularity");
        let t = nix::sys::time::TimeSpec::new(1_000_000_000, 123_456_789);
        let ok = std::fs::write(&p, b"").is_ok()
            && nix::sys::stat::utimensat(
                nix::fcntl::AT_FDCWD,
                &p,
                &t,
                &t,
                nix::sys::stat::UtimensatFlags::FollowSymlink,
            )
            .is_ok();
        let coarse = ok && std::fs::metadata(&p).is_ok_and(|m| m.mtime_nsec() == 0);
        let _ = std::fs::remove_file(&p);
        coarse
    })
}

/// Sleeps long enough for the file system's timestamps to move on: a
/// coarse kernel clock tick, or just over a second when only whole seconds
/// are stored.
pub fn tick(dir: &Path) {
    let ms = if whole_second_times(dir) { 1100 } else { 15 };
    std::thread::sleep(std::time::Duration::from_millis(ms));
}
