//! Where programs can tell the mount from kernel ext4 (issue 20): each
//! test does the same thing on `ext4kit mount` and, where it can, on a
//! kernel loop mount of an image made the same way, and ends with
//! `e2fsck -fn`. Needs root and /dev/fuse; skips loudly otherwise.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount, is_mounted};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn make_image(dir: &Path, name: &str) -> PathBuf {
    let img = dir.join(name);
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&img)
        .arg("64M")
        .output()
        .expect("run mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    img
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn: {}", r.output);
}

fn ready(tools: &[&str]) -> bool {
    let root = rustix::process::geteuid().is_root();
    let ok = skip_unless(can_fuse_mount()).is_some()
        && skip_unless(if root { Ok(()) } else { Err("needs root".to_string()) }).is_some()
        && tools.iter().all(|t| skip_unless(require_tool(t)).is_some());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "mount_like_ext4 tests skipped on CI");
    }
    ok
}

/// `setfacl -m u::rwx,g::rwx,o::rwx` as uid 1000 (gid 1000) with the given
/// supplementary groups, on each of `paths`.
fn setfacl_as_1000(groups: &str, paths: &[&Path]) {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=1000", "--regid=1000"]);
    if groups.is_empty() {
        cmd.arg("--clear-groups");
    } else {
        cmd.arg(format!("--groups={groups}"));
    }
    let out = cmd
        .args(["setfacl", "-m", "u::rwx,g::rwx,o::rwx"])
        .args(paths)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "setfacl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Modes after an owner outside (file `out`, directory `dout`) and inside
/// (`in`, `din`) the group 2000 sets an access ACL on mode-2755 objects
/// (from 2777 setfacl would see nothing to change and send nothing).
fn sgid_after_setfacl(root: &Path) -> Vec<(String, u32)> {
    let names = ["out", "dout", "in", "din"];
    for n in names {
        let p = root.join(n);
        if n.starts_with('d') {
            std::fs::create_dir(&p).unwrap();
        } else {
            std::fs::write(&p, b"x").unwrap();
        }
        std::os::unix::fs::chown(&p, Some(1000), Some(2000)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o2755)).unwrap();
    }
    setfacl_as_1000("", &[&root.join("out"), &root.join("dout")]);
    setfacl_as_1000("2000", &[&root.join("in"), &root.join("din")]);
    names
        .iter()
        .map(|n| (n.to_string(), std::fs::metadata(root.join(n)).unwrap().mode() & 0o7777))
        .collect()
}

/// An access ACL set by the owner clears `S_ISGID` unless the owner is in
/// the file's group (`posix_acl_update_mode`), on files and directories,
/// as on kernel ext4.
#[test]
fn setting_an_acl_clears_sgid_for_an_owner_outside_the_group() {
    if !ready(&["mkfs.ext4", "setfacl", "setpriv"]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "fuse.ext4");
    let m = FuseMount::start(exe(), &img, "allow_other").unwrap();
    let got = sgid_after_setfacl(m.path());
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
    let want: Vec<(String, u32)> = [("out", 0o777), ("dout", 0o777), ("in", 0o2777), ("din", 0o2777)]
        .iter()
        .map(|(n, m)| (n.to_string(), *m))
        .collect();
    assert_eq!(got, want, "modes on the FUSE mount");
    if skip_unless(can_loop_mount()).is_some() {
        let kimg = make_image(work.path(), "kernel.ext4");
        let k = LoopMount::rw(&kimg, &[]).unwrap();
        let kernel = sgid_after_setfacl(k.path());
        k.unmount().unwrap();
        assert_eq!(got, kernel, "the FUSE mount and kernel ext4 differ");
        assert_clean(&kimg);
    }
}

/// Starts `ext4kit mount IMG DIR` in the foreground and waits until the
/// kernel has the mount; the server's stderr is in the failure.
fn serve(img: &Path, dir: &Path) -> std::process::Child {
    serve_with(img, dir, &[])
}

