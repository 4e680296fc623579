//! Images in use elsewhere (issue 13, items 2 and 8): every writer —
//! `mount`, the CLI's edits, `mkfs -F` — is refused while the kernel or
//! another ext4kit has the image, with a message naming who; the image is
//! left as it was; a killed server leaves nothing that blocks the next
//! mount; `umount` leaves mounts that are not ours alone. Needs root, loop
//! devices and /dev/fuse; each test skips loudly without what it needs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount, is_mounted};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, require_tools, skip_unless};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn make_image(dir: &Path, name: &str) -> PathBuf {
    let img = dir.join(name);
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&img)
        .arg("64M")
        .output()
        .expect("run mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    img
}

fn ext4kit(args: &[&std::ffi::OsStr], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(exe())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run ext4kit");
    let mut input = child.stdin.take().expect("stdin");
    // A refused command may exit before reading its input.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().expect("wait for ext4kit")
}

fn write_file(img: &Path, path: &str, body: &[u8]) -> Output {
    ext4kit(&["write".as_ref(), img.as_os_str(), path.as_ref()], body)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts `o` failed (exit 1) with a message containing `want`.
fn assert_refused(o: &Output, what: &str, want: &str) {
    assert_eq!(o.status.code(), Some(1), "{what} was not refused: {}", stderr(o));
    assert!(
        stderr(o).contains(want),
        "{what}: message {:?} lacks {want:?}",
        stderr(o)
    );
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn {}: {}", img.display(), r.output);
}

/// The root directory's names as ext4kit lists them.
fn root_names(img: &Path) -> Vec<String> {
    let o = ext4kit(&["ls".as_ref(), img.as_os_str(), "/".as_ref()], b"");
    assert!(o.status.success(), "ls: {}", stderr(&o));
    let mut names: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

/// The loop device the kernel set up for `img` (`losetup -j`).
fn loop_device_of(img: &Path) -> PathBuf {
    let out = Command::new("losetup").arg("-j").arg(img).output().expect("losetup -j");
    let text = String::from_utf8_lossy(&out.stdout);
    let dev = text.split(':').next().unwrap_or_default().trim();
    assert!(
        dev.starts_with("/dev/loop"),
        "no loop device for {}: {text:?}",
        img.display()
    );
    PathBuf::from(dev)
}

/// A loop device attached with `losetup -f --show`, detached when dropped.
struct Losetup(PathBuf);

impl Losetup {
    fn attach(img: &Path) -> Self {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(img)
            .output()
            .expect("losetup");
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    }
}

impl Drop for Losetup {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

/// With the image mounted by the kernel through a loop device, `ext4kit
/// mount` (read-write), `write`, `mkfs -F`, and the same on the loop
/// device itself, are refused naming the mount point; `ls` warns and
/// reads. The image keeps exactly what the kernel wrote.
#[test]
fn a_kernel_mount_refuses_every_ext4kit_writer() {
    if skip_unless(can_loop_mount()).is_none()
        || skip_unless(can_fuse_mount()).is_none()
        || skip_unless(require_tools(&["mkfs.ext4", "losetup"])).is_none()
    {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "img.ext4");
    let k = LoopMount::rw(&img, &[]).unwrap();
    std::fs::write(k.path().join("from-kernel"), b"kernel data").unwrap();
    let mnt = k.path().display().to_string();

    let m = FuseMount::start(exe(), &img, "");
    let err = m
        .expect_err("ext4kit mount of a kernel-mounted image must fail")
        .to_string();
    assert!(err.contains("mounted by the kernel") && err.contains(&mnt), "{err}");
    assert_refused(&write_file(&img, "/from-ext4kit", b"lost"), "write", &mnt);
    let mkfs = ext4kit(&["mkfs".as_ref(), "-q".as_ref(), "-F".as_ref(), img.as_os_str()], b"");
    assert_refused(&mkfs, "mkfs -F", &mnt);
    let mkdir = ext4kit(&["mkdir".as_ref(), img.as_os_str(), "/d".as_ref()], b"");
    assert_refused(&mkdir, "mkdir", &mnt);

    // The loop device itself: held by the kernel mount (O_EXCL fails).
    let dev = loop_device_of(&img);
    assert_refused(
        &write_file(&dev, "/from-ext4kit", b"lost"),
        "write to the loop device",
        &mnt,
    );
    let mkfs = ext4kit(&["mkfs".as_ref(), "-q".as_ref(), "-F".as_ref(), dev.as_os_str()], b"");
    assert_refused(&mkfs, "mkfs -F of the loop device", &mnt);

    let ls = ext4kit(&["ls".as_ref(), img.as_os_str(), "/".as_ref()], b"");
    assert!(ls.status.success(), "ls: {}", stderr(&ls));
    assert!(
        stderr(&ls).contains("mounted by the kernel"),
        "ls warns: {}",
        stderr(&ls)
    );
    let fsck = ext4kit(&["fsck".as_ref(), "-fn".as_ref(), img.as_os_str()], b"");
    assert!(
        matches!(fsck.status.code(), Some(0 | 4)) && stderr(&fsck).contains("mounted by the kernel"),
        "fsck -fn checks and warns: {:?} {}",
        fsck.status,
        stderr(&fsck)
    );

    k.unmount().unwrap();
    assert_clean(&img);
    assert_eq!(root_names(&img), ["from-kernel", "lost+found"]);
}

/// While ext4kit writes an image through a loop device, the kernel cannot
/// mount that device (ext4kit holds it with O_EXCL) and ext4kit writers of
/// the image file are refused (the backing file is locked too).
#[test]
fn ext4kit_on_a_loop_device_excludes_the_kernel_and_the_image_file() {
    if skip_unless(can_loop_mount()).is_none()
        || skip_unless(can_fuse_mount()).is_none()
        || skip_unless(require_tools(&["mkfs.ext4", "losetup", "mount"])).is_none()
    {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "img.ext4");
    let lo = Losetup::attach(&img);
    let m = FuseMount::start(exe(), &lo.0, "").unwrap();
    std::fs::write(m.path().join("served"), b"through the loop device").unwrap();

    assert_refused(
        &write_file(&img, "/direct", b"lost"),
        "write to the image file",
        "ext4kit",
    );
    let kmnt = work.path().join("k");
    std::fs::create_dir(&kmnt).unwrap();
    let kernel = Command::new("mount").arg(&lo.0).arg(&kmnt).output().unwrap();
    if kernel.status.success() {
        let _ = Command::new("umount").arg(&kmnt).status();
        panic!("the kernel mounted {} while ext4kit served it", lo.0.display());
    }

    m.unmount().unwrap();
    drop(lo);
    assert_clean(&img);
    assert_eq!(root_names(&img), ["lost+found", "served"]);
}

/// With the image served by `ext4kit mount`, 20 `write`s, `mkfs -F`, a
/// second mount (read-write or read-only) all fail naming the server and
/// its mount point; what was written through the mount survives, and
/// nothing else appears.
#[test]
fn an_ext4kit_mount_refuses_every_other_writer() {
    if skip_unless(can_fuse_mount()).is_none() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "img.ext4");
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let pid = m.pid().unwrap();
    let holder = format!("mounted by ext4kit (pid {pid}) at {}", m.path().display());
    std::fs::write(m.path().join("mounted"), b"through the mount").unwrap();

    for i in 0..20 {
        let o = write_file(&img, &format!("/cli{i}"), b"must not be lost silently");
        assert_refused(&o, &format!("write {i}"), &holder);
    }
    let mkfs = ext4kit(&["mkfs".as_ref(), "-q".as_ref(), "-F".as_ref(), img.as_os_str()], b"");
    assert_refused(&mkfs, "mkfs -F", &holder);
    let rm = ext4kit(&["rm".as_ref(), img.as_os_str(), "/lost+found".as_ref()], b"");
    assert_refused(&rm, "rm", &holder);
    for opts in ["", "ro"] {
        let err = FuseMount::start(exe(), &img, opts)
            .expect_err("a second mount")
            .to_string();
        assert!(err.contains(&holder), "second mount -o {opts:?}: {err}");
    }
    let ls = ext4kit(&["ls".as_ref(), img.as_os_str(), "/".as_ref()], b"");
    assert!(
        ls.status.success() && stderr(&ls).contains(&holder),
        "ls: {}",
        stderr(&ls)
    );
    let fsck = ext4kit(&["fsck".as_ref(), "-fn".as_ref(), img.as_os_str()], b"");
    assert!(
        matches!(fsck.status.code(), Some(0 | 4)) && stderr(&fsck).contains(&holder),
        "fsck -fn checks and warns: {:?} {}",
        fsck.status,
        stderr(&fsck)
    );

    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
    assert_eq!(root_names(&img), ["lost+found", "mounted"]);
}

/// A read-only ext4kit mount holds writers off too (it must not serve an
/// image that changes under it), and readers beside it are welcome.
#[test]
fn a_read_only_mount_refuses_writers() {
    if skip_unless(can_fuse_mount()).is_none() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "img.ext4");
    let m = FuseMount::start(exe(), &img, "ro").unwrap();
    let o = write_file(&img, "/x", b"no");
    assert_refused(&o, "write beside a read-only mount", "mounted read-only by ext4kit");
    let second = FuseMount::start(exe(), &img, "ro").unwrap();
    assert!(second.unmount().unwrap().success());
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
    assert_eq!(root_names(&img), ["lost+found"]);
}

/// `kill -9` of a server: once its dead mount point is detached, the next
/// mount succeeds without any cleaning up and removes the lock files
/// killed servers left, and a clean exit removes the server's own.
#[test]
fn a_killed_server_does_not_block_the_next_mount() {
    if skip_unless(can_fuse_mount()).is_none() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "img.ext4");
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let lock = ext4kit_fuse::server_lock_path(&mnt).unwrap();
    let mount = || {
        let o = ext4kit(
            &["mount".as_ref(), "-d".as_ref(), img.as_os_str(), mnt.as_os_str()],
            b"",
        );
        assert!(o.status.success(), "mount: {}", stderr(&o));
        assert!(is_mounted(&mnt));
    };
    mount();
    std::fs::write(mnt.join("before"), b"synced").unwrap();
    std::fs::File::open(mnt.join("before")).unwrap().sync_all().unwrap();
    let pid = server_pid(&img);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let o = ext4kit(&["mount".as_ref(), img.as_os_str(), mnt.as_os_str()], b"");
    assert_refused(&o, "mount on the dead mount point", "umount -l");
    let lazy = Command::new("umount").arg("-l").arg(&mnt).status().unwrap();
    assert!(lazy.success());
    // Another killed server's file, for a mount point long gone.
    let other = lock.with_file_name(format!("_gone_{}_{}.lock", std::process::id(), pid));
    std::fs::write(&other, b"").unwrap();

    mount();
    assert!(
        !other.exists(),
        "a new server leaves stale lock files: {}",
        other.display()
    );
    assert_eq!(std::fs::read(mnt.join("before")).unwrap(), b"synced");
    let o = ext4kit(&["umount".as_ref(), mnt.as_os_str()], b"");
    assert!(o.status.success(), "umount: {}", stderr(&o));
    assert!(
        !lock.exists(),
        "the lock file outlives a clean exit: {}",
        lock.display()
    );
    assert_clean(&img);
}

