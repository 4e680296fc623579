//! Commands that take an image take an NBD URI too: `ext4kit mkfs` onto
//! an nbdkit export over a Unix socket, `ext4kit mount nbd+unix://…`
//! through FUSE with files written and read back, `ext4kit fsck -fn` over
//! the export, then `e2fsck -fn` on the server's backing file.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ext4kit_testkit::fuse::{FuseMount, ready_with};
use ext4kit_testkit::nbd::{Listen, NbdServer, servers_missing};
use ext4kit_testkit::{skipped, tools};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ext4kit(args: &[&str]) -> std::process::Output {
    Command::new(exe()).args(args).output().unwrap()
}

#[test]
fn mkfs_mount_and_fsck_over_nbd() {
    if let Some(why) = servers_missing() {
        skipped!("NBD servers missing: {why}");
        return;
    }
    if !ready_with("e2fsck") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("backing.img");
    std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let srv = NbdServer::nbdkit(
        &["file", &format!("file={}", img.display())],
        &Listen::Unix(dir.path().join("cli.sock")),
    )
    .unwrap();
    let uri = srv.uri("");
    let out = ext4kit(&["mkfs", "-q", &uri]);
    assert!(out.status.success(), "mkfs: {}", String::from_utf8_lossy(&out.stderr));
    let again = ext4kit(&["mkfs", "-q", &uri]);
    assert!(!again.status.success(), "mkfs over a file system without -F");
    assert!(String::from_utf8_lossy(&again.stderr).contains("use -F"));

    let m = FuseMount::start(exe(), Path::new(&uri), "").unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..30)
        .map(|i| (format!("f{i}"), vec![i as u8; 1 + i * 7000]))
        .collect();
    std::fs::create_dir(m.path().join("d")).unwrap();
    for (name, data) in &files {
        std::fs::write(m.path().join("d").join(name), data).unwrap();
    }
    for (name, data) in &files {
        assert!(std::fs::read(m.path().join("d").join(name)).unwrap() == *data, "{name}");
    }
    assert!(m.unmount().unwrap().success());

    let fsck = ext4kit(&["fsck", "-fn", &uri]);
    assert!(
        fsck.status.success(),
        "ext4kit fsck over NBD: {}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    drop(srv);
    tools::assert_fsck_clean(&img).unwrap();
    let listing = tools::debugfs(&img, "ls -l /d").unwrap();
    assert!(listing.contains("f29"), "{listing}");
}

