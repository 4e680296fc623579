//! Serving a mount: open the image, mount it through `/dev/fuse` with the
//! FUSE options the configuration implies, serve requests on several
//! threads until unmounted (by `umount`, `fusermount -u`, or a SIGINT,
//! SIGTERM or SIGHUP to this process), then close every file left open
//! and leave the image clean.
//!
//! `ext4kit umount` must be able to wait for that last step, since the
//! kernel's `umount` returns before the server has finished: the server
//! holds an exclusive lock on a file named after the mount point for as
//! long as it runs ([`server_lock_path`]). The image itself is locked by
//! the device it was opened on (`FileDevice`), before the first write.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};

use ext4kit_engine::Filesystem;
use fuser::{Config, MountOption, SessionACL};
use nix::fcntl::{Flock, FlockArg};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::adapter::Ext4Fuse;
use crate::options::{CpuLatencyMode, DEFAULT_POLL, DEFAULT_READ_AHEAD_KB, MountConfig, Transport};
use crate::poll::cpu_latency::CpuLatency;

/// Where the lock of the server for `mountpoint` lives. The file is
/// removed when the server ends cleanly; one left by a killed server is
/// harmless (the kernel released its `flock`) and is reused by the next.
///
/// # Errors
/// The mount point's directory does not exist.
pub fn server_lock_path(mountpoint: &Path) -> io::Result<PathBuf> {
    let canonical = resolve_mount_point(mountpoint)?;
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|_| !nix::unistd::geteuid().is_root())
        .map_or_else(|| PathBuf::from("/run/ext4kit"), |d| PathBuf::from(d).join("ext4kit"));
    let key: String = canonical
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    Ok(base.join(format!("{key}.lock")))
}

/// The absolute, symlink-free path of a mount point, also when its
/// server died and the mount point itself cannot be looked at (`ENOTCONN`):
/// then its parent is resolved and the name kept.
///
/// # Errors
/// Neither the mount point nor its parent resolves.
pub fn resolve_mount_point(mountpoint: &Path) -> io::Result<PathBuf> {
    std::fs::canonicalize(mountpoint).or_else(|e| {
        let abs = std::path::absolute(mountpoint)?;
        match (abs.parent(), abs.file_name()) {
            (Some(dir), Some(name)) => Ok(std::fs::canonicalize(dir)?.join(name)),
            _ => Err(e),
        }
    })
}

/// The server lock for `mountpoint`, held until dropped; dropping it
/// removes the file.
struct ServerLock {
    path: PathBuf,
    _lock: Flock<File>,
}

impl Drop for ServerLock {
    fn drop(&mut self) {
        // Removed while still locked: `ext4kit umount` waiting on the old
        // file gets its lock as this one is released.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Takes the server lock for `mountpoint`, first removing lock files that
/// servers killed before they could remove theirs left behind.
fn lock_server(mountpoint: &Path) -> io::Result<ServerLock> {
    let path = server_lock_path(mountpoint)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
        sweep_stale_locks(dir);
    }
    // A few tries: another server's sweep holds a stale file's lock for a
    // moment before it removes the file.
    let mut tries = 0;
    loop {
        let file = File::create(&path)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            // The sweep may also have removed the file between the create
            // and the lock: only a lock on what the path names counts.
            Ok(lock) if names(&path, &lock) => return Ok(ServerLock { path, _lock: lock }),
            Ok(_) => {}
            Err((_, e)) if tries >= 10 => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another ext4kit server holds {}: {e}", path.display()),
                ));
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
        tries += 1;
    }
}