/// The pid of the process holding the image lock, from /proc/locks.
fn server_pid(img: &Path) -> i32 {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(img).unwrap().ino();
    let locks = std::fs::read_to_string("/proc/locks").unwrap();
    locks
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 5 && f[1] == "FLOCK" && f[5].rsplit(':').next() == Some(&ino.to_string()))
        .and_then(|f| f[4].parse().ok())
        .expect("the server holds a lock on the image")
}

/// `ext4kit umount` refuses a tmpfs, a kernel ext4 mount and a directory
/// that is no mount point, and leaves them mounted.
#[test]
fn umount_refuses_what_is_not_an_ext4kit_mount() {
    if skip_unless(can_loop_mount()).is_none() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let tmp = work.path().join("tmpfs");
    std::fs::create_dir(&tmp).unwrap();
    let o = Command::new("mount")
        .args(["-t", "tmpfs", "none"])
        .arg(&tmp)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mount tmpfs: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let refused = ext4kit(&["umount".as_ref(), tmp.as_os_str()], b"");
    let still = is_mounted(&tmp);
    let _ = Command::new("umount").arg(&tmp).status();
    assert_refused(&refused, "umount of a tmpfs", "not an ext4kit mount (tmpfs");
    assert!(still, "ext4kit umount unmounted a tmpfs");

    let img = make_image(work.path(), "img.ext4");
    let k = LoopMount::rw(&img, &[]).unwrap();
    let refused = ext4kit(&["umount".as_ref(), k.path().as_os_str()], b"");
    assert_refused(&refused, "umount of a kernel ext4 mount", "not an ext4kit mount (ext4");
    assert!(is_mounted(k.path()), "ext4kit umount unmounted a kernel mount");
    k.unmount().unwrap();
    assert_clean(&img);

    let refused = ext4kit(&["umount".as_ref(), tmp.as_os_str()], b"");
    assert_refused(&refused, "umount of a plain directory", "not a mount point");
}

