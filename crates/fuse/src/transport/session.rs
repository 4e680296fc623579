//! A mount served over `/dev/fuse` by this crate alone: open the device,
//! `mount(2)` the file system on it (as root; the kernel's `fuse` type with
//! the options fuser passed; other users through `fusermount3`, see
//! [`super::fusermount`]), answer INIT, then serve requests on several
//! threads, all reading the one descriptor, until the kernel ends the
//! connection at unmount (reads then fail with ENODEV).

use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use rustix::mount::{MountFlags, UnmountFlags};

use super::Channel;
use super::abi::{self, Op, Request};
use super::reply::{InitOut, Reply};
use crate::options::MountConfig;

/// Largest WRITE payload and READ answer (`max_write`, `max_readahead`).
pub(crate) const MAX_IO: u32 = 1 << 20;
/// A request buffer: the largest WRITE plus the kernel's minimum read
/// buffer (`FUSE_MIN_READ_BUFFER`) for the headers.
pub(crate) const BUF_LEN: usize = MAX_IO as usize + 8192;
/// Page size the kernel counts `max_pages` in.
const PAGE: u32 = 4096;

/// What serves the requests: the adapter, through the dispatcher.
pub(crate) trait Serve: Send + Sync + 'static {
    /// Handles one request; every request but FORGET and INTERRUPT gets
    /// one reply through `out`.
    fn serve(&self, out: &dyn super::Sink, req: &Request<'_>);
    /// The connection ended: close what the kernel left open.
    fn destroy(&self);
    /// Whether the spinning thread should busy-poll the device before its
    /// next read (see [`crate::poll`]).
    fn spinning(&self) -> bool {
        false
    }
}

/// Opens `/dev/fuse` and mounts it at `mountpoint` with the options of
/// `cfg` (the kernel options fuser passed: `fd`, `rootmode`, `user_id`,
/// `group_id`, `default_permissions`, `allow_other`, `subtype`); a user
/// other than root mounts through `fusermount3`.
///
/// # Errors
/// No `/dev/fuse`, or `mount(2)` or the helper refused.
pub(crate) fn mount(mountpoint: &Path, source: &str, cfg: &MountConfig) -> io::Result<Arc<Channel>> {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        let dev = super::fusermount::mount(mountpoint, &helper_options(source, cfg))?;
        return Ok(Arc::new(Channel::new(dev)));
    }
    let dev = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse")?;
    let rootmode = std::fs::metadata(mountpoint)?.permissions().mode();
    let mut data = format!(
        "fd={},rootmode={:o},user_id={},group_id={},default_permissions",
        dev.as_raw_fd(),
        rootmode,
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    if cfg.allow_other || cfg.allow_root {
        data.push_str(",allow_other");
    }
    if !cfg.plain_fuse_type {
        data.push_str(",subtype=ext4kit");
    }
    let data = std::ffi::CString::new(data).map_err(io::Error::other)?;
    rustix::mount::mount(source, mountpoint, "fuse", mount_flags(cfg), data.as_c_str()).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("mounting {}: {e}", mountpoint.display()),
        )
    })?;
    Ok(Arc::new(Channel::new(dev)))
}

fn mount_flags(cfg: &MountConfig) -> MountFlags {
    let mut f = MountFlags::empty();
    for (on, flag) in [
        (cfg.read_only, MountFlags::RDONLY),
        (!cfg.dev, MountFlags::NODEV),
        (!cfg.suid, MountFlags::NOSUID),
        (!cfg.exec, MountFlags::NOEXEC),
        (cfg.atime == crate::options::AtimeMode::NoAtime, MountFlags::NOATIME),
        (cfg.sync, MountFlags::SYNCHRONOUS),
    ] {
        if on {
            f |= flag;
        }
    }
    f
}

/// The options `fusermount3 -o` takes for `cfg` (it adds `nosuid` and
/// `nodev` itself unless `suid`/`dev` are asked for, which it refuses to
/// users).
fn helper_options(source: &str, cfg: &MountConfig) -> String {
    let mut o = vec![
        format!("fsname={}", super::fusermount::escape(source)),
        "default_permissions".to_string(),
    ];
    for (on, opt) in [
        (!cfg.plain_fuse_type, "subtype=ext4kit"),
        (cfg.allow_other || cfg.allow_root, "allow_other"),
        (cfg.read_only, "ro"),
        (!cfg.read_only, "rw"),
        (cfg.dev, "dev"),
        (cfg.suid, "suid"),
        (!cfg.exec, "noexec"),
        (cfg.atime == crate::options::AtimeMode::NoAtime, "noatime"),
        (cfg.sync, "sync"),
    ] {
        if on {
            o.push(opt.to_string());
        }
    }
    o.join(",")
}

