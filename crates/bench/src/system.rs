//! The host side of a run: finding tools, making and checking images,
//! mount-table look-ups, dropping caches and syncing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::report::FsckOutcome;

/// Directories searched besides `$PATH` (a non-login root shell often lacks
/// the sbin directories where mkfs.ext4 and e2fsck live).
const EXTRA_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// Finds an executable on `$PATH` or in the sbin directories.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Like [`find_tool`], but the error names the missing tool.
pub fn tool(name: &str) -> Result<PathBuf> {
    find_tool(name).with_context(|| format!("`{name}` not found on PATH or in /usr/sbin, /sbin"))
}

/// True when running as root (mounting and dropping caches need it).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Puts a helper (mount, umount, a FUSE server, mkfs, e2fsck) in a process
/// group of its own. Ctrl-C signals the terminal's whole foreground group:
/// a helper in ours would die half-way (a `mount` whose mount then exists
/// with nobody to undo it, a FUSE server gone under its mount) while the
/// run, which only sets its interrupted flag, goes on to clean up after
/// it. Alone in its group, the helper finishes and the run undoes it.
pub fn detached(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0)
}

/// Runs `cmd` ([`detached`] from Ctrl-C), failing with its output when it
/// exits non-zero.
pub fn run_ok(cmd: &mut Command) -> Result<String> {
    let out = detached(cmd).output().with_context(|| format!("cannot run {cmd:?}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("{cmd:?} failed ({}): {}", out.status, text.trim());
    }
    Ok(text)
}

/// The `mkfs.ext4` options every target's image is made with: 4 KiB
/// blocks and the default feature set, inode tables and journal written
/// now so the kernel's lazy-init thread does not run during the kernel's
/// measurements.
pub const MKFS_OPTIONS: &[&str] = &["-q", "-F", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0"];

/// Makes a fresh sparse image of `bytes` bytes at `image`.
pub fn mkfs(image: &Path, bytes: u64) -> Result<()> {
    mkfs_with(image, bytes, &[])
}

/// [`mkfs`] with `extra` options after [`MKFS_OPTIONS`] (e.g.
/// `-O ^has_journal`).
pub fn mkfs_with(image: &Path, bytes: u64, extra: &[&str]) -> Result<()> {
    let _ = std::fs::remove_file(image);
    let f = std::fs::File::create_new(image).with_context(|| format!("cannot create {}", image.display()))?;
    f.set_len(bytes)?;
    drop(f);
    run_ok(
        Command::new(tool("mkfs.ext4")?)
            .args(MKFS_OPTIONS)
            .args(extra)
            .arg(image),
    )?;
    Ok(())
}

/// Runs `e2fsck -fn` (forced, read-only): exit 0 means the image is clean.
pub fn e2fsck(image: &Path) -> Result<FsckOutcome> {
    let out = detached(Command::new(tool("e2fsck")?).arg("-fn").arg(image))
        .output()
        .context("cannot run e2fsck")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(FsckOutcome {
        clean: out.status.success(),
        exit_code: out.status.code(),
        output: text,
    })
}

/// The free extents `e2freefrag` counts on `image`: a second meter beside
/// the engine's own count ([`ext4kit_engine::frag`]), from e2fsprogs.
/// `None` when e2freefrag is not installed.
pub fn e2freefrag_extents(image: &Path) -> Result<Option<u64>> {
    let Some(e2freefrag) = find_tool("e2freefrag") else {
        return Ok(None);
    };
    let text = run_ok(Command::new(e2freefrag).arg(image))?;
    let n = text
        .lines()
        .find_map(|l| l.strip_prefix("Num. free extent:"))
        .with_context(|| format!("e2freefrag printed no \"Num. free extent\" line:\n{text}"))?;
    let n = n
        .trim()
        .parse()
        .with_context(|| format!("e2freefrag's free extent count {n:?}"))?;
    Ok(Some(n))
}

/// True when `dir` is listed as a mount point in /proc/self/mounts.
pub fn is_mounted(dir: &Path) -> bool {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return false;
    };
    std::fs::read_to_string("/proc/self/mounts").is_ok_and(|m| {
        m.lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .any(|p| Path::new(&p.replace("\\040", " ")) == dir)
    })
}

/// Waits until `dir` is a mount point, or fails after `timeout`.
pub fn wait_mounted(dir: &Path, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !is_mounted(dir) {
        if Instant::now() > deadline {
            bail!("{} was not mounted within {} s", dir.display(), timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Writes back everything dirty under `dir`'s file system (`syncfs(2)`).
/// On a FUSE mount this flushes the kernel's dirty pages to the server;
/// the server itself is not asked to make anything durable (only
/// virtiofs gets FUSE_SYNCFS).
pub fn syncfs(dir: &Path) -> Result<()> {
    let d = std::fs::File::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
    nix::unistd::syncfs(&d).with_context(|| format!("syncfs {}", dir.display()))?;
    Ok(())
}

/// Drops the clean page cache, dentries and inodes of every file system
/// (root only): `sync`, then "3" into /proc/sys/vm/drop_caches.
pub fn drop_caches() -> Result<()> {
    nix::unistd::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3").context("cannot write /proc/sys/vm/drop_caches (root only)")
}

/// The running kernel's release, for the report.
pub fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `fstype device` of the mount holding `path` (the longest mount point
/// that is a prefix of it), for the report: a flush means something
/// different on tmpfs than on a disk.
pub fn mount_of(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let dir = PathBuf::from(f.get(1)?.replace("\\040", " "));
            let what = format!("{} {}", f.get(2)?, f.first()?);
            path.starts_with(&dir).then_some((dir, what))
        })
        .max_by_key(|(dir, _)| dir.as_os_str().len())
        .map(|(_, what)| what)
}

/// The 1-minute load average (/proc/loadavg), for the report: other work
/// on the machine skews the times.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
