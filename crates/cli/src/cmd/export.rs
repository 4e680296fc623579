//! `ext4kit export IMAGE [PATH] DEST`: copies a tree out of the image the way
//! `cp -a` copies it out of a kernel mount — contents (holes stay holes),
//! modes, owners (as root), nanosecond times, xattrs, symlinks, device nodes,
//! FIFOs, sockets and hard-link groups.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ext4kit_engine::{Filesystem, Inode, Metadata};
use ext4kit_format::inode::FileType;
use indicatif::{ProgressBar, ProgressStyle};
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FchmodatFlags, Mode, SFlag, UtimensatFlags, makedev, mkdirat, mknodat};
use nix::sys::time::TimeSpec;
use nix::unistd::{Gid, Uid};
use xattr::FileExt as _;

use super::util::open_dir_at;
use crate::ImageArgs;
use crate::open::open_ro;

/// Arguments of `export`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Source path inside the image (default: the root), then the destination
    /// on the host, which must not exist or be an empty directory.
    #[arg(num_args = 1..=2, required = true, value_names = ["PATH", "DEST"])]
    paths: Vec<String>,
    /// No progress display.
    #[arg(short, long)]
    quiet: bool,
    /// Files copied at once. Several requests in flight is what a cold
    /// cache needs; directories are still walked by one thread.
    #[arg(short, long, default_value_t = 4)]
    jobs: usize,
    /// Recreate character and block device nodes. By default they are
    /// skipped: a node from an image made elsewhere would open a device of
    /// this host.
    #[arg(long)]
    devices: bool,
    /// Keep set-user-ID and set-group-ID bits and file capabilities
    /// (`security.capability`). By default they are dropped, so that an
    /// image made elsewhere cannot leave a program that runs with
    /// privileges it chose (the set-group-ID bit of directories stays).
    #[arg(long)]
    keep_setid: bool,
    /// The image is trusted: both --devices and --keep-setid.
    #[arg(long)]
    trusted: bool,
}

/// What an untrusted image was not allowed to bring over: how many, and
/// the first, for the summary on standard error.
#[derive(Default)]
struct Withheld {
    count: AtomicU64,
    first: Mutex<Option<PathBuf>>,
}

impl Withheld {
    fn note(&self, path: &Path) {
        if self.count.fetch_add(1, Relaxed) == 0
            && let Ok(mut f) = self.first.lock()
        {
            *f = Some(path.to_path_buf());
        }
    }

    fn report(&self, what: &str, flag: &str) {
        let n = self.count.load(Relaxed);
        if n == 0 {
            return;
        }
        let first = self.first.lock().ok().and_then(|f| f.clone()).unwrap_or_default();
        eprintln!(
            "ext4kit: export: {what} of {} (first: {}); {flag}",
            super::util::count(n, "file", "files"),
            first.display()
        );
    }
}

/// What the copying threads share: the file system, the counters, and the
/// first error (after which remaining jobs are skipped).
struct Shared<'a> {
    fs: &'a Filesystem,
    chown: bool,
    devices: bool,
    keep_setid: bool,
    skipped_devices: Withheld,
    dropped_setid: Withheld,
    files: AtomicU64,
    bytes: AtomicU64,
    error: Mutex<Option<anyhow::Error>>,
}

impl Shared<'_> {
    fn failed(&self) -> bool {
        self.error.lock().is_ok_and(|e| e.is_some())
    }

    fn fail(&self, e: anyhow::Error) {
        if let Ok(mut slot) = self.error.lock() {
            slot.get_or_insert(e);
        }
    }
}

/// A regular file created by the walker, to be filled by a worker.
struct Job {
    inode: Inode,
    /// For messages only: every host call goes through `file`.
    path: PathBuf,
    file: File,
}

/// Where metadata goes: an open file or directory, or a name in an open
/// directory (symlinks and special files, which are not opened: opening a
/// FIFO would block).
enum Target<'f> {
    Fd(&'f File),
    At(&'f OwnedFd, &'f OsStr),
}

