//! `ext4kit mount` end to end through the real FUSE device: real programs
//! (cp -a, tar, git, make and cc) on the mount, then `e2fsck -fn` and a
//! kernel loop mount of the image must agree with what was written. Needs
//! root and /dev/fuse; skips loudly otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_testkit::compare::{CompareOptions, compare_trees, format_differences};
use ext4kit_testkit::fixture::{TreeOptions, build_tree};
use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount, is_mounted};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn make_image(dir: &Path, size: &str, extra: &[&str]) -> PathBuf {
    let img = dir.join("img.ext4");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .args(extra)
        .arg(&img)
        .arg(size)
        .output()
        .expect("run mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    img
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn: {}", r.output);
}

fn run_in(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The file-system type /proc/mounts gives for the mount at `dir`.
fn mount_type(dir: &Path) -> String {
    let canon = std::fs::canonicalize(dir).unwrap();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(1) == canon.to_str())
        .unwrap();
    line.split_whitespace().nth(2).unwrap().to_string()
}

fn ready() -> bool {
    skip_unless(can_fuse_mount()).is_some() && skip_unless(require_tool("mkfs.ext4")).is_some()
}

/// A tree with every kind of object, copied with `cp -a`, reads back the
/// same through the mount, after unmounting through the kernel, and is
/// e2fsck-clean.
#[test]
fn cp_a_of_every_object_kind_matches_through_fuse_and_the_kernel() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    build_tree(&src, &TreeOptions::small()).unwrap();
    let img = make_image(work.path(), "256M", &["-b", "4096"]);
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let dest = m.path().join("tree");
    let out = Command::new("cp").arg("-a").arg(&src).arg(&dest).output().unwrap();
    assert!(out.status.success(), "cp -a: {}", String::from_utf8_lossy(&out.stderr));
    let diffs = compare_trees(&src, &dest, CompareOptions::default());
    assert!(diffs.is_empty(), "through FUSE:\n{}", format_differences(&diffs));
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
    if skip_unless(can_loop_mount()).is_some() {
        let k = LoopMount::ro(&img).unwrap();
        let diffs = compare_trees(&src, &k.path().join("tree"), CompareOptions::default());
        assert!(diffs.is_empty(), "through the kernel:\n{}", format_differences(&diffs));
    }
}