/// Removes the `*.lock` files in `dir` that no live server holds (the
/// kernel released a killed server's lock; its file stayed).
fn sweep_stale_locks(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "lock") {
            continue;
        }
        let Ok(f) = File::open(&p) else { continue };
        if let Ok(lock) = Flock::lock(f, FlockArg::LockExclusiveNonblock)
            && names(&p, &lock)
        {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// True when `path` still names the file `f` is open on.
fn names(path: &Path, f: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), f.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

fn fuse_config(cfg: &MountConfig, source: &str) -> Config {
    let mut opts = vec![MountOption::FSName(source.to_string()), MountOption::DefaultPermissions];
    if !cfg.plain_fuse_type {
        // A kernel option (not fuser's Subtype, which only fusermount
        // reads): /proc/mounts then shows type fuse.ext4kit.
        opts.push(MountOption::CUSTOM("subtype=ext4kit".into()));
    }
    opts.push(if cfg.read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    opts.push(if cfg.dev { MountOption::Dev } else { MountOption::NoDev });
    opts.push(if cfg.suid {
        MountOption::Suid
    } else {
        MountOption::NoSuid
    });
    opts.push(if cfg.exec {
        MountOption::Exec
    } else {
        MountOption::NoExec
    });
    if cfg.atime == crate::options::AtimeMode::NoAtime {
        opts.push(MountOption::NoAtime);
    }
    if cfg.sync {
        opts.push(MountOption::Sync);
    }
    let mut c = Config::default();
    c.mount_options = opts;
    c.acl = if cfg.allow_other {
        SessionACL::All
    } else if cfg.allow_root {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    c.n_threads = Some(cfg.threads);
    c.clone_fd = true;
    c
}

/// Mounts `fs` at `mountpoint` and serves it until unmounted. `image`, the
/// image file when there is one, lets the server watch the host file
/// system under it (see [`crate::host_space`]) and, with `reopen`, grow it
/// while mounted (see [`crate::swap`]). `mounted` runs once the
/// kernel has accepted the mount (the daemon reports success to its parent
/// there). Returns after the image was closed cleanly.
///
/// # Errors
/// Mounting fails (no `/dev/fuse`, not a directory, not permitted), the
/// session ends with an error, or closing the image fails.
pub fn serve(
    fs: Filesystem,
    source: &str,
    image: Option<&Path>,
    reopen: Option<crate::swap::Reopen>,
    mountpoint: &Path,
    cfg: MountConfig,
    mounted: impl FnOnce(),
) -> io::Result<()> {
    let _server = lock_server(mountpoint)?;
    let journal = journal_bytes(&fs);
    let grows = image.zip(reopen).map(|(i, reopen)| crate::swap::Source {
        image: i.to_path_buf(),
        reopen,
    });
    let fs = Arc::new(crate::swap::Served::new(fs, grows));
    let config = fuse_config(&cfg, source);
    let adapter = Ext4Fuse::new(fs.clone(), cfg.clone());
    let commit = adapter.commit_slot();
    let notifier = adapter.notifier_slot();
    let space = adapter.space_slot();
    if let Some(host) = image.and_then(|i| crate::host_space::HostSpace::open(i, journal)) {
        space.watch_host(host);
    }
    let mut session = match cfg.transport.resolve() {
        crate::Transport::Fuser => {
            let mut session = mount_polled(adapter, mountpoint, &config, &cfg)?;
            let _ = notifier.set(crate::transport::Notifier::Fuser(session.notifier()));
            let mut unmounter = session.unmount_callable();
            Running::Fuser(Box::new(session), Box::new(move || unmounter.unmount()))
        }
        _ => mount_dev(adapter, mountpoint, source, &cfg)?,
    };
    set_read_ahead(mountpoint, cfg.read_ahead_kb)?;
    set_max_dirty(mountpoint, &space, cfg.max_dirty.is_some())?;
    let signals = on_signals_unmount(session.unmounter(), std::path::absolute(mountpoint)?)?;
    let (stop, flusher) = spawn_flusher(fs.clone(), commit)?;
    let warm = spawn_buddy_warmer(fs.clone())?;
    mounted();
    // Ends with the adapter dropped, and with it the poller.
    let served = session.run(cfg.threads);
    signals.close();
    let _ = stop.send(());
    let _ = flusher.join();
    warm.0.store(true, std::sync::atomic::Ordering::Relaxed);
    fs.wake();
    let _ = warm.1.join();
    let fs = Arc::try_unwrap(fs)
        .ok()
        .and_then(crate::swap::Served::into_inner)
        .ok_or_else(|| io::Error::other("the file system is still in use after the session"))?;
    let closed = fs.unmount().map_err(io::Error::from);
    served.and(closed)
}

/// A mounted session on either transport, and how to unmount it.
enum Running {
    Fuser(Box<fuser::Session<Ext4Fuse>>, Unmounter),
    /// The own transport: `/dev/fuse` alone, or with FUSE over io_uring.
    Dev(
        Arc<crate::transport::Channel>,
        Arc<Ext4Fuse>,
        PathBuf,
        Option<crate::transport::uring::Rings>,
    ),
}

/// The first unmount attempt on a signal (see [`unmount_retrying`]).
type Unmounter = Box<dyn FnMut() -> io::Result<()> + Send>;

impl Running {
    fn unmounter(&mut self) -> Unmounter {
        match self {
            Self::Fuser(_, u) => std::mem::replace(u, Box::new(|| Ok(()))),
            Self::Dev(_, _, mountpoint, _) => {
                let mountpoint = mountpoint.clone();
                Box::new(move || crate::transport::session::unmount(&mountpoint))
            }
        }
    }

    fn run(self, threads: usize) -> io::Result<()> {
        match self {
            Self::Fuser(session, _) => session.run(),
            Self::Dev(chan, adapter, mountpoint, rings) => {
                let served = match rings {
                    Some(rings) => rings.run(&chan, adapter),
                    None => crate::transport::session::run(&chan, adapter, threads),
                };
                if served.is_err() {
                    // Ended by an error, not the unmount: let nothing hang
                    // on a mount nobody serves.
                    let _ = rustix::mount::unmount(&mountpoint, rustix::mount::UnmountFlags::DETACH);
                }
                served
            }
        }
    }
}

/// Mounts with the project's own transport, answers INIT (asking for
/// FUSE over io_uring when `transport=` allows it and the ring entries
/// could be made), and starts the poller as [`mount_polled`] does (its
/// spinner is the last serving thread; on io_uring there is none).
///
/// # Errors
/// Mounting fails, INIT fails, `transport=uring` and the kernel does not
/// offer io_uring, or `cpu_latency=on` and the kernel refuses.
fn mount_dev(adapter: Ext4Fuse, mountpoint: &Path, source: &str, cfg: &MountConfig) -> io::Result<Running> {
    use crate::transport::{abi::init, session};
    let latency = cpu_latency(cfg)?;
    let chan = session::mount(mountpoint, source, cfg)?;
    let detach = || {
        let _ = rustix::mount::unmount(mountpoint, rustix::mount::UnmountFlags::DETACH);
    };
    let rings = match rings_for(&chan, cfg) {
        Ok(r) => r,
        Err(e) => {
            detach();
            return Err(e);
        }
    };
    let wanted = adapter.init_wanted() | if rings.is_some() { init::OVER_IO_URING } else { 0 };
    let init = match session::handshake(&chan, wanted) {
        Ok(i) => i,
        Err(e) => {
            detach();
            return Err(e);
        }
    };
    if rings.is_some() && init.flags & init::OVER_IO_URING == 0 && cfg.transport == Transport::Auto {
        log::info!("ext4kit: transport=auto serves on /dev/fuse: the kernel did not offer io_uring at INIT");
    }
    let rings = rings.filter(|_| init.flags & init::OVER_IO_URING != 0);
    if rings.is_none() && cfg.transport == Transport::Uring {
        detach();
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "transport=uring: the kernel did not offer FUSE over io_uring at INIT",
        ));
    }
    adapter.set_dev_notifier(chan.clone());
    let spin = !cfg.poll.is_zero() && rings.is_none();
    start_dev_poller(
        &adapter,
        spin.then(|| session::thread_name(cfg.threads.max(1) - 1)),
        latency,
        cfg,
    );
    // Absolute: the unmount may come after the daemon left its directory.
    let mountpoint = std::path::absolute(mountpoint)?;
    Ok(Running::Dev(chan, Arc::new(adapter), mountpoint, rings))
}

/// The ring entries for FUSE over io_uring, when `transport=` asks for
/// them (`uring`, or `auto` where it prefers io_uring).
///
/// # Errors
/// `transport=uring` and the machine does not allow it; `auto` falls
/// back to `/dev/fuse` instead, logging why.
fn rings_for(
    chan: &crate::transport::Channel,
    cfg: &MountConfig,
) -> io::Result<Option<crate::transport::uring::Rings>> {
    use crate::transport::uring::{self, Rings};
    if !cfg.transport.wants_uring() {
        return Ok(None);
    }
    let made = match uring::unavailable() {
        Some(why) => Err(io::Error::new(io::ErrorKind::Unsupported, why)),
        None => Rings::new(chan, cfg.uring_depth),
    };
    match made {
        Ok(r) => Ok(Some(r)),
        Err(e) if cfg.transport == Transport::Auto => {
            log::info!("ext4kit: transport=auto serves on /dev/fuse: {e}");
            Ok(None)
        }
        Err(e) => Err(io::Error::new(e.kind(), format!("transport=uring: {e}"))),
    }
}

/// Starts the poller of the own transport: spinning on `/dev/fuse` in
/// the thread named `spinner`, if any, and holding `latency` while busy.
fn start_dev_poller(adapter: &Ext4Fuse, spinner: Option<String>, latency: Option<CpuLatency>, cfg: &MountConfig) {
    if spinner.is_none() && latency.is_none() {
        return;
    }
    let window = if cfg.poll.is_zero() { DEFAULT_POLL } else { cfg.poll };
    let started = match spinner {
        Some(name) => crate::poll::Poller::start_polling_thread(name, latency, window),
        None => crate::poll::Poller::start(None, latency, window),
    };
    match started {
        Ok(p) => {
            let _ = adapter.poller_slot().set(p);
        }
        Err(e) => log::warn!("ext4kit: serving without polling: {e}"),
    }
}

/// The CPU latency request `cpu_latency=` asks for, if any.
///
/// # Errors
/// `cpu_latency=on` and the kernel refuses the request.
fn cpu_latency(cfg: &MountConfig) -> io::Result<Option<CpuLatency>> {
    Ok(match cfg.cpu_latency {
        CpuLatencyMode::Off => None,
        CpuLatencyMode::On => Some(CpuLatency::open().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cpu_latency=on: {e} (it needs root; cpu_latency=auto goes without)"),
            )
        })?),
        CpuLatencyMode::Auto => CpuLatency::open()
            .inspect_err(|e| log::info!("ext4kit: no CPU latency request while busy: {e}"))
            .ok(),
    })
}

