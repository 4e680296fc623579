//! `ext4kit ls IMAGE [PATH] [-l] [-a] [--time-style STYLE]`.

use anyhow::Result;
use ext4kit_format::inode::FileType;

use super::dates::{self, TimeStyle};
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
        vec![ext4kit_engine::dir::DirEntry {
            ino: target.ino,
            name: a.path.clone().into_bytes(),
            file_type: None,
        }]
    };
    for e in entries {
        if !a.a && (e.name == b"." || e.name == b"..") {
            continue;
        }
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