fn serve_with(img: &Path, dir: &Path, args: &[&str]) -> std::process::Child {
    let mut child = Command::new(exe())
        .arg("mount")
        .arg(img)
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while !is_mounted(dir) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            panic!("ext4kit mount exited ({status}): {err}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child
}

/// 20 rounds of write, unmount (umount(8), `fusermount3 -u` and `ext4kit
/// umount` in turn, the first two not waiting for the server) and mount
/// again at once: each mount waits for the previous server instead of
/// failing, and every round's file is there at the end. Then a read-only
/// mount, unmounted by umount(8), and a read-write one at once.
#[test]
fn mounting_right_after_unmounting_waits_for_the_previous_server() {
    if !ready(&["mkfs.ext4", "umount", "fusermount3"]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "img.ext4");
    let dir = work.path().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    let mut servers = Vec::new();
    let data = |round: usize| vec![round as u8; 512 << 10];
    for round in 0..20 {
        servers.push(serve(&img, &dir));
        std::fs::write(dir.join(format!("f{round}")), data(round)).unwrap();
        let (program, args): (&Path, &[&str]) = match round % 3 {
            0 => (Path::new("umount"), &[]),
            1 => (Path::new("fusermount3"), &["-u"]),
            _ => (exe(), &["umount"]),
        };
        let out = Command::new(program).args(args).arg(&dir).output().unwrap();
        assert!(
            out.status.success(),
            "{program:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A read-only mount's shared lock keeps a read-write one out as long.
    let ro = serve_with(&img, &dir, &["-o", "ro"]);
    assert!(Command::new("umount").arg(&dir).status().unwrap().success());
    servers.push(ro);
    let last = serve(&img, &dir);
    for round in 0..20 {
        assert_eq!(
            std::fs::read(dir.join(format!("f{round}"))).unwrap(),
            data(round),
            "f{round}"
        );
    }
    let out = Command::new(exe()).arg("umount").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for mut s in servers.into_iter().chain([last]) {
        assert!(s.wait().unwrap().success());
    }
    assert_clean(&img);
}

fn atime(p: &Path) -> (i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.atime(), m.atime_nsec())
}

fn run(program: &str, args: &[&str], path: &Path) {
    let out = Command::new(program).args(args).arg(path).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Under the mount at `root` (mounted with `option`): a file written, its
/// atime set two days back and read with `cat`, then set an hour ahead and
/// read again. Whether each read changed the atime; `chattr +A` first when
/// `no_atime_flag`.
fn reads_update_atime(root: &Path, option: &str, no_atime_flag: bool) -> (String, bool, bool) {
    let f = root.join(format!("f-{option}-{no_atime_flag}"));
    std::fs::write(&f, b"data read back").unwrap();
    if no_atime_flag {
        run("chattr", &["+A"], &f);
    }
    run("touch", &["-a", "-d", "2 days ago"], &f);
    let before = atime(&f);
    run("cat", &[], &f);
    let first = atime(&f);
    // An hour ahead: newer than mtime and ctime, so relatime leaves it
    // (two reads in a row may fall in one tick of the kernel's clock).
    run("touch", &["-a", "-d", "1 hour"], &f);
    let ahead = atime(&f);
    run("cat", &[], &f);
    let second = atime(&f);
    let name = format!("{option}{}", if no_atime_flag { " +A" } else { "" });
    (name, first != before, second != ahead)
}

/// Reads of cached data update access times as the atime options and the
/// per-file `noatime` flag say, as on kernel ext4: `strictatime` every
/// read, `relatime` when atime is not newer than mtime and ctime (or a
/// day old), never under `noatime` or `chattr +A`.
#[test]
fn reads_update_access_times_as_the_atime_option_says() {
    if !ready(&["mkfs.ext4", "chattr", "touch", "cat"]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let cases = [
        ("strictatime", false),
        ("relatime", false),
        ("noatime", false),
        ("relatime", true),
    ];
    let mut got = Vec::new();
    for (option, flag) in cases {
        let img = make_image(work.path(), "fuse.ext4");
        let m = FuseMount::start(exe(), &img, option).unwrap();
        got.push(reads_update_atime(m.path(), option, flag));
        assert!(m.unmount().unwrap().success());
        assert_clean(&img);
    }
    let want: Vec<(String, bool, bool)> = [
        ("strictatime", true, true),
        ("relatime", true, false),
        ("noatime", false, false),
        ("relatime +A", false, false),
    ]
    .iter()
    .map(|(n, a, b)| (n.to_string(), *a, *b))
    .collect();
    assert_eq!(
        got, want,
        "(option, first read updated, second read updated) on the FUSE mount"
    );
    if skip_unless(can_loop_mount()).is_some() {
        let mut kernel = Vec::new();
        for (option, flag) in cases {
            let img = make_image(work.path(), "kernel.ext4");
            let k = LoopMount::rw(&img, &[option]).unwrap();
            kernel.push(reads_update_atime(k.path(), option, flag));
            k.unmount().unwrap();
            assert_clean(&img);
        }
        assert_eq!(got, kernel, "the FUSE mount and kernel ext4 differ");
    }
}

/// Opens `f` with O_DIRECT, maps it shared, writes block 0 through the
/// map and block 1 with an aligned `pwrite`, changes block 2 through the
/// map and then block 2's first half again by direct I/O; checks that the
/// map, a direct `pread` and a buffered reader agree at each step, and
/// prints the final contents' blocks as hex digests.
const DIRECT_AND_MAP: &str = r#"
import mmap, os, sys, hashlib
p, bs = sys.argv[1], 4096
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
os.ftruncate(fd, 4 * bs)
m = mmap.mmap(fd, 4 * bs)
def aligned(data):
    buf = mmap.mmap(-1, len(data))
    buf.write(data)
    return buf
def check(step):
    m.flush()
    with open(p, "rb") as f:
        buffered = f.read()
    direct = aligned(bytes(4 * bs))
    os.preadv(fd, [direct], 0)
    if not (m[:] == buffered == direct[:]):
        sys.exit(f"{step}: the map, a buffered read and a direct read differ")
m[0:bs] = b"m" * bs
check("map write")
os.pwritev(fd, [aligned(b"d" * bs)], bs)
check("direct write")
m[2 * bs:3 * bs] = b"M" * bs
os.pwritev(fd, [aligned(b"D" * 512)], 2 * bs)
check("direct write over mapped data")
print(" ".join(hashlib.sha1(m[i * bs:(i + 1) * bs]).hexdigest()[:8] for i in range(4)))
m.close()
os.close(fd)
"#;

fn direct_and_map(root: &Path) -> String {
    let out = Command::new("python3")
        .args(["-c", DIRECT_AND_MAP])
        .arg(root.join("dm"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "O_DIRECT and mmap: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A file opened with O_DIRECT can be mapped shared, as on ext4, and the
/// map, direct I/O and buffered reads see the same data; the file is on
/// the image after unmount.
#[test]
fn a_file_opened_with_o_direct_can_be_mapped() {
    if !ready(&["mkfs.ext4", "python3"]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "fuse.ext4");
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let got = direct_and_map(m.path());
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
    let mut want = b"m".repeat(4096);
    want.extend(b"d".repeat(4096));
    want.extend(b"D".repeat(512));
    want.extend(b"M".repeat(4096 - 512));
    want.extend([0u8; 4096]);
    let cat = Command::new(exe()).arg("cat").arg(&img).arg("/dm").output().unwrap();
    assert!(cat.status.success(), "{}", String::from_utf8_lossy(&cat.stderr));
    assert!(cat.stdout == want, "the file on the image after unmount");
    if skip_unless(can_loop_mount()).is_some() {
        let kimg = make_image(work.path(), "kernel.ext4");
        let k = LoopMount::rw(&kimg, &[]).unwrap();
        let kernel = direct_and_map(k.path());
        k.unmount().unwrap();
        assert_clean(&kimg);
        assert_eq!(got, kernel, "the FUSE mount and kernel ext4 differ");
    }
}

/// `/sbin/mount.fuse.ext4kit`, where mount(8) looks for the helper of type
/// `fuse.ext4kit`: made a link to the built binary for the test (and
/// removed after) unless one is installed, which is then used. The tests
/// that use it take turns, so none removes it under another.
struct Helper {
    link: Option<PathBuf>,
    _turn: std::sync::MutexGuard<'static, ()>,
}

static HELPER_USERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Helper {
    fn install() -> Helper {
        let turn = HELPER_USERS.lock().unwrap_or_else(|e| e.into_inner());
        let at = Path::new("/sbin/mount.fuse.ext4kit");
        if at.symlink_metadata().is_ok() {
            return Helper {
                link: None,
                _turn: turn,
            };
        }
        std::os::unix::fs::symlink(exe(), at).expect("link the mount helper into /sbin");
        Helper {
            link: Some(at.to_path_buf()),
            _turn: turn,
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if let Some(p) = &self.link {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn mount_cmd(args: &[&str], dir: &Path) {
    let out = Command::new("mount").args(args).arg(dir).output().unwrap();
    assert!(
        out.status.success(),
        "mount {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_read_only(dir: &Path) -> bool {
    let v = nix::sys::statvfs::statvfs(dir).unwrap();
    v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY)
}

/// `mount -o remount,ro` through mount(8) and the installed helper: the
/// mount turns read-only (writes fail with EROFS), the image is marked
/// clean and passes `e2fsck -fn` while mounted; `remount,rw` makes it
/// writable again; a remount changes the atime mode; `ext4kit mount -o
/// remount,…` does the same; every file is there after unmount.
#[test]
fn remount_read_only_and_back() {
    if !ready(&["mkfs.ext4", "mount", "dumpe2fs", "touch", "cat"]) {
        return;
    }
    let _helper = Helper::install();
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "img.ext4");
    let dir = work.path().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    let mut mount = Command::new("mount");
    let out = mount.args(["-t", "fuse.ext4kit"]).arg(&img).arg(&dir).output().unwrap();
    assert!(out.status.success(), "mount: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(dir.join("a"), vec![7u8; 300 << 10]).unwrap();

    mount_cmd(&["-o", "remount,ro"], &dir);
    assert!(is_read_only(&dir), "the kernel's view after remount,ro");
    let err = std::fs::write(dir.join("b"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    assert_clean(&img);
    let sb = Command::new("dumpe2fs").arg("-h").arg(&img).output().unwrap();
    let sb = String::from_utf8_lossy(&sb.stdout);
    assert!(sb.contains("Filesystem state:         clean"), "{sb}");
    assert!(!sb.contains("needs_recovery"), "{sb}");
    assert_eq!(std::fs::read(dir.join("a")).unwrap(), vec![7u8; 300 << 10]);

    mount_cmd(&["-o", "remount,rw,noatime,commit=1,errors=continue"], &dir);
    assert!(!is_read_only(&dir), "the kernel's view after remount,rw");
    std::fs::write(dir.join("b"), b"written after remount,rw").unwrap();
    // Committed: the image is in use again, as after ext4's remount,rw.
    let out = Command::new(exe()).arg("sync").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sb = Command::new("dumpe2fs").arg("-h").arg(&img).output().unwrap();
    let sb = String::from_utf8_lossy(&sb.stdout);
    assert!(sb.contains("needs_recovery"), "{sb}");
    let f = dir.join("b");
    run("touch", &["-a", "-d", "2 days ago"], &f);
    let before = atime(&f);
    run("cat", &[], &f);
    assert_eq!(atime(&f), before, "noatime after remount");
    mount_cmd(&["-o", "remount,strictatime"], &dir);
    run("cat", &[], &f);
    assert_ne!(atime(&f), before, "strictatime after remount");

    // The ext4kit spelling.
    let out = Command::new(exe())
        .args(["mount", "-o", "remount,ro"])
        .arg(&img)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(is_read_only(&dir));
    assert_clean(&img);

    let out = Command::new(exe()).arg("umount").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_clean(&img);
    let cat = Command::new(exe()).arg("cat").arg(&img).arg("/b").output().unwrap();
    assert_eq!(cat.stdout, b"written after remount,rw");
}

/// A mount made with `-o ro` holds the image shared: `remount,rw` is
/// refused with a message and leaves it read-only; a remount that only
/// changes the atime mode works.
#[test]
fn remount_rw_of_a_read_only_mount_is_refused() {
    if !ready(&["mkfs.ext4", "mount"]) {
        return;
    }
    let _helper = Helper::install();
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "img.ext4");
    let m = FuseMount::start(exe(), &img, "ro").unwrap();
    let out = Command::new("mount")
        .args(["-o", "remount,rw"])
        .arg(m.path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "remount,rw of a ro mount succeeded");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mounted -o ro"), "{err}");
    assert!(is_read_only(m.path()));
    mount_cmd(&["-o", "remount,noatime"], m.path());
    assert!(is_read_only(m.path()));
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
}

/// `(stx_mask has STATX_BTIME, btime secs, btime nsecs, attributes,
/// attributes_mask)` of `p`, not following a symlink.
fn birth(p: &Path) -> (bool, i64, u32, u64, u64) {
    use rustix::fs::{AtFlags, CWD, StatxFlags, statx};
    let s = statx(
        CWD,
        p,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )
    .unwrap_or_else(|e| panic!("statx {}: {e}", p.display()));
    (
        s.stx_mask & StatxFlags::BTIME.bits() != 0,
        s.stx_btime.tv_sec,
        s.stx_btime.tv_nsec,
        s.stx_attributes.bits(),
        s.stx_attributes_mask.bits(),
    )
}

/// `statx` on the mount shows the birth time (`i_crtime`, to the
/// nanosecond) that kernel ext4 shows on a loop mount of the same image,
/// for files the kernel made; and where this kernel passes a FUSE
/// server's `stx_attributes` on, the same immutable/append/nodump bits.
#[test]
fn statx_shows_the_birth_time_kernel_ext4_shows() {
    if !ready(&["mkfs.ext4", "chattr"]) {
        return;
    }
    if skip_unless(can_loop_mount()).is_none() {
        assert!(std::env::var_os("CI").is_none(), "statx test skipped on CI");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "statx.ext4");
    let names = [".", "f", "d", "d/g", "l", "imm", "app", "nod"];
    let k = LoopMount::rw(&img, &[]).unwrap();
    let root = k.path().to_path_buf();
    std::fs::write(root.join("f"), b"x").unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d/g"), b"y").unwrap();
    std::os::unix::fs::symlink("f", root.join("l")).unwrap();
    for (name, flag) in [("imm", "+i"), ("app", "+a"), ("nod", "+d")] {
        std::fs::write(root.join(name), b"z").unwrap();
        run("chattr", &[flag], &root.join(name));
    }
    let kernel: Vec<_> = names.iter().map(|n| birth(&root.join(n))).collect();
    k.unmount().unwrap();
    let m = FuseMount::start(exe(), &img, "transport=dev").unwrap();
    let fuse: Vec<_> = names.iter().map(|n| birth(&m.path().join(n))).collect();
    assert!(m.unmount().unwrap().success());
    assert_clean(&img);
    const EXT4_BITS: u64 = 0x10 | 0x20 | 0x40;
    for ((name, k), f) in names.iter().zip(&kernel).zip(&fuse) {
        assert!(k.0, "kernel ext4 shows no birth time of {name}");
        assert_eq!((f.0, f.1, f.2), (k.0, k.1, k.2), "birth time of {name}");
        if f.4 & EXT4_BITS != 0 {
            assert_eq!(f.3 & EXT4_BITS, k.3 & EXT4_BITS, "statx attributes of {name}");
        }
    }
    assert_eq!(kernel[5].3 & EXT4_BITS, 0x10, "chattr +i as statx shows it");
}
