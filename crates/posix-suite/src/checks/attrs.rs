//! stat fields, timestamps (ns, which change when), utimensat with
//! UTIME_NOW/UTIME_OMIT, chmod/chown (setuid/setgid clearing), statfs
//! sanity and fsync/fdatasync.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::stat::{UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;

use crate::suite::Ctx;
use crate::util::{At, CheckResult, expect_errno, lstat, tick, write_file};
use crate::{ensure, fail};

fn times(p: &Path) -> Result<[(i64, i64); 3], crate::util::Failure> {
    let m = lstat(p)?;
    Ok([
        (m.atime(), m.atime_nsec()),
        (m.mtime(), m.mtime_nsec()),
        (m.ctime(), m.ctime_nsec()),
    ])
}

pub(crate) fn stat_fields(c: &Ctx) -> CheckResult {
    let a = c.p("a");
    write_file(&a, &vec![1u8; 65536 + 10])?;
    std::fs::File::open(&a).at("open")?.sync_all().at("fsync")?;
    let m = lstat(&a)?;
    ensure!(m.len() == 65546, "size {}", m.len());
    ensure!(
        m.blocks() >= 65546 / 512 && m.blocks() < 1024,
        "st_blocks {} for 64 KiB",
        m.blocks()
    );
    ensure!(m.blksize() >= 512, "st_blksize {}", m.blksize());
    ensure!(
        m.nlink() == 1 && m.mode() & 0o170000 == 0o100000,
        "nlink {} mode {:o}",
        m.nlink(),
        m.mode()
    );
    ensure!(m.uid() == nix::unistd::geteuid().as_raw(), "uid {}", m.uid());
    // An empty file has no blocks; a sparse one fewer than its size.
    write_file(&c.p("empty"), b"")?;
    ensure!(lstat(&c.p("empty"))?.blocks() == 0, "empty file has blocks");
    let f = std::fs::File::create(c.p("sparse")).at("create")?;
    f.set_len(1 << 30).at("ftruncate 1 GiB")?;
    ensure!(
        lstat(&c.p("sparse"))?.blocks() < 64,
        "1 GiB hole uses {} blocks",
        lstat(&c.p("sparse"))?.blocks()
    );
    // Directories: nlink 2, size > 0, distinct inode numbers.
    std::fs::create_dir(c.p("d")).at("mkdir")?;
    let d = lstat(&c.p("d"))?;
    ensure!(d.is_dir() && d.nlink() == 2, "dir nlink {}", d.nlink());
    ensure!(d.ino() != m.ino() && d.dev() == m.dev(), "inode numbers or devices");
    // Nanosecond timestamps survive a round trip (set explicitly).
    if crate::util::whole_second_times(&c.dir) {
        return Err(crate::util::Failure::Skip(
            "timestamps keep whole seconds only (e.g. ext4 with 128-byte inodes): ns and wide-range times not checked"
                .into(),
        ));
    }
    let t = TimeSpec::new(1_600_000_000, 123_456_789);
    let u = TimeSpec::new(1_500_000_000, 987_654_321);
    utimensat(nix::fcntl::AT_FDCWD, &a, &t, &u, UtimensatFlags::FollowSymlink).at("utimensat")?;
    let [at, mt, _] = times(&a)?;
    ensure!(
        at == (1_600_000_000, 123_456_789) && mt == (1_500_000_000, 987_654_321),
        "ns times {at:?} {mt:?}"
    );
    // Times before 1970 and after 2038.
    let pre = TimeSpec::new(-1_000_000, 5);
    let post = TimeSpec::new(4_000_000_000, 7);
    utimensat(nix::fcntl::AT_FDCWD, &a, &pre, &post, UtimensatFlags::FollowSymlink).at("utimensat wide")?;
    let [at, mt, _] = times(&a)?;
    ensure!(
        at == (-1_000_000, 5) && mt == (4_000_000_000, 7),
        "pre-1970/post-2038 times {at:?} {mt:?}"
    );
    Ok(())
}

