//! Permission checks as an unprivileged uid ([`USER`], via `probe` child
//! processes): mode bits by owner/group/other class, directory search and
//! write, sticky directories, setgid directory inheritance, setuid/setgid
//! clearing on write, who may chown/chmod/utime, and the O_EXCL race.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::errno::Errno;

use crate::suite::{Ctx, OTHER, USER, parse_probe};
use crate::util::{At, CheckResult, lstat, write_file};
use crate::{ensure, fail};

fn chmod(p: &Path, mode: u32) -> CheckResult {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).at("chmod")
}

fn chown(p: &Path, uid: u32, gid: u32) -> CheckResult {
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).at("chown")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

pub(crate) fn mode_bits(c: &Ctx) -> CheckResult {
    c.need_user()?;
    let f = c.p("f");
    write_file(&f, b"data")?;
    chmod(&f, 0o000)?;
    ensure!(
        c.user(&["read", s(&f)])? == Err(Errno::EACCES),
        "uid {USER} read a mode-0000 file"
    );
    ensure!(
        c.user(&["write", s(&f), "x"])? == Err(Errno::EACCES),
        "uid {USER} wrote a mode-0000 file"
    );
    ensure!(std::fs::read(&f).is_ok(), "root cannot read a mode-0000 file");
    chown(&f, USER, 0)?;
    chmod(&f, 0o400)?;
    ensure!(c.user(&["read", s(&f)])?.is_ok(), "owner cannot read 0400");
    ensure!(
        c.user(&["write", s(&f), "x"])? == Err(Errno::EACCES),
        "owner wrote 0400"
    );
    chmod(&f, 0o200)?;
    ensure!(c.user(&["read", s(&f)])? == Err(Errno::EACCES), "owner read 0200");
    ensure!(c.user(&["write", s(&f), "x"])?.is_ok(), "owner cannot write 0200");
    // The owner class applies even when "other" would allow more.
    chmod(&f, 0o004)?;
    ensure!(
        c.user(&["read", s(&f)])? == Err(Errno::EACCES),
        "owner read via the other bits of 0004"
    );
    chown(&f, 0, USER)?;
    chmod(&f, 0o040)?;
    ensure!(c.user(&["read", s(&f)])?.is_ok(), "group member cannot read 0040");
    chmod(&f, 0o404)?;
    ensure!(
        c.user(&["read", s(&f)])? == Err(Errno::EACCES),
        "group member read via the other bits of 0404"
    );
    Ok(())
}

pub(crate) fn dir_access(c: &Ctx) -> CheckResult {
    c.need_user()?;
    let d = c.p("d");
    std::fs::create_dir(&d).at("mkdir")?;
    let f = d.join("f");
    write_file(&f, b"x")?;
    chmod(&d, 0o644)?;
    ensure!(
        c.user(&["stat", s(&f)])? == Err(Errno::EACCES),
        "stat through a dir without x"
    );
    ensure!(c.user(&["readdir", s(&d)])? == Ok("f".into()), "readdir of an r-- dir");
    chmod(&d, 0o711)?;
    ensure!(
        c.user(&["readdir", s(&d)])? == Err(Errno::EACCES),
        "readdir of a --x dir"
    );
    ensure!(c.user(&["read", s(&f)])?.is_ok(), "open a known name in a --x dir");
    chmod(&d, 0o755)?;
    let new = d.join("new");
    ensure!(
        c.user(&["create", s(&new), "644"])? == Err(Errno::EACCES),
        "create in a root 0755 dir"
    );
    ensure!(
        c.user(&["unlink", s(&f)])? == Err(Errno::EACCES),
        "unlink in a root 0755 dir"
    );
    ensure!(
        c.user(&["mkdir", s(&new), "755"])? == Err(Errno::EACCES),
        "mkdir in a root 0755 dir"
    );
    chmod(&d, 0o733)?;
    ensure!(c.user(&["create", s(&new), "644"])?.is_ok(), "create in a -wx dir");
    ensure!(
        c.user(&["unlink", s(&f)])?.is_ok(),
        "unlink another's file in a 0733 dir (no sticky)"
    );
    chmod(&d, 0o766)?;
    ensure!(
        c.user(&["unlink", s(&new)])? == Err(Errno::EACCES),
        "unlink in a dir without x"
    );
    // Renaming a directory to another parent needs write on it (for `..`).
    chmod(&d, 0o777)?;
    let sub = d.join("sub");
    std::fs::create_dir(&sub).at("mkdir sub")?;
    let to = c.p("d2");
    std::fs::create_dir(&to).at("mkdir d2")?;
    chmod(&to, 0o777)?;
    ensure!(
        c.user(&["rename", s(&sub), s(&to.join("sub"))])? == Err(Errno::EACCES),
        "moved a root 0755 dir across parents"
    );
    Ok(())
}

