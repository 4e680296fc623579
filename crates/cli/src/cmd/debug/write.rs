//! debugfs's writing commands, each one engine transaction
//! (`ext4kit_engine::raw_edit`): `set_super_value`, `set_inode_field`,
//! `set_bg`, `freeb`/`setb`, `freei`/`seti`, `link`/`unlink`. They run
//! only on an image opened with `debug -w`.

use anyhow::{Result, bail};
use ext4kit_engine::Filesystem;
use ext4kit_engine::raw_edit::{Target, field_names};

use super::{inode_of, number};

/// `ssv FIELD VALUE`, `sif FILE FIELD VALUE`, `set_bg GROUP FIELD VALUE`;
/// `-l` lists the fields.
pub fn set_field(fs: &Filesystem, cmd: &str, args: &[String]) -> Result<()> {
    let kind = match cmd {
        "ssv" | "set_super_value" => Target::Superblock,
        "sif" | "set_inode_field" => Target::Inode(0),
        _ => Target::Group(0),
    };
    if args.first().map(String::as_str) == Some("-l") {
        return list(kind);
    }
    let (target, rest) = match kind {
        Target::Superblock => (Target::Superblock, args),
        Target::Inode(_) => (
            Target::Inode(inode_of(fs, args.first())?.ino),
            args.get(1..).unwrap_or_default(),
        ),
        Target::Group(_) => {
            let g = args.first().map(|g| number(g)).transpose()?;
            let g = g.ok_or_else(|| anyhow::anyhow!("missing group number"))?;
            (Target::Group(u32::try_from(g)?), args.get(1..).unwrap_or_default())
        }
    };
    let [field, value] = rest else {
        bail!("usage: {cmd} {}FIELD VALUE (or {cmd} -l)", what(kind))
    };
    Ok(fs.set_field(target, field, value)?)
}

fn what(kind: Target) -> &'static str {
    match kind {
        Target::Superblock => "",
        Target::Inode(_) => "FILE ",
        Target::Group(_) => "GROUP ",
    }
}

fn list(kind: Target) -> Result<()> {
    for (name, count) in field_names(kind) {
        match count {
            1 => outln!("\t{name}"),
            n => outln!("\t{name}[{n}]"),
        }
    }
    Ok(())
}

/// `setb BLOCK [COUNT]`, `freeb BLOCK [COUNT]`.
pub fn mark_blocks(fs: &Filesystem, cmd: &str, args: &[String]) -> Result<()> {
    let (start, count) = start_count(cmd, args)?;
    let used = cmd == "setb";
    for b in fs.mark_blocks(start, count, used)? {
        eprintln!(
            "{cmd}: Warning: block {b} already {}",
            if used { "set" } else { "clear" }
        );
    }
    Ok(())
}

/// `seti FILE [COUNT]`, `freei FILE [COUNT]`.
pub fn mark_inodes(fs: &Filesystem, cmd: &str, args: &[String]) -> Result<()> {
    let first = inode_of(fs, args.first())?.ino;
    let count = args.get(1).map(|c| number(c)).transpose()?.unwrap_or(1);
    let used = cmd == "seti";
    let already = fs.mark_inodes(first, u32::try_from(count)?, used)?;
    if count == 1 && !already.is_empty() {
        eprintln!("{cmd}: Warning: inode already {}", if used { "set" } else { "clear" });
    }
    Ok(())
}

fn start_count(cmd: &str, args: &[String]) -> Result<(u64, u64)> {
    match args {
        [b] => Ok((number(b)?, 1)),
        [b, c] => Ok((number(b)?, number(c)?)),
        _ => bail!("usage: {cmd} BLOCK [COUNT]"),
    }
}

/// `link FILE DEST`: DEST an existing directory (the name is FILE's last
/// component) or `DIR/NAME`; the link count is left alone.
pub fn link(fs: &Filesystem, args: &[String]) -> Result<()> {
    let [src, dest] = args else {
        bail!("usage: link FILE DEST")
    };
    let ino = inode_of(fs, Some(src))?.ino;
    let base = src.rsplit('/').next().unwrap_or(src);
    let (dir, name) = match inode_of(fs, Some(dest)) {
        Ok(d) if d.is_dir() => (d.ino, base.to_string()),
        _ => match dest.rsplit_once('/') {
            Some((d, n)) => (inode_of(fs, Some(&format!("/{d}")))?.ino, n.to_string()),
            None => (ext4kit_engine::ROOT_INO, dest.clone()),
        },
    };
    Ok(fs.link_entry(dir, name.as_bytes(), ino)?)
}

/// `unlink PATH`: the entry goes, the inode stays as it is.
pub fn unlink(fs: &Filesystem, args: &[String]) -> Result<()> {
    let [path] = args else { bail!("usage: unlink PATH") };
    let (dir, name) = match path.rsplit_once('/') {
        Some((d, n)) => (inode_of(fs, Some(&format!("/{d}")))?.ino, n),
        None => (ext4kit_engine::ROOT_INO, path.as_str()),
    };
    fs.unlink_entry(dir, name.as_bytes())?;
    Ok(())
}