/// git clone + git fsck, tar extract + compare, and a C build on the mount.
#[test]
fn git_tar_and_a_c_build_work_on_the_mount() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "512M", &[]);
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let mnt = m.path().to_path_buf();

    let src = work.path().join("src");
    build_tree(&src, &TreeOptions::small()).unwrap();
    if skip_unless(require_tool("tar")).is_some() {
        let tarball = work.path().join("t.tar");
        run_in(
            work.path(),
            "tar",
            &[
                "--format=posix",
                "--xattrs",
                "--xattrs-include=*",
                "-cSf",
                tarball.to_str().unwrap(),
                "-C",
                src.to_str().unwrap(),
                ".",
            ],
        );
        std::fs::create_dir(mnt.join("untar")).unwrap();
        run_in(
            &mnt.join("untar"),
            "tar",
            &["--xattrs", "--xattrs-include=*", "-xpf", tarball.to_str().unwrap()],
        );
        // tar archives no sockets.
        let opts = CompareOptions {
            root_metadata: false,
            exclude: vec!["special/socket".into()],
            ..CompareOptions::default()
        };
        let diffs = compare_trees(&src, &mnt.join("untar"), opts);
        assert!(diffs.is_empty(), "tar x:\n{}", format_differences(&diffs));
    }
    if skip_unless(require_tool("git")).is_some() {
        let repo = work.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        run_in(&repo, "git", &["init", "-q"]);
        for i in 0..40 {
            std::fs::write(repo.join(format!("f{i}.txt")), format!("file {i}\n").repeat(i * 50 + 1)).unwrap();
            run_in(&repo, "git", &["add", "."]);
            run_in(
                &repo,
                "git",
                &[
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "commit",
                    "-qm",
                    &format!("c{i}"),
                ],
            );
        }
        run_in(&mnt, "git", &["clone", "-q", repo.to_str().unwrap(), "clone"]);
        run_in(&mnt.join("clone"), "git", &["fsck", "--full", "--strict"]);
        run_in(&mnt.join("clone"), "git", &["gc", "-q"]);
        run_in(&mnt.join("clone"), "git", &["fsck", "--full"]);
        let st = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(mnt.join("clone"))
            .output()
            .unwrap();
        assert!(
            st.stdout.is_empty(),
            "clone is dirty: {}",
            String::from_utf8_lossy(&st.stdout)
        );
    }
    if skip_unless(require_tool("make")).is_some() && skip_unless(require_tool("cc")).is_some() {
        let p = mnt.join("cproj");
        std::fs::create_dir(&p).unwrap();
        for i in 0..8 {
            std::fs::write(
                p.join(format!("m{i}.c")),
                format!("int f{i}(int x) {{ return x * {i} + 1; }}\n"),
            )
            .unwrap();
        }
        let calls: String = (0..8).map(|i| format!("int f{i}(int); s += f{i}(s);\n")).collect();
        std::fs::write(
            p.join("main.c"),
            format!(
                "#include <stdio.h>\n{}int main(void) {{ int s = 1; {calls} printf(\"%d\\n\", s); return 0; }}\n",
                ""
            ),
        )
        .unwrap();
        std::fs::write(
            p.join("Makefile"),
            "OBJS = main.o m0.o m1.o m2.o m3.o m4.o m5.o m6.o m7.o\nprog: $(OBJS)\n\tcc -o $@ $(OBJS)\n%.o: %.c\n\tcc -O1 -c $<\n",
        )
        .unwrap();
        run_in(&p, "make", &["-j2", "-s"]);
        let out = Command::new(p.join("prog")).output().unwrap();
        let mut s: i64 = 1;
        for i in 0..8 {
            s += s * i + 1;
        }
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), s.to_string());
    }
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
}

/// Options the engine cannot honour are refused by name; allocation
/// policies mount and leave a clean image; `ro` refuses writes with
/// EROFS; `fstype=fuse` mounts with the plain type.
#[test]
fn options_are_honoured_or_refused() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(exe())
        .arg("mount")
        .arg(&img)
        .arg(dir.path())
        .args(["-o", "dax"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dax") && err.contains("not supported yet"), "{err}");
    assert!(!is_mounted(dir.path()));
    // Options that only disagree together are refused before the mount.
    let out = Command::new(exe())
        .arg("mount")
        .arg(&img)
        .arg(dir.path())
        .args(["-o", "mb_min_to_scan=300", "-o", "alloc=ext3"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mb_min_to_scan=300") && err.contains("mb_max_to_scan=200"),
        "{err}"
    );
    assert!(!is_mounted(dir.path()));

    let allocs = "alloc=ext3,inode_alloc=flexbg,stripe=16,mb_group_prealloc=64,mb_optimize_scan=1";
    let m = FuseMount::start(exe(), &img, allocs).unwrap();
    std::fs::create_dir(m.path().join("d")).unwrap();
    std::fs::write(m.path().join("d/f"), vec![7u8; 300 << 10]).unwrap();
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);

    let m = FuseMount::start(exe(), &img, "ro,fstype=fuse").unwrap();
    let e = std::fs::write(m.path().join("x"), b"no").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    assert_eq!(mount_type(m.path()), "fuse");
    assert!(m.unmount().unwrap().success());

    let m = FuseMount::start(exe(), &img, "").unwrap();
    assert_eq!(mount_type(m.path()), "fuse.ext4kit");
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
}

/// SIGTERM and SIGINT unmount, flush and leave the image clean.
#[test]
fn signals_unmount_cleanly() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    for (i, sig) in [rustix::process::Signal::TERM, rustix::process::Signal::INT]
        .into_iter()
        .enumerate()
    {
        let m = FuseMount::start(exe(), &img, "").unwrap();
        let body = vec![i as u8 + 1; 300_000];
        std::fs::write(m.path().join(format!("f{i}")), &body).unwrap();
        let mnt = m.path().to_path_buf();
        let status = m.signal_and_wait(sig).unwrap();
        assert!(status.success(), "{status}");
        assert!(!is_mounted(&mnt));
        assert_clean(&img);
        let cat = Command::new(exe())
            .arg("cat")
            .arg(&img)
            .arg(format!("/f{i}"))
            .output()
            .unwrap();
        assert_eq!(cat.stdout, body);
    }
}

