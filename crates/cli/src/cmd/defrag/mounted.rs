//! `ext4kit defrag` on an ext4kit mount: each regular file named, or found
//! under a directory named, is defragmented by the mount's server, asked
//! through the request of [`ext4kit_fuse::defrag_request`] (reading a
//! private extended attribute). The server calls the engine; this side
//! only finds the files and prints the outcomes.

use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ext4kit_engine::{DefragOptions, DefragOutcome};
use ext4kit_fuse::defrag_request::{DEFRAG_XATTR, decode_reply, reply_len, request_name};
use rustix::io::Errno;

use super::report::{self, Progress};
use crate::cmd::sync::FUSE_SUPER_MAGIC;

/// A file to defragment: the path shown, the path used (symlinks of
/// named paths resolved, so every request can be made without following
/// one), and whether it was named rather than found.
struct Target {
    shown: String,
    real: PathBuf,
    named: bool,
}

/// True when `path` is a directory (an image never is) or a file whose
/// server answers the size query of a defrag request, which does no work:
/// only an ext4kit mount answers that name.
pub(super) fn answers(path: &Path) -> bool {
    path.is_dir() || rustix::fs::getxattr_query(path, DEFRAG_XATTR).is_ok_and(|n| n == reply_len())
}

/// Defragments (or plans, with `opts.dry_run`) every file under `paths`
/// and prints the report; stops at the first error.
pub(super) fn run(paths: &[PathBuf], opts: &DefragOptions, json: bool) -> Result<()> {
    let mut files = Vec::new();
    for p in paths {
        prepare(p)?;
        collect(p, &mut files)?;
    }
    let name = request_name(opts);
    let mut progress = Progress::new(files.len() as u64);
    let mut done = Vec::with_capacity(files.len());
    for (i, t) in files.iter().enumerate() {
        progress.show(i as u64, &t.shown);
        if let Some(out) = request(t, &name)? {
            done.push((t.shown.as_str(), out));
        }
    }
    progress.finish();
    report::print(&done, opts.dry_run, json)
}

/// Checks that `path` is on a FUSE mount, then writes the kernel's dirty
/// pages for that mount to its server (`syncfs(2)`), so blocks the kernel
/// still caches are placed before the server plans the moves.
fn prepare(path: &Path) -> Result<()> {
    let shown = path.display();
    let meta = std::fs::metadata(path).with_context(|| format!("{shown}"))?;
    if !meta.is_dir() && !meta.is_file() {
        bail!("{shown}: not a regular file or directory");
    }
    let file = std::fs::File::open(path).with_context(|| format!("{shown}"))?;
    let fs = nix::sys::statfs::fstatfs(&file).with_context(|| format!("statfs {shown}"))?;
    if fs.filesystem_type().0 as i64 != FUSE_SUPER_MAGIC {
        bail!("{shown}: not on an ext4kit mount (not a FUSE file system)");
    }
    nix::unistd::syncfs(&file).with_context(|| format!("syncfs {shown}"))
}

/// Adds the regular file `path`, or every regular file under the
/// directory `path` in name order, not crossing into other mounts
/// (`find -xdev`) nor following symlinks. Directories below `path` the
/// caller may not read (`lost+found` of a mount, for a user) are passed
/// over with a warning.
fn collect(path: &Path, out: &mut Vec<Target>) -> Result<()> {
    let shown = path.display().to_string();
    let real = std::fs::canonicalize(path).with_context(|| shown.clone())?;
    let meta = std::fs::metadata(&real).with_context(|| shown.clone())?;
    if meta.is_file() {
        out.push(Target {
            shown,
            real,
            named: true,
        });
        return Ok(());
    }
    let mut todo = vec![(shown, real)];
    let mut top = true;
    while let Some((shown, dir)) = todo.pop() {
        let listed = std::fs::read_dir(&dir).and_then(|d| d.collect::<std::io::Result<Vec<_>>>());
        let mut entries = match listed {
            Err(e) if !top && e.kind() == ErrorKind::PermissionDenied => {
                log::warn!("{shown}: {e}: passed over");
                continue;
            }
            r => r.with_context(|| shown.clone())?,
        };
        top = false;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        let mut subdirs = Vec::new();
        for e in entries {
            let name = e.file_name();
            let child = format!("{}/{}", shown.trim_end_matches('/'), name.to_string_lossy());
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if m.is_file() {
                out.push(Target {
                    shown: child,
                    real: e.path(),
                    named: false,
                });
            } else if m.is_dir() && m.dev() == meta.dev() {
                subdirs.push((child, e.path()));
            }
        }
        todo.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

/// Asks the server to defragment `t`; `None` when a file found in a
/// directory (not named) was removed before its turn or is not the
/// caller's to defragment: a walk of a shared tree goes on past them.
fn request(t: &Target, name: &str) -> Result<Option<DefragOutcome>> {
    let shown = &t.shown;
    let mut buf = vec![0u8; reply_len()];
    match rustix::fs::lgetxattr(&t.real, name, &mut buf[..]) {
        Ok(n) => match buf.get(..n).and_then(decode_reply) {
            Some(out) => Ok(Some(out)),
            None => bail!("{shown}: not on an ext4kit mount (its server's answer is not ext4kit's defrag reply)"),
        },
        Err(Errno::NOENT) if !t.named => Ok(None),
        Err(Errno::ACCESS) if !t.named => {
            log::warn!("{shown}: not the caller's file: passed over (only root or the owner may defragment it)");
            Ok(None)
        }
        Err(Errno::NODATA | Errno::NOTSUP | Errno::NOSYS | Errno::RANGE) => {
            bail!("{shown}: not on an ext4kit mount (its server does not know ext4kit's defrag)")
        }
        Err(Errno::ROFS) => bail!("{shown}: the ext4kit mount is read-only (EROFS); defrag needs it writable"),
        Err(Errno::ACCESS) => bail!("{shown}: permission denied: only root or the file's owner may defragment it"),
        Err(e) => Err(std::io::Error::from(e)).with_context(|| format!("{shown}: defrag")),
    }
}