/// The walking side: creates directories, special files and links in
/// order, and hands regular files to the workers.
///
/// Host paths may be deeper than `PATH_MAX`: everything is created
/// relative to the open directory `cur` (`mkdirat`, `openat`, `mknodat`,
/// `linkat`…), one directory descriptor open at a time, and the walk goes
/// back up through `..` of the directories it made.
struct Walker<'a, 's> {
    shared: &'s Shared<'a>,
    jobs: SyncSender<Job>,
    /// The directory `export` writes into (the destination, or its parent
    /// when a single file is exported).
    root: OwnedFd,
    /// The directory being filled.
    cur: OwnedFd,
    /// `cur` below `root`, as names, for the first link of each
    /// multiply-linked inode.
    rel: Vec<OsString>,
    /// `cur` as a host path, for messages.
    shown: PathBuf,
    /// Inode → its first copy, below `root`.
    linked: HashMap<u32, Vec<OsString>>,
    visited_dirs: HashSet<u32>,
    dirs: u64,
    links: u64,
    pb: ProgressBar,
}

/// A directory on the walk's stack: its subdirectories not yet copied.
struct Level {
    ino: u32,
    subdirs: Vec<(Vec<u8>, u32)>,
}

/// Runs the export.
pub fn run(a: Args) -> Result<()> {
    let (src, dest) = match a.paths.as_slice() {
        [d] => ("/".to_string(), PathBuf::from(d)),
        [s, d] => (s.clone(), PathBuf::from(d)),
        _ => bail!("expected [PATH] DEST"),
    };
    check_dest(&dest)?;
    let fs = open_ro(&a.image)?;
    let root = fs.resolve_opts(src.as_bytes(), true)?;
    let pb = if a.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    pb.set_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let shared = Shared {
        fs: &fs,
        chown: nix::unistd::geteuid().is_root(),
        devices: a.devices || a.trusted,
        keep_setid: a.keep_setid || a.trusted,
        skipped_devices: Withheld::default(),
        dropped_setid: Withheld::default(),
        files: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        error: Mutex::new(None),
    };
    // The directory the copy goes into, and the name of a single file.
    let (into, file_name) = if root.is_dir() {
        if !dest.exists() {
            fs::create_dir(&dest).with_context(|| format!("{}", dest.display()))?;
        }
        (dest.clone(), None)
    } else {
        let parent = dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = dest.file_name().context("the destination has no file name")?;
        (parent.to_path_buf(), Some(name.to_os_string()))
    };
    let open_into = || -> Result<OwnedFd> {
        open_dir_at(nix::fcntl::AT_FDCWD, into.as_os_str()).with_context(|| format!("{}", into.display()))
    };
    let (root_fd, cur) = (open_into()?, open_into()?);
    let t = Instant::now();
    let (tx, rx) = sync_channel::<Job>(1024);
    let rx = Mutex::new(rx);
    let (dirs, links) = std::thread::scope(|scope| -> Result<(u64, u64)> {
        for _ in 0..a.jobs.max(1) {
            scope.spawn(|| worker(&shared, &rx));
        }
        let mut w = Walker {
            shared: &shared,
            jobs: tx,
            root: root_fd,
            cur,
            rel: Vec::new(),
            shown: into.clone(),
            linked: HashMap::new(),
            visited_dirs: HashSet::new(),
            dirs: 0,
            links: 0,
            pb,
        };
        let r = match &file_name {
            None => w.tree(root.ino),
            Some(name) => w.entry(&root, name),
        };
        w.pb.finish_and_clear();
        r.map(|()| (w.dirs, w.links))
    })?;
    if let Some(e) = shared.error.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    shared
        .skipped_devices
        .report("skipped the device nodes", "--devices recreates them");
    shared.dropped_setid.report(
        "dropped set-user-ID/set-group-ID bits or file capabilities",
        "--keep-setid keeps them",
    );
    if !a.quiet {
        let (files, bytes) = (shared.files.load(Relaxed), shared.bytes.load(Relaxed));
        use super::util::count;
        eprintln!(
            "exported {}, {}, {}, {} in {:.2?}",
            count(files, "file", "files"),
            count(dirs, "directory", "directories"),
            count(links, "hard link", "hard links"),
            count(bytes, "byte", "bytes"),
            t.elapsed()
        );
    }
    Ok(())
}