/// A signal that finds the mount busy (a file open on it) does not give
/// up: the server keeps serving, unmounts once the file is closed, and
/// exits with a clean image. (fuser's unmounter forgets its mount after
/// one failed try; retrying through it used to leave the server running.)
#[test]
fn a_signal_on_a_busy_mount_unmounts_once_it_is_free() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let mnt = m.path().to_path_buf();
    use std::io::Write;
    let mut open = std::fs::File::create(mnt.join("held")).unwrap();
    open.write_all(b"still open").unwrap();
    let pid = rustix::process::Pid::from_raw(m.pid().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(is_mounted(&mnt), "unmounted while a file was open");
    open.write_all(b", served").unwrap();
    drop(open);
    let status = m.signal_and_wait(rustix::process::Signal::TERM).unwrap();
    assert!(status.success(), "{status}");
    assert!(!is_mounted(&mnt));
    assert_clean(&img);
    let cat = Command::new(exe()).arg("cat").arg(&img).arg("/held").output().unwrap();
    assert_eq!(cat.stdout, b"still open, served");
}

/// A server killed without unmounting (SIGKILL) leaves its fsync'd
/// changes in the journal: our next open, and the kernel's, replay them.
#[test]
fn a_killed_server_recovers_by_journal_replay() {
    if !ready() {
        return;
    }
    for opts in ["", "data=journal"] {
        let work = tempfile::tempdir().unwrap();
        let img = make_image(work.path(), "64M", &[]);
        let m = FuseMount::start(exe(), &img, opts).unwrap();
        let body: Vec<u8> = (0..700_000u32).map(|i| (i * 13 % 251) as u8).collect();
        {
            use std::io::Write;
            let mut f = std::fs::File::create(m.path().join("synced")).unwrap();
            f.write_all(&body).unwrap();
            f.sync_all().unwrap();
        }
        std::fs::create_dir(m.path().join("dir")).unwrap();
        std::fs::File::open(m.path()).unwrap().sync_all().unwrap();
        let mnt = m.path().to_path_buf();
        let status = m.signal_and_wait(rustix::process::Signal::KILL).unwrap();
        assert!(!status.success(), "{opts}: {status}");
        let _ = Command::new("umount").arg("-l").arg(&mnt).status();
        let h = Command::new("dumpe2fs").arg("-h").arg(&img).output().unwrap();
        assert!(String::from_utf8_lossy(&h.stdout).contains("needs_recovery"), "{opts}");
        let kernel_copy = work.path().join("kernel.img");
        std::fs::copy(&img, &kernel_copy).unwrap();

        let cat = || {
            Command::new(exe())
                .arg("cat")
                .arg(&img)
                .arg("/synced")
                .output()
                .unwrap()
                .stdout
        };
        assert!(cat() == body, "{opts}: read-only replay in memory");
        FuseMount::start(exe(), &img, "").unwrap().unmount().unwrap();
        assert_clean(&img);
        assert!(cat() == body, "{opts}: after our replay");

        if can_loop_mount().is_ok() {
            let k = LoopMount::rw(&kernel_copy, &[]).unwrap();
            assert!(
                std::fs::read(k.path().join("synced")).unwrap() == body,
                "{opts}: kernel replay"
            );
            assert!(k.path().join("dir").is_dir());
            k.unmount().unwrap();
            assert_clean(&kernel_copy);
        }
    }
}

