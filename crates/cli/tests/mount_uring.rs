//! `ext4kit mount -o transport=uring`: FUSE over io_uring end to end. Every
//! kind of request the adapter answers goes through the ring entries (the
//! ring threads do the work, not the `/dev/fuse` reader), an unmount with
//! requests in flight ends the server cleanly, and a server killed in the
//! middle of requests leaves the mount failing with ENOTCONN, not hanging.
//! Each image is `e2fsck -fn` clean afterwards. Needs root, /dev/fuse and
//! a kernel with FUSE over io_uring (6.14+); turns `fuse.enable_uring` on,
//! and skips loudly where it cannot.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

const ENABLE: &str = "/sys/module/fuse/parameters/enable_uring";

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

/// Root, /dev/fuse, mkfs.ext4, and FUSE over io_uring turned on (this
/// turns it on, as root may).
fn ready() -> bool {
    if skip_unless(can_fuse_mount()).is_none() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        return false;
    }
    let on = match std::fs::read_to_string(ENABLE) {
        Ok(v) if v.trim() == "Y" => Ok(()),
        Ok(_) => std::fs::write(ENABLE, "Y").map_err(|e| format!("cannot turn on {ENABLE}: {e}")),
        Err(_) => Err(format!("no {ENABLE}: the kernel has no FUSE over io_uring")),
    };
    skip_unless(on).is_some()
}

fn make_image(dir: &Path) -> PathBuf {
    let img = dir.join("img.ext4");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&img)
        .arg("128M")
        .output()
        .expect("run mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    img
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn: {}", r.output);
}

/// Voluntary context switches of the server's threads whose name starts
/// with `prefix`: each request a thread waits for and serves adds some.
fn switches(pid: u32, prefix: &str) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        total += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