/// Fills and finishes regular files until the walker hangs up.
fn worker(shared: &Shared<'_>, rx: &Mutex<Receiver<Job>>) {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let job = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        if shared.failed() {
            continue;
        }
        let r = copy_data(shared, &job, &mut buf)
            .and_then(|()| apply_metadata(shared, &job.inode, Target::Fd(&job.file), &job.path));
        if let Err(e) = r {
            shared.fail(e);
        }
    }
}

fn check_dest(dest: &Path) -> Result<()> {
    match fs::symlink_metadata(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("{}", dest.display())),
        Ok(m) if m.is_dir() && fs::read_dir(dest)?.next().is_none() => Ok(()),
        Ok(_) => bail!("{}: destination exists and is not an empty directory", dest.display()),
    }
}

impl Walker<'_, '_> {
    /// Copies the directory `ino` into `cur`, depth first with an explicit
    /// stack (any depth costs heap, not the thread's stack); a directory's
    /// metadata is applied once its contents are done, so its times survive.
    fn tree(&mut self, ino: u32) -> Result<()> {
        let subdirs = self.enter(ino)?;
        let mut stack = vec![Level { ino, subdirs }];
        while let Some(top) = stack.last_mut() {
            if self.shared.failed() {
                return Ok(());
            }
            if let Some((name, ino)) = top.subdirs.pop() {
                let name = OsString::from_vec(name);
                let shown = self.shown.join(&name);
                mkdirat(&self.cur, name.as_os_str(), Mode::from_bits_truncate(0o700))
                    .with_context(|| format!("{}", shown.display()))?;
                self.cur = open_dir_at(&self.cur, &name).with_context(|| format!("{}", shown.display()))?;
                self.shown = shown;
                self.rel.push(name);
                let subdirs = self.enter(ino)?;
                stack.push(Level { ino, subdirs });
                continue;
            }
            let done = stack.pop().map(|l| l.ino).context("the walk's stack")?;
            let dir = self.shared.fs.inode(done)?;
            let fd = File::from(self.cur.try_clone()?);
            apply_metadata(self.shared, &dir, Target::Fd(&fd), &self.shown)?;
            if !stack.is_empty() {
                self.cur =
                    open_dir_at(&self.cur, OsStr::new("..")).with_context(|| format!("{}/..", self.shown.display()))?;
                self.shown.pop();
                self.rel.pop();
            }
        }
        Ok(())
    }

    /// Copies the non-directories of directory `ino` into `cur`; returns
    /// its subdirectories, first listed last.
    fn enter(&mut self, ino: u32) -> Result<Vec<(Vec<u8>, u32)>> {
        if !self.visited_dirs.insert(ino) {
            bail!(
                "directory inode {ino} is reachable twice (a directory loop); {} not exported",
                self.shown.display()
            );
        }
        self.dirs += 1;
        let dir = self.shared.fs.inode(ino)?;
        let mut subdirs = Vec::new();
        for e in self.shared.fs.read_dir(&dir)? {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let inode = self.shared.fs.inode(e.ino)?;
            if inode.is_dir() {
                subdirs.push((e.name, e.ino));
            } else {
                self.entry(&inode, OsStr::from_bytes(&e.name))?;
            }
        }
        subdirs.reverse();
        Ok(subdirs)
    }