pub(crate) fn sticky(c: &Ctx) -> CheckResult {
    c.need_user()?;
    let d = c.p("tmp");
    std::fs::create_dir(&d).at("mkdir")?;
    chmod(&d, 0o1777)?;
    let theirs = d.join("theirs");
    write_file(&theirs, b"x")?;
    chown(&theirs, OTHER, OTHER)?;
    chmod(&theirs, 0o666)?;
    ensure!(
        c.user(&["unlink", s(&theirs)])? == Err(Errno::EPERM),
        "deleted another user's file in a sticky dir"
    );
    let r = c.user(&["rename", s(&theirs), s(&d.join("moved"))])?;
    ensure!(
        r == Err(Errno::EPERM),
        "renamed another user's file in a sticky dir: {r:?}"
    );
    ensure!(
        c.user(&["write", s(&theirs), "ok"])?.is_ok(),
        "0666 file in sticky dir not writable"
    );
    let mine = d.join("mine");
    ensure!(c.user(&["create", s(&mine), "644"])?.is_ok(), "create in sticky dir");
    ensure!(
        c.user(&["rename", s(&mine), s(&d.join("mine2"))])?.is_ok(),
        "rename own file in sticky dir"
    );
    ensure!(
        c.user(&["unlink", s(&d.join("mine2"))])?.is_ok(),
        "delete own file in sticky dir"
    );
    // Replacing another user's file by rename is also refused.
    ensure!(c.user(&["create", s(&mine), "644"])?.is_ok(), "create again");
    ensure!(
        c.user(&["rename", s(&mine), s(&theirs)])? == Err(Errno::EPERM),
        "rename over another user's file"
    );
    // The directory's owner may delete anything in it.
    chown(&d, USER, USER)?;
    ensure!(
        c.user(&["unlink", s(&theirs)])?.is_ok(),
        "sticky dir owner cannot delete"
    );
    Ok(())
}

pub(crate) fn setgid_dir(c: &Ctx) -> CheckResult {
    c.need_user()?;
    const G: u32 = 4242;
    let d = c.p("sg");
    std::fs::create_dir(&d).at("mkdir")?;
    chown(&d, 0, G)?;
    chmod(&d, 0o2777)?;
    write_file(&d.join("rootfile"), b"")?;
    ensure!(
        lstat(&d.join("rootfile"))?.gid() == G,
        "file does not inherit the setgid dir's gid"
    );
    std::fs::create_dir(d.join("rootsub")).at("mkdir sub")?;
    let m = lstat(&d.join("rootsub"))?;
    ensure!(
        m.gid() == G && m.mode() & 0o2000 != 0,
        "subdir gid {} mode {:o}",
        m.gid(),
        m.mode()
    );
    let uf = d.join("userfile");
    ensure!(c.user(&["create", s(&uf), "644"])?.is_ok(), "user create in setgid dir");
    ensure!(
        lstat(&uf)?.gid() == G && lstat(&uf)?.uid() == USER,
        "user's file gid {} (wanted {G})",
        lstat(&uf)?.gid()
    );
    let ud = d.join("usersub");
    ensure!(c.user(&["mkdir", s(&ud), "755"])?.is_ok(), "user mkdir in setgid dir");
    let m = lstat(&ud)?;
    ensure!(
        m.gid() == G && m.mode() & 0o2000 != 0,
        "user's subdir gid {} mode {:o}",
        m.gid(),
        m.mode()
    );
    // A non-member creating a group-executable setgid file loses the bit.
    let sf = d.join("sgfile");
    ensure!(c.user(&["create", s(&sf), "2755"])?.is_ok(), "create 2755");
    let m = lstat(&sf)?;
    ensure!(
        m.mode() & 0o2000 == 0,
        "non-member kept S_ISGID on a new file: {:o}",
        m.mode()
    );
    // Without setgid on the dir, the creator's gid is used.
    chmod(&d, 0o777)?;
    let plain = d.join("plain");
    ensure!(c.user(&["create", s(&plain), "644"])?.is_ok(), "create in plain dir");
    ensure!(
        lstat(&plain)?.gid() == USER,
        "gid in a non-setgid dir: {}",
        lstat(&plain)?.gid()
    );
    Ok(())
}

