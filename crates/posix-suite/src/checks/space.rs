//! fallocate(2) modes (0, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE), SEEK_DATA /
//! SEEK_HOLE, and copy_file_range(2). A mode the file system refuses with
//! EOPNOTSUPP is a loud skip naming the mode.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};

use nix::errno::Errno;
use nix::fcntl::{FallocateFlags as F, fallocate};
use nix::unistd::{Whence, lseek};

use crate::suite::Ctx;
use crate::util::{At, CheckResult, Failure, expect_errno, open_flags, pattern};
use crate::{ensure, fail};

fn falloc(f: &File, mode: F, off: i64, len: i64, what: &str) -> CheckResult {
    match fallocate(f, mode, off, len) {
        Ok(()) => Ok(()),
        Err(Errno::EOPNOTSUPP) => Err(Failure::Skip(format!(
            "fallocate {what} ({mode:?}) returns EOPNOTSUPP here"
        ))),
        Err(e) => fail!("fallocate {what} at {off}+{len}: {e}"),
    }
}

fn content(f: &File) -> Result<Vec<u8>, Failure> {
    let n = f.metadata().at("fstat")?.len() as usize;
    let mut v = vec![0u8; n];
    f.read_exact_at(&mut v, 0).at("read all")?;
    Ok(v)
}

fn new_file(c: &Ctx, name: &str, data: &[u8]) -> Result<File, Failure> {
    let f = open_flags(&c.p(name), true, true, libc::O_CREAT).at("create")?;
    f.write_all_at(data, 0).at("write")?;
    f.sync_all().at("fsync")?;
    Ok(f)
}

pub(crate) fn falloc_default(c: &Ctx) -> CheckResult {
    let f = new_file(c, "a", b"0123456789")?;
    falloc(&f, F::empty(), 0, 1 << 20, "mode 0")?;
    let m = f.metadata().at("fstat")?;
    ensure!(m.len() == 1 << 20, "size {} after mode-0 fallocate of 1 MiB", m.len());
    ensure!(m.blocks() >= 2048, "st_blocks {} after allocating 1 MiB", m.blocks());
    let d = content(&f)?;
    ensure!(
        &d[..10] == b"0123456789" && d[10..].iter().all(|&b| b == 0),
        "fallocated range not zero or data lost"
    );
    // Inside the size: nothing changes.
    falloc(&f, F::empty(), 5, 100, "mode 0 inside")?;
    ensure!(content(&f)? == d, "fallocate inside the file changed data");
    expect_errno(fallocate(&f, F::empty(), 0, 0), &[Errno::EINVAL], "fallocate len 0")?;
    let ro = File::open(c.p("a")).at("open ro")?;
    expect_errno(
        fallocate(&ro, F::empty(), 0, 4096),
        &[Errno::EBADF],
        "fallocate on O_RDONLY fd",
    )
}

pub(crate) fn falloc_keep_size(c: &Ctx) -> CheckResult {
    let f = new_file(c, "a", b"0123456789")?;
    falloc(&f, F::FALLOC_FL_KEEP_SIZE, 0, 2 << 20, "KEEP_SIZE")?;
    let m = f.metadata().at("fstat")?;
    ensure!(m.len() == 10, "KEEP_SIZE changed size to {}", m.len());
    ensure!(m.blocks() >= 4096, "st_blocks {} after KEEP_SIZE of 2 MiB", m.blocks());
    // Growing into the preallocated range reads zeros.
    f.set_len(1 << 20).at("ftruncate up")?;
    let d = content(&f)?;
    ensure!(
        &d[..10] == b"0123456789" && d[10..].iter().all(|&b| b == 0),
        "preallocated range not zero"
    );
    f.write_all_at(b"end", (2 << 20) - 3).at("write at end of prealloc")?;
    ensure!(
        f.metadata().at("fstat")?.len() == 2 << 20,
        "size after writing into prealloc"
    );
    Ok(())
}

pub(crate) fn falloc_punch(c: &Ctx) -> CheckResult {
    let data = pattern(1 << 20, 4);
    let f = new_file(c, "a", &data)?;
    // A write-back cache (FUSE's, like delayed allocation) shows blocks only
    // once written back; fsync first so the count is the allocated one.
    f.sync_all().at("fsync")?;
    let before = f.metadata().at("fstat")?.blocks();
    expect_errno(
        fallocate(&f, F::FALLOC_FL_PUNCH_HOLE, 0, 4096),
        &[Errno::EOPNOTSUPP],
        "PUNCH_HOLE without KEEP_SIZE",
    )?;
    let punch = F::FALLOC_FL_PUNCH_HOLE | F::FALLOC_FL_KEEP_SIZE;
    falloc(&f, punch, 65536, 262144, "PUNCH_HOLE|KEEP_SIZE")?;
    falloc(&f, punch, 100, 4900, "unaligned PUNCH_HOLE")?;
    let mut want = data.clone();
    want[65536..65536 + 262144].fill(0);
    want[100..5000].fill(0);
    let d = content(&f)?;
    ensure!(d.len() == data.len(), "punch changed size");
    if let Some(i) = (0..d.len()).find(|&i| d[i] != want[i]) {
        fail!("after punching, byte {i} is {:#x}, wanted {:#x}", d[i], want[i]);
    }
    let after = f.metadata().at("fstat")?.blocks();
    ensure!(
        after + 512 <= before,
        "punching 256 KiB freed only {} sectors",
        before.saturating_sub(after)
    );
    // Punching past EOF does nothing.
    falloc(&f, punch, 2 << 20, 4096, "PUNCH_HOLE past EOF")?;
    ensure!(
        f.metadata().at("fstat")?.len() == 1 << 20,
        "punch past EOF changed size"
    );
    Ok(())
}

