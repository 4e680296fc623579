//! The three ways `hugedir` reaches an image: the engine in this process,
//! `ext4kit mount` (a FUSE server started as a child, so its peak RSS can
//! be read), and the kernel through a loop mount. Every target gets the
//! same kind of image from `mkfs.ext4`, sparse, with inodes for the run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::ops::{HostOps, HugeOps, LibraryOps};
use crate::system::{self, run_ok, tool};

/// Where the run's files go inside the image's root.
pub const DIR: &str = "hugedir";

/// Which front end a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The engine's library API, in this process.
    Library,
    /// `ext4kit mount`, through system calls.
    Mount,
    /// Kernel ext4 on a loop device, through system calls.
    Kernel,
}

impl Kind {
    /// Every kind, in the order a run goes through them.
    pub const ALL: [Kind; 3] = [Kind::Library, Kind::Mount, Kind::Kernel];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Library => "library",
            Kind::Mount => "mount",
            Kind::Kernel => "kernel",
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown target {s}: expected library, mount or kernel"))
    }
}

/// Makes a sparse ext4 image at `image` for `entries` empty files in one
/// directory with blocks of `block_size`: `-N` with room to spare, enough
/// groups to hold that many inodes (a group has at most 8 × block size of
/// them), and `large_dir` so the htree may take a third level.
pub fn make_image(image: &Path, entries: u64, block_size: u32) -> Result<()> {
    let bs = u64::from(block_size);
    let inodes = entries + entries / 20 + 1024;
    let groups = inodes.div_ceil(8 * bs) + 2;
    let bytes = (groups * 8 * bs * bs).max(1 << 30);
    let _ = std::fs::remove_file(image);
    let f = std::fs::File::create_new(image).with_context(|| format!("cannot create {}", image.display()))?;
    f.set_len(bytes)?;
    drop(f);
    run_ok(
        Command::new(tool("mkfs.ext4")?)
            .args(["-q", "-F", "-t", "ext4", "-O", "large_dir"])
            .args(["-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .args(["-b", &block_size.to_string(), "-N", &inodes.to_string()])
            .arg(image),
    )?;
    Ok(())
}

/// An open target: its operations, and how to close it.
pub struct Opened {
    /// The operations on its directory.
    pub ops: Box<dyn HugeOps>,
    /// `None` once closed.
    how: Option<How>,
}

enum How {
    Library,
    Mount { child: Child, mnt: PathBuf, exe: PathBuf },
    Kernel { mnt: PathBuf },
}

impl Opened {
    /// Opens `image` as `kind`, mounting at `mnt` where it mounts; makes the
    /// run's directory when `fresh`.
    pub fn open(kind: Kind, image: &Path, mnt: &Path, cfg: &super::Config, fresh: bool) -> Result<Self> {
        let exe = &cfg.ext4kit_exe;
        if kind == Kind::Library {
            let ops = LibraryOps::open(image, DIR, fresh, cfg.cache_bytes)?;
            return Ok(Self {
                ops: Box::new(ops),
                how: Some(How::Library),
            });
        }
        let how = if kind == Kind::Mount {
            let child = system::detached(&mut Command::new(exe))
                .arg("mount")
                .arg(image)
                .arg(mnt)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .context("cannot start ext4kit mount")?;
            let how = How::Mount {
                child,
                mnt: mnt.to_path_buf(),
                exe: exe.to_path_buf(),
            };
            system::wait_mounted(mnt, Duration::from_secs(30))?;
            how
        } else {
            run_ok(
                Command::new(tool("mount")?)
                    .args(["-t", "ext4", "-o", "loop"])
                    .arg(image)
                    .arg(mnt),
            )?;
            How::Kernel { mnt: mnt.to_path_buf() }
        };
        let dir = mnt.join(DIR);
        if fresh {
            std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        }
        Ok(Self {
            ops: Box::new(HostOps::new(&dir)),
            how: Some(how),
        })
    }

    /// A `kB` field (`VmRSS:`, `VmHWM:`) of the process serving the file
    /// system: this one for the library, the FUSE server for the mount;
    /// `None` for the kernel, whose memory is no process's.
    pub fn status_kib(&self, field: &str) -> Option<u64> {
        match self.how.as_ref()? {
            How::Library => status_kib("self", field),
            How::Mount { child, .. } => status_kib(&child.id().to_string(), field),
            How::Kernel { .. } => None,
        }
    }

    /// Unmounts (the FUSE server has written the image once it exits).
    pub fn close(mut self) -> Result<()> {
        let ops = std::mem::replace(&mut self.ops, Box::new(HostOps::new(Path::new("/"))));
        match self.how.take() {
            None => Ok(()),
            Some(How::Library) => ops.finish(),
            Some(How::Mount { mut child, mnt, exe }) => {
                ops.finish()?;
                run_ok(Command::new(exe).arg("umount").arg(&mnt))?;
                wait_exit(&mut child)
            }
            Some(How::Kernel { mnt }) => {
                ops.finish()?;
                run_ok(Command::new(tool("umount")?).arg(&mnt)).map(drop)
            }
        }
    }
}

impl Drop for Opened {
    /// A run that failed must not leave a mount behind (its directory is
    /// removed next): detach it lazily and stop the FUSE server.
    fn drop(&mut self) {
        match self.how.take() {
            Some(How::Mount { mut child, mnt, .. }) => {
                let _ = Command::new("umount").arg("-l").arg(&mnt).status();
                let _ = child.kill();
                let _ = child.wait();
            }
            Some(How::Kernel { mnt }) => {
                let _ = Command::new("umount").arg("-l").arg(&mnt).status();
            }
            Some(How::Library) | None => {}
        }
    }
}

fn wait_exit(child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("ext4kit mount exited with {status} after unmounting");
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("ext4kit mount still running 600 s after unmounting");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `kB` field of `/proc/PID/status`.
pub fn status_kib(pid: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// Starts this process's peak RSS over (`/proc/self/clear_refs`, "5"), so
/// the library target's figure is its own, not an earlier target's.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
