//! `ext4kit mount` and `ext4kit umount`, and the `mount.fuse.ext4kit`
//! helper that `mount -t fuse.ext4kit` and `/etc/fstab` run.
//!
//! `mount` serves in the foreground unless `--daemon`: then the process
//! starts itself again detached, waits until the kernel accepted the
//! mount, and returns — the child's first line on stdout says it did.
//! With `-o remount,…` it changes a live mount instead (see
//! [`super::remount`]).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs, parse_size};
use ext4kit_engine::{DirtyJournal, Filesystem, OpenOptions, SuperblockAt};
use ext4kit_fuse::MountConfig;

/// Environment variable marking the detached child of `mount --daemon`.
const DAEMON_CHILD: &str = "EXT4KIT_DAEMON_CHILD";
/// What the child prints once mounted.
const READY: &str = "ext4kit: mounted";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The image file.
    image: PathBuf,
    /// Where to mount it.
    mountpoint: PathBuf,
    /// Mount options, comma-separated (ro, noatime, errors=, uid=IMAGE:HOST,
    /// allow_other, fstype=fuse, alloc=, inode_alloc=, stripe=…; see the
    /// README). `remount,ro|rw,…` changes the live mount at MOUNTPOINT
    /// instead (ro/rw, atime modes, commit=, errors=).
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Return once mounted, serving in the background.
    #[arg(short = 'd', long)]
    daemon: bool,
    /// Make an ext4 image of this size first if IMAGE does not exist (e.g. 1G).
    #[arg(long, value_name = "SIZE")]
    create: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct UmountArgs {
    /// The mount point.
    mountpoint: PathBuf,
    /// Seconds to wait for the server to finish writing.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

pub fn run(a: Args) -> Result<()> {
    if super::remount::asked(&a.options) {
        return super::remount::run(&a.mountpoint, &a.options);
    }
    let mut cfg = MountConfig::default();
    for o in &a.options {
        cfg.apply(o).map_err(anyhow::Error::msg)?;
    }
    cfg.check().map_err(anyhow::Error::msg)?;
    match std::fs::metadata(&a.mountpoint) {
        Ok(m) if m.is_dir() => {}
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => bail!(
            "{}: a FUSE mount whose server is gone (killed?); detach it with `umount -l {0}` and mount again",
            a.mountpoint.display()
        ),
        Ok(_) => bail!("{}: mount point is not a directory", a.mountpoint.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!(
                "{}: mount point does not exist (mkdir it first)",
                a.mountpoint.display()
            )
        }
        Err(e) => bail!("{}: mount point: {e}", a.mountpoint.display()),
    }
    let is_uri = a.image.to_str().is_some_and(ext4kit_engine::device::nbd::is_nbd_uri);
    if a.create.is_none() && !is_uri && !a.image.exists() {
        bail!(
            "{}: no such image (--create SIZE makes a new one, e.g. --create 1G)",
            a.image.display()
        );
    }
    if a.daemon && std::env::var_os(DAEMON_CHILD).is_none() {
        return spawn_daemon(&a);
    }
    let created = match &a.create {
        Some(size) => create_image(&a.image, size)?,
        None => false,
    };
    let mounted = std::cell::Cell::new(false);
    let served = open_and_serve(&a, cfg, || mounted.set(true));
    if served.is_err() && created && !mounted.get() {
        // Nothing was served from it: the next try starts afresh instead
        // of meeting a half-made image.
        let _ = std::fs::remove_file(&a.image);
    }
    served
}

/// Opens the image (claiming it for writing unless `ro`) and serves it;
/// `mounted` runs once the kernel accepted the mount.
fn open_and_serve(a: &Args, cfg: MountConfig, mounted: impl FnOnce()) -> Result<()> {
    wait_for_finishing_server(&a.image, FINISHING_WAIT);
    super::precheck::run(&a.image, &cfg)?;
    let fs = open(&a.image, &cfg, Default::default())?;
    let source = cfg.fsname.clone().unwrap_or_else(|| {
        std::fs::canonicalize(&a.image)
            .unwrap_or(a.image.clone())
            .display()
            .to_string()
    });
    let daemon = std::env::var_os(DAEMON_CHILD).is_some();
    // A grow while mounted opens the image again, as this mount did.
    let reopen: Option<ext4kit_fuse::Reopen> = (!cfg.read_only).then(|| {
        let (image, cfg) = (a.image.clone(), cfg.clone());
        Box::new(move |kept| open(&image, &cfg, kept).map_err(|e| std::io::Error::other(format!("{e:#}"))))
            as ext4kit_fuse::Reopen
    });
    ext4kit_fuse::serve(fs, &source, Some(&a.image), reopen, &a.mountpoint, cfg, || {
        mounted();
        if daemon {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{READY}").and_then(|()| out.flush());
            detach_output();
        }
    })
    .with_context(|| format!("serving {} at {}", a.image.display(), a.mountpoint.display()))
}

/// How long a new mount waits for the server of an earlier mount of the
/// same image to finish writing it.
const FINISHING_WAIT: Duration = Duration::from_secs(30);

/// Waits (up to `timeout`, saying so after a second) while the image's
/// lock is held by an ext4kit mount server that is no longer mounted: it
/// was unmounted (by umount(8) or `fusermount3 -u`, which do not wait)
/// and is still writing the image, which is complete once it lets go. A
/// live mount of the image (the mount table names it as source) is not
/// waited for: the open that follows refuses it, as it does any other
/// holder.
fn wait_for_finishing_server(image: &Path, timeout: Duration) {
    let start = Instant::now();
    let mut said = false;
    // A reader's shared lock counts: a read-write mount cannot claim the
    // image while an unmounted read-only server still holds it.
    while let Some(h) = ext4kit_engine::device::inuse::lock_holder_of(image) {
        if h.mount_point.is_some() || !is_mount_server(h.command.as_deref()) || start.elapsed() > timeout {
            return;
        }
        if !said && start.elapsed() > Duration::from_secs(1) {
            eprintln!(
                "ext4kit: {} was just unmounted; waiting for its server (pid {}) to finish writing it",
                image.display(),
                h.pid.map_or_else(|| "?".into(), |p| p.to_string())
            );
            said = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a command line is `ext4kit mount …` (also the detached child
/// of `--daemon` and of the `mount.fuse.ext4kit` helper).
fn is_mount_server(command: Option<&str>) -> bool {
    let mut args = command.unwrap_or_default().split_whitespace();
    let ours = args
        .next()
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|n| n.to_string_lossy().contains("ext4kit"));
    ours && args.next() == Some("mount")
}

/// A read-write mount claims the image (the device layer's lock, no
/// kernel mount); a read-only one holds a shared lock, so no ext4kit
/// writer changes the image under it. `kept`: files still open when the
/// image is opened again after a grow (which is not counted as a mount).
fn open(image: &Path, cfg: &MountConfig, kept: ext4kit_engine::resize::OpenCounts) -> Result<Filesystem> {
    let access = if cfg.read_only {
        crate::open::Access::ReadShared
    } else {
        crate::open::Access::Write
    };
    let (dev, who) =
        crate::open::open_device(image, access).with_context(|| format!("cannot open {}", image.display()))?;
    if let Some(who) = who {
        log::warn!(
            "ext4kit: {} is {who}: serving it read-only as it is on disk",
            image.display()
        );
    }
    let opts = OpenOptions {
        verify_checksums: !cfg.ignore_checksums,
        dirty_journal: DirtyJournal::Replay,
        sync_writes: cfg.sync,
        journal: cfg.journal,
        alloc: cfg.alloc,
        readdir: cfg.readdir,
        superblock: cfg.superblock.map(SuperblockAt::Kib),
        journal_device: crate::open::external_journal(image, cfg.journal_path.as_deref(), !cfg.read_only)?,
        count_mount: kept.is_empty(),
        keep_open: kept,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(dev, opts).map_err(|e| {
        let hint = cfg.superblock.is_none().then(|| {
            crate::open::backup_hint(image, &e, |b| {
                format!("mount with -o ro,sb={}", b.block * u64::from(b.block_size) / 1024)
            })
        });
        match hint.flatten() {
            Some(hint) => anyhow::anyhow!("{}: {e}{hint}", image.display()),
            None => anyhow::Error::new(e).context(format!("{}", image.display())),
        }
    })?;
    crate::open::log_recovery(&fs);
    crate::keys::add_keys(&fs, &cfg.keys)?;
    if !cfg.read_only
        && let Some(why) = fs.read_only_reason()
    {
        bail!(
            "{}: cannot be mounted read-write ({why}); mount it with -o ro",
            image.display()
        );
    }
    Ok(fs)
}

/// Points the detached server's stdout and stderr away from whoever
/// started it (a caller reading them to the end would wait forever):
/// to `EXT4KIT_LOG_FILE` when set, else to /dev/null.
fn detach_output() {
    let log = std::env::var_os("EXT4KIT_LOG_FILE")
        .and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
    let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") else {
        return;
    };
    let _ = nix::unistd::dup2_stdout(&null);
    let _ = nix::unistd::dup2_stderr(log.as_ref().unwrap_or(&null));
}

/// `--create`: an ext4 image with the default options, when none exists.
/// Returns whether it made one; a failure removes what it made.
fn create_image(image: &Path, size: &str) -> Result<bool> {
    if image.exists() {
        return Ok(false);
    }
    let bytes = parse_size(size)?;
    std::fs::File::create_new(image).with_context(|| format!("cannot create {}", image.display()))?;
    let made = (|| -> Result<()> {
        let mut dev = FileDevice::open(image, true)?;
        dev.set_len(bytes)?;
        let opts = MkfsOptions {
            size_bytes: Some(bytes),
            device_zeroed: true,
            ..MkfsOptions::default()
        };
        mkfs(&dev, &opts)?;
        Ok(())
    })();
    if let Err(e) = made {
        let _ = std::fs::remove_file(image);
        return Err(e.context(format!("making a file system on {}", image.display())));
    }
    Ok(true)
}

/// Starts this command again as a detached child and waits for it to
/// report the mount (or to fail, its message going to our stderr).
fn spawn_daemon(a: &Args) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the ext4kit executable")?;
    let mut args: Vec<OsString> = vec!["mount".into(), a.image.clone().into(), a.mountpoint.clone().into()];
    for o in &a.options {
        args.extend(["-o".into(), o.into()]);
    }
    if let Some(size) = &a.create {
        args.extend(["--create".into(), size.into()]);
    }
    let mut child = Command::new(exe)
        .args(args)
        .env(DAEMON_CHILD, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .context("cannot start the server")?;
    let out = child.stdout.take().context("no pipe from the server")?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    if line.trim_end() == READY {
        return Ok(());
    }
    let status = child.wait()?;
    bail!("the server did not mount ({status})")
}

/// `umount(2)`, tried again for up to a second while the mount is busy: a
/// file closed just before can still be held by a process that another
/// thread forked and that has not yet run `exec` (which closes it). A
/// mount still busy after that is reported.
fn umount_retrying(dir: &std::path::Path) -> nix::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    loop {
        match nix::mount::umount(dir) {
            Err(nix::errno::Errno::EBUSY) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// `ext4kit umount DIR`: unmounts and waits until the server has closed
/// the image, so the image is complete when this returns.
pub fn umount(a: UmountArgs) -> Result<()> {
    let lock = ext4kit_fuse::server_lock_path(&a.mountpoint)?;
    check_ours(&a.mountpoint, &lock)?;
    if let Err(e) = umount_retrying(&a.mountpoint) {
        if e != nix::errno::Errno::EPERM {
            bail!("cannot unmount {}: {e}", a.mountpoint.display());
        }
        let status = Command::new("fusermount3").arg("-u").arg(&a.mountpoint).status()?;
        if !status.success() {
            bail!("fusermount3 -u {} failed", a.mountpoint.display());
        }
    }
    wait_for_server(&lock, Duration::from_secs(a.timeout))
}

/// Refuses anything but an ext4kit mount: type `fuse.ext4kit`, or a
/// plain `fuse` mount (`-o fstype=fuse`) whose server holds the lock
/// [`ext4kit_fuse::server_lock_path`] names. A tmpfs or a kernel ext4
/// mount is left to umount(8).
pub(super) fn check_ours(mountpoint: &Path, lock: &Path) -> Result<()> {
    let at = ext4kit_fuse::resolve_mount_point(mountpoint)?;
    let Some(m) = ext4kit_engine::device::inuse::mounts()
        .into_iter()
        .rev()
        .find(|m| m.mount_point == at)
    else {
        bail!("{}: not a mount point", mountpoint.display());
    };
    let ours = m.fstype == "fuse.ext4kit" || (m.fstype == "fuse" && server_running(lock));
    if !ours {
        bail!(
            "{} is not an ext4kit mount ({} from {}); unmount it with umount(8)",
            mountpoint.display(),
            m.fstype,
            m.source
        );
    }
    Ok(())
}

/// True while an ext4kit server holds its lock for the mount point.
fn server_running(lock: &Path) -> bool {
    std::fs::File::open(lock).is_ok_and(|f| f.try_lock_shared().is_err())
}

fn wait_for_server(lock: &Path, timeout: Duration) -> Result<()> {
    let Ok(file) = std::fs::File::open(lock) else {
        return Ok(());
    };
    let deadline = Instant::now() + timeout;
    let mut file = file;
    loop {
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
            Ok(_) => return Ok(()),
            Err((f, _)) if Instant::now() < deadline => {
                file = f;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => bail!("the server is still writing after {} s", timeout.as_secs()),
        }
    }
}

/// Arguments of `mount.fuse.ext4kit SOURCE DIR [-o OPTS] [-n] [-s] [-v]`
/// (as `mount(8)` calls a helper) turned into `ext4kit mount … --daemon`.
pub fn helper_args(argv: &[OsString]) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec!["ext4kit".into(), "mount".into()];
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-o") => {
                if let Some(v) = it.next() {
                    out.push("-o".into());
                    out.push(v.clone());
                }
            }
            Some("-n" | "-s" | "-v" | "-f") => {}
            _ => out.push(a.clone()),
        }
    }
    out.push("--daemon".into());
    out
}