pub(crate) fn falloc_zero_range(c: &Ctx) -> CheckResult {
    let data = pattern(300_000, 5);
    let f = new_file(c, "a", &data)?;
    falloc(&f, F::FALLOC_FL_ZERO_RANGE, 12295, 20000, "ZERO_RANGE")?;
    let mut want = data.clone();
    want[12295..32295].fill(0);
    ensure!(content(&f)? == want, "ZERO_RANGE result differs");
    // Past EOF: extends the size, unless KEEP_SIZE.
    falloc(
        &f,
        F::FALLOC_FL_ZERO_RANGE | F::FALLOC_FL_KEEP_SIZE,
        290_000,
        50_000,
        "ZERO_RANGE|KEEP_SIZE",
    )?;
    want[290_000..].fill(0);
    ensure!(
        content(&f)? == want,
        "ZERO_RANGE|KEEP_SIZE past EOF changed size or data"
    );
    falloc(&f, F::FALLOC_FL_ZERO_RANGE, 299_000, 100_000, "ZERO_RANGE past EOF")?;
    want.resize(399_000, 0);
    ensure!(
        content(&f)? == want,
        "ZERO_RANGE past EOF: size {}",
        f.metadata().at("fstat")?.len()
    );
    Ok(())
}

fn seek(f: &File, off: i64, w: Whence) -> nix::Result<i64> {
    lseek(f, off, w)
}

pub(crate) fn seek_data_hole(c: &Ctx) -> CheckResult {
    const M: i64 = 1 << 20;
    let f = open_flags(&c.p("a"), true, true, libc::O_CREAT).at("create")?;
    f.write_all_at(&[1u8; 4096], 0).at("write head")?;
    f.write_all_at(&[2u8; 4096], M as u64).at("write middle")?;
    f.set_len(2 * M as u64).at("set size")?;
    f.sync_all().at("fsync")?;
    let hole0 = seek(&f, 0, Whence::SeekHole).at("SEEK_HOLE 0")?;
    if hole0 == 2 * M {
        return Err(Failure::Skip(
            "SEEK_HOLE reports no holes at all (generic whole-file-is-data fallback)".into(),
        ));
    }
    let want: [(i64, Whence, Result<i64, Errno>); 8] = [
        (0, Whence::SeekData, Ok(0)),
        (0, Whence::SeekHole, Ok(4096)),
        (4096, Whence::SeekData, Ok(M)),
        (100, Whence::SeekData, Ok(100)),
        (M + 10, Whence::SeekHole, Ok(M + 4096)),
        (M + 4096, Whence::SeekData, Err(Errno::ENXIO)),
        (M + M / 2, Whence::SeekHole, Ok(M + M / 2)),
        (2 * M, Whence::SeekData, Err(Errno::ENXIO)),
    ];
    for (off, w, expect) in want {
        let got = seek(&f, off, w);
        ensure!(got == expect, "lseek({off}, {w:?}) = {got:?}, wanted {expect:?}");
    }
    expect_errno(seek(&f, 2 * M, Whence::SeekHole), &[Errno::ENXIO], "SEEK_HOLE at EOF")?;
    // A punched range becomes a hole (when punching is supported).
    let punch = F::FALLOC_FL_PUNCH_HOLE | F::FALLOC_FL_KEEP_SIZE;
    if fallocate(&f, punch, M, 4096).is_ok() {
        let got = seek(&f, 4096, Whence::SeekData);
        ensure!(
            got == Err(Errno::ENXIO),
            "SEEK_DATA after punching the only later data: {got:?}"
        );
    }
    Ok(())
}

pub(crate) fn copy_range(c: &Ctx) -> CheckResult {
    let data = pattern((1 << 20) + 333, 6);
    let src = new_file(c, "src", &data)?;
    let dst = open_flags(&c.p("dst"), true, true, libc::O_CREAT).at("create dst")?;
    let (mut off_in, mut off_out) = (1000i64, 5000i64);
    let mut left = 600_000usize;
    while left > 0 {
        let n = nix::fcntl::copy_file_range(&src, Some(&mut off_in), &dst, Some(&mut off_out), left)
            .at("copy_file_range")?;
        ensure!(n > 0, "copy_file_range returned 0 with {left} left");
        left -= n;
    }
    ensure!(
        off_in == 601_000 && off_out == 605_000,
        "offsets not advanced: {off_in} {off_out}"
    );
    let d = content(&dst)?;
    ensure!(
        d.len() == 605_000 && d[..5000].iter().all(|&b| b == 0),
        "dst size {} or leading zeros",
        d.len()
    );
    ensure!(d[5000..] == data[1000..601_000], "copied bytes differ");
    // At or past the source's EOF: 0 bytes.
    let mut at_eof = data.len() as i64;
    let n = nix::fcntl::copy_file_range(&src, Some(&mut at_eof), &dst, None, 100).at("copy at EOF")?;
    ensure!(n == 0, "copy at EOF copied {n}");
    // Overlapping ranges in one file are EINVAL.
    let (mut a, mut b) = (0i64, 100i64);
    expect_errno(
        nix::fcntl::copy_file_range(&src, Some(&mut a), &src, Some(&mut b), 4096),
        &[Errno::EINVAL],
        "overlapping copy",
    )?;
    let ro = File::open(c.p("dst")).at("open ro")?;
    expect_errno(
        nix::fcntl::copy_file_range(&src, None, &ro, None, 10),
        &[Errno::EBADF],
        "copy to O_RDONLY fd",
    )?;
    // Without offsets, the file positions are used and advanced.
    let n = nix::fcntl::copy_file_range(&src, None, &dst, None, 10).at("copy at file offsets")?;
    ensure!(n == 10, "copied {n}");
    Ok(())
}