pub(crate) fn time_updates(c: &Ctx) -> CheckResult {
    use std::os::unix::fs::FileExt;
    let a = c.p("a");
    write_file(&a, b"data")?;
    let t0 = times(&a)?;
    tick(&c.dir);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&a)
        .at("open")?
        .write_at(b"x", 1)
        .at("write")?;
    let t1 = times(&a)?;
    ensure!(
        t1[1] > t0[1] && t1[2] > t0[2],
        "write: mtime {:?}->{:?} ctime {:?}->{:?}",
        t0[1],
        t1[1],
        t0[2],
        t1[2]
    );
    tick(&c.dir);
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o600)).at("chmod")?;
    let t2 = times(&a)?;
    ensure!(t2[2] > t1[2] && t2[1] == t1[1], "chmod: ctime must change, mtime not");
    tick(&c.dir);
    let mut b = [0u8; 4];
    std::fs::File::open(&a).at("open")?.read_at(&mut b, 0).at("read")?;
    ensure!(
        times(&a)?[1] == t2[1] && times(&a)?[2] == t2[2],
        "read changed mtime/ctime"
    );
    // Directory mtime/ctime change when an entry is added or removed.
    let d1 = times(&c.dir)?;
    tick(&c.dir);
    write_file(&c.p("new"), b"")?;
    let d2 = times(&c.dir)?;
    ensure!(
        d2[1] > d1[1] && d2[2] > d1[2],
        "create did not update the dir's mtime/ctime"
    );
    tick(&c.dir);
    std::fs::remove_file(c.p("new")).at("unlink")?;
    ensure!(times(&c.dir)?[1] > d2[1], "unlink did not update the dir's mtime");
    tick(&c.dir);
    std::fs::rename(&a, c.p("b")).at("rename")?;
    ensure!(
        times(&c.p("b"))?[2] > t2[2],
        "rename did not change the file's ctime (Linux does)"
    );
    Ok(())
}

pub(crate) fn utimens(c: &Ctx) -> CheckResult {
    let a = c.p("a");
    write_file(&a, b"x")?;
    let set = TimeSpec::new(1_000_000_000, 1);
    utimensat(nix::fcntl::AT_FDCWD, &a, &set, &set, UtimensatFlags::FollowSymlink).at("set both")?;
    let before = times(&a)?;
    tick(&c.dir);
    utimensat(
        nix::fcntl::AT_FDCWD,
        &a,
        &TimeSpec::UTIME_OMIT,
        &TimeSpec::UTIME_NOW,
        UtimensatFlags::FollowSymlink,
    )
    .at("OMIT/NOW")?;
    let after = times(&a)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .at("clock")?
        .as_secs() as i64;
    ensure!(
        after[0] == before[0],
        "UTIME_OMIT changed atime: {:?} -> {:?}",
        before[0],
        after[0]
    );
    ensure!(
        (after[1].0 - now).abs() <= 5,
        "UTIME_NOW mtime {:?}, now {now}",
        after[1]
    );
    ensure!(after[2] > before[2], "utimensat did not change ctime");
    utimensat(
        nix::fcntl::AT_FDCWD,
        &a,
        &TimeSpec::UTIME_NOW,
        &TimeSpec::UTIME_OMIT,
        UtimensatFlags::FollowSymlink,
    )
    .at("NOW/OMIT")?;
    let last = times(&a)?;
    ensure!(
        last[1] == after[1] && (last[0].0 - now).abs() <= 5,
        "NOW/OMIT: {last:?}"
    );
    // Both OMIT: nothing changes, not even ctime.
    tick(&c.dir);
    utimensat(
        nix::fcntl::AT_FDCWD,
        &a,
        &TimeSpec::UTIME_OMIT,
        &TimeSpec::UTIME_OMIT,
        UtimensatFlags::FollowSymlink,
    )
    .at("OMIT/OMIT")?;
    ensure!(times(&a)? == last, "OMIT/OMIT changed times");
    // AT_SYMLINK_NOFOLLOW sets the link's own times.
    std::os::unix::fs::symlink("a", c.p("l")).at("symlink")?;
    let ns = if crate::util::whole_second_times(&c.dir) { 0 } else { 42 };
    let lt = TimeSpec::new(900_000_000, ns);
    utimensat(
        nix::fcntl::AT_FDCWD,
        &c.p("l"),
        &lt,
        &lt,
        UtimensatFlags::NoFollowSymlink,
    )
    .at("lutimes")?;
    let (lm, tm) = (times(&c.p("l"))?[1], times(&a)?[1]);
    ensure!(
        lm == (900_000_000, ns) && tm == last[1],
        "symlink times: link {lm:?}, target {tm:?}"
    );
    expect_errno(
        utimensat(
            nix::fcntl::AT_FDCWD,
            &c.p("nope"),
            &lt,
            &lt,
            UtimensatFlags::FollowSymlink,
        ),
        &[Errno::ENOENT],
        "utimensat missing",
    )
}

