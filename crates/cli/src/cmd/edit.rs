//! Namespace edits on an image: `mkdir`, `rm`, `ln`, `touch`, `write`,
//! `chmod`, `chown`. Each is a thin loop over engine operations; the engine
//! keeps the image consistent (one transaction per operation).

use std::io::Read;

use anyhow::{Context, Result, bail};
use ext4kit_engine::{Attr, Filesystem, NodeKind, ROOT_INO, SetAttr};

use crate::ImageArgs;
use crate::open::open_rw;

/// Splits `path` into its parent directory's inode and the last name.
fn parent_and_name<'p>(fs: &Filesystem, path: &'p str) -> Result<(u32, &'p [u8])> {
    let trimmed = path.trim_end_matches('/');
    let (dir, name) = match trimmed.rfind('/') {
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => ("", trimmed),
    };
    if name.is_empty() {
        bail!("{path}: no file name");
    }
    let parent = if dir.is_empty() {
        ROOT_INO
    } else {
        fs.resolve_opts(dir.as_bytes(), true)?.ino
    };
    Ok((parent, name.as_bytes()))
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
    let fs = open_rw(&a.image)?;
    let perm = parse_mode(&a.mode)?;
    for path in &a.paths {
        if a.p {
            let mut cur = ROOT_INO;
            for part in path.split('/').filter(|p| !p.is_empty()) {
                let dir = fs.inode(cur)?;
                cur = match fs.lookup(&dir, part.as_bytes()) {
                    Ok(ino) => ino,
                    Err(ext4kit_engine::Error::NotFound(_)) => {
                        fs.create(cur, part.as_bytes(), NodeKind::Directory, attr(perm))?.ino
                    }
                    Err(e) => return Err(e).with_context(|| path.clone()),
                };
            }
            continue;
        }
        let (parent, name) = parent_and_name(&fs, path)?;
        fs.create(parent, name, NodeKind::Directory, attr(perm))
            .with_context(|| path.clone())?;
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

/// Removes files (and, with `-r`/`-d`, directories).
pub fn rm(a: RmArgs) -> Result<()> {
    let fs = open_rw(&a.image)?;
    for path in &a.paths {
        let (parent, name) = parent_and_name(&fs, path)?;
        let target = fs.inode(fs.lookup(&fs.inode(parent)?, name)?)?;
        if !target.is_dir() {
            fs.unlink(parent, name).with_context(|| path.clone())?;
        } else if a.r {
            remove_tree(&fs, target.ino)?;
            fs.rmdir(parent, name).with_context(|| path.clone())?;
        } else if a.d {
            fs.rmdir(parent, name).with_context(|| path.clone())?;
        } else {
            bail!("{path}: is a directory (use -d or -r)");
        }
    }
    Ok(())
}

/// Empties directory `dir`, depth first.
fn remove_tree(fs: &Filesystem, dir: u32) -> Result<()> {
    for e in fs.read_dir(&fs.inode(dir)?)? {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let child = fs.inode(e.ino)?;
        if child.is_dir() {
            remove_tree(fs, e.ino)?;
            fs.rmdir(dir, &e.name)?;
        } else {
            fs.unlink(dir, &e.name)?;
        }
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
        fs.create(parent, name, NodeKind::Symlink(a.target.into_bytes()), attr(0o777))?;
    } else {
        let target = fs.resolve(a.target.as_bytes())?;
        fs.link(target.ino, parent, name)?;
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
        match fs.resolve_opts(path.as_bytes(), true) {
            Ok(inode) => {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
                let t = ext4kit_format::inode::Timestamp {
                    secs: now.as_secs() as i64,
                    nsecs: now.subsec_nanos(),
                };
                fs.setattr(
                    inode.ino,
                    &SetAttr {
                        atime: Some(t),
                        mtime: Some(t),
                        ..SetAttr::default()
                    },
                )?;
            }
            Err(ext4kit_engine::Error::NotFound(_)) => {
                let (parent, name) = parent_and_name(&fs, path)?;
                fs.create(parent, name, NodeKind::Regular, attr(0o644))?;
            }
            Err(e) => return Err(e).with_context(|| path.clone()),
        }
    }
    Ok(())
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

/// Copies standard input into a file of the image.
pub fn write(a: WriteArgs) -> Result<()> {
    let fs = open_rw(&a.image)?;
    let (ino, mut off) = match a.offset {
        Some(off) => (fs.resolve_opts(a.path.as_bytes(), true)?.ino, off),
        None => {
            let (parent, name) = parent_and_name(&fs, &a.path)?;
            (
                fs.create(parent, name, NodeKind::Regular, attr(0o644))
                    .with_context(|| a.path.clone())?
                    .ino,
                0,
            )
        }
    };
    let mut buf = vec![0u8; 4 << 20];
    let mut input = std::io::stdin().lock();
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        fs.write(ino, off, &buf[..n])?;
        off += n as u64;
    }
    Ok(())
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
    let fs = open_rw(&a.image)?;
    let perm = parse_mode(&a.mode)?;
    for path in &a.paths {
        let inode = fs.resolve_opts(path.as_bytes(), true)?;
        fs.setattr(
            inode.ino,
            &SetAttr {
                perm: Some(perm),
                ..SetAttr::default()
            },
        )?;
    }
    Ok(())
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
    let fs = open_rw(&a.image)?;
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
    for path in &a.paths {
        fs.setattr(fs.resolve(path.as_bytes())?.ino, &set)?;
    }
    Ok(())
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

/// Renames a file or directory.
pub fn mv(a: MvArgs) -> Result<()> {
    let fs = open_rw(&a.image)?;
    let (op, oname) = parent_and_name(&fs, &a.from)?;
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