pub(crate) fn suid_cleared(c: &Ctx) -> CheckResult {
    c.need_user()?;
    let f = c.p("f");
    write_file(&f, b"data")?;
    chmod(&f, 0o6777)?;
    ensure!(c.user(&["write", s(&f), "x"])?.is_ok(), "write 6777 file");
    let mode = lstat(&f)?.mode() & 0o7777;
    ensure!(mode == 0o777, "unprivileged write left mode {mode:o}, wanted 777");
    chown(&f, USER, USER)?;
    chmod(&f, 0o4755)?;
    ensure!(c.user(&["write", s(&f), "y"])?.is_ok(), "owner write");
    ensure!(
        lstat(&f)?.mode() & 0o7777 == 0o755,
        "owner's write kept setuid: {:o}",
        lstat(&f)?.mode()
    );
    // Root (CAP_FSETID) keeps the bits.
    chmod(&f, 0o4755)?;
    std::fs::write(&f, b"root").at("root write")?;
    ensure!(lstat(&f)?.mode() & 0o7777 == 0o4755, "root's write cleared setuid");
    // The owner (a member of the file's group) may set both bits again.
    chmod(&f, 0o6777)?;
    ensure!(c.user(&["chmod", s(&f), "6777"])?.is_ok(), "owner chmod");
    let sg = lstat(&f)?.mode() & 0o7777;
    ensure!(sg & 0o4000 != 0, "owner chmod 6777 lost setuid: {sg:o}");
    Ok(())
}

pub(crate) fn owner_ops(c: &Ctx) -> CheckResult {
    c.need_user()?;
    let mine = c.p("mine");
    write_file(&mine, b"x")?;
    chown(&mine, USER, USER)?;
    let r = c.user(&["chown", s(&mine), &OTHER.to_string(), ""])?;
    ensure!(r == Err(Errno::EPERM), "user gave a file away: {r:?}");
    ensure!(
        c.user(&["chown", s(&mine), "", "4242"])? == Err(Errno::EPERM),
        "chgrp to a non-member group"
    );
    ensure!(
        c.user(&["chown", s(&mine), &USER.to_string(), &USER.to_string()])?
            .is_ok(),
        "no-op chown"
    );
    ensure!(c.user(&["utime-set", s(&mine)])?.is_ok(), "owner set times");
    let theirs = c.p("theirs");
    write_file(&theirs, b"x")?;
    chmod(&theirs, 0o666)?;
    ensure!(
        c.user(&["chmod", s(&theirs), "777"])? == Err(Errno::EPERM),
        "chmod another's file"
    );
    ensure!(
        c.user(&["utime-now", s(&theirs)])?.is_ok(),
        "UTIME_NOW with write permission"
    );
    ensure!(
        c.user(&["utime-set", s(&theirs)])? == Err(Errno::EPERM),
        "explicit times on another's file"
    );
    chmod(&theirs, 0o644)?;
    ensure!(
        c.user(&["utime-now", s(&theirs)])? == Err(Errno::EACCES),
        "UTIME_NOW without write permission"
    );
    Ok(())
}

pub(crate) fn excl_race(c: &Ctx) -> CheckResult {
    for round in 0..20 {
        let p = c.p(&format!("race{round}"));
        let mut kids = Vec::new();
        for _ in 0..6 {
            kids.push(
                c.probe_command(None, &["create-excl", s(&p)])
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .at("spawn")?,
            );
        }
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let p = p.clone();
                std::thread::spawn(move || {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&p)
                        .map(|_| ())
                })
            })
            .collect();
        let mut wins = 0;
        for k in kids {
            match parse_probe(&k.wait_with_output().at("wait")?)? {
                Ok(_) => wins += 1,
                Err(Errno::EEXIST) => {}
                Err(e) => fail!("round {round}: a racing O_EXCL create failed with {e}"),
            }
        }
        for t in threads {
            match t.join() {
                Ok(Ok(())) => wins += 1,
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Ok(Err(e)) => fail!("round {round}: thread O_EXCL: {e}"),
                Err(_) => fail!("thread panicked"),
            }
        }
        ensure!(wins == 1, "round {round}: {wins} of 10 racing O_EXCL creates succeeded");
    }
    Ok(())
}
