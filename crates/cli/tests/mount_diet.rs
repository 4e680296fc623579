//! The FUSE request diet keeps behaviour, on both transports:
//! - negative entries: a name the kernel was told is missing appears as
//!   soon as the same mount creates it (file, directory, symlink, link,
//!   rename target), and is never cached as missing in a casefolded
//!   directory, where another casing of it may be created;
//! - `FUSE_HANDLE_KILLPRIV_V2`: set-id bits still go on a write or
//!   truncate by a caller without `CAP_FSETID` and on chown, as the VFS
//!   drops them; a capability is still removed by a write; and a run of
//!   writes asks for `security.capability` once, not once per `write(2)`
//!   (counted with the kernel's `fuse_request_send` tracepoint).
//!
//! e2fsck -fn is clean after each mount.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_testkit::fuse::{FuseMount, ready_with};
use ext4kit_testkit::tools::{assert_fsck_clean, require_tools};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

const TRANSPORTS: [&str; 2] = ["transport=dev", "transport=fuser"];

/// A fresh image (`mkfs` options `features`) served with `options`.
fn mounted(dir: &Path, features: &[&str], options: &str) -> (PathBuf, FuseMount) {
    let img = dir.join("img");
    let out = Command::new(exe())
        .args(["mkfs", "-q"])
        .args(features)
        .arg(&img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = FuseMount::start(exe(), &img, options).expect("mounted");
    std::fs::set_permissions(m.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    (img, m)
}

fn finish(img: &Path, m: FuseMount) {
    assert!(m.unmount().expect("unmount").success());
    assert_fsck_clean(img).expect("e2fsck -fn clean");
}

fn missing(p: &Path) -> bool {
    matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

#[test]
fn a_name_looked_up_as_missing_appears_once_the_mount_creates_it() {
    if !ready_with("e2fsck") {
        return;
    }
    for transport in TRANSPORTS {
        let tmp = tempfile::tempdir().unwrap();
        let (img, m) = mounted(tmp.path(), &[], transport);
        let p = |n: &str| m.path().join(n);
        std::fs::write(p("old"), b"x").unwrap();
        for n in ["file", "dir", "sym", "link", "renamed", "node"] {
            // Twice: the second is answered from the kernel's cache.
            assert!(missing(&p(n)) && missing(&p(n)), "{transport}: {n} before");
        }
        std::fs::write(p("file"), b"data").unwrap();
        std::fs::create_dir(p("dir")).unwrap();
        std::os::unix::fs::symlink("file", p("sym")).unwrap();
        std::fs::hard_link(p("file"), p("link")).unwrap();
        std::fs::rename(p("old"), p("renamed")).unwrap();
        nix_mkfifo(&p("node"));
        assert_eq!(std::fs::read(p("file")).unwrap(), b"data", "{transport}");
        assert!(p("dir").is_dir(), "{transport}");
        assert_eq!(std::fs::read(p("sym")).unwrap(), b"data", "{transport}");
        assert_eq!(std::fs::metadata(p("link")).unwrap().nlink(), 2, "{transport}");
        assert_eq!(std::fs::read(p("renamed")).unwrap(), b"x", "{transport}");
        assert!(!missing(&p("node")), "{transport}: mkfifo");
        assert!(missing(&p("old")), "{transport}: the old name of a rename");
        // And back: a name removed is missing again at once.
        std::fs::remove_file(p("link")).unwrap();
        assert!(missing(&p("link")), "{transport}");
        finish(&img, m);
    }
}

fn nix_mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(st.success(), "mkfifo");
}

#[test]
fn a_casefolded_directory_caches_no_missing_names() {
    if !ready_with("e2fsck") {
        return;
    }
    if let Err(why) = require_tools(&["chattr"]) {
        ext4kit_testkit::skipped!("{why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
        return;
    }
    for transport in TRANSPORTS {
        let tmp = tempfile::tempdir().unwrap();
        let (img, m) = mounted(tmp.path(), &["-O", "casefold"], transport);
        let cf = m.path().join("cf");
        std::fs::create_dir(&cf).unwrap();
        assert!(Command::new("chattr").arg("+F").arg(&cf).status().unwrap().success());
        assert!(missing(&cf.join("README")), "{transport}");
        std::fs::write(cf.join("readme"), b"hi").unwrap();
        assert_eq!(
            std::fs::read(cf.join("README")).unwrap(),
            b"hi",
            "{transport}: another casing of a created name"
        );
        finish(&img, m);
    }
}

/// Runs `sh -c script` as user and group 65534 (nobody).
fn as_nobody(script: &str) {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn set_id_bits_go_as_the_vfs_drops_them() {
    if !ready_with("e2fsck") {
        return;
    }
    if let Err(why) = require_tools(&["setpriv", "setcap", "getcap"]) {
        ext4kit_testkit::skipped!("{why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
        return;
    }
    for transport in TRANSPORTS {
        let tmp = tempfile::tempdir().unwrap();
        let (img, m) = mounted(tmp.path(), &[], &format!("allow_other,suid,{transport}"));
        let f = m.path().join("f");
        std::fs::write(&f, b"data").unwrap();
        let q = f.to_str().unwrap();
        // A write by another user (no CAP_FSETID) drops both bits.
        chmod(&f, 0o6777);
        as_nobody(&format!("echo x >> {q}"));
        assert_eq!(mode(&f), 0o777, "{transport}: write by another user");
        // So does a truncate; setgid without group execute stays.
        chmod(&f, 0o6766);
        as_nobody(&format!("truncate -s 1 {q}"));
        assert_eq!(mode(&f), 0o2766, "{transport}: truncate by another user");
        // The owner is no exception.
        std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
        chmod(&f, 0o4755);
        as_nobody(&format!("echo y >> {q}"));
        assert_eq!(mode(&f), 0o755, "{transport}: write by the owner");
        // Root (CAP_FSETID) keeps them on write.
        chmod(&f, 0o6755);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&f)
            .unwrap()
            .write_all(b"r")
            .unwrap();
        assert_eq!(mode(&f), 0o6755, "{transport}: write by root");
        // chown drops them even for root.
        std::os::unix::fs::chown(&f, Some(0), None).unwrap();
        assert_eq!(mode(&f), 0o755, "{transport}: chown");
        // A capability goes with a write, whoever writes.
        assert!(
            Command::new("setcap")
                .args(["cap_net_raw+ep", q])
                .status()
                .unwrap()
                .success()
        );
        let caps = || String::from_utf8(Command::new("getcap").arg(q).output().unwrap().stdout).unwrap();
        assert!(caps().contains("cap_net_raw"), "{transport}: setcap");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&f)
            .unwrap()
            .write_all(b"c")
            .unwrap();
        assert!(
            !caps().contains("cap_net_raw"),
            "{transport}: capability kept after a write"
        );
        finish(&img, m);
    }
}

/// How many `op` requests (`FUSE_GETXATTR`…) the kernel sent to the mount
/// at `mnt` while `f` ran, from a tracing instance of this test's own;
/// `None` (after a recorded skip) without tracefs or the fuse events.
fn requests_during(mnt: &Path, op: &str, f: impl FnOnce()) -> Option<usize> {
    let events = Path::new("/sys/kernel/tracing/events/fuse/fuse_request_send");
    if !events.exists() {
        let why = "no fuse tracepoints (mount -t tracefs nodev /sys/kernel/tracing)";
        ext4kit_testkit::skipped!("{why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
        return None;
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mnt = mnt.canonicalize().unwrap();
    let dev = info
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.get(4).is_some_and(|p| Path::new(p) == mnt))
        .and_then(|f| f[2].split_once(':').map(|(_, minor)| minor.to_string()))
        .expect("the mount in mountinfo");
    let inst = PathBuf::from(format!(
        "/sys/kernel/tracing/instances/ext4kit-diet-{}",
        std::process::id()
    ));
    std::fs::create_dir(&inst).unwrap();
    let ev = inst.join("events/fuse/fuse_request_send");
    std::fs::write(inst.join("buffer_size_kb"), "8192").unwrap();
    std::fs::write(ev.join("filter"), format!("connection == {dev}")).unwrap();
    std::fs::write(ev.join("enable"), "1").unwrap();
    f();
    std::fs::write(ev.join("enable"), "0").unwrap();
    let trace = std::fs::read_to_string(inst.join("trace")).unwrap();
    std::fs::remove_dir(&inst).unwrap();
    let tag = format!("({op})");
    Some(trace.lines().filter(|l| l.contains(&tag)).count())
}

#[test]
fn a_run_of_writes_asks_for_security_capability_once() {
    if !ready_with("e2fsck") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (img, m) = mounted(tmp.path(), &[], "transport=dev");
    let mut file = std::fs::File::create(m.path().join("f")).unwrap();
    let block = [7u8; 4096];
    let asked = requests_during(m.path(), "FUSE_GETXATTR", || {
        for _ in 0..1000 {
            file.write_all(&block).unwrap();
        }
    });
    drop(file);
    if let Some(n) = asked {
        assert!(n <= 2, "{n} GETXATTRs for 1000 writes");
    }
    assert_eq!(std::fs::metadata(m.path().join("f")).unwrap().len(), 4096 * 1000);
    finish(&img, m);
}