fn ring_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("ext4kit-ring-")))
        .count()
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every request kind the adapter answers, through the rings: names,
/// attributes, data, directories, links, extended attributes, space,
/// ioctls, sync; what was written reads back through the mount and from
/// the image afterwards.
#[test]
fn every_request_kind_round_trips_over_io_uring() {
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path());
    let m = FuseMount::start(exe(), &img, "transport=uring").unwrap();
    let pid = m.pid().unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The serving threads start just after the mount is reported.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ring_threads(pid) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(ring_threads(pid) >= 1, "no ring threads serve the mount");
    let (ring0, dev0) = (switches(pid, "ext4kit-ring-"), switches(pid, "ext4kit-fuse-"));
    let p = m.path();

    std::fs::create_dir(p.join("d")).unwrap(); // MKDIR
    let f = p.join("d/f");
    let body: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 253) as u8).collect();
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&f)
        .unwrap(); // CREATE
    file.write_all(&body).unwrap(); // WRITE
    file.sync_all().unwrap(); // FSYNC
    let mut back = vec![0u8; 4096];
    file.read_exact_at(&mut back, 1_000_000).unwrap();
    assert_eq!(back, body[1_000_000..1_004_096]);
    file.seek(SeekFrom::Start(0)).unwrap();
    drop(file); // FLUSH, RELEASE
    assert_eq!(std::fs::read(&f).unwrap(), body, "OPEN, READ");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap(); // SETATTR
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600, "GETATTR");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(5000)
        .unwrap();
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 5000);
    std::os::unix::fs::symlink("f", p.join("d/l")).unwrap(); // SYMLINK
    assert_eq!(std::fs::read_link(p.join("d/l")).unwrap(), Path::new("f"), "READLINK");
    std::fs::hard_link(&f, p.join("d/h")).unwrap(); // LINK
    assert_eq!(std::fs::metadata(&f).unwrap().nlink(), 2);
    std::fs::rename(p.join("d/h"), p.join("h2")).unwrap(); // RENAME
    run("mkfifo", &[p.join("d/fifo").to_str().unwrap()]); // MKNOD
    let mut names: Vec<_> = std::fs::read_dir(p.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect(); // OPENDIR, READDIR(PLUS), RELEASEDIR
    names.sort();
    assert_eq!(names, ["f", "fifo", "l"]);
    xattr::set(&f, "user.k", b"value").unwrap(); // SETXATTR
    assert_eq!(
        xattr::get(&f, "user.k").unwrap().as_deref(),
        Some(&b"value"[..]),
        "GETXATTR"
    );
    let listed: Vec<_> = xattr::list(&f).unwrap().collect(); // LISTXATTR
    assert!(listed.iter().any(|n| n == "user.k"), "{listed:?}");
    xattr::remove(&f, "user.k").unwrap(); // REMOVEXATTR
    assert_eq!(xattr::get(&f, "user.k").unwrap(), None);
    let st = rustix::fs::statvfs(p).unwrap(); // STATFS
    assert_eq!(st.f_bsize, 4096);
    let sx = rustix::fs::statx(
        rustix::fs::CWD,
        &f,
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::BTIME,
    )
    .unwrap(); // STATX
    assert_eq!(sx.stx_size, 5000);
    let g = std::fs::OpenOptions::new().read(true).write(true).open(&f).unwrap();
    rustix::fs::fallocate(&g, rustix::fs::FallocateFlags::empty(), 1 << 20, 1 << 20).unwrap(); // FALLOCATE
    assert_eq!(g.metadata().unwrap().len(), 2 << 20);
    let data = rustix::fs::seek(&g, rustix::fs::SeekFrom::Data(0)).unwrap(); // LSEEK
    assert_eq!(data, 0);
    let copy = std::fs::File::create(p.join("copy")).unwrap();
    let n = rustix::fs::copy_file_range(&g, Some(&mut 0), &copy, Some(&mut 0), 4096).unwrap(); // COPY_FILE_RANGE
    assert_eq!(n, 4096);
    drop((g, copy));
    if require_tool("chattr").is_ok() {
        run("chattr", &["+d", f.to_str().unwrap()]); // IOCTL (FS_IOC_SETFLAGS)
        assert!(
            run("lsattr", &[f.to_str().unwrap()]).starts_with("------d"),
            "IOCTL (GETFLAGS)"
        );
    }
    assert!(rustix::fs::access(&f, rustix::fs::Access::READ_OK).is_ok()); // ACCESS
    std::fs::remove_file(p.join("d/fifo")).unwrap(); // UNLINK
    std::fs::create_dir(p.join("d/sub")).unwrap();
    std::fs::remove_dir(p.join("d/sub")).unwrap(); // RMDIR
    assert_eq!(
        std::fs::metadata(p.join("nope")).unwrap_err().raw_os_error(),
        Some(libc::ENOENT),
        "LOOKUP of a missing name"
    );
    let mut small = std::fs::File::open(&f).unwrap();
    let mut head = [0u8; 16];
    small.read_exact(&mut head).unwrap();
    assert_eq!(head[..], body[..16]);
    drop(small);

    let (ring1, dev1) = (switches(pid, "ext4kit-ring-"), switches(pid, "ext4kit-fuse-"));
    assert!(
        ring1 - ring0 >= 40,
        "the ring threads served few requests: {ring0} → {ring1} switches ({cpus} CPUs)"
    );
    assert!(
        dev1 - dev0 < ring1 - ring0,
        "/dev/fuse did the work: {dev0} → {dev1}, rings {ring0} → {ring1}"
    );
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
    let cat = Command::new(exe()).arg("cat").arg(&img).arg("/copy").output().unwrap();
    assert_eq!(cat.stdout, body[..4096]);
}

/// Lazily unmounted while four threads keep creating, writing and
/// stat-ing files through directory handles they hold: the requests in
/// flight are answered, the server exits once the last handle closes,
/// and the image is clean.
#[test]
fn unmount_with_requests_in_flight_ends_the_server_cleanly() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path());
    let m = FuseMount::start(exe(), &img, "transport=uring").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let dir = std::fs::File::open(m.path()).unwrap();
            let (stop, done) = (stop.clone(), done.clone());
            std::thread::spawn(move || busy_in(&dir, t, &stop, &done))
        })
        .collect();
    while done.load(Ordering::Relaxed) < 200 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let detached = Command::new("umount").arg("-l").arg(m.path()).status().unwrap();
    assert!(detached.success());
    let before = done.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    assert!(done.load(Ordering::Relaxed) > before, "requests stopped being answered");
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let status = m.wait().unwrap();
    assert!(status.success(), "{status}");
    assert_clean(&img);
}