    /// Copies one non-directory inode as `name` in `cur`: links and
    /// special files here, regular files created here and filled by a worker.
    fn entry(&mut self, inode: &Inode, name: &OsStr) -> Result<()> {
        let fs = self.shared.fs;
        let m = fs.metadata(inode)?;
        let shown = self.shown.join(name);
        let ctx = || format!("{}", shown.display());
        if matches!(m.file_type, FileType::CharDevice | FileType::BlockDevice) && !self.shared.devices {
            self.shared.skipped_devices.note(&shown);
            return Ok(());
        }
        if m.nlink > 1 {
            if let Some(first) = self.linked.get(&inode.ino) {
                let (dir, last) = self.open_parent(first)?;
                nix::unistd::linkat(&dir, last, &self.cur, name, AtFlags::empty()).with_context(ctx)?;
                self.links += 1;
                return Ok(());
            }
            let mut at = self.rel.clone();
            at.push(name.to_os_string());
            self.linked.insert(inode.ino, at);
        }
        match m.file_type {
            FileType::Regular => {
                let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                let fd = openat(&self.cur, name, flags, Mode::from_bits_truncate(0o600)).with_context(ctx)?;
                let job = Job {
                    inode: inode.clone(),
                    path: shown.clone(),
                    file: File::from(fd),
                };
                // A closed channel means every worker is gone; their error is reported.
                let _ = self.jobs.send(job);
                self.pb.set_message(format!(
                    "{} files, {} MiB",
                    self.shared.files.load(Relaxed),
                    self.shared.bytes.load(Relaxed) >> 20
                ));
                return Ok(());
            }
            FileType::Symlink => {
                let target = fs.read_link(inode)?;
                nix::unistd::symlinkat(OsStr::from_bytes(&target), &self.cur, name).with_context(ctx)?;
            }
            FileType::Directory => bail!("{}: directories go through the walk", shown.display()),
            other => make_node(other, &m, &self.cur, name).with_context(ctx)?,
        }
        self.shared.files.fetch_add(1, Relaxed);
        apply_metadata(self.shared, inode, Target::At(&self.cur, name), &shown)
    }

    /// Opens the directory holding `path` (names below `root`), one
    /// component at a time; returns it and the last name.
    fn open_parent<'p>(&self, path: &'p [OsString]) -> Result<(OwnedFd, &'p OsStr)> {
        let (last, dirs) = path.split_last().context("an empty link path")?;
        let mut dir = self.root.try_clone()?;
        for d in dirs {
            dir = open_dir_at(&dir, d).with_context(|| format!("{}", d.to_string_lossy()))?;
        }
        Ok((dir, last.as_os_str()))
    }
}

/// Writes the mapped runs only, so holes and unwritten extents stay holes.
fn copy_data(shared: &Shared<'_>, job: &Job, buf: &mut [u8]) -> Result<()> {
    let (fs, inode) = (shared.fs, &job.inode);
    let size = inode.size();
    let bs = fs.block_size() as u64;
    let ranges: Vec<(u64, u64)> = if inode.has_inline_data() {
        vec![(0, size)]
    } else {
        fs.all_runs(inode)?
            .iter()
            .filter(|r| !r.unwritten)
            .map(|r| (r.logical * bs, (r.end() * bs).min(size)))
            .collect()
    };
    for (mut off, end) in ranges {
        while off < end {
            let want = ((end - off) as usize).min(buf.len());
            let n = fs.read_at(inode, off, &mut buf[..want])?;
            if n == 0 {
                break;
            }
            job.file
                .write_all_at(&buf[..n], off)
                .with_context(|| format!("{}", job.path.display()))?;
            off += n as u64;
            shared.bytes.fetch_add(n as u64, Relaxed);
        }
    }
    job.file.set_len(size)?;
    shared.files.fetch_add(1, Relaxed);
    Ok(())
}

