//! open(2) flags: O_CREAT|O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY,
//! O_NOFOLLOW, and the path errors (ENOENT, ENOTDIR, ENAMETOOLONG).

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use nix::errno::Errno;

use crate::suite::Ctx;
use crate::util::{At, CheckResult, expect_errno, lstat, open_flags, read_file, write_file};
use crate::{ensure, fail};

pub(crate) fn creat_excl(c: &Ctx) -> CheckResult {
    let a = c.p("a");
    open_flags(&a, false, true, libc::O_CREAT | libc::O_EXCL).at("first O_CREAT|O_EXCL")?;
    expect_errno(
        open_flags(&a, false, true, libc::O_CREAT | libc::O_EXCL),
        &[Errno::EEXIST],
        "second O_EXCL",
    )?;
    // A dangling symlink counts as existing for O_EXCL and is not followed.
    let l = c.p("dangling");
    std::os::unix::fs::symlink(c.p("target"), &l).at("symlink")?;
    expect_errno(
        open_flags(&l, false, true, libc::O_CREAT | libc::O_EXCL),
        &[Errno::EEXIST],
        "O_EXCL on symlink",
    )?;
    ensure!(!c.p("target").exists(), "O_EXCL followed the dangling symlink");
    // Without O_EXCL, O_CREAT opens the existing file and keeps its data.
    write_file(&a, b"keep")?;
    open_flags(&a, false, true, libc::O_CREAT).at("O_CREAT existing")?;
    ensure!(read_file(&a)? == b"keep", "O_CREAT without O_TRUNC changed the data");
    Ok(())
}

pub(crate) fn trunc(c: &Ctx) -> CheckResult {
    use std::os::unix::fs::MetadataExt;
    let a = c.p("a");
    write_file(&a, &[7u8; 10000])?;
    let before = lstat(&a)?;
    crate::util::tick(&c.dir);
    open_flags(&a, false, true, libc::O_TRUNC).at("O_TRUNC")?;
    let after = lstat(&a)?;
    ensure!(after.len() == 0, "size {} after O_TRUNC", after.len());
    ensure!(
        (after.mtime(), after.mtime_nsec()) > (before.mtime(), before.mtime_nsec()),
        "mtime did not change on O_TRUNC"
    );
    // O_TRUNC on an empty file, and O_RDONLY|O_TRUNC is not an error on Linux.
    open_flags(&a, false, true, libc::O_TRUNC).at("O_TRUNC empty")?;
    Ok(())
}

pub(crate) fn append(c: &Ctx) -> CheckResult {
    let a = c.p("a");
    write_file(&a, b"0123456789")?;
    let mut f = open_flags(&a, false, true, libc::O_APPEND).at("open O_APPEND")?;
    f.seek(SeekFrom::Start(2)).at("seek")?;
    f.write_all(b"AB").at("append write")?;
    ensure!(
        read_file(&a)? == b"0123456789AB",
        "O_APPEND write did not land at the end"
    );
    // Linux: pwrite on an O_APPEND descriptor also appends (pwrite(2) BUGS).
    f.write_at(b"CD", 0).at("pwrite O_APPEND")?;
    ensure!(
        read_file(&a)? == b"0123456789ABCD",
        "pwrite with O_APPEND did not append (Linux appends)"
    );
    // Another writer extends the file: the next append still goes to the new end.
    let g = open_flags(&a, false, true, 0).at("second fd")?;
    g.write_at(b"XYZ", 20).at("pwrite far")?;
    f.write_all(b"E").at("append after extension")?;
    let d = read_file(&a)?;
    ensure!(
        d.len() == 24 && d[23] == b'E',
        "append did not follow the new end: len {}",
        d.len()
    );
    Ok(())
}

pub(crate) fn directory(c: &Ctx) -> CheckResult {
    let f = c.p("file");
    write_file(&f, b"x")?;
    expect_errno(
        open_flags(&f, true, false, libc::O_DIRECTORY),
        &[Errno::ENOTDIR],
        "O_DIRECTORY on a file",
    )?;
    open_flags(&c.dir, true, false, libc::O_DIRECTORY).at("O_DIRECTORY on a dir")?;
    expect_errno(
        open_flags(&c.dir, false, true, 0),
        &[Errno::EISDIR],
        "open dir O_WRONLY",
    )?;
    expect_errno(open_flags(&c.dir, true, true, 0), &[Errno::EISDIR], "open dir O_RDWR")?;
    // A symlink to a directory satisfies O_DIRECTORY.
    let l = c.p("ldir");
    std::os::unix::fs::symlink(&c.dir, &l).at("symlink")?;
    open_flags(&l, true, false, libc::O_DIRECTORY).at("O_DIRECTORY via symlink")?;
    // Reading a directory fd with read(2) is EISDIR.
    let mut d = open_flags(&c.dir, true, false, libc::O_DIRECTORY).at("open dir")?;
    let mut b = [0u8; 8];
    expect_errno(d.read(&mut b), &[Errno::EISDIR], "read(2) on a directory")
}

pub(crate) fn nofollow(c: &Ctx) -> CheckResult {
    let f = c.p("file");
    write_file(&f, b"x")?;
    let l = c.p("link");
    std::os::unix::fs::symlink("file", &l).at("symlink")?;
    expect_errno(
        open_flags(&l, true, false, libc::O_NOFOLLOW),
        &[Errno::ELOOP],
        "O_NOFOLLOW on symlink",
    )?;
    open_flags(&f, true, false, libc::O_NOFOLLOW).at("O_NOFOLLOW on a file")?;
    // O_PATH|O_NOFOLLOW opens the link itself.
    open_flags(&l, true, false, libc::O_PATH | libc::O_NOFOLLOW).at("O_PATH|O_NOFOLLOW")?;
    // A symlink loop is ELOOP when followed.
    std::os::unix::fs::symlink("loop2", c.p("loop1")).at("symlink loop1")?;
    std::os::unix::fs::symlink("loop1", c.p("loop2")).at("symlink loop2")?;
    expect_errno(
        open_flags(&c.p("loop1"), true, false, 0),
        &[Errno::ELOOP],
        "open symlink loop",
    )
}

pub(crate) fn path_errors(c: &Ctx) -> CheckResult {
    let f = c.p("file");
    write_file(&f, b"x")?;
    expect_errno(
        open_flags(&c.p("missing"), true, false, 0),
        &[Errno::ENOENT],
        "open missing",
    )?;
    expect_errno(
        open_flags(&c.p("missing/x"), true, false, libc::O_CREAT),
        &[Errno::ENOENT],
        "create in missing dir",
    )?;
    expect_errno(
        open_flags(&f.join("x"), true, false, 0),
        &[Errno::ENOTDIR],
        "open file/x",
    )?;
    expect_errno(
        open_flags(&f.join("x"), false, true, libc::O_CREAT),
        &[Errno::ENOTDIR],
        "create file/x",
    )?;
    let long = "n".repeat(256);
    expect_errno(
        open_flags(&c.p(&long), false, true, libc::O_CREAT),
        &[Errno::ENAMETOOLONG],
        "256-byte name",
    )?;
    let ok = "m".repeat(255);
    open_flags(&c.p(&ok), false, true, libc::O_CREAT).at("255-byte name")?;
    let names: Vec<_> = std::fs::read_dir(&c.dir)
        .at("readdir")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    if !names.iter().any(|n| n.len() == 255) {
        fail!("255-byte name not listed");
    }
    Ok(())
}