/// `mount.fuse.ext4kit` (how `mount -t fuse.ext4kit` and fstab reach us)
/// mounts in the background and returns.
#[test]
fn mount_helper_mounts_in_the_background() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    let helper = work.path().join("mount.fuse.ext4kit");
    std::os::unix::fs::symlink(exe(), &helper).unwrap();
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = Command::new(&helper)
        .arg(&img)
        .arg(&mnt)
        .args(["-o", "rw,noatime"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(is_mounted(&mnt));
    std::fs::write(mnt.join("hello"), b"from the helper").unwrap();
    let out = Command::new(exe()).arg("umount").arg(&mnt).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!is_mounted(&mnt));
    assert_clean(&img);
    let cat = Command::new(exe()).arg("cat").arg(&img).arg("/hello").output().unwrap();
    assert_eq!(cat.stdout, b"from the helper");
}

/// `errors=remount-ro` (the default) stops changes once corruption is met;
/// `errors=continue` goes on.
#[test]
fn corruption_follows_the_errors_option() {
    if !ready() || skip_unless(require_tool("debugfs")).is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    let out = Command::new(exe())
        .args(["touch"])
        .arg(&img)
        .arg("/victim")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new("debugfs")
        .args(["-w", "-R", "set_inode_field /victim checksum 0x1234"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (opts, writes_after) in [("", false), ("errors=continue", true)] {
        let m = FuseMount::start(exe(), &img, opts).unwrap();
        std::fs::write(m.path().join("before"), b"ok").unwrap();
        let e = std::fs::metadata(m.path().join("victim")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADMSG), "{opts}: {e}");
        let r = std::fs::write(m.path().join("after"), b"x");
        match writes_after {
            true => r.unwrap(),
            false => assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EROFS), "{opts}"),
        }
        std::fs::remove_file(m.path().join("before")).ok();
        assert!(m.unmount().unwrap().success());
    }
}

/// `uid=IMAGE:HOST` shows the image's owner as the host's, and stores the
/// host's as the image's.
#[test]
fn uid_and_gid_maps_translate_both_ways() {
    if !ready() {
        return;
    }
    use std::os::unix::fs::{MetadataExt, chown};
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    let out = Command::new(exe())
        .args(["touch"])
        .arg(&img)
        .arg("/theirs")
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = Command::new(exe())
        .args(["chown"])
        .arg(&img)
        .args(["1001:1001", "/theirs"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = FuseMount::start(exe(), &img, "uid=1001:1000,gid=1001:1000").unwrap();
    let md = std::fs::metadata(m.path().join("theirs")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1000, 1000));
    std::fs::write(m.path().join("mine"), b"").unwrap();
    chown(m.path().join("mine"), Some(1000), Some(1000)).unwrap();
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
    let st = Command::new(exe()).arg("stat").arg(&img).arg("/mine").output().unwrap();
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(text.contains("1001"), "stored owner should be 1001:\n{text}");
}

/// `df` on the mount shows what it shows on a kernel mount of the image:
/// size less metadata, used, and available less both reserves.
#[test]
fn statfs_matches_the_kernel() {
    if !ready() || skip_unless(can_loop_mount()).is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    for (size, extra) in [
        ("256M", &[][..]),
        ("2G", &["-b", "4096"][..]),
        ("128M", &["-t", "ext2"][..]),
    ] {
        let img = make_image(work.path(), size, extra);
        let fields = |p: &Path| {
            let s = nix::sys::statvfs::statvfs(p).unwrap();
            let bs = s.fragment_size();
            (
                s.blocks() * bs,
                s.blocks_free() * bs,
                s.blocks_available() * bs,
                s.files(),
                s.files_free(),
            )
        };
        let k = LoopMount::ro(&img).unwrap();
        let kernel = fields(k.path());
        k.unmount().unwrap();
        let m = FuseMount::start(exe(), &img, "ro").unwrap();
        assert_eq!(fields(m.path()), kernel, "{size} {extra:?}");
        assert!(m.unmount().unwrap().success());
    }
}

/// How many of process `pid`'s `/dev/fuse` descriptors are non-blocking
/// (`O_NONBLOCK` in `/proc/PID/fdinfo`): the one fuser's spinner reads;
/// plus the threads of the own transport spinning on the device now.
fn polled_fuse_fds(pid: u32) -> usize {
    non_blocking_fuse_fds(pid) + spinning_threads(pid)
}

/// Serving threads of `pid` (`ext4kit-fuse-N`) that neither sleep nor
/// block in a read: on a CPU, or in `ppoll` without waiting, in two looks
/// 100 µs apart. A serving thread that is only finishing a request can be
/// caught too, so callers judge by most looks, not one.
fn spinning_threads(pid: u32) -> usize {
    let look = || -> std::collections::HashSet<String> {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Default::default();
        };
        tasks
            .filter_map(Result::ok)
            .filter(|t| {
                let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                let call = std::fs::read_to_string(t.path().join("syscall")).unwrap_or_default();
                comm.starts_with("ext4kit-fuse-") && (call.starts_with("running") || call.starts_with("271 "))
            })
            .map(|t| t.file_name().to_string_lossy().into_owned())
            .collect()
    };
    let first = look();
    std::thread::sleep(std::time::Duration::from_micros(100));
    first.intersection(&look()).count()
}

