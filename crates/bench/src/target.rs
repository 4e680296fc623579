//! One target's run: fresh image, mount, workloads (the suite's, through
//! [`crate::mount_suite`]), unmount, `e2fsck -fn`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::config::{Config, Target, TargetRun};
use crate::fuse_trace::Tracer;
use crate::report::{TargetReport, WorkloadResult};
use crate::system::{self, find_tool, run_ok, tool};
use crate::{log, mount_suite};

/// How long a mount or a server's exit after unmounting may take.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(60);
const EXIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Says why `t` cannot run here (a missing tool, not root, no /dev/fuse),
/// or `Ok` when it can.
pub fn availability(cfg: &Config, t: Target) -> Result<(), String> {
    if !system::is_root() {
        return Err("not root: mounting and dropping caches need root".into());
    }
    for name in ["mkfs.ext4", "e2fsck"] {
        find_tool(name).ok_or(format!("`{name}` not found (Debian package e2fsprogs)"))?;
    }
    let fuse = || {
        Path::new("/dev/fuse")
            .exists()
            .then_some(())
            .ok_or("no /dev/fuse (modprobe fuse)".to_string())
    };
    match t {
        Target::Kernel => {
            for name in ["mount", "umount"] {
                find_tool(name).ok_or(format!("`{name}` not found (util-linux)"))?;
            }
            let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
            if !fs.lines().any(|l| l.split_whitespace().last() == Some("ext4")) {
                return Err("the kernel lists no ext4 in /proc/filesystems".into());
            }
            Ok(())
        }
        Target::Fuse2fs => {
            find_tool("fuse2fs").ok_or("`fuse2fs` not found (Debian package fuse2fs)")?;
            fuse()
        }
        Target::Ext4kit => {
            if !cfg.ext4kit_exe.is_file() {
                return Err(format!("no ext4kit executable at {}", cfg.ext4kit_exe.display()));
            }
            fuse()
        }
    }
}

/// Runs every selected workload on a fresh image mounted by `run`; all
/// failures end up in the returned report. Once `interrupted` is set the
/// running workload fails, no other starts, and the target is unmounted
/// and checked as usual. With a `tracer`, every workload on a FUSE target
/// is profiled.
pub fn run_target(
    cfg: &Config,
    run: &TargetRun,
    work: &Path,
    interrupted: &Arc<AtomicBool>,
    tracer: Option<&Tracer>,
) -> TargetReport {
    let mut r = TargetReport::new(run);
    let t = &run.label;
    if let Err(why) = availability(cfg, run.target) {
        eprintln!("SKIPPED: target {t}: {why}");
        r.skipped = Some(why);
        return r;
    }
    let tracer = tracer.filter(|_| run.target != Target::Kernel);
    if let Err(e) = run_mounted(cfg, run, work, interrupted, tracer, &mut r) {
        log(&format!("{t}: FAILED: {e:#}"));
        r.error = Some(format!("{e:#}"));
    }
    r
}

/// `label` as a file name: letters, digits, `-` and `_` kept, the rest `_`.
fn file_name(label: &str) -> String {
    label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .collect()
}

fn run_mounted(
    cfg: &Config,
    run: &TargetRun,
    work: &Path,
    interrupted: &Arc<AtomicBool>,
    tracer: Option<&Tracer>,
    r: &mut TargetReport,
) -> Result<()> {
    let t = &run.label;
    let image = work.join(format!("{}.ext4", file_name(t)));
    let mnt = work.join(format!("{}.mnt", file_name(t)));
    std::fs::create_dir_all(&mnt)?;
    log(&format!("{t}: mkfs.ext4 {}", image.display()));
    system::mkfs(&image, cfg.sizes().image_bytes)?;
    let started = Instant::now();
    let mut mounted = Mounted::mount(cfg, run, &image, &mnt, work)?;
    r.mount_s = started.elapsed().as_secs_f64();
    log(&format!("{t}: mounted at {} in {:.2} s", mnt.display(), r.mount_s));
    let mut runner = mount_suite::Runner::new(&mnt, cfg.sizes(), interrupted.clone()).with_tracer(tracer);
    for &w in &cfg.workloads {
        if interrupted.load(Ordering::Relaxed) {
            r.error = Some("interrupted".into());
            break;
        }
        log(&format!("{t}: {w} …"));
        let result = runner.run(w).and_then(|m| system::syncfs(&mnt).map(|()| m));
        let result = WorkloadResult::from_result(w, result);
        log(&format!("{t}: {}", result.summary()));
        r.workloads.push(result);
    }
    let started = Instant::now();
    let unmounted = mounted.unmount();
    drop(mounted);
    r.umount_s = started.elapsed().as_secs_f64();
    unmounted?;
    log(&format!("{t}: unmounted in {:.2} s; e2fsck -fn", r.umount_s));
    let fsck = system::e2fsck(&image)?;
    if fsck.clean {
        std::fs::remove_file(&image)?;
    } else {
        r.kept_image = Some(keep_dirty_image(cfg, &file_name(t), &image)?);
        log(&format!("{t}: e2fsck -fn found errors:\n{}", fsck.output));
    }
    r.fsck = Some(fsck);
    Ok(())
}