/// Creates, writes and stats files in `dir` until `stop`, counting each
/// round in `done`.
fn busy_in(dir: &std::fs::File, t: usize, stop: &AtomicBool, done: &AtomicU64) {
    use rustix::fs::{Mode, OFlags, openat, statat, unlinkat};
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("t{t}-{}", i % 50);
        let fd = openat(
            dir,
            &name,
            OFlags::CREATE | OFlags::WRONLY | OFlags::TRUNC,
            Mode::from(0o644),
        )
        .unwrap();
        rustix::io::write(&fd, &[t as u8; 8192]).unwrap();
        drop(fd);
        statat(dir, &name, rustix::fs::AtFlags::empty()).unwrap();
        if i.is_multiple_of(7) {
            unlinkat(dir, &name, rustix::fs::AtFlags::empty()).unwrap();
        }
        i += 1;
        done.fetch_add(1, Ordering::Relaxed);
    }
}

/// SIGKILL while two threads keep requests coming: the requests in
/// flight fail within seconds (none hangs), every later one with
/// ENOTCONN, and the journal
/// replays to a clean image on the next mount.
#[test]
fn a_server_killed_mid_request_leaves_enotconn_not_a_hang() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path());
    let m = FuseMount::start(exe(), &img, "transport=uring").unwrap();
    let mnt = m.path().to_path_buf();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            let (mnt, stop, done, errors) = (mnt.clone(), stop.clone(), done.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let r = std::fs::write(mnt.join(format!("k{t}-{}", i % 20)), [1u8; 65536])
                        .and_then(|()| std::fs::metadata(&mnt).map(|_| ()));
                    match r {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            errors.lock().unwrap().push(e.raw_os_error());
                            return;
                        }
                    }
                    i += 1;
                }
            })
        })
        .collect();
    while done.load(Ordering::Relaxed) < 100 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = m.signal_and_wait(rustix::process::Signal::KILL).unwrap();
    assert!(!status.success());
    let started = Instant::now();
    for w in workers {
        w.join().unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "requests hung {:?} after the kill",
        started.elapsed()
    );
    // A request in flight at the kill is aborted (ECONNABORTED, as on
    // /dev/fuse); one made afterwards finds no connection (ENOTCONN).
    for e in errors.lock().unwrap().iter() {
        assert!(
            matches!(*e, Some(libc::ENOTCONN | libc::ECONNABORTED)),
            "requests around the kill: {e:?}"
        );
    }
    let later = std::fs::metadata(mnt.join("k0-0")).unwrap_err();
    assert_eq!(later.raw_os_error(), Some(libc::ENOTCONN), "{later}");
    stop.store(true, Ordering::Relaxed);
    assert!(Command::new("umount").arg("-l").arg(&mnt).status().unwrap().success());
    FuseMount::start(exe(), &img, "transport=uring")
        .unwrap()
        .unmount()
        .unwrap();
    assert_clean(&img);
}

/// `transport=auto` serves over io_uring where the kernel offers it (it
/// measured no slower than `/dev/fuse` on any workload), as `uring`
/// does; `transport=dev` starts no ring threads.
#[test]
fn auto_and_uring_start_rings_and_dev_does_not() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path());
    for (options, rings) in [
        ("transport=uring", true),
        ("transport=auto", true),
        ("transport=dev", false),
    ] {
        let m = FuseMount::start(exe(), &img, options).unwrap();
        std::fs::write(m.path().join("x"), options).unwrap();
        assert_eq!(ring_threads(m.pid().unwrap()) >= 1, rings, "{options}");
        assert!(m.unmount().unwrap().success());
    }
    assert_clean(&img);
}