fn non_blocking_fuse_fds(pid: u32) -> usize {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
    fds.filter_map(Result::ok)
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == Path::new("/dev/fuse")))
        .filter(|e| {
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", e.file_name().to_string_lossy()))
                .unwrap_or_default();
            let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).unwrap_or("0");
            u32::from_str_radix(flags.trim(), 8).unwrap_or(0) & libc::O_NONBLOCK as u32 != 0
        })
        .count()
}

/// While requests keep coming, the server polls its device (in most of
/// 400 looks: a spinner is seen in nearly all, a loaded server without
/// one in a few at most); once they stop, it does not; `poll=0` never
/// polls.
#[test]
fn the_server_polls_its_device_only_while_requests_come() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    // Polling is the /dev/fuse transport's (io_uring has no device read).
    for (options, polls) in [("transport=dev", true), ("poll=0,transport=dev", false)] {
        let m = FuseMount::start(exe(), &img, options).unwrap();
        let pid = m.pid().unwrap();
        // Each stat of a new name is a LOOKUP the kernel cannot answer.
        let looks = (0..20_000)
            .filter(|i| {
                let _ = std::fs::metadata(m.path().join(format!("absent{i}")));
                i % 50 == 49
            })
            .map(|_| polled_fuse_fds(pid) > 0)
            .collect::<Vec<_>>();
        let hits = looks.iter().filter(|&&p| p).count();
        let busy_polled = hits * 2 > looks.len();
        assert_eq!(
            busy_polled,
            polls,
            "polling while busy with -o '{options}': {hits} of {} looks",
            looks.len()
        );
        let idle = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            polled_fuse_fds(pid) == 0
        });
        assert!(idle, "still polling after 5 s without a request");
        assert!(m.unmount().unwrap().success());
        assert_clean(&img);
    }
}

/// Whether the server `pid` holds a CPU latency request open.
fn holds_cpu_latency(pid: u32) -> bool {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
    fds.filter_map(Result::ok)
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == Path::new("/dev/cpu_dma_latency")))
}

/// The CPU wake-up latency the whole system is held to now (µs), an `s32`
/// in the kernel's byte order.
#[allow(clippy::host_endian_bytes)]
fn cpu_latency_limit() -> i32 {
    use std::io::Read;
    let mut dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/cpu_dma_latency")
        .unwrap();
    let mut b = [0u8; 4];
    dev.read_exact(&mut b).unwrap();
    i32::from_ne_bytes(b)
}