/// The set-id bits an untrusted image may not bring: set-user-ID always,
/// set-group-ID on anything but a directory (there it only passes the
/// group on to new entries).
fn setid_bits(ft: FileType) -> u16 {
    if ft == FileType::Directory { 0o4000 } else { 0o6000 }
}

/// Owner (as root), mode, xattrs, then times — in that order, because
/// chown clears set-id bits and capabilities.
fn apply_metadata(shared: &Shared<'_>, inode: &Inode, to: Target<'_>, shown: &Path) -> Result<()> {
    let fs = shared.fs;
    let m = fs.metadata(inode)?;
    let ctx = || format!("{}", shown.display());
    let symlink = m.file_type == FileType::Symlink;
    let mut dropped = false;
    let mut perm = m.perm;
    if !shared.keep_setid && perm & setid_bits(m.file_type) != 0 {
        perm &= !setid_bits(m.file_type);
        dropped = true;
    }
    if shared.chown {
        let (u, g) = (Some(Uid::from_raw(m.uid)), Some(Gid::from_raw(m.gid)));
        match to {
            Target::Fd(f) => nix::unistd::fchown(f, u, g),
            Target::At(dir, name) => nix::unistd::fchownat(dir, name, u, g, AtFlags::AT_SYMLINK_NOFOLLOW),
        }
        .with_context(ctx)?;
    }
    if !symlink {
        let mode = Mode::from_bits_truncate(u32::from(perm));
        match to {
            Target::Fd(f) => nix::sys::stat::fchmod(f, mode),
            // Never a symlink here, so following the name changes nothing.
            Target::At(dir, name) => nix::sys::stat::fchmodat(dir, name, mode, FchmodatFlags::FollowSymlink),
        }
        .with_context(ctx)?;
    }
    for x in fs.xattrs(inode)? {
        let name = OsStr::from_bytes(&x.name);
        if !shared.keep_setid && x.name == b"security.capability" {
            dropped = true;
            continue;
        }
        let r = match to {
            Target::Fd(f) => f.set_xattr(name, &x.value),
            Target::At(dir, entry) => {
                // No `lsetxattrat`: the directory's /proc link keeps the path short.
                let mut p = OsString::from(format!("/proc/self/fd/{}/", dir.as_raw_fd()));
                p.push(entry);
                xattr::set(&p, name, &x.value)
            }
        };
        if let Err(e) = r {
            // Symlinks cannot carry user.* attributes on Linux; the kernel
            // shows none there either.
            if !(symlink && e.raw_os_error() == Some(libc::EPERM)) {
                return Err(e)
                    .with_context(|| format!("{}: setting xattr {}", shown.display(), name.to_string_lossy()));
            }
        }
    }
    let ts = |t: ext4kit_format::inode::Timestamp| TimeSpec::new(t.secs, i64::from(t.nsecs));
    match to {
        Target::Fd(f) => nix::sys::stat::futimens(f, &ts(m.atime), &ts(m.mtime)),
        // On the name itself: opening a FIFO to set times would block.
        Target::At(dir, name) => {
            nix::sys::stat::utimensat(dir, name, &ts(m.atime), &ts(m.mtime), UtimensatFlags::NoFollowSymlink)
        }
    }
    .with_context(ctx)?;
    if dropped {
        shared.dropped_setid.note(shown);
    }
    Ok(())
}

fn make_node(ft: FileType, m: &Metadata, dir: &OwnedFd, name: &OsStr) -> Result<()> {
    let kind = match ft {
        FileType::CharDevice => SFlag::S_IFCHR,
        FileType::BlockDevice => SFlag::S_IFBLK,
        FileType::Fifo => SFlag::S_IFIFO,
        FileType::Socket => SFlag::S_IFSOCK,
        _ => bail!("not a special file"),
    };
    let dev = makedev(u64::from(m.rdev.0), u64::from(m.rdev.1));
    mknodat(dir, name, kind, Mode::from_bits_truncate(0o600), dev).context("mknod")?;
    Ok(())
}
