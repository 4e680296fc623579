//! `ext4kit import IMAGE SRC DEST`: copies a host tree into an image (what
//! `mke2fs -d` does for a new one) — regular files (holes kept), directories,
//! symlinks, device nodes, FIFOs, sockets, hard links, modes, owners,
//! nanosecond times and xattrs. Host reading lives here; every change to the
//! image is an engine call.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ext4kit_engine::{Attr, Batch, Filesystem, NodeKind, SetAttr, XattrSet};
use ext4kit_format::inode::Timestamp;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat};
use xattr::FileExt as _;

use super::util::open_dir_at;
use crate::ImageArgs;
use crate::open::open_rw;

/// Arguments of `import`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Host directory (or file) to copy.
    src: std::path::PathBuf,
    /// Existing directory in the image that receives SRC's contents.
    #[arg(default_value = "/")]
    dest: String,
}

/// Copies the tree in.
pub fn run(a: Args) -> Result<()> {
    let fs = open_rw(&a.image)?;
    import(&fs, &a.src, &a.dest, false)
}

/// Copies `src` into directory `dest` of `fs`; with `own_root`, the
/// directory also takes `src`'s owner, mode, times and xattrs (`mkfs -d`).
///
/// The copy runs as one engine [`Batch`]: the operations share a
/// transaction that commits every few thousand operations or 64 MiB, so
/// the blocks many of them touch (bitmaps, descriptors, superblock,
/// directory and inode-table blocks) are written once per commit. On an
/// error the image keeps what the last commit held (whole files and
/// directories up to some point of the walk, e2fsck-clean).
///
/// The host tree is read relative to open directories (`openat`,
/// `fstatat`), one at a time, so its depth is bounded neither by the
/// stack nor by `PATH_MAX`.
pub fn import(fs: &Filesystem, src: &Path, dest_path: &str, own_root: bool) -> Result<()> {
    let dest = fs.resolve_opts(dest_path.as_bytes(), true)?;
    if !dest.is_dir() {
        bail!("{dest_path}: not a directory in the image");
    }
    let mut im = Importer {
        fs: fs.batch()?,
        links: HashMap::new(),
        buf: vec![0u8; 1 << 20],
    };
    if let Err(e) = im.copy(src, dest.ino, own_root) {
        // Dropping the batch discards what its last commit did not hold.
        let kept = im.fs.committed();
        return Err(if kept == 0 {
            e.context("import stopped; nothing was imported, the image is as it was")
        } else {
            e.context(format!(
                "import stopped; the first {kept} changes of the walk (whole files and directories, in name order) stay in the image"
            ))
        });
    }
    im.fs.finish()?;
    fs.sync()?;
    Ok(())
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

fn perm(st: &FileStat) -> u16 {
    (st.st_mode & 0o7777) as u16
}

/// The names in the open directory `dir`, sorted, last first (popped in order).
fn names(dir: &OwnedFd, shown: &Path) -> Result<Vec<OsString>> {
    // Listed through the descriptor's /proc link: a short path at any depth.
    let at = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let mut names = std::fs::read_dir(&at)
        .and_then(|d| d.map(|e| e.map(|e| e.file_name())).collect::<std::io::Result<Vec<_>>>())
        .with_context(|| shown.display().to_string())?;
    names.sort_unstable_by(|a, b| b.cmp(a));
    Ok(names)
}

/// Where a host entry's xattrs are read: an open file or directory, or a
/// name in an open directory (symlinks and special files are not opened).
enum Host<'f> {
    Fd(&'f File),
    At(&'f OwnedFd, &'f OsStr),
}

/// A host directory being copied: its image inode, the names still to
/// copy, and its own status (taken before its contents were read), for
/// its times once they are done. `fresh` when this import made the image
/// directory: then its names are the host directory's, unique, and are
/// added without a lookup ([`Batch::create_new`]); the destination itself
/// may hold names already and gets [`Batch::create`], which refuses a clash.
struct Level {
    ino: u32,
    names: Vec<OsString>,
    st: FileStat,
    fresh: bool,
}

struct Importer<'a> {
    /// Every change goes through the batch.
    fs: Batch<'a>,
    /// Host (dev, ino) → image inode, for hard links.
    links: HashMap<(u64, u64), u32>,
    buf: Vec<u8>,
}

