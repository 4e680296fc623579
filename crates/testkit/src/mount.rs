//! Kernel loop mounts with RAII unmounting.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::tools;

/// Says whether this process can loop-mount ext2/3/4 images, and why not:
/// not root, no loop device, no ext4 in `/proc/filesystems`, or no
/// `mount`/`umount` tool. Tests print `SKIPPED: <reason>` on `Err`.
pub fn can_loop_mount() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("loop mounts need root (run the tests as root)".into());
    }
    if !Path::new("/dev/loop-control").exists() && !Path::new("/dev/loop0").exists() {
        return Err("no loop device (/dev/loop-control and /dev/loop0 are missing)".into());
    }
    let fss =
        std::fs::read_to_string("/proc/filesystems").map_err(|e| format!("cannot read /proc/filesystems: {e}"))?;
    if !fss.lines().any(|l| l.split_whitespace().last() == Some("ext4")) {
        return Err("the kernel has no ext4 (not in /proc/filesystems)".into());
    }
    tools::require_tools(&["mount", "umount"])
}

/// The last ext2/3/4 complaint in the kernel log (e.g. `EXT4-fs (loop0): bad
/// block size 65536`), if `dmesg` is readable.
pub fn kernel_reason() -> Option<String> {
    let out = tools::run("dmesg", &["--notime"]).ok()?;
    out.stdout
        .lines()
        .rev()
        .take(50)
        .find(|l| {
            (l.contains("EXT4-fs") || l.contains("EXT2-fs") || l.contains("EXT3-fs"))
                && !l.contains("unmounting")
                && !l.contains("mounted filesystem")
        })
        .map(|l| l.trim().to_string())
}

/// An image mounted through a loop device on a private temporary directory;
/// unmounted (with retries, lazily as a last resort) when dropped.
#[derive(Debug)]
pub struct LoopMount {
    dir: Option<tempfile::TempDir>,
    image: PathBuf,
    mounted: bool,
}

impl LoopMount {
    /// Mounts `image` read-only (`mount -o loop,ro`).
    pub fn ro(image: &Path) -> io::Result<LoopMount> {
        Self::mount(image, None, &["ro"])
    }

    /// Mounts `image` read-write; `extra` are additional `-o` options.
    /// `noinit_itable` is always added so that the lazy inode-table zeroing
    /// thread does not keep the file system busy.
    pub fn rw(image: &Path, extra: &[&str]) -> io::Result<LoopMount> {
        let mut opts = vec!["rw"];
        opts.extend_from_slice(extra);
        Self::mount(image, None, &opts)
    }

    /// Mounts `image` with `-o loop,OPTS` and, when given, `-t FSTYPE`
    /// (otherwise mount detects the type).
    pub fn mount(image: &Path, fstype: Option<&str>, opts: &[&str]) -> io::Result<LoopMount> {
        let dir = tempfile::Builder::new().prefix("ext4kit-mnt-").tempdir()?;
        let mut o = String::from("loop");
        for opt in opts {
            o.push(',');
            o.push_str(opt);
        }
        let rw = opts.contains(&"rw");
        let is_ext4ish = fstype.is_none_or(|t| t == "ext4");
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        if let Some(t) = fstype {
            args.push("-t".into());
            args.push(t.into());
        }
        args.push("-o".into());
        let mut with_noinit = o.clone();
        if rw && is_ext4ish {
            with_noinit.push_str(",noinit_itable");
        }
        args.push(with_noinit.into());
        args.push(image.into());
        args.push(dir.path().into());
        let mut out = tools::run("mount", &args)?;
        if !out.success() && rw && is_ext4ish {
            // ext2/ext3 drivers reject noinit_itable: retry without it.
            let n = args.len();
            args[n - 3] = o.into();
            out = tools::run("mount", &args)?;
        }
        if !out.success() {
            return Err(io::Error::other(format!(
                "mount -o {opts:?} {} failed ({:?}): {}{}",
                image.display(),
                out.code,
                out.combined().split_whitespace().collect::<Vec<_>>().join(" "),
                kernel_reason().map(|r| format!("; kernel: {r}")).unwrap_or_default()
            )));
        }
        Ok(LoopMount {
            dir: Some(dir),
            image: image.to_path_buf(),
            mounted: true,
        })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.as_ref().map(|d| d.path()).unwrap_or(Path::new("/nonexistent"))
    }

    /// The image file behind the mount.
    pub fn image(&self) -> &Path {
        &self.image
    }

    /// The file system type the kernel mounted, from `/proc/self/mounts`
    /// (e.g. `ext4`, or `ext2` when the separate ext2 driver took it).
    pub fn fstype(&self) -> Option<String> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
        let want = self.path().to_string_lossy().into_owned();
        mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[1] == want).then(|| f[2].to_string())
        })
    }

    /// Unmounts now, reporting failure (drop only logs it).
    pub fn unmount(mut self) -> io::Result<()> {
        self.do_unmount()
    }

    fn do_unmount(&mut self) -> io::Result<()> {
        if !self.mounted {
            return Ok(());
        }
        let target = self.path().to_path_buf();
        let mut last = String::new();
        for attempt in 0..8u32 {
            match tools::run("umount", &[target.as_os_str()]) {
                Ok(out) if out.success() => {
                    self.mounted = false;
                    return Ok(());
                }
                Ok(out) => last = out.combined(),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50 << attempt.min(5)));
        }
        // Last resort: detach lazily so the temp dir can go and the loop device
        // is released once the last user is gone.
        let _ = tools::run("umount", &[std::ffi::OsStr::new("-l"), target.as_os_str()]);
        self.mounted = false;
        Err(io::Error::other(format!(
            "umount {} failed: {}",
            target.display(),
            last.trim()
        )))
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if let Err(e) = self.do_unmount() {
            eprintln!("LoopMount: {e}");
        }
        if let Some(d) = self.dir.take() {
            // Never a recursive delete: if the unmount failed, that would wipe
            // the mounted file system. An empty mount point just goes away.
            let _ = std::fs::remove_dir(d.keep());
        }
    }
}
