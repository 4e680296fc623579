//! Shared by the integration tests: the binary, a kernel ext4 image mounted
//! read-write, and a private tmpfs mount.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ext4kit_testkit::image::{FsType, Image, ImageSpec};
use ext4kit_testkit::mount::{self, LoopMount};
use ext4kit_testkit::tools;

/// Runs `ext4kit-posix ARGS`, echoing its output into the test log.
pub fn posix(args: &[&std::ffi::OsStr]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit-posix"))
        .args(args)
        .output()
        .expect("run ext4kit-posix");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// A fresh 4 KiB-block ext4 image of `size` bytes in `dir`, loop-mounted
/// read-write with a 0755 root; `None` (after a loud skip) without root or
/// a loop device.
pub fn kernel_ext4(dir: &Path, size: u64) -> Option<(Image, LoopMount)> {
    tools::skip_unless(mount::can_loop_mount())?;
    tools::skip_unless(tools::require_tools(&["mkfs.ext4", "e2fsck"]))?;
    let spec = ImageSpec::new("posix", FsType::Ext4, size, &["-b", "4096"]);
    let img = Image::empty(&spec, dir).expect("mkfs.ext4");
    let mnt = LoopMount::rw(&img.path, &[]).expect("loop mount rw");
    chmod_755(mnt.path());
    Some((img, mnt))
}

/// `chmod 0755`, so uid 1000 can search the mount root.
pub fn chmod_755(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod mount root");
}

/// A tmpfs mounted on a private directory, unmounted on drop.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a 512 MiB tmpfs; `None` (after a loud skip) without root.
    pub fn mount() -> Option<Tmpfs> {
        if !nix::unistd::geteuid().is_root() {
            ext4kit_testkit::skipped!("mounting a tmpfs needs root");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("ext4kit-tmpfs-")
            .tempdir()
            .expect("tempdir");
        let out = tools::run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                "size=512m,mode=0755",
                "tmpfs",
                dir.path().to_str()?,
            ],
        )
        .expect("run mount");
        if !out.success() {
            ext4kit_testkit::skipped!("cannot mount tmpfs: {}", out.combined());
            return None;
        }
        Some(Tmpfs { dir })
    }

    /// The mount point.
    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = tools::run("umount", &[self.dir.path()]);
    }
}

/// The `FAIL` and `SKIP` lines of a suite run.
pub fn lines_starting(out: &Output, prefix: &str) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_string)
        .collect()
}