#[test]
fn a_bad_uri_is_named() {
    let out = ext4kit(&["fsck", "-fn", "nbd+unix:///x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("socket="), "{err}");
    let out = ext4kit(&["fsck", "-fn", "nbds://127.0.0.1/x?tls-psk-file=/k"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("TLS-PSK is not supported"));
}

/// A mkfs.ext4 image of 64 MiB in `dir` holding `pre` (1 MiB, never
/// read before the server dies, so reading it later must reach the
/// export), and the bytes of `pre`.
fn image_with_pre(dir: &Path) -> Option<(std::path::PathBuf, Vec<u8>)> {
    if !ready_with("mkfs.ext4") {
        return None;
    }
    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    let pre: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(src.join("pre"), &pre).unwrap();
    let img = dir.join("backing.img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-d"])
        .arg(&src)
        .arg(&img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some((img, pre))
}

fn errno_of(r: std::io::Result<()>) -> Option<i32> {
    r.err().map(|e| e.raw_os_error().unwrap_or(0))
}

/// The server of a mounted image SIGKILLed: what was fsynced before is
/// kept; the next fsync fails with EIO and the mount refuses writes from
/// then on (EROFS or EIO, never success); once the server is back on the
/// same socket, reads go on (the client reconnects); unmount works; the
/// backing file, mounted directly (the journal recovers), holds every
/// fsynced file and passes `e2fsck -fn`.
#[test]
fn mount_survives_a_killed_server() {
    if let Some(why) = servers_missing() {
        skipped!("NBD servers missing: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((img, pre)) = image_with_pre(dir.path()) else {
        return;
    };
    let mut srv = NbdServer::qemu_nbd(&img, "", &Listen::Unix(dir.path().join("k.sock"))).unwrap();
    let uri = srv.uri("");
    let m = FuseMount::start(exe(), Path::new(&uri), "").unwrap();
    let synced: Vec<(String, Vec<u8>)> = (0..8)
        .map(|i| (format!("s{i}"), vec![0x40 + i as u8; 1000 + i * 30_000]))
        .collect();
    for (name, data) in &synced {
        let mut f = std::fs::File::create(m.path().join(name)).unwrap();
        std::io::Write::write_all(&mut f, data).unwrap();
        f.sync_all().unwrap();
    }
    srv.kill();
    let late = (|| {
        let mut f = std::fs::File::create(m.path().join("late"))?;
        std::io::Write::write_all(&mut f, &[7u8; 200_000])?;
        f.sync_all()
    })();
    assert_eq!(errno_of(late), Some(libc::EIO), "an fsync with the server gone");
    let again = std::fs::write(m.path().join("later"), b"x");
    let code = errno_of(again);
    assert!(
        matches!(code, Some(libc::EROFS | libc::EIO)),
        "a write after the failure gave {code:?}"
    );
    srv.restart().unwrap();
    assert!(
        std::fs::read(m.path().join("pre")).unwrap() == pre,
        "pre read after the restart"
    );
    for (name, data) in &synced {
        assert!(std::fs::read(m.path().join(name)).unwrap() == *data, "{name}");
    }
    let status = m.unmount().expect("unmount after the failure");
    assert!(!status.success(), "the server hid the lost writes (exit {status})");
    drop(srv);

    let local = FuseMount::start(exe(), &img, "").unwrap();
    for (name, data) in &synced {
        assert!(
            std::fs::read(local.path().join(name)).unwrap() == *data,
            "{name} was fsynced before the kill and is lost"
        );
    }
    assert!(std::fs::read(local.path().join("pre")).unwrap() == pre);
    assert!(local.unmount().unwrap().success());
    tools::assert_fsck_clean(&img).unwrap();
}

/// Writes `w{i}` files (sizes drawn from `seed`), each fsynced, until one
/// fails; returns those whose fsync returned and the first error's errno.
fn fsync_writer(dir: &Path, seed: u64, done: &AtomicUsize) -> (Vec<(String, Vec<u8>)>, i32) {
    let mut rng = ext4kit_testkit::rng::Rng::new(seed);
    let mut kept = Vec::new();
    for i in 0..5000u32 {
        let name = format!("w{i}");
        let len = 1 + rng.below(96 << 10) as usize;
        let data = rng.bytes(len);
        let r = (|| {
            let mut f = std::fs::File::create(dir.join(&name))?;
            std::io::Write::write_all(&mut f, &data)?;
            f.sync_all()
        })();
        match r {
            Ok(()) => {
                kept.push((name, data));
                done.store(kept.len(), Ordering::SeqCst);
            }
            Err(e) => return (kept, e.raw_os_error().unwrap_or(0)),
        }
    }
    panic!("5000 fsyncs succeeded with the server killed");
}

/// The server SIGKILLed at a seeded moment (after the writer's third
/// fsync) while a writer fsyncs file after file (requests in flight when
/// it dies): the writer gets EIO or
/// EROFS, and the backing file, mounted directly, holds every file whose
/// fsync returned, byte for byte, and passes `e2fsck -fn`.
#[test]
fn mount_keeps_every_fsync_across_a_kill_in_flight() {
    if let Some(why) = servers_missing() {
        skipped!("NBD servers missing: {why}");
        return;
    }
    for seed in 0x6b11..0x6b14 {
        kill_in_flight(seed, seed % 2 == 0);
    }
}

fn kill_in_flight(seed: u64, qemu: bool) {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, _)) = image_with_pre(dir.path()) else {
        return;
    };
    let listen = Listen::Unix(dir.path().join("w.sock"));
    let mut srv = if qemu {
        NbdServer::qemu_nbd(&img, "", &listen)
    } else {
        NbdServer::nbdkit(&["file", &format!("file={}", img.display())], &listen)
    }
    .unwrap();
    let m = FuseMount::start(exe(), Path::new(&srv.uri("")), "").unwrap();
    let root = m.path().to_path_buf();
    let done = Arc::new(AtomicUsize::new(0));
    let writer = std::thread::spawn({
        let done = done.clone();
        move || fsync_writer(&root, seed, &done)
    });
    let started = Instant::now();
    while done.load(Ordering::SeqCst) < 3 && !writer.is_finished() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "three fsyncs took a minute"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let delay = ext4kit_testkit::rng::Rng::new(seed).below(200);
    std::thread::sleep(Duration::from_millis(delay));
    srv.kill();
    let (kept, errno) = writer.join().unwrap();
    assert!(
        matches!(errno, libc::EIO | libc::EROFS),
        "the writer's first failure after {} files: errno {errno}",
        kept.len()
    );
    assert!(!m.unmount().unwrap().success());
    drop(srv);
    let local = FuseMount::start(exe(), &img, "").unwrap();
    for (name, data) in &kept {
        assert!(
            std::fs::read(local.path().join(name)).unwrap() == *data,
            "{name} was fsynced before the kill and is not intact"
        );
    }
    assert!(local.unmount().unwrap().success());
    tools::assert_fsck_clean(&img).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    eprintln!(
        "seed {seed}: killed {delay} ms after the third fsync: {} fsynced files kept",
        kept.len()
    );
}

/// A read-only mount whose server dies and comes back on the same
/// socket: reads while it is gone fail with EIO (never hang or return
/// wrong bytes); once it is back, reads from four threads at once
/// reconnect and return every file whole, and the mount unmounts cleanly.
#[test]
fn read_only_mount_reads_again_after_the_server_returns() {
    if let Some(why) = servers_missing() {
        skipped!("NBD servers missing: {why}");
        return;
    }
    if !ready_with("mkfs.ext4") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let body = |i: usize| -> Vec<u8> {
        (0..512usize << 10)
            .map(|k| (k / 4096 + i * 31) as u8 ^ k as u8)
            .collect()
    };
    for i in 0..16 {
        std::fs::write(src.join(format!("p{i}")), body(i)).unwrap();
    }
    let img = dir.path().join("ro.img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-d"])
        .arg(&src)
        .arg(&img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut srv = NbdServer::qemu_nbd(&img, "", &Listen::Unix(dir.path().join("ro.sock"))).unwrap();
    let m = FuseMount::start(exe(), Path::new(&srv.uri("")), "ro").unwrap();
    let read = |i: usize| std::fs::read(m.path().join(format!("p{i}")));
    assert!(read(0).unwrap() == body(0));
    srv.kill();
    let e = read(1).expect_err("a read with the server gone");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    srv.restart().unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                for i in (1 + t..16).step_by(4) {
                    assert!(read(i).unwrap() == body(i), "p{i} after the reconnect");
                }
            });
        }
    });
    assert!(m.unmount().unwrap().success(), "a read-only mount lost nothing");
    drop(srv);
    tools::assert_fsck_clean(&img).unwrap();
}