pub(crate) fn chmod_chown(c: &Ctx) -> CheckResult {
    let a = c.p("a");
    write_file(&a, b"x")?;
    for mode in [0o000, 0o644, 0o7777, 0o4755, 0o2755, 0o1777, 0o755] {
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(mode)).at("chmod")?;
        let got = lstat(&a)?.mode() & 0o7777;
        ensure!(got == mode, "chmod {mode:o} -> {got:o}");
    }
    c.need_root()?;
    std::os::unix::fs::chown(&a, Some(1234), Some(5678)).at("chown")?;
    let m = lstat(&a)?;
    ensure!(m.uid() == 1234 && m.gid() == 5678, "owner {}:{}", m.uid(), m.gid());
    // chown clears setuid, and setgid when group-executable, even for root.
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o6755)).at("chmod 6755")?;
    std::os::unix::fs::chown(&a, Some(4321), None).at("chown uid")?;
    let got = lstat(&a)?.mode() & 0o7777;
    ensure!(got == 0o755, "chown left mode {got:o}, wanted 755 (suid/sgid cleared)");
    // Setgid without group-exec (mandatory-locking marker) survives chown.
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o2644)).at("chmod 2644")?;
    std::os::unix::fs::chown(&a, Some(1), None).at("chown again")?;
    let got = lstat(&a)?.mode() & 0o7777;
    ensure!(got == 0o2644, "chown of g-x setgid file left {got:o}, wanted 2644");
    // lchown changes the link, not its target.
    std::os::unix::fs::symlink("a", c.p("l")).at("symlink")?;
    std::os::unix::fs::lchown(c.p("l"), Some(77), Some(88)).at("lchown")?;
    let (l, t) = (lstat(&c.p("l"))?, lstat(&a)?);
    ensure!(l.uid() == 77 && l.gid() == 88 && t.uid() == 1, "lchown");
    // Directories keep setgid across chown.
    std::fs::create_dir(c.p("d")).at("mkdir")?;
    std::fs::set_permissions(c.p("d"), std::fs::Permissions::from_mode(0o2775)).at("chmod dir")?;
    std::os::unix::fs::chown(c.p("d"), Some(5), Some(6)).at("chown dir")?;
    ensure!(
        lstat(&c.p("d"))?.mode() & 0o7777 == 0o2775,
        "chown cleared setgid on a dir"
    );
    Ok(())
}

pub(crate) fn statfs(c: &Ctx) -> CheckResult {
    let s = nix::sys::statfs::statfs(&c.dir).at("statfs")?;
    let (blocks, bfree, bavail) = (s.blocks(), s.blocks_free(), s.blocks_available());
    ensure!(s.block_size() >= 512, "f_bsize {}", s.block_size());
    ensure!(
        blocks > 0 && blocks >= bfree && bfree >= bavail,
        "blocks {blocks} free {bfree} avail {bavail}"
    );
    ensure!(
        s.files() == 0 || s.files() >= s.files_free(),
        "files {} ffree {}",
        s.files(),
        s.files_free()
    );
    ensure!(s.maximum_name_length() >= 255, "f_namelen {}", s.maximum_name_length());
    let vfs = nix::sys::statvfs::statvfs(&c.dir).at("statvfs")?;
    ensure!(vfs.blocks() as u64 == blocks, "statvfs disagrees with statfs");
    // Writing 8 MiB and syncing takes free space; removing gives it back.
    let f = c.p("big");
    write_file(&f, &vec![0xa5; 8 << 20])?;
    std::fs::File::open(&f).at("open")?.sync_all().at("fsync")?;
    let after = nix::sys::statfs::statfs(&c.dir).at("statfs after")?;
    let used = (bfree - after.blocks_free()) as u64 * s.block_size() as u64;
    ensure!(used >= 8 << 20, "8 MiB write used only {used} bytes of f_bfree");
    let files_used = s.files_free().saturating_sub(after.files_free());
    ensure!(
        s.files() == 0 || files_used >= 1,
        "creating a file did not use an inode"
    );
    std::fs::remove_file(&f).at("unlink")?;
    nix::unistd::sync();
    let back = nix::sys::statfs::statfs(&c.dir).at("statfs after unlink")?;
    if back.blocks_free() + 64 < bfree {
        fail!(
            "free blocks {} after unlink, {} before the write",
            back.blocks_free(),
            bfree
        );
    }
    Ok(())
}

pub(crate) fn fsync(c: &Ctx) -> CheckResult {
    let a = c.p("a");
    write_file(&a, b"sync me")?;
    let f = std::fs::OpenOptions::new().write(true).open(&a).at("open")?;
    f.sync_all().at("fsync")?;
    f.sync_data().at("fdatasync")?;
    std::fs::File::open(&a)
        .at("open ro")?
        .sync_all()
        .at("fsync O_RDONLY fd")?;
    let d = std::fs::File::open(&c.dir).at("open dir")?;
    nix::unistd::fsync(&d).at("fsync dir")?;
    nix::unistd::fdatasync(&d).at("fdatasync dir")?;
    nix::unistd::syncfs(&d).at("syncfs")?;
    let (r, _w) = nix::unistd::pipe().at("pipe")?;
    expect_errno(nix::unistd::fsync(&r), &[Errno::EINVAL], "fsync on a pipe")
}
