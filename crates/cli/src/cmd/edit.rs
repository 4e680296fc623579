//! Namespace edits on an image: `mkdir`, `rm`, `ln`, `touch`, `write`,
//! `chmod`, `chown`, `mv`. Each is a thin loop over engine operations; the
//! engine keeps the image consistent (one transaction per operation, one
//! batch for a tree or a file's data).
//!
//! Every command checks its whole request before its first change: each
//! path resolves as the command needs, no path ends in `.` or `..` (such a
//! name is an alias of a directory, and GNU `rm` refuses it for that reason:
//! `rm -r /..` would empty `/`), the root is never removed. A command that
//! fails half-way through several paths says which ones it finished.

use std::io::Read;

use anyhow::{Context, Result, bail};
use ext4kit_engine::{Attr, Error, Filesystem, Inode, NodeKind, ROOT_INO, SetAttr};

use crate::ImageArgs;
use crate::open::open_rw;

/// Splits `path` into its parent directory's path and its last name,
/// refusing the root and names that are aliases (`.`, `..`).
fn split(path: &str) -> Result<(&str, &str)> {
    let trimmed = path.trim_end_matches('/');
    let (dir, name) = match trimmed.rfind('/') {
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => ("", trimmed),
    };
    if name.is_empty() && path.starts_with('/') {
        bail!("{path}: refusing to change the root directory '/' itself");
    }
    if name.is_empty() {
        bail!("{path}: no file name");
    }
    if name == "." || name == ".." {
        bail!("{path}: refusing a path ending in '.' or '..' (name the directory itself)");
    }
    Ok((dir, name))
}

/// Splits `path` into its parent directory's inode and the last name.
fn parent_and_name<'p>(fs: &Filesystem, path: &'p str) -> Result<(u32, &'p [u8])> {
    let (dir, name) = split(path)?;
    let parent = if dir.is_empty() {
        ROOT_INO
    } else {
        let p = fs
            .resolve_opts(dir.as_bytes(), true)
            .with_context(|| path.to_string())?;
        if !p.is_dir() {
            bail!("{path}: {dir} is not a directory");
        }
        p.ino
    };
    Ok((parent, name.as_bytes()))
}

/// Resolves an existing path for a command that changes it in place.
fn existing(fs: &Filesystem, path: &str, follow: bool) -> Result<Inode> {
    split(path)?;
    fs.resolve_opts(path.as_bytes(), follow)
        .with_context(|| path.to_string())
}

/// `path` as components without `.` and empty ones, for telling whether a
/// path names one created earlier by the same command; `None` when it
/// goes through `..` (then only the image can tell).
fn lexical(path: &str) -> Option<Vec<&str>> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    (!parts.contains(&"..")).then_some(parts)
}

/// Runs `op` on each path in order; an error names the paths already done.
fn each<'p>(paths: &'p [String], mut op: impl FnMut(&'p str) -> Result<()>) -> Result<()> {
    for (i, path) in paths.iter().enumerate() {
        if let Err(e) = op(path) {
            if i == 0 {
                return Err(e);
            }
            return Err(e.context(format!("stopped at {path}; done before it: {}", paths[..i].join(", "))));
        }
    }
    Ok(())
}

fn owner() -> (u32, u32) {
    (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw())
}

fn attr(perm: u16) -> Attr {
    let (uid, gid) = owner();
    Attr { perm, uid, gid }
}

fn parse_mode(s: &str) -> Result<u16> {
    u16::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .with_context(|| format!("{s}: not an octal mode"))
}

/// Arguments of `mkdir`.
#[derive(clap::Args)]
pub struct MkdirArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Directories to create.
    #[arg(required = true)]
    paths: Vec<String>,
    /// Create missing parents; no error if a directory exists.
    #[arg(short)]
    p: bool,
    /// Permission bits, octal.
    #[arg(short, default_value = "755")]
    mode: String,
}