/// Starts the poller into `slot` when there is something to do while busy.
fn start_poller(
    slot: &std::sync::OnceLock<crate::poll::Poller>,
    spin: Option<(std::os::fd::OwnedFd, String)>,
    latency: Option<CpuLatency>,
    cfg: &MountConfig,
) {
    if spin.is_none() && latency.is_none() {
        return;
    }
    let window = if cfg.poll.is_zero() { DEFAULT_POLL } else { cfg.poll };
    match crate::poll::Poller::start(spin, latency, window) {
        Ok(p) => {
            let _ = slot.set(p);
        }
        Err(e) => log::warn!("ext4kit: serving without polling: {e}"),
    }
}

/// Mounts, then keeps round trips short while requests keep coming (see
/// [`crate::poll`]): spins on the `/dev/fuse` descriptor the new session
/// added, unless `poll=0`, and holds a CPU latency request as
/// `cpu_latency=` says. Mounts of this process take turns, so each finds
/// its own descriptor.
///
/// # Errors
/// Mounting fails, or `cpu_latency=on` and the kernel refuses the request.
fn mount_polled(
    adapter: Ext4Fuse,
    mountpoint: &Path,
    config: &Config,
    cfg: &MountConfig,
) -> io::Result<fuser::Session<Ext4Fuse>> {
    let latency = cpu_latency(cfg)?;
    static MOUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = MOUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let slot = adapter.poller_slot();
    let before = crate::poll::fuse_fds();
    let session = fuser::Session::new(adapter, mountpoint, config)?;
    let spin = if cfg.poll.is_zero() {
        None
    } else {
        let fd = crate::poll::session_fd(&before);
        if fd.is_none() {
            log::warn!("ext4kit: serving without polling: no /dev/fuse descriptor found");
        }
        // fuser 0.18 gives the session's own descriptor to the last of the
        // threads it names `fuser-0`, `fuser-1`…; the others read clones.
        fd.map(|fd| (fd, format!("fuser-{}", cfg.threads.saturating_sub(1))))
    };
    start_poller(&slot, spin, latency, cfg);
    Ok(session)
}