/// Moves a dirty image out of the temporary directory so it can be examined.
fn keep_dirty_image(cfg: &Config, t: &str, image: &Path) -> Result<PathBuf> {
    let base = cfg.dir.clone().unwrap_or_else(|| PathBuf::from("/var/tmp"));
    let kept = base.join(format!("ext4kit-bench-{t}-{}.dirty.ext4", std::process::id()));
    std::fs::rename(image, &kept)?;
    Ok(kept)
}

/// A mounted target, to be unmounted with [`Mounted::unmount`] (which also
/// waits until the server has finished writing the image).
struct Mounted {
    kind: Kind,
    mnt: PathBuf,
}

enum Kind {
    Kernel,
    Fuse2fs(Child),
    Ext4kit(PathBuf),
    Gone,
}

impl Mounted {
    /// Mounts `image` at `mnt`. When this fails, whatever got mounted is
    /// detached: a helper can fail after its mount took effect.
    fn mount(cfg: &Config, run: &TargetRun, image: &Path, mnt: &Path, work: &Path) -> Result<Mounted> {
        match Self::start(cfg, run, image, mnt, work) {
            Ok(kind) => Ok(Mounted {
                kind,
                mnt: mnt.to_path_buf(),
            }),
            Err(e) => {
                detach_if_mounted(mnt);
                Err(e)
            }
        }
    }

    fn start(cfg: &Config, run: &TargetRun, image: &Path, mnt: &Path, work: &Path) -> Result<Kind> {
        Ok(match run.target {
            Target::Kernel => {
                run_ok(Command::new(tool("mount")?).args(["-o", "loop"]).arg(image).arg(mnt))?;
                Kind::Kernel
            }
            Target::Fuse2fs => {
                // Foreground (-f) as our child, so that after unmounting we
                // can wait for it to exit, i.e. to have flushed the image.
                let log_path = work.join("fuse2fs.log");
                let log = File::create(&log_path)?;
                let mut child = system::detached(&mut Command::new(tool("fuse2fs")?))
                    .arg(image)
                    .arg(mnt)
                    .args(["-f", "-o", "allow_other"])
                    .stdin(Stdio::null())
                    .stdout(log.try_clone()?)
                    .stderr(log)
                    .spawn()
                    .context("cannot start fuse2fs")?;
                wait_server_mounted(&mut child, mnt, &log_path)?;
                Kind::Fuse2fs(child)
            }
            Target::Ext4kit => {
                run_ok(
                    Command::new(&cfg.ext4kit_exe)
                        .arg("mount")
                        .arg(image)
                        .arg(mnt)
                        .args(["-d", "-o"])
                        .arg(match &run.options {
                            Some(more) => format!("allow_other,{more}"),
                            None => "allow_other".into(),
                        })
                        .env("EXT4KIT_LOG_FILE", work.join("ext4kit.log"))
                        .stdin(Stdio::null()),
                )?;
                system::wait_mounted(mnt, MOUNT_TIMEOUT)?;
                Kind::Ext4kit(cfg.ext4kit_exe.clone())
            }
        })
    }

    fn unmount(&mut self) -> Result<()> {
        let mnt = self.mnt.clone();
        match std::mem::replace(&mut self.kind, Kind::Gone) {
            Kind::Kernel => {
                run_ok(Command::new(tool("umount")?).arg(&mnt))?;
            }
            Kind::Fuse2fs(mut child) => {
                let r = run_ok(Command::new(tool("umount")?).arg(&mnt));
                if r.is_err() {
                    self.kind = Kind::Fuse2fs(child);
                    r?;
                } else {
                    wait_exit(&mut child, "fuse2fs")?;
                }
            }
            Kind::Ext4kit(exe) => {
                let r = run_ok(Command::new(&exe).arg("umount").arg(&mnt));
                if r.is_err() {
                    self.kind = Kind::Ext4kit(exe);
                    r?;
                }
            }
            Kind::Gone => {}
        }
        Ok(())
    }
}

impl Drop for Mounted {
    /// An unmount that failed must not leave the mount behind (the
    /// temporary directory holding the mount point is removed next):
    /// detach it lazily and stop a fuse2fs child.
    fn drop(&mut self) {
        if let Kind::Gone = self.kind {
            return;
        }
        detach_if_mounted(&self.mnt);
        if let Kind::Fuse2fs(child) = &mut self.kind {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Detaches the mount at `mnt` lazily (`umount -l`), if there is one.
fn detach_if_mounted(mnt: &Path) {
    if system::is_mounted(mnt) {
        log(&format!("detaching {} lazily", mnt.display()));
        let _ = system::detached(Command::new("umount").arg("-l").arg(mnt)).status();
    }
}

/// Waits until a foreground FUSE server has mounted `mnt`, failing with
/// its log when it exits first.
fn wait_server_mounted(child: &mut Child, mnt: &Path, log_path: &Path) -> Result<()> {
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    while !system::is_mounted(mnt) {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(log_path).unwrap_or_default();
            bail!("the server exited before mounting ({status}): {}", log.trim());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("not mounted within {} s", MOUNT_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn wait_exit(child: &mut Child, name: &str) -> Result<()> {
    let deadline = Instant::now() + EXIT_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("{name} exited with {status} after unmounting");
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name} still running {} s after unmounting", EXIT_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
