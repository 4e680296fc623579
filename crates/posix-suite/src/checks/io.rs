//! read/write/pread/pwrite and ftruncate up and down.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use nix::errno::Errno;

use crate::ensure;
use crate::suite::Ctx;
use crate::util::{At, CheckResult, expect_errno, lstat, open_flags, pattern, read_file};

pub(crate) fn read_write(c: &Ctx) -> CheckResult {
    let a = c.p("a");
    let mut f = open_flags(&a, true, true, libc::O_CREAT).at("create")?;
    let data = pattern(3 << 20 | 123, 1);
    f.write_all(&data).at("3 MiB write")?;
    f.seek(SeekFrom::Start(0)).at("seek")?;
    let mut back = Vec::new();
    f.read_to_end(&mut back).at("read back")?;
    ensure!(back == data, "3 MiB read back differs");
    let mut b = [0u8; 16];
    ensure!(f.read(&mut b).at("read at EOF")? == 0, "read at EOF returned data");
    // pread/pwrite do not move the file offset.
    f.seek(SeekFrom::Start(100)).at("seek 100")?;
    f.write_at(b"PWRITE", 5000).at("pwrite")?;
    let mut p = [0u8; 6];
    f.read_exact_at(&mut p, 5000).at("pread")?;
    ensure!(&p == b"PWRITE", "pread after pwrite: {p:?}");
    ensure!(f.stream_position().at("tell")? == 100, "pread/pwrite moved the offset");
    // pwrite past EOF leaves a hole that reads as zeros.
    let end = data.len() as u64 + 100_000;
    f.write_at(b"tail", end).at("pwrite past EOF")?;
    let mut gap = vec![1u8; 100_000];
    f.read_exact_at(&mut gap, data.len() as u64).at("read gap")?;
    ensure!(gap.iter().all(|&x| x == 0), "gap after pwrite past EOF is not zero");
    ensure!(lstat(&a)?.len() == end + 4, "size after pwrite past EOF");
    // Short read at EOF.
    let mut big = vec![0u8; 100];
    ensure!(
        f.read_at(&mut big, end + 2).at("pread at EOF-2")? == 2,
        "pread at EOF-2 not short"
    );
    // Writes through one fd are seen through another at once.
    let g = open_flags(&a, true, false, 0).at("second fd")?;
    f.write_at(b"SEEN", 10).at("pwrite 10")?;
    g.read_exact_at(&mut p[..4], 10).at("pread other fd")?;
    ensure!(&p[..4] == b"SEEN", "write not visible through another fd");
    // Bad descriptors: write on O_RDONLY, read on O_WRONLY.
    expect_errno((&g).write(b"x"), &[Errno::EBADF], "write on O_RDONLY fd")?;
    let mut w = open_flags(&a, false, true, 0).at("O_WRONLY")?;
    expect_errno(w.read(&mut b), &[Errno::EBADF], "read on O_WRONLY fd")
}

pub(crate) fn truncate(c: &Ctx) -> CheckResult {
    let a = c.p("a");
    let data = pattern(20000, 2);
    std::fs::write(&a, &data).at("write")?;
    let f = open_flags(&a, true, true, 0).at("open")?;
    f.set_len(5000).at("ftruncate down")?;
    ensure!(read_file(&a)? == data[..5000], "data after ftruncate down");
    f.set_len(1 << 20).at("ftruncate up")?;
    let d = read_file(&a)?;
    ensure!(d.len() == 1 << 20, "size after ftruncate up: {}", d.len());
    ensure!(
        d[..5000] == data[..5000] && d[5000..].iter().all(|&x| x == 0),
        "ftruncate up: old data or zeros wrong"
    );
    // Down into the middle of a block and up again: the cut bytes are zero.
    f.set_len(4097).at("ftruncate to 4097")?;
    f.set_len(8192).at("ftruncate to 8192")?;
    let d = read_file(&a)?;
    ensure!(
        d[..4097] == data[..4097] && d[4097..].iter().all(|&x| x == 0),
        "stale bytes after down/up truncate"
    );
    nix::unistd::truncate(&a, 0).at("truncate(2) by path")?;
    ensure!(lstat(&a)?.len() == 0, "truncate(2) to 0");
    let r = open_flags(&a, true, false, 0).at("O_RDONLY")?;
    expect_errno(
        r.set_len(10),
        &[Errno::EINVAL, Errno::EBADF],
        "ftruncate on O_RDONLY fd",
    )?;
    expect_errno(nix::unistd::ftruncate(&f, -1), &[Errno::EINVAL], "ftruncate to -1")?;
    expect_errno(
        nix::unistd::truncate(&c.dir, 0),
        &[Errno::EISDIR],
        "truncate a directory",
    )
}

pub(crate) fn unlinked_open(c: &Ctx) -> CheckResult {
    use std::os::unix::fs::MetadataExt;
    let a = c.p("a");
    std::fs::write(&a, b"still here").at("write")?;
    let f = open_flags(&a, true, true, 0).at("open")?;
    std::fs::remove_file(&a).at("unlink")?;
    ensure!(std::fs::symlink_metadata(&a).is_err(), "name still there after unlink");
    let mut b = [0u8; 10];
    f.read_exact_at(&mut b, 0).at("read unlinked")?;
    ensure!(&b == b"still here", "unlinked file data: {b:?}");
    f.write_at(&pattern(200_000, 3), 10).at("write unlinked")?;
    f.set_len(150_000).at("ftruncate unlinked")?;
    let mut back = vec![0u8; 149_990];
    f.read_exact_at(&mut back, 10).at("read unlinked after write")?;
    ensure!(
        back == pattern(200_000, 3)[..149_990],
        "unlinked file write/readback differs"
    );
    let m = f.metadata().at("fstat")?;
    ensure!(
        m.nlink() == 0 && m.len() == 150_000,
        "fstat of unlinked: nlink {} size {}",
        m.nlink(),
        m.len()
    );
    f.sync_all().at("fsync unlinked")?;
    // A new file of the same name is a different inode.
    std::fs::write(&a, b"new").at("recreate")?;
    ensure!(lstat(&a)?.ino() != m.ino(), "recreated name reuses the open inode");
    Ok(())
}