/// Unmounts `mountpoint` (the serving threads then see ENODEV): with
/// `umount2` as root, through `fusermount3 -u` otherwise.
///
/// # Errors
/// The unmount fails (busy, not mounted).
pub(crate) fn unmount(mountpoint: &Path) -> io::Result<()> {
    if !rustix::process::geteuid().is_root() {
        return super::fusermount::unmount(mountpoint);
    }
    rustix::mount::unmount(mountpoint, UnmountFlags::empty()).map_err(Into::into)
}

/// Answers INIT: the kernel's version if it is 7.x (this one's minor at
/// most), the wanted capabilities the kernel offers, and the limits.
///
/// # Errors
/// The connection ends first, or the kernel speaks another major version
/// than 7 and no second INIT follows.
pub(crate) fn handshake(chan: &Channel, wanted: u64) -> io::Result<InitOut> {
    let mut buf = vec![0u8; BUF_LEN];
    loop {
        let n =
            read_request(chan, &mut buf, true, &NoServer)?.ok_or_else(|| io::Error::other("unmounted during INIT"))?;
        let Ok(req) = Request::parse(&buf[..n]) else {
            log::warn!("ext4kit: malformed request before INIT");
            continue;
        };
        let Op::Init {
            major,
            minor,
            max_readahead,
            flags,
        } = req.op
        else {
            chan.send(&Reply::error(req.unique(), libc::EIO))?;
            continue;
        };
        if major > abi::KERNEL_VERSION {
            // The kernel sends INIT again with our major.
            let ours = InitOut {
                major: abi::KERNEL_VERSION,
                minor: abi::KERNEL_MINOR,
                ..InitOut::default()
            };
            chan.send(&Reply::init(req.unique(), &ours))?;
            continue;
        }
        if major < abi::KERNEL_VERSION {
            chan.send(&Reply::error(req.unique(), libc::EPROTO))?;
            return Err(io::Error::other(format!("FUSE protocol {major}.{minor} is too old")));
        }
        let out = init_out(minor, max_readahead, flags, wanted);
        chan.send(&Reply::init(req.unique(), &out))?;
        return Ok(out);
    }
}

/// What reads before INIT: nothing to stand by for.
struct NoServer;

