//! `ext4kit ls IMAGE [PATH] [-l] [-a] [--time-style STYLE] [--json]`.

use anyhow::Result;
use ext4kit_engine::Filesystem;
use ext4kit_engine::dir::DirEntry;
use ext4kit_format::inode::FileType;
use serde_json::{Map, Value, json};

use super::dates::{self, TimeStyle};
use super::stat::json::{put_bytes, put_time, rdev, type_name};
use super::util::mode_string;
use crate::ImageArgs;
use crate::open::open_ro;

/// Arguments of `ls`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Directory (or file) inside the image.
    #[arg(default_value = "/")]
    path: String,
    /// Long listing: inode, mode, links, owner, group, size (or device
    /// numbers), modification time, name (and a symlink's target).
    #[arg(short)]
    l: bool,
    /// Include `.` and `..`.
    #[arg(short)]
    a: bool,
    /// How `-l` prints times (ls's names; `epoch` is seconds since 1970).
    #[arg(long, value_enum, default_value_t = TimeStyle::Locale)]
    time_style: TimeStyle,
    /// `-l` with `--time-style full-iso`.
    #[arg(long)]
    full_time: bool,
    /// An array of entries, for programs; with `-l` each carries the
    /// long listing's fields (docs/json.md).
    #[arg(long)]
    json: bool,
}

/// Lists the directory in on-disk order.
pub fn run(a: Args) -> Result<()> {
    let fs = open_ro(&a.image)?;
    let (style, now) = (
        if a.full_time { TimeStyle::FullIso } else { a.time_style },
        dates::now(),
    );
    let long = a.l || a.full_time;
    let target = fs.resolve_opts(a.path.as_bytes(), true)?;
    let entries = if target.is_dir() {
        fs.read_dir(&target)?
    } else {
        vec![DirEntry {
            ino: target.ino,
            name: a.path.clone().into_bytes(),
            file_type: None,
        }]
    };
    let entries = entries
        .into_iter()
        .filter(|e| a.a || (e.name != b"." && e.name != b".."));
    if a.json {
        let v = entries.map(|e| entry_json(&fs, &e, long)).collect::<Result<Vec<_>>>()?;
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    for e in entries {
        let name = String::from_utf8_lossy(&e.name);
        if !long {
            outln!("{name}");
            continue;
        }
        let inode = fs.inode(e.ino)?;
        let m = fs.metadata(&inode)?;
        let mut line = format!(
            "{:>8} {} {:>4} {:>5} {:>5} {:>12} {} {name}",
            m.ino,
            mode_string(m.file_type, m.perm),
            m.nlink,
            m.uid,
            m.gid,
            if matches!(m.file_type, FileType::CharDevice | FileType::BlockDevice) {
                format!("{},{}", m.rdev.0, m.rdev.1)
            } else {
                m.size.to_string()
            },
            dates::format(m.mtime, style, now)
        );
        if m.file_type == FileType::Symlink {
            line.push_str(" -> ");
            line.push_str(&String::from_utf8_lossy(&fs.read_link(&inode)?));
        }
        outln!("{line}");
    }
    Ok(())
}

/// One `ls --json` entry; the type comes from the inode (the directory
/// entry's type byte is only a hint, absent without `filetype`).
fn entry_json(fs: &Filesystem, e: &DirEntry, long: bool) -> Result<Value> {
    let inode = fs.inode(e.ino)?;
    let m = fs.metadata(&inode)?;
    let mut o = Map::new();
    put_bytes(&mut o, "name", &e.name);
    o.insert("inode".into(), json!(e.ino));
    o.insert("type".into(), json!(type_name(m.file_type)));
    if !long {
        return Ok(Value::Object(o));
    }
    o.insert("mode".into(), json!(inode.raw.i_mode.get()));
    o.insert("links".into(), json!(m.nlink));
    o.insert("uid".into(), json!(m.uid));
    o.insert("gid".into(), json!(m.gid));
    o.insert("size".into(), json!(m.size));
    put_time(&mut o, "mtime", m.mtime);
    if m.file_type == FileType::Symlink {
        put_bytes(&mut o, "target", &fs.read_link(&inode)?);
    }
    if let Some(d) = rdev(&m) {
        o.insert("rdev".into(), d);
    }
    Ok(Value::Object(o))
}