/// A server that fails writes with EIO while it lives (nbdkit's error
/// filter, armed by a trigger file): the fsync that meets it gets EIO,
/// the mount refuses writes from then on even once the server is healthy
/// again (`errors=remount-ro`), unmount works, and the backing file keeps
/// every file fsynced before and passes `e2fsck -fn` after recovery.
#[test]
fn server_write_errors_turn_the_mount_read_only() {
    if let Some(why) = servers_missing() {
        skipped!("NBD servers missing: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((img, _)) = image_with_pre(dir.path()) else {
        return;
    };
    let trigger = dir.path().join("inject");
    let srv = NbdServer::nbdkit(
        &[
            "--filter=error",
            "file",
            &format!("file={}", img.display()),
            "error-pwrite=EIO",
            "error-pwrite-rate=100%",
            &format!("error-pwrite-file={}", trigger.display()),
        ],
        &Listen::Unix(dir.path().join("e.sock")),
    )
    .unwrap();
    let m = FuseMount::start(exe(), Path::new(&srv.uri("")), "").unwrap();
    let fsynced = |name: &str, data: &[u8]| -> std::io::Result<()> {
        let mut f = std::fs::File::create(m.path().join(name))?;
        std::io::Write::write_all(&mut f, data)?;
        f.sync_all()
    };
    fsynced("kept", &[0x11u8; 300_000]).unwrap();
    std::fs::File::create(&trigger).unwrap();
    assert_eq!(errno_of(fsynced("failed", &[0x22u8; 300_000])), Some(libc::EIO));
    std::fs::remove_file(&trigger).unwrap();
    let code = errno_of(fsynced("after", b"x"));
    assert!(
        matches!(code, Some(libc::EROFS | libc::EIO)),
        "a write on a healthy server after the failure gave {code:?}"
    );
    assert!(std::fs::read(m.path().join("kept")).unwrap() == [0x11u8; 300_000]);
    assert!(!m.unmount().unwrap().success(), "the server hid the failed write");
    drop(srv);
    let local = FuseMount::start(exe(), &img, "").unwrap();
    assert!(std::fs::read(local.path().join("kept")).unwrap() == [0x11u8; 300_000]);
    assert!(local.unmount().unwrap().success());
    tools::assert_fsck_clean(&img).unwrap();
}