impl Serve for NoServer {
    fn serve(&self, _: &dyn super::Sink, _: &Request<'_>) {}
    fn destroy(&self) {}
}

/// The INIT answer for a 7.`minor` kernel offering `offered`.
fn init_out(minor: u32, max_readahead: u32, offered: u64, wanted: u64) -> InitOut {
    use abi::init;
    // What fuser always asked for, and the extended flags when offered
    // (the kernel reads `flags2` only if the answer sets FUSE_INIT_EXT).
    let always = init::ASYNC_READ | init::BIG_WRITES | init::MAX_PAGES | init::INIT_EXT;
    let max_readahead = max_readahead.min(MAX_IO);
    InitOut {
        major: abi::KERNEL_VERSION,
        minor: minor.min(abi::KERNEL_MINOR),
        max_readahead,
        flags: (wanted | always) & offered,
        max_background: 64,
        congestion_threshold: 48,
        max_write: MAX_IO,
        time_gran: 1,
        max_pages: MAX_IO.max(max_readahead).div_ceil(PAGE) as u16,
    }
}

/// Reads one request into `buf`: its length, or `None` once the
/// connection is gone (unmounted). While the mount is busy (see
/// [`crate::poll`]) the spinning thread first polls the device without
/// sleeping until a request is there; the descriptor itself stays
/// blocking, since every thread reads it.
fn read_request(chan: &Channel, buf: &mut [u8], spinner: bool, server: &dyn Serve) -> io::Result<Option<usize>> {
    use rustix::io::Errno;
    loop {
        if spinner {
            spin_until_ready(chan, server);
        }
        match rustix::io::read(chan.device(), &mut *buf) {
            Ok(n) => return Ok(Some(n)),
            // Interrupted, or a request the kernel took back.
            Err(Errno::INTR | Errno::NOENT) => {}
            Err(Errno::AGAIN) => {
                let mut fds = [rustix::event::PollFd::new(chan.device(), rustix::event::PollFlags::IN)];
                let _ = rustix::event::poll(&mut fds, None);
            }
            Err(Errno::NODEV) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Busy-polls the device while `server` says to spin: returns once a
/// request is there (or the device is gone), or the spin ended.
fn spin_until_ready(chan: &Channel, server: &dyn Serve) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let now = Timespec { tv_sec: 0, tv_nsec: 0 };
    while server.spinning() {
        let mut fds = [PollFd::new(chan.device(), PollFlags::IN)];
        if !matches!(poll(&mut fds, Some(&now)), Ok(0)) {
            return;
        }
        std::hint::spin_loop();
    }
}

/// Serves requests on `threads` threads named `ext4kit-fuse-N` until the
/// connection ends, then calls [`Serve::destroy`]. The thread named
/// `spinner` retries reads that would block instead of sleeping.
///
/// # Errors
/// A thread cannot be started, or reading the device fails otherwise
/// than by the unmount.
pub(crate) fn run(chan: &Arc<Channel>, server: Arc<dyn Serve>, threads: usize) -> io::Result<()> {
    let mut workers = Vec::new();
    for i in 0..threads.max(1) {
        let (chan, server) = (chan.clone(), server.clone());
        let name = thread_name(i);
        let spinner = i + 1 == threads;
        workers.push(
            std::thread::Builder::new()
                .name(name)
                .spawn(move || serve_loop(&chan, &*server, spinner))?,
        );
    }
    join(workers, &*server)
}

/// Waits for the serving threads, then tells the server the session is
/// over; the first error any thread returned, if any.
pub(crate) fn join(workers: Vec<std::thread::JoinHandle<io::Result<()>>>, server: &dyn Serve) -> io::Result<()> {
    let mut result = Ok(());
    for w in workers {
        let r = w
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("a serving thread panicked")));
        result = result.and(r);
    }
    server.destroy();
    result
}

/// The name of serving thread `i`.
pub(crate) fn thread_name(i: usize) -> String {
    format!("ext4kit-fuse-{i}")
}

pub(crate) fn serve_loop(chan: &Arc<Channel>, server: &dyn Serve, spinner: bool) -> io::Result<()> {
    let mut buf = vec![0u8; BUF_LEN];
    while let Some(n) = read_request(chan, &mut buf, spinner, server)? {
        match Request::parse(&buf[..n]) {
            Ok(req) => server.serve(&**chan, &req),
            Err(abi::Malformed) => {
                log::warn!("ext4kit: malformed FUSE request of {n} bytes");
                if let Ok(h) = abi::parse_header(&buf[..n]) {
                    chan.send(&Reply::error(h.unique, libc::EIO))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi::init;

    #[test]
    fn helper_options_name_the_image_and_the_flags() {
        let cfg = MountConfig {
            read_only: true,
            exec: false,
            ..MountConfig::default()
        };
        assert_eq!(
            helper_options("/a,b.img", &cfg),
            r"fsname=/a\,b.img,default_permissions,subtype=ext4kit,ro,noexec"
        );
    }

    #[test]
    fn init_answers_only_what_the_kernel_offers() {
        let offered = init::ASYNC_READ | init::WRITEBACK_CACHE | init::INIT_EXT | init::MAX_PAGES;
        let out = init_out(
            44,
            128 << 10,
            offered,
            init::WRITEBACK_CACHE | init::DIRECT_IO_ALLOW_MMAP,
        );
        assert_eq!(out.minor, abi::KERNEL_MINOR);
        assert_eq!(out.flags, offered);
        assert_eq!(out.max_readahead, 128 << 10);
        assert_eq!(out.max_pages, 256);
        let old = init_out(31, 1 << 30, init::ASYNC_READ, init::DIRECT_IO_ALLOW_MMAP);
        assert_eq!(
            (old.minor, old.flags, old.max_readahead),
            (31, init::ASYNC_READ, MAX_IO)
        );
    }
}
