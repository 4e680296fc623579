//! rename(2) and renameat2(2): replacing, RENAME_NOREPLACE,
//! RENAME_EXCHANGE, and the directory errnos (EINVAL, ENOTEMPTY, EISDIR,
//! ENOTDIR), plus `..` and link counts after moving a directory.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};

use crate::ensure;
use crate::suite::Ctx;
use crate::util::{At, CheckResult, expect_errno, lstat, read_file, write_file};

fn rename2(a: &Path, b: &Path, flags: RenameFlags) -> nix::Result<()> {
    renameat2(AT_FDCWD, a, AT_FDCWD, b, flags)
}

pub(crate) fn basic(c: &Ctx) -> CheckResult {
    let (a, b) = (c.p("a"), c.p("b"));
    write_file(&a, b"AAA")?;
    let ino = lstat(&a)?.ino();
    std::fs::rename(&a, &b).at("rename to new name")?;
    ensure!(
        !a.exists() && read_file(&b)? == b"AAA" && lstat(&b)?.ino() == ino,
        "rename to a new name"
    );
    // Over an existing file: the target is replaced, an open fd keeps the old inode.
    write_file(&a, b"NEW")?;
    let old = std::fs::File::open(&b).at("open target")?;
    std::fs::rename(&a, &b).at("rename over file")?;
    ensure!(read_file(&b)? == b"NEW" && !a.exists(), "rename over a file");
    ensure!(
        old.metadata().at("fstat replaced")?.nlink() == 0,
        "replaced inode still linked"
    );
    // Two names of one inode: rename is a no-op and both names stay.
    std::fs::hard_link(&b, &a).at("link")?;
    std::fs::rename(&a, &b).at("rename hard link onto itself")?;
    ensure!(a.exists() && b.exists(), "rename between hard links removed a name");
    expect_errno(std::fs::rename(c.p("missing"), &b), &[Errno::ENOENT], "rename missing")?;
    // Into another directory.
    std::fs::create_dir(c.p("d")).at("mkdir")?;
    std::fs::rename(&b, c.p("d/b")).at("rename across dirs")?;
    ensure!(read_file(&c.p("d/b"))? == b"NEW", "moved file content");
    Ok(())
}

pub(crate) fn noreplace(c: &Ctx) -> CheckResult {
    let (a, b) = (c.p("a"), c.p("b"));
    write_file(&a, b"A")?;
    write_file(&b, b"B")?;
    match rename2(&a, &b, RenameFlags::RENAME_NOREPLACE) {
        Err(e) if e == Errno::EINVAL || e == Errno::EOPNOTSUPP => {
            return Err(crate::util::Failure::Skip(format!("RENAME_NOREPLACE unsupported: {e}")));
        }
        r => expect_errno(r, &[Errno::EEXIST], "RENAME_NOREPLACE onto a file")?,
    }
    ensure!(
        read_file(&a)? == b"A" && read_file(&b)? == b"B",
        "failed NOREPLACE changed something"
    );
    rename2(&a, &c.p("c"), RenameFlags::RENAME_NOREPLACE).at("RENAME_NOREPLACE to a new name")?;
    ensure!(!a.exists() && read_file(&c.p("c"))? == b"A", "NOREPLACE rename");
    Ok(())
}

pub(crate) fn exchange(c: &Ctx) -> CheckResult {
    let (f, d) = (c.p("f"), c.p("d"));
    write_file(&f, b"file")?;
    std::fs::create_dir(&d).at("mkdir")?;
    write_file(&d.join("inner"), b"in")?;
    let (fi, di) = (lstat(&f)?.ino(), lstat(&d)?.ino());
    match rename2(&f, &d, RenameFlags::RENAME_EXCHANGE) {
        Err(e) if e == Errno::EINVAL || e == Errno::EOPNOTSUPP => {
            return Err(crate::util::Failure::Skip(format!("RENAME_EXCHANGE unsupported: {e}")));
        }
        r => r.at("RENAME_EXCHANGE file <-> dir")?,
    }
    ensure!(lstat(&f)?.ino() == di && lstat(&d)?.ino() == fi, "names not swapped");
    ensure!(
        read_file(&d)? == b"file" && read_file(&f.join("inner"))? == b"in",
        "contents not swapped"
    );
    // Exchange across directories updates `..` of the moved directory.
    std::fs::create_dir(c.p("p")).at("mkdir p")?;
    write_file(&c.p("p/x"), b"x")?;
    rename2(&f, &c.p("p/x"), RenameFlags::RENAME_EXCHANGE).at("exchange across dirs")?;
    ensure!(
        lstat(&c.p("p/x/.."))?.ino() == lstat(&c.p("p"))?.ino(),
        "`..` not updated by exchange"
    );
    ensure!(
        lstat(&c.p("p"))?.nlink() == 3 && lstat(&c.dir)?.nlink() == 3,
        "nlink after exchanging a dir across"
    );
    expect_errno(
        rename2(&d, &c.p("none"), RenameFlags::RENAME_EXCHANGE),
        &[Errno::ENOENT],
        "exchange with missing",
    )?;
    expect_errno(
        rename2(
            &d,
            &c.p("p"),
            RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_NOREPLACE,
        ),
        &[Errno::EINVAL],
        "EXCHANGE|NOREPLACE",
    )
}

pub(crate) fn dir_errors(c: &Ctx) -> CheckResult {
    let (a, b) = (c.p("a"), c.p("b"));
    std::fs::create_dir_all(a.join("sub/deeper")).at("mkdir a/sub/deeper")?;
    std::fs::create_dir(&b).at("mkdir b")?;
    write_file(&b.join("f"), b"x")?;
    write_file(&c.p("file"), b"x")?;
    expect_errno(
        std::fs::rename(&a, a.join("sub/inside")),
        &[Errno::EINVAL],
        "dir into own subdir",
    )?;
    expect_errno(
        std::fs::rename(&a, a.join("inside")),
        &[Errno::EINVAL],
        "dir into itself",
    )?;
    expect_errno(
        std::fs::rename(&a, &b),
        &[Errno::ENOTEMPTY, Errno::EEXIST],
        "dir over non-empty dir",
    )?;
    expect_errno(std::fs::rename(c.p("file"), &b), &[Errno::EISDIR], "file over dir")?;
    expect_errno(std::fs::rename(&a, c.p("file")), &[Errno::ENOTDIR], "dir over file")?;
    expect_errno(
        std::fs::rename(c.p("a/."), c.p("x")),
        &[Errno::EINVAL, Errno::EBUSY],
        "rename dir/.",
    )?;
    // Over an empty dir succeeds; link counts and `..` follow.
    std::fs::create_dir(c.p("empty")).at("mkdir empty")?;
    let before = lstat(&c.dir)?.nlink();
    std::fs::rename(&a, c.p("empty")).at("dir over empty dir")?;
    ensure!(
        lstat(&c.dir)?.nlink() == before - 1,
        "parent nlink after replacing a dir"
    );
    std::fs::rename(c.p("empty/sub"), b.join("sub")).at("move subdir to b")?;
    ensure!(lstat(&b.join("sub/.."))?.ino() == lstat(&b)?.ino(), "`..` not updated");
    ensure!(
        lstat(&b)?.nlink() == 3 && lstat(&c.p("empty"))?.nlink() == 2,
        "nlinks after moving a dir"
    );
    Ok(())
}