/// Creates directories.
pub fn mkdir(a: MkdirArgs) -> Result<()> {
    let perm = parse_mode(&a.mode)?;
    let fs = open_rw(&a.image)?;
    let mut made: Vec<Vec<&str>> = Vec::new();
    for path in &a.paths {
        let (dir, _) = split(path)?;
        let earlier = |p: &str| lexical(p).is_some_and(|l| made.contains(&l));
        if a.p {
            check_mkdir_p(&fs, path)?;
        } else if earlier(path) {
            bail!("{path}: named twice");
        } else if !earlier(dir) {
            let (parent, name) = parent_and_name(&fs, path)?;
            if fs.lookup(&fs.inode(parent)?, name).is_ok() {
                bail!("{path}: {}", Error::Exists(String::from_utf8_lossy(name).into_owned()));
            }
        }
        made.extend(lexical(path));
    }
    each(&a.paths, |path| {
        if a.p {
            let mut cur = ROOT_INO;
            for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
                let dir = fs.inode(cur)?;
                cur = match fs.lookup(&dir, part.as_bytes()) {
                    Ok(ino) => ino,
                    Err(Error::NotFound(_)) => fs.create(cur, part.as_bytes(), NodeKind::Directory, attr(perm))?.ino,
                    Err(e) => return Err(e).with_context(|| path.to_string()),
                };
            }
            return Ok(());
        }
        let (parent, name) = parent_and_name(&fs, path)?;
        fs.create(parent, name, NodeKind::Directory, attr(perm))
            .with_context(|| path.to_string())?;
        Ok(())
    })
}

/// `mkdir -p`: every component that exists is a directory, and none after
/// the first missing one is `..`.
fn check_mkdir_p(fs: &Filesystem, path: &str) -> Result<()> {
    let mut cur = Some(fs.inode(ROOT_INO)?);
    for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        let Some(dir) = cur else {
            if part == ".." {
                bail!("{path}: '..' after a directory that does not exist yet");
            }
            continue;
        };
        cur = match fs.lookup(&dir, part.as_bytes()) {
            Ok(ino) => {
                let inode = fs.inode(ino)?;
                if !inode.is_dir() {
                    bail!("{path}: {part} exists and is not a directory");
                }
                Some(inode)
            }
            Err(Error::NotFound(_)) => None,
            Err(e) => return Err(e).with_context(|| path.to_string()),
        };
    }
    Ok(())
}

/// Arguments of `rm`.
#[derive(clap::Args)]
pub struct RmArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Paths to remove.
    #[arg(required = true)]
    paths: Vec<String>,
    /// Remove directories and their contents.
    #[arg(short)]
    r: bool,
    /// Remove empty directories.
    #[arg(short)]
    d: bool,
}

/// Removes files (and, with `-r`/`-d`, directories). Every path is checked
/// first; a tree goes through the engine's [`Filesystem::remove_tree`].
pub fn rm(a: RmArgs) -> Result<()> {
    let fs = open_rw(&a.image)?;
    let mut targets = Vec::with_capacity(a.paths.len());
    for path in &a.paths {
        let last = path.trim_end_matches('/').rsplit('/').next();
        if matches!(last, Some("." | "..")) {
            bail!("{path}: refusing to remove '.' or '..' directory");
        }
        let (parent, name) = parent_and_name(&fs, path)?;
        let ino = fs.lookup(&fs.inode(parent)?, name).with_context(|| path.clone())?;
        let target = fs.inode(ino)?;
        if target.is_dir() && !a.r {
            if !a.d {
                bail!("{path}: is a directory (use -d or -r)");
            }
            if fs.read_dir(&target)?.len() > 2 {
                bail!("{path}: directory not empty (ENOTEMPTY)");
            }
        }
        targets.push((path.as_str(), parent, name, ino));
    }
    let mut done: Vec<&str> = Vec::new();
    for (path, parent, name, ino) in targets {
        // Validated above: a target gone now was inside one removed before it.
        if fs.lookup(&fs.inode(parent)?, name).ok() != Some(ino) {
            continue;
        }
        let r = if a.r {
            fs.remove_tree(parent, name).map(drop).map_err(anyhow::Error::from)
        } else if fs.inode(ino)?.is_dir() {
            fs.rmdir(parent, name).map_err(anyhow::Error::from)
        } else {
            fs.unlink(parent, name).map_err(anyhow::Error::from)
        };
        if let Err(e) = r {
            let e = e.context(path.to_string());
            if done.is_empty() {
                return Err(e);
            }
            return Err(e.context(format!("removed before it: {}", done.join(", "))));
        }
        done.push(path);
    }
    Ok(())
}

/// Arguments of `ln`.
#[derive(clap::Args)]
pub struct LnArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Existing path (or, with -s, the link's target text).
    target: String,
    /// The new name.
    link: String,
    /// Make a symbolic link.
    #[arg(short)]
    s: bool,
}