/// A file the kernel swaps to is refused to `mkfs -F` and left as it was.
#[test]
fn swap_space_is_refused() {
    if skip_unless(can_loop_mount()).is_none() || skip_unless(require_tools(&["mkswap", "swapon", "swapoff"])).is_none()
    {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let swap = work.path().join("swapfile");
    std::fs::write(&swap, vec![0u8; 16 << 20]).unwrap();
    std::fs::set_permissions(&swap, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let made = Command::new("mkswap").arg(&swap).output().unwrap();
    assert!(
        made.status.success(),
        "mkswap: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let on = Command::new("swapon").arg(&swap).output().unwrap();
    if !on.status.success() {
        ext4kit_testkit::skipped!(
            "swapon {}: {}",
            swap.display(),
            String::from_utf8_lossy(&on.stderr).trim()
        );
        assert!(std::env::var_os("CI").is_none(), "swapon failed under CI");
        return;
    }
    let before = std::fs::read(&swap).unwrap();
    let mkfs = ext4kit(&["mkfs".as_ref(), "-q".as_ref(), "-F".as_ref(), swap.as_os_str()], b"");
    let _ = Command::new("swapoff").arg(&swap).status();
    assert_refused(&mkfs, "mkfs -F of a swap file", "in use by the kernel as swap space");
    assert!(std::fs::read(&swap).unwrap() == before, "the swap file changed");
}

/// While `ext4kit write` runs (its input still open), `ext4kit mount` and
/// other edits are refused naming that command; the write then completes.
#[test]
fn a_running_cli_edit_holds_off_a_mount() {
    if skip_unless(can_fuse_mount()).is_none() || skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    use std::io::Write;
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "img.ext4");
    let mut writer = Command::new(exe())
        .arg("write")
        .arg(&img)
        .arg("/slow")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = writer.stdin.take().unwrap();
    input.write_all(b"first half, ").unwrap();
    // The image is locked once the writer has opened it.
    while !held(&img) {
        if let Some(status) = writer.try_wait().unwrap() {
            panic!("write exited early: {status}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let holder = format!("being written by ext4kit (pid {}: ", writer.id());
    let err = FuseMount::start(exe(), &img, "")
        .expect_err("mount beside a writer")
        .to_string();
    assert!(err.contains(&holder) && err.contains(" write "), "mount: {err}");
    let mkdir = ext4kit(&["mkdir".as_ref(), img.as_os_str(), "/d".as_ref()], b"");
    assert_refused(&mkdir, "mkdir beside a writer", &holder);

    input.write_all(b"second half").unwrap();
    drop(input);
    let out = writer.wait_with_output().unwrap();
    assert!(out.status.success(), "write: {}", stderr(&out));
    assert_clean(&img);
    let cat = ext4kit(&["cat".as_ref(), img.as_os_str(), "/slow".as_ref()], b"");
    assert_eq!(cat.stdout, b"first half, second half");
    assert_eq!(root_names(&img), ["lost+found", "slow"]);
}

/// True when /proc/locks lists an exclusive lock on `img`.
fn held(img: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(img).unwrap().ino().to_string();
    std::fs::read_to_string("/proc/locks").unwrap().lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 5 && f[1] == "FLOCK" && f[3] == "WRITE" && f[5].rsplit(':').next() == Some(ino.as_str())
    })
}
