//! Extended attributes in the `user.` namespace: set/get/list/remove, the
//! XATTR_CREATE/XATTR_REPLACE errnos, ENODATA, ERANGE on small buffers,
//! values that overflow the inode into an xattr block, and EPERM on
//! symlinks.

use nix::errno::Errno;
use rustix::fs::{XattrFlags, getxattr, getxattr_query, listxattr, lsetxattr, removexattr, setxattr};

use crate::suite::Ctx;
use crate::util::{At, CheckResult, Failure, ToErrno, expect_errno, pattern, write_file};
use crate::{ensure, fail};

fn get(p: &std::path::Path, name: &str) -> Result<Vec<u8>, Failure> {
    let n = getxattr_query(p, name).at(&format!("getxattr size {name}"))?;
    let mut buf = vec![0u8; n];
    let got = getxattr(p, name, &mut buf[..]).at(&format!("getxattr {name}"))?;
    buf.truncate(got);
    Ok(buf)
}

fn list(p: &std::path::Path) -> Result<Vec<String>, Failure> {
    let mut buf = vec![0u8; 65536];
    let n = listxattr(p, &mut buf[..]).at("listxattr")?;
    let mut v: Vec<String> = buf[..n]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    v.sort();
    Ok(v)
}

pub(crate) fn user_xattrs(c: &Ctx) -> CheckResult {
    let f = c.p("f");
    write_file(&f, b"x")?;
    if let Err(e) = setxattr(&f, "user.a", b"v1", XattrFlags::empty()) {
        if e.errno() == Some(Errno::EOPNOTSUPP) {
            return Err(Failure::Skip(
                "user xattrs not supported (EOPNOTSUPP; mount with user_xattr?)".into(),
            ));
        }
        fail!("setxattr user.a: {e}");
    }
    ensure!(get(&f, "user.a")? == b"v1", "value of user.a");
    expect_errno(
        setxattr(&f, "user.a", b"v2", XattrFlags::CREATE),
        &[Errno::EEXIST],
        "XATTR_CREATE existing",
    )?;
    expect_errno(
        setxattr(&f, "user.b", b"v", XattrFlags::REPLACE),
        &[Errno::ENODATA],
        "XATTR_REPLACE missing",
    )?;
    setxattr(&f, "user.a", b"v2-longer", XattrFlags::REPLACE).at("XATTR_REPLACE existing")?;
    ensure!(get(&f, "user.a")? == b"v2-longer", "replaced value");
    setxattr(&f, "user.empty", b"", XattrFlags::CREATE).at("empty value")?;
    ensure!(get(&f, "user.empty")?.is_empty(), "empty value read back");
    let mut small = [0u8; 4];
    expect_errno(
        getxattr(&f, "user.missing", &mut small[..]),
        &[Errno::ENODATA],
        "getxattr missing",
    )?;
    expect_errno(
        removexattr(&f, "user.missing"),
        &[Errno::ENODATA],
        "removexattr missing",
    )?;
    // A large value: the size query is exact and a small buffer is ERANGE.
    let big = pattern(3000, 9);
    setxattr(&f, "user.big", &big, XattrFlags::empty()).at("3000-byte value")?;
    ensure!(getxattr_query(&f, "user.big").at("size query")? == 3000, "size query");
    let mut buf100 = [0u8; 100];
    expect_errno(
        getxattr(&f, "user.big", &mut buf100[..]),
        &[Errno::ERANGE],
        "getxattr into 100 bytes",
    )?;
    ensure!(get(&f, "user.big")? == big, "3000-byte value read back");
    let mut two = [0u8; 2];
    expect_errno(listxattr(&f, &mut two[..]), &[Errno::ERANGE], "listxattr into 2 bytes")?;
    ensure!(
        list(&f)? == ["user.a", "user.big", "user.empty"],
        "list {:?}",
        list(&f)?
    );
    // Many small attributes (spills out of the inode).
    for i in 0..20 {
        setxattr(
            &f,
            format!("user.n{i:02}"),
            format!("value {i}").as_bytes(),
            XattrFlags::CREATE,
        )
        .at("many")?;
    }
    for i in 0..20 {
        ensure!(
            get(&f, &format!("user.n{i:02}"))? == format!("value {i}").as_bytes(),
            "user.n{i:02}"
        );
    }
    removexattr(&f, "user.a").at("removexattr")?;
    let l = list(&f)?;
    ensure!(
        !l.contains(&"user.a".to_string()) && l.len() == 22,
        "after remove: {l:?}"
    );
    expect_errno(getxattr(&f, "user.a", &mut small[..]), &[Errno::ENODATA], "get removed")?;
    // Names: 255 bytes is the limit.
    let long = format!("user.{}", "n".repeat(251));
    expect_errno(
        setxattr(&f, &long, b"x", XattrFlags::empty()),
        &[Errno::ERANGE],
        "256-byte name",
    )?;
    // Attributes follow the inode through rename and hard links.
    std::fs::hard_link(&f, c.p("g")).at("link")?;
    std::fs::rename(&f, c.p("h")).at("rename")?;
    ensure!(
        get(&c.p("g"), "user.big")? == big,
        "xattr through hard link after rename"
    );
    // Directories take user xattrs; symlinks refuse them (EPERM).
    std::fs::create_dir(c.p("d")).at("mkdir")?;
    setxattr(c.p("d"), "user.dir", b"yes", XattrFlags::empty()).at("xattr on dir")?;
    ensure!(get(&c.p("d"), "user.dir")? == b"yes", "dir xattr");
    std::os::unix::fs::symlink("h", c.p("s")).at("symlink")?;
    expect_errno(
        lsetxattr(c.p("s"), "user.x", b"1", XattrFlags::empty()),
        &[Errno::EPERM],
        "user xattr on symlink",
    )
}