impl Importer<'_> {
    /// Copies `src` into image directory `dest` (see [`import`]).
    fn copy(&mut self, src: &Path, dest: u32, own_root: bool) -> Result<()> {
        let shown = || src.display().to_string();
        let st = fstatat(AT_FDCWD, src, AtFlags::AT_SYMLINK_NOFOLLOW).with_context(shown)?;
        if kind(&st) == SFlag::S_IFDIR {
            let top = open_dir_at(AT_FDCWD, src.as_os_str()).with_context(shown)?;
            let top = self.tree(top, src.to_path_buf(), dest)?;
            if own_root {
                self.fs.setattr(
                    dest,
                    &SetAttr {
                        perm: Some(perm(&st)),
                        uid: Some(st.st_uid),
                        gid: Some(st.st_gid),
                        ..SetAttr::default()
                    },
                )?;
                self.finish(Host::Fd(&File::from(top)), dest, &st, src)?;
            }
        } else {
            let parent = src
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let name = src.file_name().context("source has no file name")?;
            let dir = open_dir_at(AT_FDCWD, parent.as_os_str()).with_context(|| parent.display().to_string())?;
            self.entry(&dir, name, (dest, false), &st, src)?;
        }
        Ok(())
    }

    /// Copies the contents of the open host directory `top` into image
    /// directory `ino`, depth first with an explicit stack: one host
    /// directory open at a time, and back up through `..`. Returns `top`.
    fn tree(&mut self, top: OwnedFd, mut shown: PathBuf, ino: u32) -> Result<OwnedFd> {
        let st = nix::sys::stat::fstat(&top).with_context(|| shown.display().to_string())?;
        let mut cur = top;
        let mut stack = vec![Level {
            ino,
            names: names(&cur, &shown)?,
            st,
            fresh: false,
        }];
        while let Some(level) = stack.last_mut() {
            if let Some(name) = level.names.pop() {
                let path = shown.join(&name);
                let st = fstatat(&cur, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                    .with_context(|| path.display().to_string())?;
                if kind(&st) != SFlag::S_IFDIR {
                    self.entry(&cur, &name, (level.ino, level.fresh), &st, &path)?;
                    continue;
                }
                let attr = Attr {
                    perm: perm(&st),
                    uid: st.st_uid,
                    gid: st.st_gid,
                };
                let (sub, fresh) = match self.lost_and_found(level, &name)? {
                    Some(ino) => (ino, false),
                    None => {
                        let made = self.create(level.ino, level.fresh, name.as_bytes(), NodeKind::Directory, attr);
                        (made.with_context(|| path.display().to_string())?.ino, true)
                    }
                };
                cur = open_dir_at(&cur, &name).with_context(|| path.display().to_string())?;
                shown = path;
                let names = names(&cur, &shown)?;
                stack.push(Level {
                    ino: sub,
                    names,
                    st,
                    fresh,
                });
                continue;
            }
            let done = stack.pop().context("the walk's stack")?;
            if stack.is_empty() {
                break;
            }
            self.finish(Host::Fd(&File::from(cur.try_clone()?)), done.ino, &done.st, &shown)?;
            cur = open_dir_at(&cur, OsStr::new("..")).with_context(|| format!("{}/..", shown.display()))?;
            shown.pop();
        }
        Ok(cur)
    }

    /// The image's own `lost+found` when the host directory `name` is the
    /// root's `lost+found` (a tree copied from a mounted ext2/3/4 has one):
    /// its contents go into the existing directory, as mke2fs's `-d` does,
    /// instead of failing on the name mkfs already made.
    fn lost_and_found(&self, level: &Level, name: &OsStr) -> Result<Option<u32>> {
        if level.fresh || level.ino != ext4kit_engine::ROOT_INO || name.as_bytes() != b"lost+found" {
            return Ok(None);
        }
        match self.fs.lookup(level.ino, b"lost+found") {
            Ok(ino) if self.fs.inode(ino)?.is_dir() => Ok(Some(ino)),
            _ => Ok(None),
        }
    }

    /// Creates `name` in image directory `parent`, without a lookup when
    /// `fresh` (see [`Level`]).
    fn create(
        &mut self,
        parent: u32,
        fresh: bool,
        name: &[u8],
        node: NodeKind,
        attr: Attr,
    ) -> ext4kit_engine::Result<ext4kit_engine::Inode> {
        if fresh {
            self.fs.create_new(parent, name, node, attr)
        } else {
            self.fs.create(parent, name, node, attr)
        }
    }

    /// Copies the non-directory `name` of host directory `dir` into image
    /// directory `parent` (the inode, and whether this import made it).
    fn entry(&mut self, dir: &OwnedFd, name: &OsStr, parent: (u32, bool), st: &FileStat, path: &Path) -> Result<()> {
        let (parent, fresh) = parent;
        let ctx = || path.display().to_string();
        let nlink = st.st_nlink;
        let key = (st.st_dev, st.st_ino);
        if nlink > 1
            && let Some(&ino) = self.links.get(&key)
        {
            return self.fs.link(ino, parent, name.as_bytes()).with_context(ctx);
        }
        let ft = kind(st);
        let rdev = st.st_rdev;
        let node = match ft {
            SFlag::S_IFDIR => bail!("{}: directories go through the walk", path.display()),
            SFlag::S_IFLNK => NodeKind::Symlink(readlinkat(dir, name).with_context(ctx)?.as_bytes().to_vec()),
            SFlag::S_IFCHR => NodeKind::CharDevice(major(rdev), minor(rdev)),
            SFlag::S_IFBLK => NodeKind::BlockDevice(major(rdev), minor(rdev)),
            SFlag::S_IFIFO => NodeKind::Fifo,
            SFlag::S_IFSOCK => NodeKind::Socket,
            _ => NodeKind::Regular,
        };
        let attr = Attr {
            perm: perm(st),
            uid: st.st_uid,
            gid: st.st_gid,
        };
        let ino = self
            .create(parent, fresh, name.as_bytes(), node, attr)
            .with_context(ctx)?
            .ino;
        if ft == SFlag::S_IFREG {
            let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let f = File::from(openat(dir, name, flags, Mode::empty()).with_context(ctx)?);
            self.copy_data(&f, ino, st.st_size as u64, path)?;
            if nlink > 1 {
                self.links.insert(key, ino);
            }
            return self.finish(Host::Fd(&f), ino, st, path);
        }
        self.finish(Host::At(dir, name), ino, st, path)
    }

    /// Copies the data ranges (SEEK_DATA/SEEK_HOLE keeps holes as holes).
    fn copy_data(&mut self, f: &File, ino: u32, len: u64, path: &Path) -> Result<()> {
        let ranges = data_ranges(f, len);
        let written_to = ranges.last().map_or(0, |r| r.1.min(len));
        for (start, end) in ranges {
            let mut off = start;
            while off < end {
                let want = ((end - off) as usize).min(self.buf.len());
                let n = f
                    .read_at(&mut self.buf[..want], off)
                    .with_context(|| path.display().to_string())?;
                if n == 0 {
                    break;
                }
                self.fs.write(ino, off, &self.buf[..n])?;
                off += n as u64;
            }
        }
        // A trailing hole still has to count in the size.
        if written_to < len {
            self.fs.truncate(ino, len)?;
        }
        Ok(())
    }

    /// Times and xattrs, after the contents (writing changes mtime).
    fn finish(&mut self, host: Host<'_>, ino: u32, st: &FileStat, path: &Path) -> Result<()> {
        let xattrs = match host {
            Host::Fd(f) => f
                .list_xattr()
                .map(|l| {
                    l.filter_map(|n| f.get_xattr(&n).ok().flatten().map(|v| (n, v)))
                        .collect()
                })
                .unwrap_or_default(),
            Host::At(dir, name) => {
                // No `llistxattrat`: the directory's /proc link keeps the path short.
                let mut p = OsString::from(format!("/proc/self/fd/{}/", dir.as_raw_fd()));
                p.push(name);
                xattr::list(&p)
                    .map(|l| {
                        l.filter_map(|n| xattr::get(&p, &n).ok().flatten().map(|v| (n, v)))
                            .collect()
                    })
                    .unwrap_or_else(|_| Vec::<(OsString, Vec<u8>)>::new())
            }
        };
        for (n, v) in xattrs {
            self.fs
                .set_xattr(ino, n.as_bytes(), &v, XattrSet::Any)
                .with_context(|| format!("{}: xattr {}", path.display(), n.to_string_lossy()))?;
        }
        let ts = |s: i64, ns: i64| Timestamp {
            secs: s,
            nsecs: ns.clamp(0, 999_999_999) as u32,
        };
        let set = SetAttr {
            atime: Some(ts(st.st_atime, st.st_atime_nsec)),
            mtime: Some(ts(st.st_mtime, st.st_mtime_nsec)),
            ..SetAttr::default()
        };
        self.fs.setattr(ino, &set)?;
        Ok(())
    }
}

/// The data ranges of `f` (one range for the whole file when the host
/// cannot tell holes apart).
fn data_ranges(f: &File, len: u64) -> Vec<(u64, u64)> {
    use nix::unistd::{Whence, lseek};
    let mut out = Vec::new();
    let mut pos = 0i64;
    while (pos as u64) < len {
        let Ok(data) = lseek(f, pos, Whence::SeekData) else {
            break;
        };
        let hole = lseek(f, data, Whence::SeekHole).unwrap_or(len as i64);
        out.push((data as u64, hole as u64));
        pos = hole;
    }
    if out.is_empty() && len > 0 && lseek(f, 0, Whence::SeekData).is_err_and(|e| e != nix::errno::Errno::ENXIO) {
        out.push((0, len));
    }
    out
}

fn major(dev: u64) -> u32 {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)) as u32
}

fn minor(dev: u64) -> u32 {
    (((dev >> 12) & 0xffff_ff00) | (dev & 0xff)) as u32
}
