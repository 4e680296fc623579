//! flock(2), POSIX record locks (F_SETLK/F_GETLK) against a second process,
//! and open-file-description locks (F_OFD_SETLK) between two descriptors.

use std::fs::File;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, Flock, FlockArg, fcntl};

use crate::ensure;
use crate::probe::write_lock;
use crate::suite::Ctx;
use crate::util::{At, CheckResult, open_flags, write_file};

pub(crate) fn flock(c: &Ctx) -> CheckResult {
    let p = c.p("f");
    write_file(&p, b"x")?;
    let path = p.to_str().unwrap_or_default();
    let f = File::open(&p).at("open")?;
    let held = Flock::lock(f, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .at("LOCK_EX")?;
    ensure!(
        c.probe(&["flock-nb", path])? == Err(Errno::EWOULDBLOCK),
        "second process got LOCK_EX while held"
    );
    let f = held.unlock().map_err(|(_, e)| e).at("LOCK_UN")?;
    ensure!(c.probe(&["flock-nb", path])?.is_ok(), "LOCK_EX refused after unlock");
    let shared = Flock::lock(f, FlockArg::LockSharedNonblock)
        .map_err(|(_, e)| e)
        .at("LOCK_SH")?;
    ensure!(
        c.probe(&["flock-nb", path])? == Err(Errno::EWOULDBLOCK),
        "LOCK_EX granted over LOCK_SH"
    );
    // A second open file description in this process conflicts too.
    let g = File::open(&p).at("open again")?;
    ensure!(
        Flock::lock(g, FlockArg::LockExclusiveNonblock).is_err(),
        "flock on a second OFD did not conflict"
    );
    drop(shared);
    ensure!(
        c.probe(&["flock-nb", path])?.is_ok(),
        "closing did not release the flock"
    );
    Ok(())
}

pub(crate) fn posix_locks(c: &Ctx) -> CheckResult {
    let p = c.p("f");
    write_file(&p, &[0u8; 1000])?;
    let path = p.to_str().unwrap_or_default();
    let f = open_flags(&p, true, true, 0).at("open")?;
    fcntl(&f, FcntlArg::F_SETLK(&write_lock(0, 100))).at("F_SETLK")?;
    let got = c.probe(&["setlk", path, "50", "10"])?;
    ensure!(
        matches!(got, Err(Errno::EAGAIN | Errno::EACCES)),
        "overlapping lock from another process: {got:?}"
    );
    ensure!(c.probe(&["setlk", path, "200", "10"])?.is_ok(), "disjoint lock refused");
    let me = std::process::id().to_string();
    ensure!(
        c.probe(&["getlk", path, "0", "10"])? == Ok(me),
        "F_GETLK does not name the holder"
    );
    // Unlocking part of the range releases just that part.
    let mut un = write_lock(0, 60);
    un.l_type = libc::F_UNLCK as i16;
    fcntl(&f, FcntlArg::F_SETLK(&un)).at("F_UNLCK")?;
    ensure!(
        c.probe(&["setlk", path, "10", "10"])?.is_ok(),
        "unlocked part still locked"
    );
    ensure!(
        c.probe(&["setlk", path, "70", "10"])?.is_err(),
        "rest of the range was released"
    );
    // Closing any descriptor of the file drops this process's POSIX locks.
    drop(File::open(&p).at("open+close")?);
    ensure!(
        c.probe(&["getlk", path, "0", "1000"])? == Ok("unlocked".into()),
        "close did not drop POSIX locks"
    );
    Ok(())
}

pub(crate) fn ofd_locks(c: &Ctx) -> CheckResult {
    let p = c.p("f");
    write_file(&p, &[0u8; 100])?;
    let path = p.to_str().unwrap_or_default();
    let a = open_flags(&p, true, true, 0).at("open a")?;
    let b = open_flags(&p, true, true, 0).at("open b")?;
    fcntl(&a, FcntlArg::F_OFD_SETLK(&write_lock(0, 10))).at("F_OFD_SETLK a")?;
    let r = fcntl(&b, FcntlArg::F_OFD_SETLK(&write_lock(5, 10)));
    ensure!(
        matches!(r, Err(Errno::EAGAIN | Errno::EACCES)),
        "OFD lock on a second description: {r:?}"
    );
    let mut q = write_lock(0, 10);
    fcntl(&b, FcntlArg::F_OFD_GETLK(&mut q)).at("F_OFD_GETLK")?;
    ensure!(
        q.l_type == libc::F_WRLCK as i16 && q.l_pid == -1,
        "F_OFD_GETLK: type {} pid {}",
        q.l_type,
        q.l_pid
    );
    // Another process's POSIX lock conflicts with the OFD lock.
    ensure!(
        c.probe(&["setlk", path, "0", "5"])?.is_err(),
        "POSIX lock granted over an OFD lock"
    );
    // Closing an unrelated descriptor keeps OFD locks (unlike POSIX locks).
    drop(File::open(&p).at("open+close")?);
    ensure!(
        c.probe(&["setlk", path, "0", "5"])?.is_err(),
        "closing another fd dropped the OFD lock"
    );
    drop(a);
    ensure!(
        c.probe(&["setlk", path, "0", "5"])?.is_ok(),
        "closing the description kept the OFD lock"
    );
    fcntl(&b, FcntlArg::F_OFD_SETLK(&write_lock(0, 10))).at("F_OFD_SETLK b after close")?;
    Ok(())
}
