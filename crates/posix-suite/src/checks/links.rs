//! link/symlink/readlink, hard-link counts, mknod (FIFO, socket, and as
//! root character and block devices).

use std::os::unix::fs::{FileTypeExt, MetadataExt};

use nix::errno::Errno;
use nix::sys::stat::{Mode, SFlag, makedev, mknod};

use crate::ensure;
use crate::suite::Ctx;
use crate::util::{At, CheckResult, expect_errno, lstat, read_file, write_file};

pub(crate) fn hardlinks(c: &Ctx) -> CheckResult {
    let (a, b) = (c.p("a"), c.p("b"));
    write_file(&a, b"shared")?;
    let ct = lstat(&a)?;
    crate::util::tick(&c.dir);
    std::fs::hard_link(&a, &b).at("link")?;
    let (ma, mb) = (lstat(&a)?, lstat(&b)?);
    ensure!(
        ma.ino() == mb.ino() && ma.nlink() == 2,
        "after link: ino {} {} nlink {}",
        ma.ino(),
        mb.ino(),
        ma.nlink()
    );
    ensure!(
        (ma.ctime(), ma.ctime_nsec()) > (ct.ctime(), ct.ctime_nsec()),
        "link did not change ctime"
    );
    std::fs::write(&b, b"via b").at("write b")?;
    ensure!(
        read_file(&a)? == b"via b",
        "write through one name not seen through the other"
    );
    std::fs::hard_link(&a, c.p("c")).at("third link")?;
    ensure!(lstat(&a)?.nlink() == 3, "nlink 3");
    std::fs::remove_file(&a).at("unlink a")?;
    ensure!(lstat(&b)?.nlink() == 2, "nlink after unlink");
    expect_errno(std::fs::hard_link(&b, c.p("c")), &[Errno::EEXIST], "link onto existing")?;
    std::fs::create_dir(c.p("d")).at("mkdir")?;
    expect_errno(
        std::fs::hard_link(c.p("d"), c.p("dl")),
        &[Errno::EPERM],
        "link a directory",
    )?;
    expect_errno(
        std::fs::hard_link(c.p("missing"), c.p("x")),
        &[Errno::ENOENT],
        "link missing",
    )?;
    Ok(())
}

pub(crate) fn symlinks(c: &Ctx) -> CheckResult {
    use std::os::unix::fs::symlink;
    write_file(&c.p("f"), b"target data")?;
    symlink("f", c.p("s")).at("symlink")?;
    ensure!(
        std::fs::read_link(c.p("s")).at("readlink")?.as_os_str() == "f",
        "readlink"
    );
    let m = lstat(&c.p("s"))?;
    ensure!(
        m.file_type().is_symlink() && m.len() == 1,
        "lstat symlink: size {}",
        m.len()
    );
    ensure!(read_file(&c.p("s"))? == b"target data", "read through symlink");
    // Fast (in-inode) and slow (block) symlinks; 4095 is the longest target.
    for len in [59, 60, 61, 500, 4095] {
        let t = format!("{}/{}", "d".repeat(len - 2), "t");
        let t = &t[t.len() - len..];
        let l = c.p(&format!("len{len}"));
        symlink(t, &l).at(&format!("symlink of {len} bytes"))?;
        ensure!(
            std::fs::read_link(&l).at("readlink long")?.as_os_str().len() == len,
            "{len}-byte target"
        );
        ensure!(lstat(&l)?.len() == len as u64, "{len}-byte symlink size");
    }
    expect_errno(
        symlink("x".repeat(4096), c.p("toolong")),
        &[Errno::ENAMETOOLONG],
        "4096-byte target",
    )?;
    symlink("nowhere", c.p("dangling")).at("dangling")?;
    expect_errno(std::fs::metadata(c.p("dangling")), &[Errno::ENOENT], "stat dangling")?;
    expect_errno(std::fs::read_link(c.p("f")), &[Errno::EINVAL], "readlink on a file")?;
    expect_errno(symlink("f", c.p("s")), &[Errno::EEXIST], "symlink onto existing")?;
    // Removing the symlink leaves the target.
    std::fs::remove_file(c.p("s")).at("unlink symlink")?;
    ensure!(c.p("f").exists(), "unlinking the symlink removed the target");
    Ok(())
}

pub(crate) fn mknod_nodes(c: &Ctx) -> CheckResult {
    nix::unistd::mkfifo(&c.p("fifo"), Mode::from_bits_truncate(0o640)).at("mkfifo")?;
    let m = lstat(&c.p("fifo"))?;
    ensure!(
        m.file_type().is_fifo() && m.mode() & 0o7777 == 0o640,
        "fifo mode {:o}",
        m.mode()
    );
    mknod(&c.p("sock"), SFlag::S_IFSOCK, Mode::from_bits_truncate(0o600), 0).at("mknod socket")?;
    ensure!(lstat(&c.p("sock"))?.file_type().is_socket(), "socket type");
    expect_errno(
        nix::unistd::mkfifo(&c.p("fifo"), Mode::S_IRWXU),
        &[Errno::EEXIST],
        "mkfifo existing",
    )?;
    if !c.is_root() {
        return Err(crate::util::Failure::Skip(
            "FIFO and socket passed; device nodes need root".into(),
        ));
    }
    let dev = makedev(4, 67);
    mknod(&c.p("chr"), SFlag::S_IFCHR, Mode::from_bits_truncate(0o620), dev).at("mknod chr")?;
    let m = lstat(&c.p("chr"))?;
    ensure!(
        m.file_type().is_char_device() && m.rdev() == dev,
        "char dev rdev {:x}",
        m.rdev()
    );
    // A large (new-style) device number.
    let big = makedev(259, 300_000);
    mknod(&c.p("blk"), SFlag::S_IFBLK, Mode::from_bits_truncate(0o660), big).at("mknod blk")?;
    let m = lstat(&c.p("blk"))?;
    ensure!(
        m.file_type().is_block_device() && m.rdev() == big,
        "block dev rdev {:x}",
        m.rdev()
    );
    Ok(())
}
