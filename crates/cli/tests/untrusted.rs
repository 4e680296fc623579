//! Images one did not make: `ext4kit mount` is `nosuid,nodev` unless
//! `-o suid`/`-o dev` ask otherwise, and `export` skips device nodes and
//! drops set-user-ID/set-group-ID bits and file capabilities unless
//! `--devices`/`--keep-setid` (or `--trusted`) ask otherwise, saying on
//! standard error what it withheld. Both need root (FUSE mounts; device
//! nodes and capabilities in the source tree); they skip loudly otherwise.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tools, skip_unless};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn mke2fs(img: &Path, src: Option<&Path>) {
    let mut c = Command::new("mkfs.ext4");
    c.args(["-q", "-F"]);
    if let Some(s) = src {
        c.arg("-d").arg(s);
    }
    let out = c.arg(img).arg("16M").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).unwrap();
    assert!(r.is_clean(), "e2fsck -fn:\n{}", r.output);
}

/// The per-mount options (mountinfo's sixth field) of the mount at `dir`.
fn mount_options(dir: &Path) -> Vec<String> {
    let canon = std::fs::canonicalize(dir).unwrap();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .find(|l| l.split_whitespace().nth(4) == canon.to_str())
        .unwrap_or_else(|| panic!("{} not in mountinfo", canon.display()));
    line.split_whitespace()
        .nth(5)
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect()
}

#[test]
fn mounts_are_nosuid_nodev_unless_asked() {
    if skip_unless(can_fuse_mount()).is_none() || skip_unless(require_tools(&["mkfs.ext4", "e2fsck"])).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    mke2fs(&img, None);
    for (options, nosuid, nodev) in [
        ("", true, true),
        ("suid", false, true),
        ("dev", true, false),
        ("suid,dev", false, false),
    ] {
        let m = FuseMount::start(exe(), &img, options).unwrap();
        let got = mount_options(m.path());
        m.unmount().unwrap();
        assert_eq!(got.contains(&"nosuid".into()), nosuid, "-o {options:?}: {got:?}");
        assert_eq!(got.contains(&"nodev".into()), nodev, "-o {options:?}: {got:?}");
    }
    assert_clean(&img);
}

/// `security.capability` granting CAP_NET_RAW, effective (VFS_CAP_REVISION_2).
const CAPABILITY: [u8; 20] = [1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// A source tree with what an untrusted image may carry: device nodes,
/// set-id programs, a capability, and harmless neighbours.
fn hostile_tree(src: &Path) {
    std::fs::create_dir(src).unwrap();
    let file = |name: &str, mode: u32| {
        let p = src.join(name);
        std::fs::write(&p, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    };
    file("suid", 0o4755);
    file("sgid", 0o2755);
    file("plain", 0o755);
    let cap = file("cap", 0o755);
    xattr::set(&cap, "security.capability", &CAPABILITY).unwrap();
    let sgdir = src.join("shared");
    std::fs::create_dir(&sgdir).unwrap();
    std::fs::set_permissions(&sgdir, std::fs::Permissions::from_mode(0o2775)).unwrap();
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    mknod(
        &src.join("mem"),
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(1, 1),
    )
    .unwrap();
    mknod(
        &src.join("disk"),
        SFlag::S_IFBLK,
        Mode::from_bits_truncate(0o666),
        makedev(7, 250),
    )
    .unwrap();
    mknod(&src.join("fifo"), SFlag::S_IFIFO, Mode::from_bits_truncate(0o644), 0).unwrap();
}

fn export(img: &Path, dest: &Path, extra: &[&str]) -> String {
    let out = Command::new(exe())
        .arg("export")
        .arg("-q")
        .args(extra)
        .arg(img)
        .arg(dest)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "export {extra:?}: {err}");
    err
}

fn mode(p: PathBuf) -> u32 {
    std::fs::symlink_metadata(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

#[test]
fn export_withholds_devices_and_privileges_unless_trusted() {
    if !nix::unistd::geteuid().is_root() {
        ext4kit_testkit::skipped!("needs root (device nodes and capabilities in the source tree)");
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        return;
    }
    if skip_unless(require_tools(&["mkfs.ext4", "e2fsck"])).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, img) = (dir.path().join("src"), dir.path().join("img"));
    hostile_tree(&src);
    mke2fs(&img, Some(&src));

    let safe = dir.path().join("safe");
    let err = export(&img, &safe, &[]);
    assert!(!safe.join("mem").exists() && !safe.join("disk").exists());
    assert!(
        err.contains("skipped the device nodes of 2 files") && err.contains("--devices"),
        "{err}"
    );
    assert!(err.contains("of 3 files") && err.contains("--keep-setid"), "{err}");
    assert_eq!(mode(safe.join("suid")), 0o755);
    assert_eq!(mode(safe.join("sgid")), 0o755);
    assert_eq!(mode(safe.join("plain")), 0o755);
    assert_eq!(
        mode(safe.join("shared")),
        0o2775,
        "a directory's set-group-ID only passes its group on"
    );
    assert_eq!(xattr::get(safe.join("cap"), "security.capability").unwrap(), None);
    assert!(safe.join("fifo").exists());

    for flags in [&["--trusted"][..], &["--devices", "--keep-setid"]] {
        let all = dir.path().join(format!("all{}", flags.len()));
        let err = export(&img, &all, flags);
        assert!(err.is_empty(), "{flags:?}: {err}");
        let rdev = |n: &str| std::fs::symlink_metadata(all.join(n)).unwrap().rdev();
        assert_eq!(rdev("mem"), nix::sys::stat::makedev(1, 1));
        assert_eq!(rdev("disk"), nix::sys::stat::makedev(7, 250));
        assert_eq!(mode(all.join("suid")), 0o4755);
        assert_eq!(mode(all.join("sgid")), 0o2755);
        assert_eq!(
            xattr::get(all.join("cap"), "security.capability").unwrap().as_deref(),
            Some(&CAPABILITY[..])
        );
    }
    assert_clean(&img);
}