/// Sets the mount's readahead (see [`crate::bdi`]): as asked, or
/// the default where this process may.
///
/// # Errors
/// `read_ahead_kb=` was given and cannot be set.
fn set_read_ahead(mountpoint: &Path, asked: Option<u32>) -> io::Result<()> {
    let kb = asked.unwrap_or(DEFAULT_READ_AHEAD_KB);
    match crate::bdi::set(mountpoint, "read_ahead_kb", u64::from(kb)) {
        Ok(()) => Ok(()),
        Err(e) if asked.is_some() => Err(io::Error::new(e.kind(), format!("read_ahead_kb={kb}: {e}"))),
        Err(e) => {
            log::info!("ext4kit: keeping the kernel's readahead: {e}");
            Ok(())
        }
    }
}

/// Bytes of the internal journal (0 without one).
fn journal_bytes(fs: &Filesystem) -> u64 {
    fs.journal_info()
        .superblock
        .as_ref()
        .map_or(0, |j| u64::from(j.max_len) * u64::from(j.block_size))
}

/// Makes the kernel hold at most the reserve's `max_dirty` of unsent file
/// data for the mount (see [`crate::space`]). Where this process may not
/// (not root, an older kernel), the reserve follows the kernel's own
/// limit instead.
///
/// # Errors
/// `max_dirty=` was given and cannot be set.
fn set_max_dirty(mountpoint: &Path, space: &crate::space::Space, asked: bool) -> io::Result<()> {
    let want = space.max_dirty();
    if want == 0 {
        return Ok(());
    }
    match crate::bdi::set(mountpoint, "max_bytes", want) {
        Ok(()) => Ok(()),
        Err(e) if asked => Err(io::Error::new(e.kind(), format!("max_dirty={want}: {e}"))),
        Err(e) => {
            let kernel = crate::bdi::get(mountpoint, "max_bytes").unwrap_or(want.max(64 << 20));
            log::info!("ext4kit: keeping the kernel's dirty limit of {kernel} bytes: {e}");
            space.set_max_dirty(kernel);
            Ok(())
        }
    }
}

