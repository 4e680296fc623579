//! mkdir/rmdir/unlink errnos, directory link counts and readdir, including
//! 5,000 entries with telldir/seekdir (`d_off` + lseek) stability and
//! deletions during the listing.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::errno::Errno;

use crate::suite::Ctx;
use crate::util::{At, CheckResult, expect_errno, lstat, write_file};
use crate::{ensure, fail};

pub(crate) fn mkdir_rmdir(c: &Ctx) -> CheckResult {
    let d = c.p("d");
    std::fs::create_dir(&d).at("mkdir")?;
    expect_errno(std::fs::create_dir(&d), &[Errno::EEXIST], "mkdir existing")?;
    let m = lstat(&d)?;
    ensure!(m.is_dir() && m.nlink() == 2, "new dir nlink {}", m.nlink());
    std::fs::create_dir(d.join("s1")).at("mkdir s1")?;
    std::fs::create_dir(d.join("s2")).at("mkdir s2")?;
    write_file(&d.join("f"), b"x")?;
    ensure!(
        lstat(&d)?.nlink() == 4,
        "dir with 2 subdirs nlink {}",
        lstat(&d)?.nlink()
    );
    expect_errno(
        std::fs::remove_dir(&d),
        &[Errno::ENOTEMPTY, Errno::EEXIST],
        "rmdir non-empty",
    )?;
    expect_errno(std::fs::remove_dir(d.join("f")), &[Errno::ENOTDIR], "rmdir a file")?;
    expect_errno(
        std::fs::create_dir(d.join("f/x")),
        &[Errno::ENOTDIR],
        "mkdir under a file",
    )?;
    expect_errno(std::fs::create_dir(d.join("f")), &[Errno::EEXIST], "mkdir over a file")?;
    expect_errno(std::fs::remove_dir(d.join("nope")), &[Errno::ENOENT], "rmdir missing")?;
    expect_errno(std::fs::remove_dir(d.join("s1/.")), &[Errno::EINVAL], "rmdir dir/.")?;
    expect_errno(
        std::fs::remove_dir(d.join("s1/..")),
        &[Errno::ENOTEMPTY, Errno::EBUSY],
        "rmdir dir/..",
    )?;
    std::fs::remove_dir(d.join("s1")).at("rmdir s1")?;
    ensure!(lstat(&d)?.nlink() == 3, "nlink after rmdir {}", lstat(&d)?.nlink());
    // `..` of a subdirectory is the parent.
    ensure!(lstat(&d.join("s2/.."))?.ino() == m.ino(), "s2/.. is not d");
    // A removed directory that is still open: cannot create in it.
    let held = File::open(d.join("s2")).at("open s2")?;
    std::fs::remove_dir(d.join("s2")).at("rmdir s2")?;
    let mfd = held.metadata().at("fstat removed dir")?;
    ensure!(mfd.nlink() == 0, "removed dir nlink {}", mfd.nlink());
    expect_errno(
        nix::sys::stat::mkdirat(&held, "x", nix::sys::stat::Mode::from_bits_truncate(0o755)),
        &[Errno::ENOENT],
        "mkdir in removed dir",
    )
}

pub(crate) fn unlink_dir(c: &Ctx) -> CheckResult {
    let d = c.p("d");
    std::fs::create_dir(&d).at("mkdir")?;
    // Linux returns EISDIR (POSIX also allows EPERM).
    expect_errno(std::fs::remove_file(&d), &[Errno::EISDIR, Errno::EPERM], "unlink a dir")?;
    expect_errno(std::fs::remove_file(c.p("nope")), &[Errno::ENOENT], "unlink missing")?;
    write_file(&c.p("f"), b"x")?;
    expect_errno(std::fs::remove_file(c.p("f/")), &[Errno::ENOTDIR], "unlink f/")?;
    std::fs::remove_file(c.p("f")).at("unlink f")?;
    ensure!(!c.p("f").exists(), "f exists after unlink");
    Ok(())
}

pub(crate) fn readdir_basic(c: &Ctx) -> CheckResult {
    let d = c.p("d");
    std::fs::create_dir(&d).at("mkdir")?;
    write_file(&d.join("file"), b"x")?;
    std::fs::create_dir(d.join("sub")).at("mkdir sub")?;
    std::os::unix::fs::symlink("file", d.join("link")).at("symlink")?;
    nix::unistd::mkfifo(&d.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).at("mkfifo")?;
    let list = list(&d)?;
    let names: BTreeSet<&str> = list.iter().map(|(n, _, _)| n.as_str()).collect();
    let want: BTreeSet<&str> = [".", "..", "file", "sub", "link", "fifo"].into_iter().collect();
    ensure!(names == want && list.len() == want.len(), "listing {names:?}");
    use rustix::fs::FileType as T;
    for (name, ty, ino) in &list {
        let want_ty = match name.as_str() {
            "." | ".." | "sub" => T::Directory,
            "file" => T::RegularFile,
            "link" => T::Symlink,
            _ => T::Fifo,
        };
        ensure!(*ty == want_ty || *ty == T::Unknown, "{name}: d_type {ty:?}");
        if !matches!(name.as_str(), "." | "..") {
            ensure!(lstat(&d.join(name))?.ino() == *ino, "{name}: d_ino differs from st_ino");
        }
    }
    Ok(())
}

