//! `ext4kit export IMAGE [PATH] DEST`: copies a tree out of the image the way
//! `cp -a` copies it out of a kernel mount — contents (holes stay holes),
//! modes, owners (as root), nanosecond times, xattrs, symlinks, device nodes,
//! FIFOs, sockets and hard-link groups.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
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
use nix::fcntl::AT_FDCWD;
use nix::sys::stat::{Mode, SFlag, UtimensatFlags, makedev, mknod, utimensat};
use nix::sys::time::TimeSpec;

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
}

/// What the copying threads share: the file system, the counters, and the
/// first error (after which remaining jobs are skipped).
struct Shared<'a> {
    fs: &'a Filesystem,
    chown: bool,
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
    path: PathBuf,
    file: File,
}

/// The walking side: creates directories, special files and links in
/// order, and hands regular files to the workers.
struct Walker<'a, 's> {
    shared: &'s Shared<'a>,
    jobs: SyncSender<Job>,
    linked: HashMap<u32, PathBuf>,
    visited_dirs: HashSet<u32>,
    dirs: u64,
    links: u64,
    pb: ProgressBar,
}

enum Step {
    Enter(u32, PathBuf),
    Finish(Box<Inode>, PathBuf),
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
        files: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        error: Mutex::new(None),
    };
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
            linked: HashMap::new(),
            visited_dirs: HashSet::new(),
            dirs: 0,
            links: 0,
            pb,
        };
        let r = if root.is_dir() {
            w.tree(root.ino, dest)
        } else {
            w.entry(&root, &dest)
        };
        w.pb.finish_and_clear();
        r.map(|()| (w.dirs, w.links))
    })?;
    if let Some(e) = shared.error.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    if !a.quiet {
        let (files, bytes) = (shared.files.load(Relaxed), shared.bytes.load(Relaxed));
        eprintln!(
            "exported {files} files, {dirs} directories, {links} hard links, {bytes} bytes in {:.2?}",
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
        let r = copy_data(shared, &job, &mut buf).and_then(|()| apply_metadata(shared, &job.inode, &job.path));
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
    /// Copies the directory `ino` to `dest`, depth first with an explicit
    /// stack; directory metadata is applied after the contents so their
    /// times survive.
    fn tree(&mut self, ino: u32, dest: PathBuf) -> Result<()> {
        let mut stack = vec![Step::Enter(ino, dest)];
        while let Some(step) = stack.pop() {
            match step {
                Step::Finish(inode, path) => apply_metadata(self.shared, &inode, &path)?,
                Step::Enter(ino, path) => {
                    if !self.visited_dirs.insert(ino) {
                        bail!(
                            "directory inode {ino} is reachable twice (a directory loop); {} not exported",
                            path.display()
                        );
                    }
                    if self.shared.failed() {
                        return Ok(());
                    }
                    let dir = self.shared.fs.inode(ino)?;
                    if !path.exists() {
                        fs::create_dir(&path).with_context(|| format!("{}", path.display()))?;
                    }
                    self.dirs += 1;
                    let entries = self.shared.fs.read_dir(&dir)?;
                    stack.push(Step::Finish(Box::new(dir), path.clone()));
                    for e in entries.into_iter().rev() {
                        if e.name == b"." || e.name == b".." {
                            continue;
                        }
                        let child = path.join(OsStr::from_bytes(&e.name));
                        let inode = self.shared.fs.inode(e.ino)?;
                        if inode.is_dir() {
                            stack.push(Step::Enter(e.ino, child));
                        } else {
                            self.entry(&inode, &child)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Copies one non-directory inode: links and special files here,
    /// regular files created here and filled by a worker.
    fn entry(&mut self, inode: &Inode, path: &Path) -> Result<()> {
        let fs = self.shared.fs;
        let m = fs.metadata(inode)?;
        if m.nlink > 1 {
            if let Some(first) = self.linked.get(&inode.ino) {
                fs::hard_link(first, path).with_context(|| format!("{}", path.display()))?;
                self.links += 1;
                return Ok(());
            }
            self.linked.insert(inode.ino, path.to_path_buf());
        }
        match m.file_type {
            FileType::Regular => {
                let file = File::create_new(path).with_context(|| format!("{}", path.display()))?;
                let job = Job {
                    inode: inode.clone(),
                    path: path.to_path_buf(),
                    file,
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
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), path)
                    .with_context(|| format!("{}", path.display()))?;
            }
            FileType::Directory => bail!("{}: directories go through the walk", path.display()),
            other => make_node(other, &m, path)?,
        }
        self.shared.files.fetch_add(1, Relaxed);
        apply_metadata(self.shared, inode, path)
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

/// Owner (as root), mode, xattrs, then times — in that order, because
/// chown clears set-id bits and capabilities.
fn apply_metadata(shared: &Shared<'_>, inode: &Inode, path: &Path) -> Result<()> {
    let fs = shared.fs;
    let m = fs.metadata(inode)?;
    let ctx = || format!("{}", path.display());
    let symlink = m.file_type == FileType::Symlink;
    if shared.chown {
        std::os::unix::fs::lchown(path, Some(m.uid), Some(m.gid)).with_context(ctx)?;
    }
    if !symlink {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(u32::from(m.perm))).with_context(ctx)?;
    }
    for x in fs.xattrs(inode)? {
        let name = OsStr::from_bytes(&x.name);
        if let Err(e) = xattr::set(path, name, &x.value) {
            // Symlinks cannot carry user.* attributes on Linux; the kernel
            // shows none there either.
            if !(symlink && e.raw_os_error() == Some(libc::EPERM)) {
                return Err(e).with_context(|| format!("{}: setting xattr {}", path.display(), name.to_string_lossy()));
            }
        }
    }
    // utimensat on the path itself: opening a FIFO to set times would block.
    let ts = |t: ext4kit_format::inode::Timestamp| TimeSpec::new(t.secs, i64::from(t.nsecs));
    utimensat(
        AT_FDCWD,
        path,
        &ts(m.atime),
        &ts(m.mtime),
        UtimensatFlags::NoFollowSymlink,
    )
    .with_context(ctx)?;
    Ok(())
}

fn make_node(ft: FileType, m: &Metadata, path: &Path) -> Result<()> {
    let kind = match ft {
        FileType::CharDevice => SFlag::S_IFCHR,
        FileType::BlockDevice => SFlag::S_IFBLK,
        FileType::Fifo => SFlag::S_IFIFO,
        FileType::Socket => SFlag::S_IFSOCK,
        _ => bail!("{}: not a special file", path.display()),
    };
    let dev = makedev(u64::from(m.rdev.0), u64::from(m.rdev.1));
    mknod(path, kind, Mode::from_bits_truncate(0o600), dev).with_context(|| format!("{}: mknod", path.display()))?;
    Ok(())
}