/// Makes a hard or symbolic link.
pub fn ln(a: LnArgs) -> Result<()> {
    let fs = open_rw(&a.image)?;
    let (parent, name) = parent_and_name(&fs, &a.link)?;
    if a.s {
        fs.create(parent, name, NodeKind::Symlink(a.target.into_bytes()), attr(0o777))
            .with_context(|| a.link.clone())?;
    } else {
        let target = existing(&fs, &a.target, false)?;
        fs.link(target.ino, parent, name).with_context(|| a.link.clone())?;
    }
    Ok(())
}

/// Arguments of `touch`.
#[derive(clap::Args)]
pub struct TouchArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Files to create or to stamp with the current time.
    #[arg(required = true)]
    paths: Vec<String>,
}

/// Creates empty files or updates their times.
pub fn touch(a: TouchArgs) -> Result<()> {
    let fs = open_rw(&a.image)?;
    for path in &a.paths {
        match existing(&fs, path, true) {
            Ok(_) => {}
            Err(e)
                if e.downcast_ref::<Error>()
                    .is_some_and(|e| matches!(e, Error::NotFound(_))) =>
            {
                parent_and_name(&fs, path)?;
            }
            Err(e) => return Err(e),
        }
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let t = ext4kit_format::inode::Timestamp {
        secs: now.as_secs() as i64,
        nsecs: now.subsec_nanos(),
    };
    each(&a.paths, |path| {
        match fs.resolve_opts(path.as_bytes(), true) {
            Ok(inode) => {
                fs.setattr(
                    inode.ino,
                    &SetAttr {
                        atime: Some(t),
                        mtime: Some(t),
                        ..SetAttr::default()
                    },
                )?;
            }
            Err(Error::NotFound(_)) => {
                let (parent, name) = parent_and_name(&fs, path)?;
                fs.create(parent, name, NodeKind::Regular, attr(0o644))?;
            }
            Err(e) => return Err(e).with_context(|| path.to_string()),
        }
        Ok(())
    })
}

/// Arguments of `write`.
#[derive(clap::Args)]
pub struct WriteArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// File to write standard input to; created when missing.
    path: String,
    /// Write at this byte offset of an existing file instead of creating one.
    #[arg(long)]
    offset: Option<u64>,
}

/// Copies standard input into a file of the image, all or nothing. A new
/// file is built without a name (the engine's `O_TMPFILE`) and named in
/// the last commit, so at any size — through several commits, an error or
/// a crash — it appears whole or not at all; an error frees it. Written
/// at `--offset` into an existing file, the data goes through one batch,
/// and on error the file gets its old size back.
pub fn write(a: WriteArgs) -> Result<()> {
    let fs = open_rw(&a.image)?;
    let (parent, name) = parent_and_name(&fs, &a.path)?;
    let existing = match a.offset {
        Some(_) => {
            let inode = existing(&fs, &a.path, true)?;
            if inode.is_dir() {
                bail!("{}: {}", a.path, Error::IsDir("cannot write into a directory".into()));
            }
            Some(inode)
        }
        None => {
            if fs.lookup(&fs.inode(parent)?, name).is_ok() {
                bail!(
                    "{}: {}",
                    a.path,
                    Error::Exists("the file exists (use --offset to write into it)".into())
                );
            }
            None
        }
    };
    let mut batch = fs.batch()?;
    let (ino, start) = match &existing {
        Some(inode) => (inode.ino, a.offset.unwrap_or(0)),
        None => (
            batch
                .create_tmpfile(parent, attr(0o644))
                .with_context(|| a.path.clone())?
                .ino,
            0,
        ),
    };
    let mut off = start;
    let r = copy_stdin(&mut batch, ino, &mut off)
        .and_then(|()| match existing {
            None => Ok(batch.link_tmpfile(ino, parent, name)?),
            Some(_) => Ok(()),
        })
        .and_then(|()| Ok(batch.commit()?));
    let committed = batch.committed();
    drop(batch);
    if existing.is_none() {
        // Frees the file if it never got its name.
        let released = fs.release_file(ino);
        if r.is_ok() {
            released?;
        }
    }
    let Err(e) = r else { return Ok(()) };
    let written = off - start;
    let undo = match &existing {
        None => "nothing was stored".to_string(),
        Some(_) if committed == 0 => "the file is unchanged".to_string(),
        Some(old) => {
            let size = old.size();
            let grown = fs.inode(ino).map(|i| i.size() > size).unwrap_or(true);
            match if grown { fs.truncate(ino, size) } else { Ok(()) } {
                Ok(()) => format!("bytes from offset {start} on may hold new data; the size is {size} as before"),
                Err(u) => format!("bytes from offset {start} on may hold new data; the size was not restored ({u})"),
            }
        }
    };
    let e = match e.downcast_ref::<Error>() {
        Some(Error::NoSpace | Error::DirIndexFull(_)) => e.context("no space left in the image (ENOSPC)"),
        _ => e,
    };
    Err(e.context(format!("{}: write failed after {written} bytes; {undo}", a.path)))
}