/// `cpu_latency=on` holds a request for zero wake-up latency while the
/// mount is busy, even without spinning; `cpu_latency=off` never opens one.
#[test]
fn a_busy_server_asks_for_prompt_cpu_wakeups_only_when_told() {
    if !ready() {
        return;
    }
    if !Path::new("/dev/cpu_dma_latency").exists() {
        ext4kit_testkit::skipped!("a_busy_server_asks_for_prompt_cpu_wakeups…: no /dev/cpu_dma_latency");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    for (options, asks) in [("cpu_latency=on,poll=0", true), ("cpu_latency=off", false)] {
        let m = FuseMount::start(exe(), &img, options).unwrap();
        let pid = m.pid().unwrap();
        assert_eq!(holds_cpu_latency(pid), asks, "holding the device with -o '{options}'");
        if asks {
            let busy_zero = (0..20_000).any(|i| {
                let _ = std::fs::metadata(m.path().join(format!("absent{i}")));
                i % 50 == 49 && cpu_latency_limit() == 0
            });
            assert!(busy_zero, "no zero latency demand while busy with -o '{options}'");
        }
        assert!(m.unmount().unwrap().success());
        assert_clean(&img);
    }
}

/// The kernel's readahead for the mount, in KiB: the `read_ahead_kb` of
/// its backing device info.
fn mount_read_ahead_kb(mnt: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(mnt).unwrap().dev();
    let knob = format!("/sys/class/bdi/{}:{}/read_ahead_kb", libc::major(dev), libc::minor(dev));
    std::fs::read_to_string(&knob).unwrap().trim().parse().unwrap()
}

/// FUSE gives a mount 128 KiB of readahead; the server raises it to
/// 16 MiB, or to what `read_ahead_kb=` asks.
#[test]
fn the_mount_reads_ahead_as_much_as_asked() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    for (options, kb) in [("", 16384), ("read_ahead_kb=512", 512)] {
        let m = FuseMount::start(exe(), &img, options).unwrap();
        assert_eq!(mount_read_ahead_kb(m.path()), kb, "with -o '{options}'");
        assert!(m.unmount().unwrap().success());
        assert_clean(&img);
    }
}

/// A corrupt extent met by `cat` through the mount is recorded in the
/// superblock at once (as the kernel's `ext4_error`), with nothing else of
/// the image written; `e2fsck -p` then checks the image. A read-only mount
/// writes nothing; `errors=panic` records before it stops.
#[test]
fn corruption_met_by_a_read_is_recorded_in_the_superblock() {
    if !ready() || skip_unless(require_tool("debugfs")).is_none() || skip_unless(require_tool("dumpe2fs")).is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), vec![5u8; 20_000]).unwrap();
    let img = make_image(work.path(), "64M", &["-d", src.to_str().unwrap()]);
    let debugfs = |req: &str| ext4kit_testkit::tools::debugfs_write(&img, req).unwrap();
    debugfs("sif /f block[0] 0x1234");
    let ino = debugfs("stat /f").split_whitespace().nth(1).unwrap().to_string();
    let field = |key: &str| {
        let out = Command::new("dumpe2fs").arg("-h").arg(&img).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
            .map(|v| v.trim().to_string())
    };
    let cat_fails = |mnt: &Path| {
        let out = Command::new("cat").arg(mnt.join("f")).output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    let before = std::fs::read(&img).unwrap();
    let m = FuseMount::start(exe(), &img, "ro").unwrap();
    cat_fails(m.path());
    assert!(m.unmount().unwrap().success());
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a read-only mount wrote the image"
    );

    let m = FuseMount::start(exe(), &img, "noatime").unwrap();
    let err = cat_fails(m.path());
    assert!(err.contains("Structure needs cleaning"), "{err}");
    assert_eq!(
        field("Filesystem state").as_deref(),
        Some("clean with errors"),
        "while mounted"
    );
    // One per READ: the kernel tries again without readahead.
    let count = || field("FS Error count").map_or(0, |c| c.parse::<u32>().unwrap());
    let errors = count();
    assert!(errors >= 1);
    assert!(m.unmount().unwrap().success());
    assert_eq!(field("Filesystem state").as_deref(), Some("clean with errors"));
    assert_eq!(count(), errors);
    assert_eq!(field("First error inode #"), Some(ino.clone()));
    assert!(field("First error function").is_some_and(|f| !f.is_empty()));
    let after = std::fs::read(&img).unwrap();
    let journal: Vec<usize> = debugfs("blocks <8>")
        .split_whitespace()
        .map(|b| b.parse().unwrap())
        .collect();
    let bs: usize = field("Block size").unwrap().parse().unwrap();
    let others: Vec<usize> = (0..before.len() / bs)
        .filter(|b| before[b * bs..(b + 1) * bs] != after[b * bs..(b + 1) * bs])
        .filter(|b| *b != 1024 / bs && !journal.contains(b))
        .collect();
    assert!(
        others.is_empty(),
        "written besides the superblock and the journal: {others:?}"
    );

    let m = FuseMount::start(exe(), &img, "errors=panic").unwrap();
    cat_fails(m.path());
    let mnt = m.path().to_path_buf();
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    assert!(count() > errors, "errors=panic records before it stops");

    let out = Command::new("e2fsck").arg("-p").arg(&img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("contains a file system with errors, check forced"),
        "{text}"
    );
    let _ = Command::new("e2fsck").arg("-fy").arg(&img).output().unwrap();
    assert_clean(&img);
}