/// Every entry of `dir`: (name, d_type, d_ino).
fn list(dir: &Path) -> Result<Vec<(String, rustix::fs::FileType, u64)>, crate::util::Failure> {
    let mut d = rustix::fs::Dir::new(File::open(dir).at("open dir")?).at("Dir")?;
    let mut out = Vec::new();
    while let Some(e) = d.read() {
        let e = e.at("readdir")?;
        out.push((e.file_name().to_string_lossy().into_owned(), e.file_type(), e.ino()));
    }
    Ok(out)
}

/// Every entry with its telldir cookie (the offset of the next entry).
fn list_offsets(d: &mut rustix::fs::Dir) -> Result<Vec<(String, i64)>, crate::util::Failure> {
    let mut out = Vec::new();
    while let Some(e) = d.read() {
        let e = e.at("readdir")?;
        out.push((e.file_name().to_string_lossy().into_owned(), e.offset()));
    }
    Ok(out)
}

const MANY: usize = 5000;

fn make_many(d: &Path) -> Result<BTreeSet<String>, crate::util::Failure> {
    std::fs::create_dir(d).at("mkdir")?;
    let mut names = BTreeSet::new();
    for i in 0..MANY {
        // Names of varied lengths so that entries straddle block boundaries.
        let n = format!("entry-{i:05}-{}", "x".repeat(i % 37));
        File::create(d.join(&n)).at("create")?;
        names.insert(n);
    }
    Ok(names)
}

pub(crate) fn readdir_many(c: &Ctx) -> CheckResult {
    let d = c.p("big");
    let names = make_many(&d)?;
    let mut dir = rustix::fs::Dir::new(File::open(&d).at("open")?).at("Dir")?;
    let all = list_offsets(&mut dir)?;
    let listed: Vec<&str> = all
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| *n != "." && *n != "..")
        .collect();
    let set: BTreeSet<&str> = listed.iter().copied().collect();
    ensure!(
        listed.len() == MANY && set.len() == MANY,
        "{} entries listed, {} distinct",
        listed.len(),
        set.len()
    );
    ensure!(
        set.iter().all(|n| names.contains(*n)),
        "listing has names never created"
    );
    ensure!(lstat(&d)?.nlink() == 2, "dir of files nlink {}", lstat(&d)?.nlink());
    // seekdir(telldir) at several points resumes exactly where it was.
    for i in [0, 1, 2, 100, 1234, 2500, 4000, all.len() - 2] {
        dir.seek(all[i].1).at("seekdir")?;
        let rest = list_offsets(&mut dir)?;
        if rest != all[i + 1..] {
            fail!(
                "after seekdir to the cookie of entry {i} ({}), {} entries follow, wanted {}",
                all[i].0,
                rest.len(),
                all.len() - i - 1
            );
        }
    }
    dir.rewind();
    ensure!(list_offsets(&mut dir)? == all, "rewinddir lists differently");
    Ok(())
}

pub(crate) fn readdir_unlink_during(c: &Ctx) -> CheckResult {
    let d = c.p("big");
    let names = make_many(&d)?;
    let mut dir = rustix::fs::Dir::new(File::open(&d).at("open")?).at("Dir")?;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..MANY / 2 {
        let Some(e) = dir.read() else { break };
        *seen
            .entry(e.at("readdir")?.file_name().to_string_lossy().into_owned())
            .or_default() += 1;
    }
    // Delete every third name (seen or not), then finish the listing.
    let deleted: BTreeSet<&String> = names.iter().step_by(3).collect();
    for n in &deleted {
        std::fs::remove_file(d.join(n)).at("unlink during readdir")?;
    }
    while let Some(e) = dir.read() {
        *seen
            .entry(e.at("readdir")?.file_name().to_string_lossy().into_owned())
            .or_default() += 1;
    }
    for n in &names {
        let k = seen.get(n).copied().unwrap_or(0);
        if !deleted.contains(n) && k != 1 {
            fail!("{n} (never deleted) listed {k} times");
        }
        if k > 1 {
            fail!("{n} listed {k} times");
        }
    }
    let after = list(&d)?.len() - 2;
    ensure!(
        after == MANY - deleted.len(),
        "{after} entries remain, wanted {}",
        MANY - deleted.len()
    );
    Ok(())
}