/// Feeds standard input to `ino` from `*off` on, moving `*off` along.
fn copy_stdin(batch: &mut ext4kit_engine::Batch<'_>, ino: u32, off: &mut u64) -> Result<()> {
    let mut buf = vec![0u8; 4 << 20];
    let mut input = std::io::stdin().lock();
    loop {
        let n = input.read(&mut buf).context("reading standard input")?;
        if n == 0 {
            return Ok(());
        }
        batch.write(ino, *off, &buf[..n])?;
        *off += n as u64;
    }
}

/// Arguments of `chmod`.
#[derive(clap::Args)]
pub struct ChmodArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Octal mode.
    mode: String,
    /// Paths.
    #[arg(required = true)]
    paths: Vec<String>,
}

/// Changes permission bits.
pub fn chmod(a: ChmodArgs) -> Result<()> {
    let perm = parse_mode(&a.mode)?;
    let fs = open_rw(&a.image)?;
    let inodes = a
        .paths
        .iter()
        .map(|p| existing(&fs, p, true).map(|i| i.ino))
        .collect::<Result<Vec<_>>>()?;
    let set = SetAttr {
        perm: Some(perm),
        ..SetAttr::default()
    };
    let mut it = inodes.into_iter();
    each(&a.paths, |path| {
        let ino = it.next().context("one inode per path")?;
        fs.setattr(ino, &set).with_context(|| path.to_string())?;
        Ok(())
    })
}

/// Arguments of `chown`.
#[derive(clap::Args)]
pub struct ChownArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// `UID`, `UID:GID` or `:GID` (numbers).
    owner: String,
    /// Paths.
    #[arg(required = true)]
    paths: Vec<String>,
}

/// Changes owner and group (numeric ids: the image's users are not the host's).
pub fn chown(a: ChownArgs) -> Result<()> {
    let (u, g) = a.owner.split_once(':').unwrap_or((&a.owner, ""));
    let num = |s: &str| -> Result<Option<u32>> {
        if s.is_empty() {
            Ok(None)
        } else {
            Ok(Some(s.parse().with_context(|| format!("{s}: not a number"))?))
        }
    };
    let set = SetAttr {
        uid: num(u)?,
        gid: num(g)?,
        ..SetAttr::default()
    };
    let fs = open_rw(&a.image)?;
    let inodes = a
        .paths
        .iter()
        .map(|p| existing(&fs, p, false).map(|i| i.ino))
        .collect::<Result<Vec<_>>>()?;
    let mut it = inodes.into_iter();
    each(&a.paths, |path| {
        let ino = it.next().context("one inode per path")?;
        fs.setattr(ino, &set).with_context(|| path.to_string())?;
        Ok(())
    })
}

/// Arguments of `mv`.
#[derive(clap::Args)]
pub struct MvArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Existing path.
    from: String,
    /// New path (an existing directory receives FROM under its own name).
    to: String,
    /// Do not replace an existing name (`RENAME_NOREPLACE`).
    #[arg(short = 'n', long)]
    no_clobber: bool,
    /// Swap FROM and TO (`RENAME_EXCHANGE`).
    #[arg(long)]
    exchange: bool,
}

/// Renames a file or directory: one engine operation, a whole tree
/// included.
pub fn mv(a: MvArgs) -> Result<()> {
    let fs = open_rw(&a.image)?;
    let (op, oname) = parent_and_name(&fs, &a.from)?;
    split(&a.to)?;
    fs.lookup(&fs.inode(op)?, oname).with_context(|| a.from.clone())?;
    let into_dir = !a.exchange && fs.resolve_opts(a.to.as_bytes(), true).is_ok_and(|i| i.is_dir());
    let (np, nname) = if into_dir {
        (fs.resolve_opts(a.to.as_bytes(), true)?.ino, oname)
    } else {
        parent_and_name(&fs, &a.to)?
    };
    let flags = ext4kit_engine::RenameFlags {
        noreplace: a.no_clobber,
        exchange: a.exchange,
    };
    fs.rename(op, oname, np, nname, flags)
        .with_context(|| format!("{} -> {}", a.from, a.to))?;
    Ok(())
}