/// `sync` and `syncfs(2)` do not reach the server; `ext4kit sync` does:
/// what was written before it survives a `kill -9` of the server (with
/// `commit=60`, so no periodic commit helps), through journal replay.
/// Paths that are not ext4kit mounts are refused.
#[test]
fn ext4kit_sync_makes_everything_durable_now() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    let m = FuseMount::start(exe(), &img, "commit=60").unwrap();
    let bodies: Vec<Vec<u8>> = (0..3u32)
        .map(|n| (0..300_000u32).map(|i| (i * (n + 7) % 251) as u8).collect())
        .collect();
    for (n, body) in bodies.iter().enumerate() {
        std::fs::write(m.path().join(format!("f{n}")), body).unwrap();
    }
    std::fs::create_dir(m.path().join("d")).unwrap();
    std::fs::write(m.path().join("d/small"), b"small").unwrap();
    let out = Command::new(exe()).arg("sync").arg(m.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mnt = m.path().to_path_buf();
    let status = m.signal_and_wait(rustix::process::Signal::KILL).unwrap();
    assert!(!status.success());
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();

    let cat = |path: &str| {
        let out = Command::new(exe()).arg("cat").arg(&img).arg(path).output().unwrap();
        assert!(out.status.success(), "{path}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    for (n, body) in bodies.iter().enumerate() {
        assert!(cat(&format!("/f{n}")) == *body, "f{n} after the kill");
    }
    assert_eq!(cat("/d/small"), b"small");
    FuseMount::start(exe(), &img, "").unwrap().unmount().unwrap();
    assert_clean(&img);
    assert!(cat("/f2") == bodies[2], "after replay");

    for not_ours in [work.path(), Path::new("/proc")] {
        let out = Command::new(exe()).arg("sync").arg(not_ours).output().unwrap();
        assert!(!out.status.success(), "{}", not_ours.display());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not an ext4kit mount"), "{err}");
    }
}

/// Without `ext4kit sync`, `sync` alone promises nothing on a FUSE mount
/// (with `commit=60` the files may well be gone after a `kill -9`), but
/// what the replay brings back is consistent: each file is absent, empty
/// (created, its data not yet committed, as on kernel ext4) or whole, and
/// the image is e2fsck-clean.
#[test]
fn plain_sync_then_a_kill_leaves_a_consistent_image() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M", &[]);
    let m = FuseMount::start(exe(), &img, "commit=60").unwrap();
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    for n in 0..4 {
        std::fs::write(m.path().join(format!("f{n}")), &body).unwrap();
    }
    let out = Command::new("sync").arg("-f").arg(m.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mnt = m.path().to_path_buf();
    m.signal_and_wait(rustix::process::Signal::KILL).unwrap();
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    FuseMount::start(exe(), &img, "").unwrap().unmount().unwrap();
    assert_clean(&img);
    for n in 0..4 {
        let out = Command::new(exe())
            .arg("cat")
            .arg(&img)
            .arg(format!("/f{n}"))
            .output()
            .unwrap();
        if out.status.success() {
            assert!(
                out.stdout.is_empty() || out.stdout == body,
                "f{n} is there but not whole"
            );
        }
    }
}
