//! Formatting and host-side helpers shared by the subcommands.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};

use ext4kit_format::inode::FileType;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

/// Opens directory `name` under `dir` without following a symlink there:
/// `export` and `import` walk host trees one open directory at a time, so
/// paths of any length work and a link swapped in cannot redirect them.
pub fn open_dir_at(dir: impl AsFd, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// `ls -l` style mode string.
pub fn mode_string(ft: FileType, perm: u16) -> String {
    let t = match ft {
        FileType::Regular => '-',
        FileType::Directory => 'd',
        FileType::Symlink => 'l',
        FileType::CharDevice => 'c',
        FileType::BlockDevice => 'b',
        FileType::Fifo => 'p',
        FileType::Socket => 's',
    };
    let mut s = String::from(t);
    let bits = [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o40, 'r'),
        (0o20, 'w'),
        (0o10, 'x'),
        (0o4, 'r'),
        (0o2, 'w'),
        (0o1, 'x'),
    ];
    for (i, (bit, ch)) in bits.iter().enumerate() {
        let set = perm & bit != 0;
        let special = match i {
            2 => Some((0o4000, 's')),
            5 => Some((0o2000, 's')),
            8 => Some((0o1000, 't')),
            _ => None,
        };
        let c = match special {
            Some((sb, sc)) if perm & sb != 0 => {
                if set {
                    sc
                } else {
                    sc.to_ascii_uppercase()
                }
            }
            _ if set => *ch,
            _ => '-',
        };
        s.push(c);
    }
    s
}

/// `1 file`, `2 files`: a count with its noun agreeing.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
