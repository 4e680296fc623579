//! Inode flags (FS_IOC_GETFLAGS/SETFLAGS) through `chattr`/`lsattr`:
//! immutable and append-only files and an immutable directory. A file
//! system answering ENOTTY or EOPNOTSUPP is a loud skip saying which.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::errno::Errno;

use crate::suite::Ctx;
use crate::util::{At, CheckResult, Failure, expect_errno, open_flags, read_file, write_file};
use crate::{ensure, fail};

fn run(tool: &str, args: &[&str], p: &Path) -> Result<String, Failure> {
    let out = match Command::new(tool).args(args).arg(p).env("LC_ALL", "C").output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure::Skip(format!("`{tool}` not installed (e2fsprogs)")));
        }
        Err(e) => fail!("{tool}: {e}"),
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return Ok(text);
    }
    if text.contains("Inappropriate ioctl") {
        return Err(Failure::Skip(format!(
            "{tool} {args:?}: FS_IOC_*FLAGS returns ENOTTY here"
        )));
    }
    if text.contains("Operation not supported") {
        return Err(Failure::Skip(format!(
            "{tool} {args:?}: the flag is refused with EOPNOTSUPP here"
        )));
    }
    fail!("{tool} {args:?} {}: {}", p.display(), text.trim())
}

/// Clears the flags again however the check ends, so the work directory
/// can be removed.
struct Clear(PathBuf, &'static str);

impl Drop for Clear {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg(self.1).arg(&self.0).output();
    }
}

fn lsattr_has(p: &Path, flag: char) -> Result<bool, Failure> {
    let out = run("lsattr", &["-d"], p)?;
    Ok(out.split_whitespace().next().is_some_and(|f| f.contains(flag)))
}

pub(crate) fn immutable(c: &Ctx) -> CheckResult {
    c.need_root()?;
    let f = c.p("f");
    write_file(&f, b"frozen")?;
    run("lsattr", &["-d"], &f)?;
    run("chattr", &["+i"], &f)?;
    let _g = Clear(f.clone(), "-i");
    ensure!(lsattr_has(&f, 'i')?, "lsattr does not show i");
    expect_errno(
        open_flags(&f, false, true, 0),
        &[Errno::EPERM],
        "open immutable for write",
    )?;
    expect_errno(std::fs::remove_file(&f), &[Errno::EPERM], "unlink immutable")?;
    expect_errno(std::fs::rename(&f, c.p("g")), &[Errno::EPERM], "rename immutable")?;
    expect_errno(std::fs::hard_link(&f, c.p("h")), &[Errno::EPERM], "link immutable")?;
    expect_errno(nix::unistd::truncate(&f, 0), &[Errno::EPERM], "truncate immutable")?;
    use std::os::unix::fs::PermissionsExt;
    expect_errno(
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)),
        &[Errno::EPERM],
        "chmod immutable",
    )?;
    ensure!(read_file(&f)? == b"frozen", "immutable file unreadable");
    // An immutable directory refuses new entries.
    let d = c.p("d");
    std::fs::create_dir(&d).at("mkdir")?;
    run("chattr", &["+i"], &d)?;
    let _gd = Clear(d.clone(), "-i");
    expect_errno(
        open_flags(&d.join("x"), false, true, libc::O_CREAT),
        &[Errno::EPERM],
        "create in immutable dir",
    )?;
    run("chattr", &["-i"], &f)?;
    std::fs::remove_file(&f).at("unlink after chattr -i")
}

pub(crate) fn append_only(c: &Ctx) -> CheckResult {
    c.need_root()?;
    let f = c.p("f");
    write_file(&f, b"log:")?;
    run("chattr", &["+a"], &f)?;
    let _g = Clear(f.clone(), "-a");
    ensure!(lsattr_has(&f, 'a')?, "lsattr does not show a");
    expect_errno(
        open_flags(&f, false, true, 0),
        &[Errno::EPERM],
        "open append-only without O_APPEND",
    )?;
    expect_errno(
        open_flags(&f, false, true, libc::O_TRUNC | libc::O_APPEND),
        &[Errno::EPERM],
        "O_TRUNC on append-only",
    )?;
    let mut a = open_flags(&f, false, true, libc::O_APPEND).at("open O_APPEND")?;
    a.write_all(b"entry").at("append")?;
    ensure!(read_file(&f)? == b"log:entry", "append-only content");
    expect_errno(nix::unistd::truncate(&f, 0), &[Errno::EPERM], "truncate append-only")?;
    expect_errno(std::fs::remove_file(&f), &[Errno::EPERM], "unlink append-only")?;
    expect_errno(std::fs::rename(&f, c.p("g")), &[Errno::EPERM], "rename append-only")?;
    Ok(())
}
