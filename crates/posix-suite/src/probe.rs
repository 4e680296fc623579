//! The `probe` sub-command: one system call in a child process, usually
//! running as an unprivileged uid, so the permission checks see what a
//! normal user sees and the lock checks have a second process.
//!
//! Protocol: the child prints one line, `ok [TEXT]` or `err ERRNO`, and
//! exits 0; anything else is a broken probe.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use nix::errno::Errno;

use crate::util::ToErrno;

/// Runs the probe named by `args[0]` on the path `args[1]` with optional
/// further arguments, prints the result line and returns the exit status.
pub fn main(args: &[OsString]) -> i32 {
    let Some(op) = args.first().and_then(|a| a.to_str()) else {
        eprintln!("probe: missing operation");
        return 2;
    };
    let path = PathBuf::from(args.get(1).cloned().unwrap_or_default());
    let arg = |i: usize| args.get(i).and_then(|a| a.to_str()).unwrap_or("").to_string();
    let r = run(op, &path, &arg(2), &arg(3));
    match r {
        Ok(text) => println!("ok {text}"),
        Err(Some(e)) => println!("err {}", e as i32),
        Err(None) => {
            eprintln!("probe: bad request {op}");
            return 2;
        }
    }
    0
}

fn e<T: ToErrno>(err: T) -> Option<Errno> {
    Some(err.errno().unwrap_or(Errno::EIO))
}

fn octal(s: &str) -> u32 {
    u32::from_str_radix(s, 8).unwrap_or(0o644)
}

fn run(op: &str, path: &std::path::Path, a2: &str, a3: &str) -> Result<String, Option<Errno>> {
    use std::os::unix::fs::MetadataExt;
    match op {
        "read" => {
            let mut f = OpenOptions::new().read(true).open(path).map_err(e)?;
            let mut s = Vec::new();
            f.read_to_end(&mut s).map_err(e)?;
            Ok(String::from_utf8_lossy(&s).into_owned())
        }
        "write" => {
            let mut f = OpenOptions::new().write(true).open(path).map_err(e)?;
            f.write_all(a2.as_bytes()).map_err(e)?;
            Ok(String::new())
        }
        "stat" => std::fs::symlink_metadata(path)
            .map(|m| format!("{} {} {:o}", m.uid(), m.gid(), m.mode()))
            .map_err(e),
        "create" => OpenOptions::new()
            .write(true)
            .create(true)
            .mode(octal(a2))
            .open(path)
            .map(|_| String::new())
            .map_err(e),
        "create-excl" => OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
            .map(|_| String::new())
            .map_err(e),
        "mkdir" => nix::unistd::mkdir(path, nix::sys::stat::Mode::from_bits_truncate(octal(a2)))
            .map(|_| String::new())
            .map_err(e),
        "unlink" => std::fs::remove_file(path).map(|_| String::new()).map_err(e),
        "rmdir" => std::fs::remove_dir(path).map(|_| String::new()).map_err(e),
        "rename" => std::fs::rename(path, a2).map(|_| String::new()).map_err(e),
        "readdir" => {
            let mut names: Vec<String> = std::fs::read_dir(path)
                .map_err(e)?
                .map(|d| d.map(|d| d.file_name().to_string_lossy().into_owned()))
                .collect::<Result<_, _>>()
                .map_err(e)?;
            names.sort();
            Ok(names.join(","))
        }
        "chmod" => nix::sys::stat::fchmodat(
            nix::fcntl::AT_FDCWD,
            path,
            nix::sys::stat::Mode::from_bits_truncate(octal(a2)),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map(|_| String::new())
        .map_err(e),
        "chown" => {
            let id = |s: &str| s.parse::<u32>().ok();
            std::os::unix::fs::chown(path, id(a2), id(a3))
                .map(|_| String::new())
                .map_err(e)
        }
        "utime-now" | "utime-set" => {
            let t = if op == "utime-now" {
                nix::sys::time::TimeSpec::UTIME_NOW
            } else {
                nix::sys::time::TimeSpec::new(1_000_000, 0)
            };
            nix::sys::stat::utimensat(
                nix::fcntl::AT_FDCWD,
                path,
                &t,
                &t,
                nix::sys::stat::UtimensatFlags::FollowSymlink,
            )
            .map(|_| String::new())
            .map_err(e)
        }
        "flock-nb" => {
            let f = OpenOptions::new().read(true).open(path).map_err(e)?;
            match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(_) => Ok(String::new()),
                Err((_, err)) => Err(Some(err)),
            }
        }
        "setlk" | "getlk" => posix_lock(op, path, a2, a3),
        _ => Err(None),
    }
}

/// `setlk`: a non-blocking write lock on `[start, start+len)`; `getlk`:
/// F_GETLK for that range, printing `unlocked` or the holder's pid.
fn posix_lock(op: &str, path: &std::path::Path, start: &str, len: &str) -> Result<String, Option<Errno>> {
    let f = OpenOptions::new().read(true).write(true).open(path).map_err(e)?;
    let mut fl = write_lock(start.parse().unwrap_or(0), len.parse().unwrap_or(0));
    if op == "setlk" {
        nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_SETLK(&fl)).map_err(e)?;
        Ok(String::new())
    } else {
        nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_GETLK(&mut fl)).map_err(e)?;
        if fl.l_type == libc::F_UNLCK as i16 {
            Ok("unlocked".into())
        } else {
            Ok(fl.l_pid.to_string())
        }
    }
}

/// A `struct flock` asking for a write lock on `[start, start+len)`.
pub fn write_lock(start: i64, len: i64) -> libc::flock {
    libc::flock {
        l_type: libc::F_WRLCK as i16,
        l_whence: libc::SEEK_SET as i16,
        l_start: start,
        l_len: len,
        l_pid: 0,
    }
}