/// Unmounts on SIGINT, SIGTERM or SIGHUP (from a thread of its own); the
/// handle stops that thread.
fn on_signals_unmount(mut unmounter: Unmounter, mountpoint: PathBuf) -> io::Result<signal_hook::iterator::Handle> {
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("ext4kit-signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                unmount_retrying(&mut unmounter, &mountpoint);
            }
        })?;
    Ok(handle)
}

/// Unmounts, trying again for up to 10 s while the kernel refuses (the
/// mount can be busy for a moment while it writes back cached pages): a
/// signal must not leave the server running after a single failed try.
///
/// fuser's unmounter gives its mount up on the first attempt, failed or
/// not, so the retries call `umount2` on the mount point themselves; the
/// last resort is a lazy unmount (`MNT_DETACH`), after which the session
/// ends as soon as nothing uses the file system any more.
fn unmount_retrying(unmounter: &mut Unmounter, mountpoint: &Path) {
    use rustix::mount::{UnmountFlags, unmount};
    let Err(e) = unmounter() else { return };
    log::warn!("ext4kit: unmounting on signal: {e}; trying again");
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        match unmount(mountpoint, UnmountFlags::empty()) {
            Ok(()) => return,
            // Not (or no longer) a mount point: someone else unmounted it.
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOENT) => return,
            Err(e) => log::warn!("ext4kit: unmounting on signal: {e}; trying again"),
        }
    }
    match unmount(mountpoint, UnmountFlags::DETACH) {
        Ok(()) => log::warn!("ext4kit: still busy after 10 s: detached the mount lazily"),
        Err(e) => log::error!("ext4kit: unmounting on signal: {e}; giving up"),
    }
}

/// Builds the allocator's buddies on a thread of its own after the mount
/// (seed 001 §2.5), so group selection by order lists works from the
/// first large write, and again after a grow swapped the file system
/// (giving way to the grow meanwhile); stops when the returned flag is set.
fn spawn_buddy_warmer(
    served: Arc<crate::swap::Served>,
) -> io::Result<(Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<()>)> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let warmer = std::thread::Builder::new()
        .name("ext4kit-mb-warm".into())
        .spawn(move || {
            let stopped = || flag.load(std::sync::atomic::Ordering::Relaxed);
            while !stopped() {
                let generation = served.generation();
                let gate = served.enter();
                match served.get().warm_buddies(&|| stopped() || served.swapping()) {
                    Ok(n) => log::debug!("ext4kit: {n} buddies built"),
                    Err(e) => log::warn!("ext4kit: building buddies: {e}"),
                }
                drop(gate);
                served.wait_for_swap(generation, &stopped);
            }
        })?;
    Ok((stop, warmer))
}

/// Commits (writes back) what changed every `commit=` interval (which a
/// remount may change) until told to stop through the returned sender.
fn spawn_flusher(
    served: Arc<crate::swap::Served>,
    commit_ms: Arc<std::sync::atomic::AtomicU64>,
) -> io::Result<(mpsc::Sender<()>, std::thread::JoinHandle<()>)> {
    let (stop, stopped) = mpsc::channel::<()>();
    let flusher = std::thread::Builder::new()
        .name("ext4kit-writeback".into())
        .spawn(move || {
            let interval = || crate::remount_request::commit_interval(&commit_ms);
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval()) {
                let _gate = served.enter();
                if let Err(e) = served.get().sync() {
                    log::error!("ext4kit: writing back: {e}");
                }
            }
        })?;
    Ok((stop, flusher))
}
