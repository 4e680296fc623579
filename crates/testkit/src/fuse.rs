//! `ext4kit mount` as a test fixture: [`FuseMount`] starts the server in the
//! foreground as a child process, waits until the kernel lists the mount,
//! and on [`FuseMount::unmount`] (or drop) unmounts and waits for the
//! server to exit, so the image is complete afterwards.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Says whether this process can serve FUSE mounts: root (FUSE mounts as
/// another user need `fusermount3` and `user_allow_other`) and `/dev/fuse`.
pub fn can_fuse_mount() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("FUSE mount tests run as root (mount(2) on /dev/fuse)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse (modprobe fuse)".into());
    }
    Ok(())
}

/// True when FUSE mounts can be served and `tool` (an e2fsprogs program
/// the test needs) is installed; otherwise records a skip naming why, and
/// fails under CI, which must run these tests.
pub fn ready_with(tool: &str) -> bool {
    let check = can_fuse_mount().and_then(|()| crate::tools::require_tool(tool).map(|_| ()));
    if let Err(why) = check {
        crate::skipped!("{why}");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root with /dev/fuse and e2fsprogs: {why}"
        );
        return false;
    }
    true
}

/// `options` plus `transport=$EXT4KIT_TEST_TRANSPORT` when that is set
/// and `options` name no transport.
pub fn with_test_transport(options: &str) -> String {
    let forced = std::env::var("EXT4KIT_TEST_TRANSPORT").unwrap_or_default();
    if forced.is_empty() || options.split(',').any(|o| o.starts_with("transport=")) {
        return options.to_string();
    }
    if options.is_empty() {
        format!("transport={forced}")
    } else {
        format!("{options},transport={forced}")
    }
}

/// True when `dir` is a mount point listed in /proc/mounts.
pub fn is_mounted(dir: &Path) -> bool {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return false;
    };
    std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .any(|p| Path::new(&p.replace("\\040", " ")) == dir)
    })
}

/// A running `ext4kit mount` on a private temporary directory.
#[derive(Debug)]
pub struct FuseMount {
    exe: PathBuf,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl FuseMount {
    /// Serves `image` with `-o options` (may be empty) using the `ext4kit`
    /// binary `exe`; returns once mounted.
    ///
    /// # Errors
    /// The server exits early (its stderr is in the message) or does not
    /// mount within 30 s.
    ///
    /// `EXT4KIT_TEST_TRANSPORT=dev|uring|…` adds `transport=` to options
    /// that name none, so that the whole mount suite runs on each
    /// transport (see `scripts/test.sh`).
    pub fn start(exe: &Path, image: &Path, options: &str) -> io::Result<FuseMount> {
        let dir = tempfile::Builder::new().prefix("ext4kit-fuse-").tempdir()?;
        let mut cmd = Command::new(exe);
        cmd.arg("mount").arg(image).arg(dir.path());
        let options = with_test_transport(options);
        if !options.is_empty() {
            cmd.arg("-o").arg(options);
        }
        let mut child = cmd.stdin(Stdio::null()).stderr(Stdio::piped()).spawn()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !is_mounted(dir.path()) {
            if let Some(status) = child.try_wait()? {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                return Err(io::Error::other(format!("ext4kit mount exited ({status}): {err}")));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(io::Error::other("ext4kit mount did not mount within 30 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(FuseMount {
            exe: exe.to_path_buf(),
            dir,
            child: Some(child),
        })
    }

    /// The server's process ID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Unmounts with `ext4kit umount` and waits for the server; returns its
    /// exit status (success means it closed the image cleanly).
    ///
    /// # Errors
    /// `ext4kit umount` fails, or the server does not exit within 120 s.
    pub fn unmount(mut self) -> io::Result<ExitStatus> {
        self.finish()
    }

    fn finish(&mut self) -> io::Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            return Err(io::Error::other("already unmounted"));
        };
        let out = Command::new(&self.exe).arg("umount").arg(self.dir.path()).output()?;
        if !out.status.success() {
            let _ = child.kill();
            return Err(io::Error::other(format!(
                "ext4kit umount: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        wait_exit(&mut child)
    }

    /// Sends `signal` (e.g. `SIGTERM`) to the server and waits for it.
    ///
    /// # Errors
    /// The signal cannot be sent or the server does not exit within 120 s.
    pub fn signal_and_wait(mut self, signal: rustix::process::Signal) -> io::Result<ExitStatus> {
        let mut child = self.child.take().ok_or_else(|| io::Error::other("already unmounted"))?;
        let pid = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(pid, signal)?;
        wait_exit(&mut child)
    }
}

impl FuseMount {
    /// Waits for the server to exit on its own (after the mount was
    /// unmounted some other way, e.g. lazily).
    ///
    /// # Errors
    /// The server does not exit within 120 s.
    pub fn wait(mut self) -> io::Result<ExitStatus> {
        let mut child = self.child.take().ok_or_else(|| io::Error::other("already unmounted"))?;
        wait_exit(&mut child)
    }
}

/// Waits up to 120 s for the server to exit (killing it after that).
fn wait_exit(child: &mut Child) -> io::Result<ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(io::Error::other("the server did not exit within 120 s"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.finish();
        }
    }
}
