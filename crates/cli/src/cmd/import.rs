//! `ext4kit import IMAGE SRC DEST`: copies a host tree into an image (what
//! `mke2fs -d` does for a new one) — regular files (holes kept), directories,
//! symlinks, device nodes, FIFOs, sockets, hard links, modes, owners,
//! nanosecond times and xattrs. Host reading lives here; every change to the
//! image is an engine call.

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::Path;

use anyhow::{Context, Result, bail};
use ext4kit_engine::{Attr, Batch, Filesystem, NodeKind, SetAttr, XattrSet};
use ext4kit_format::inode::Timestamp;

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
    let meta = fs::symlink_metadata(src).with_context(|| src.display().to_string())?;
    if meta.is_dir() {
        im.dir_contents(src, dest.ino)?;
        if own_root {
            let perm = (meta.mode() & 0o7777) as u16;
            im.fs.setattr(
                dest.ino,
                &SetAttr {
                    perm: Some(perm),
                    uid: Some(meta.uid()),
                    gid: Some(meta.gid()),
                    ..SetAttr::default()
                },
            )?;
            im.finish(src, dest.ino, &meta)?;
        }
    } else {
        let name = src.file_name().context("source has no file name")?;
        im.entry(src, dest.ino, name.as_bytes())?;
    }
    im.fs.finish()?;
    fs.sync()?;
    Ok(())
}

struct Importer<'a> {
    /// Every change goes through the batch.
    fs: Batch<'a>,
    /// Host (dev, ino) → image inode, for hard links.
    links: HashMap<(u64, u64), u32>,
    buf: Vec<u8>,
}

impl Importer<'_> {
    fn dir_contents(&mut self, dir: &Path, parent: u32) -> Result<()> {
        let mut names: Vec<_> = fs::read_dir(dir)?.collect::<std::io::Result<_>>()?;
        names.sort_by_key(|e| e.file_name());
        for e in names {
            self.entry(&e.path(), parent, e.file_name().as_bytes())?;
        }
        Ok(())
    }

    fn entry(&mut self, path: &Path, parent: u32, name: &[u8]) -> Result<()> {
        let m = fs::symlink_metadata(path).with_context(|| path.display().to_string())?;
        let ctx = || path.display().to_string();
        if !m.is_dir()
            && m.nlink() > 1
            && let Some(&ino) = self.links.get(&(m.dev(), m.ino()))
        {
            return self.fs.link(ino, parent, name).with_context(ctx);
        }
        let ft = m.file_type();
        let kind = if ft.is_dir() {
            NodeKind::Directory
        } else if ft.is_symlink() {
            NodeKind::Symlink(fs::read_link(path)?.as_os_str().as_bytes().to_vec())
        } else if ft.is_char_device() {
            NodeKind::CharDevice(major(m.rdev()), minor(m.rdev()))
        } else if ft.is_block_device() {
            NodeKind::BlockDevice(major(m.rdev()), minor(m.rdev()))
        } else if ft.is_fifo() {
            NodeKind::Fifo
        } else if ft.is_socket() {
            NodeKind::Socket
        } else {
            NodeKind::Regular
        };
        let attr = Attr {
            perm: (m.mode() & 0o7777) as u16,
            uid: m.uid(),
            gid: m.gid(),
        };
        let ino = self.fs.create(parent, name, kind, attr).with_context(ctx)?.ino;
        if ft.is_file() {
            self.copy_data(path, ino, m.len())?;
            if m.nlink() > 1 {
                self.links.insert((m.dev(), m.ino()), ino);
            }
        } else if ft.is_dir() {
            self.dir_contents(path, ino)?;
        }
        self.finish(path, ino, &m)
    }

    /// Copies the data ranges (SEEK_DATA/SEEK_HOLE keeps holes as holes).
    fn copy_data(&mut self, path: &Path, ino: u32, len: u64) -> Result<()> {
        let f = File::open(path).with_context(|| path.display().to_string())?;
        let ranges = data_ranges(&f, len);
        let written_to = ranges.last().map_or(0, |r| r.1.min(len));
        for (start, end) in ranges {
            let mut off = start;
            while off < end {
                let want = ((end - off) as usize).min(self.buf.len());
                let n = f.read_at(&mut self.buf[..want], off)?;
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
    fn finish(&mut self, path: &Path, ino: u32, m: &fs::Metadata) -> Result<()> {
        let names = xattr::list(path).map(|l| l.collect::<Vec<_>>()).unwrap_or_default();
        for n in names {
            if let Some(v) = xattr::get(path, &n)? {
                self.fs
                    .set_xattr(ino, n.as_bytes(), &v, XattrSet::Any)
                    .with_context(|| format!("{}: xattr {}", path.display(), n.to_string_lossy()))?;
            }
        }
        let ts = |s: i64, ns: i64| Timestamp {
            secs: s,
            nsecs: ns.clamp(0, 999_999_999) as u32,
        };
        let set = SetAttr {
            atime: Some(ts(m.atime(), m.atime_nsec())),
            mtime: Some(ts(m.mtime(), m.mtime_nsec())),
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
