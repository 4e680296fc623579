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
}

/// Totals of one export.
#[derive(Debug, Default)]
struct Stats {
    files: u64,
    dirs: u64,
    bytes: u64,
    links: u64,
}

struct Exporter<'a> {
    fs: &'a Filesystem,
    linked: HashMap<u32, PathBuf>,
    visited_dirs: HashSet<u32>,
    chown: bool,
    buf: Vec<u8>,
    stats: Stats,
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
        ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let mut ex = Exporter {
        fs: &fs,
        linked: HashMap::new(),
        visited_dirs: HashSet::new(),
        chown: nix::unistd::geteuid().is_root(),
        buf: vec![0u8; 1 << 20],
        stats: Stats::default(),
        pb,
    };
    let t = Instant::now();
    if root.is_dir() {
        ex.tree(root.ino, dest)?;
    } else {
        ex.entry(&root, &dest)?;
    }
    ex.pb.finish_and_clear();
    let s = &ex.stats;
    if !a.quiet {
        eprintln!(
            "exported {} files, {} directories, {} hard links, {} bytes in {:.2?}",
            s.files,
            s.dirs,
            s.links,
            s.bytes,
            t.elapsed()
        );
    }
    Ok(())
}

fn check_dest(dest: &Path) -> Result<()> {
    match fs::symlink_metadata(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("{}", dest.display())),
        Ok(m) if m.is_dir() && fs::read_dir(dest)?.next().is_none() => Ok(()),
        Ok(_) => bail!(
            "{}: destination exists and is not an empty directory",
            dest.display()
        ),
    }
}

impl Exporter<'_> {
    /// Copies the directory `ino` to `dest`, depth first with an explicit
    /// stack; directory metadata is applied after the contents so their
    /// times survive.
    fn tree(&mut self, ino: u32, dest: PathBuf) -> Result<()> {
        let mut stack = vec![Step::Enter(ino, dest)];
        while let Some(step) = stack.pop() {
            match step {
                Step::Finish(inode, path) => self.apply_metadata(&inode, &path)?,
                Step::Enter(ino, path) => {
                    if !self.visited_dirs.insert(ino) {
                        bail!(
                            "directory inode {ino} is reachable twice (a directory loop); {} not exported",
                            path.display()
                        );
                    }
                    let dir = self.fs.inode(ino)?;
                    if !path.exists() {
                        fs::create_dir(&path).with_context(|| format!("{}", path.display()))?;
                    }
                    self.stats.dirs += 1;
                    let entries = self.fs.read_dir(&dir)?;
                    stack.push(Step::Finish(Box::new(dir), path.clone()));
                    for e in entries.into_iter().rev() {
                        if e.name == b"." || e.name == b".." {
                            continue;
                        }
                        let child = path.join(OsStr::from_bytes(&e.name));
                        let inode = self.fs.inode(e.ino)?;
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

    /// Copies one non-directory inode.
    fn entry(&mut self, inode: &Inode, path: &Path) -> Result<()> {
        let m = self.fs.metadata(inode)?;
        if m.nlink > 1 {
            if let Some(first) = self.linked.get(&inode.ino) {
                fs::hard_link(first, path).with_context(|| format!("{}", path.display()))?;
                self.stats.links += 1;
                return Ok(());
            }
            self.linked.insert(inode.ino, path.to_path_buf());
        }
        match m.file_type {
            FileType::Regular => self.copy_data(inode, path)?,
            FileType::Symlink => {
                let target = self.fs.read_link(inode)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), path)
                    .with_context(|| format!("{}", path.display()))?;
            }
            FileType::Directory => unreachable!("directories go through tree()"),
            other => make_node(other, &m, path)?,
        }
        self.stats.files += 1;
        self.pb.set_message(format!(
            "{} files, {} MiB",
            self.stats.files,
            self.stats.bytes >> 20
        ));
        self.apply_metadata(inode, path)
    }

    /// Writes the mapped runs only, so holes and unwritten extents stay holes.
    fn copy_data(&mut self, inode: &Inode, path: &Path) -> Result<()> {
        let out = File::create_new(path).with_context(|| format!("{}", path.display()))?;
        let size = inode.size();
        let bs = self.fs.block_size() as u64;
        let ranges: Vec<(u64, u64)> = if inode.has_inline_data() {
            vec![(0, size)]
        } else {
            self.fs
                .all_runs(inode)?
                .iter()
                .filter(|r| !r.unwritten)
                .map(|r| (r.logical * bs, (r.end() * bs).min(size)))
                .collect()
        };
        for (mut off, end) in ranges {
            while off < end {
                let want = ((end - off) as usize).min(self.buf.len());
                let n = self.fs.read_at(inode, off, &mut self.buf[..want])?;
                if n == 0 {
                    break;
                }
                out.write_all_at(&self.buf[..n], off)
                    .with_context(|| format!("{}", path.display()))?;
                off += n as u64;
                self.stats.bytes += n as u64;
            }
        }
        out.set_len(size)?;
        Ok(())
    }

    /// Owner (as root), mode, xattrs, then times — in that order, because
    /// chown clears set-id bits and capabilities.
    fn apply_metadata(&self, inode: &Inode, path: &Path) -> Result<()> {
        let m = self.fs.metadata(inode)?;
        let ctx = || format!("{}", path.display());
        let symlink = m.file_type == FileType::Symlink;
        if self.chown {
            std::os::unix::fs::lchown(path, Some(m.uid), Some(m.gid)).with_context(ctx)?;
        }
        if !symlink {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(path, fs::Permissions::from_mode(u32::from(m.perm)))
                .with_context(ctx)?;
        }
        for x in self.fs.xattrs(inode)? {
            let name = OsStr::from_bytes(&x.name);
            if let Err(e) = xattr::set(path, name, &x.value) {
                // Symlinks cannot carry user.* attributes on Linux; the kernel
                // shows none there either.
                if !(symlink && e.raw_os_error() == Some(libc::EPERM)) {
                    return Err(e).with_context(|| {
                        format!(
                            "{}: setting xattr {}",
                            path.display(),
                            name.to_string_lossy()
                        )
                    });
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
    mknod(path, kind, Mode::from_bits_truncate(0o600), dev)
        .with_context(|| format!("{}: mknod", path.display()))?;
    Ok(())
}
